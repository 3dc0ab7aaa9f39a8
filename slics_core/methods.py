"""The registry of methods: every method of the comparison declared once.

A :class:`Method` says what a method is called, what it needs (concept labels,
concept prompt embeddings, a word vocabulary), how it is fitted, and how it is
used at query time. Evaluation (:mod:`slics_core.evaluation`), workspaces
(:mod:`slics_core.explorer.workspace`), the command line and the app's pages
loop over :data:`REGISTRY`; adding a method is one :func:`register` call.

Every fitted model, whatever the method, exposes the same interface (the
fitted attributes of :class:`slics_core.SLiCS`), so callers never special-case
a method:

``n_concepts_``, ``n_features_in_``, ``concept_names_``
    Sizes and names.
``project(X, concept=None)``
    Partial components ``tilde-v_j`` (eq. 3): ``(n, S, d)``, or ``(n, d)`` for one
    concept.
``components(X, Y)``
    Full components ``v_j`` (eq. 2) with the active concepts ``Y`` ``(n, S)``.
``modes`` (optional)
    The component modes it has (:data:`MODES` when absent, as for SLiCS; a model with one kind of
    component has ``("partial",)`` and gives it for both modes).
``save(path)`` / ``Method.load(path)``
    Persistence (``.npz``, no pickle): SLiCS's model file, or for the models without a dictionary
    the baseline model file (both in :mod:`slics_core.formats`).

Every model is a scikit-learn estimator: ``get_params``, ``clone`` and pickling work. The
models of UF, SpLiCE and F-SpLiCE (:mod:`slics_core.method_models`) are made whole by their
constructor arguments (no training: SpLiCE's vocabulary is given), so their ``fit`` only checks its
input, and ``clone`` gives an equal model.

Dictionary methods (``dictionary=True``) also have ``atoms_`` and ``groups_``
and are fitted once per ``d0``. Unfiltered methods (``filtered=False``: UF,
SpLiCE) return the same vector for every concept; evaluation then ranks once
per query.

What each component mode computes is decided in one place, :func:`components_of` (every
caller, batch or one query, goes through it); :func:`check_mode` is the one check of a mode.

Registered here, in the paper's order:

========== ============================== ===================================================
name       needs                          fit
========== ============================== ===================================================
S-SVD      labels                         ``SLiCS(n_atoms=d0, n_iter=0)``: the supervised
                                          SVD initialisation
S-SLiCS    labels                         ``SLiCS(n_atoms=d0, n_iter, batch_size)``
U-SLiCS    concept_text                   SLiCS on zero-shot pseudo-labels
                                          (:func:`slics_core.unsupervised.zero_shot_labels`);
                                          at query time the full decomposition uses the
                                          query's zero-shot concepts, not its labels
UF         (nothing)                      the whole embedding, for every concept
F-SpLiCE   vocabulary, concept_text       SpLiCE over the vocabulary, words grouped by
                                          their closest concept prompt
F-SpLiCE-  label_vocabulary,              F-SpLiCE over the label names alone: an *oracle*
oracle     concept_text                   (``oracle=True``), shown labelled and never ranked
                                          against the others (:func:`contenders`)
SpLiCE     vocabulary                     the SpLiCE reconstruction, unfiltered
========== ============================== ===================================================

Text embeddings (concept prompts, vocabulary) are given raw (as the encoder
returns them); F-SpLiCE and SpLiCE prepare them as the paper does
(:func:`slics_core.captions.prepare_text_embeddings`: unit, minus the
vocabulary mean, unit; concept prompts centred with the *vocabulary* mean).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from slics_core._validation import MODES, check_mode
from slics_core.baselines import FSpLiCE, SpLiCE, supervised_svd
from slics_core.captions import prepare_text_embeddings
from slics_core.method_models import FSpLiCEModel, SpLiCEModel, UnfilteredModel
from slics_core.slics import SLiCS
from slics_core.unsupervised import estimate_n_active, zero_shot_labels

#: Each component mode's symbol, the one spelling of the pages, tables and reports: the partial component
#: ṽⱼ (nearest point of one concept's cone, eq. 3) and the full one vⱼ (the joint decomposition, eq. 2).
MODE_SYMBOL = {"partial": "ṽⱼ", "full": "vⱼ"}

__all__ = [
    "MODES",
    "MODE_SYMBOL",
    "check_mode",
    "components_of",
    "NEEDS",
    "active_count",
    "FitInputs",
    "Method",
    "REGISTRY",
    "register",
    "get_method",
    "method_names",
    "missing_needs",
    "needs_message",
    "fit_method",
    "active_concepts",
    "ORACLE_FSPLICE",
    "is_oracle",
    "contenders",
    "absent",
    "DEFAULT_METHOD",
    "preferred_method",
    "dictionary_method_words",
    "uses_active",
]

def components_of(model, X, mode: str = "partial", *, active=None) -> np.ndarray:
    """Concept components of the rows of ``X``: the one place where a component mode is computed.

    Parameters
    ----------
    model : fitted model of a registered method (the common interface above)
    X : array-like of shape (n, d)
        Queries, preprocessed like the model's training data; rows are samples.
    mode : {"partial", "full"}
        ``"partial"``: ``tilde-v_j``, the nearest point of concept ``j``'s cone to each row (eq. 3,
        ``model.project(X, None)``); ``"full"``: ``v_j = B_j a_j`` from the joint NNLS of each row
        over its ``active`` concepts (eq. 2, ``model.components(X, active)``; inactive concepts' components
        are zero). A model with one kind of component (``model.modes == ("partial",)``: UF, F-SpLiCE,
        SpLiCE) gives it for both modes and needs no ``active``.
    active : array-like of bool, shape (n, S), optional
        Active concepts of each row, for ``mode="full"`` (:func:`active_concepts`).

    Returns
    -------
    V : ndarray of shape (n, S, d)

    Raises
    ------
    ValueError
        An unknown mode, or ``mode="full"`` without ``active`` for a model that has full components.
    """
    if uses_active(model, mode):
        if active is None:
            raise ValueError("mode='full' needs the active concepts of the queries (active=, one row of "
                             "booleans per query).")
        return np.asarray(model.components(X, active))
    return np.asarray(model.project(X, None))

def uses_active(method_or_model, mode) -> bool:
    """Whether components in ``mode`` are decomposed with the queries' active concepts, for a method (a
    registered name or :class:`Method`) or a fitted model: only ``"full"``, and only where there are full
    components (a model without a ``modes`` attribute has both, like SLiCS)."""
    check_mode(mode)
    m = get_method(method_or_model) if isinstance(method_or_model, str) else method_or_model
    return mode == "full" and "full" in getattr(m, "modes", MODES)


#: What a method can need, and how a user gets it.
NEEDS = {
    "labels": "concept labels of the training items",
    "concept_text": "text embeddings of the concept prompts (embed with a CLIP-like encoder that has a text tower)",
    "vocabulary": "text embeddings of a word vocabulary (needs a CLIP-like encoder with a text tower)",
    "label_vocabulary": "text embeddings of the label names (an oracle's vocabulary; given for the emoji world)",
}

#: L1 weight of the SpLiCE baselines (SpLiCE's lambda; see :mod:`slics_core.baselines`).
SPLICE_L1 = 0.25


@dataclass
class FitInputs:
    """What methods are fitted from: the training items and the text embeddings.

    Attributes
    ----------
    X : ndarray of shape (n, d)
        Preprocessed training embeddings.
    Y : ndarray of bool, shape (n, S), optional
        Training labels.
    concept_names : list of str
    X_raw : ndarray of shape (n, d), optional
        The encoder's embeddings of the same items (zero-shot pseudo-labels).
    concept_text : ndarray of shape (S, d), optional
        Raw text embeddings of the concept prompts.
    vocab_words : list of str, optional
    vocab_text : ndarray of shape (V, d), optional
        Raw text embeddings of the vocabulary words.
    n_active : int, optional
        ``S~``, concepts per image for pseudo-labels (default: from ``Y``, else 2).
    oracle_words : list of str, optional
    oracle_text : ndarray of shape (V', d), optional
        The label names and their raw text embeddings: the vocabulary of the oracle row
        (:data:`ORACLE_FSPLICE`), which the paper's baselines never have.
    """

    X: np.ndarray
    Y: np.ndarray | None
    concept_names: list
    X_raw: np.ndarray | None = None
    concept_text: np.ndarray | None = None
    vocab_words: list | None = None
    vocab_text: np.ndarray | None = None
    n_active: int | None = None
    oracle_words: list | None = None
    oracle_text: np.ndarray | None = None

    def available(self) -> set:
        """The :data:`NEEDS` these inputs satisfy."""
        out = set()
        if self.Y is not None:
            out.add("labels")
        if self.concept_text is not None:
            out.add("concept_text")
        if self.vocab_text is not None and self.vocab_words:
            out.add("vocabulary")
        if self.oracle_text is not None and self.oracle_words:
            out.add("label_vocabulary")
        return out

    def active_count(self) -> int:
        """``S~`` of these inputs (:func:`active_count`)."""
        return active_count(self.Y, self.n_active)


def active_count(Y, n_active=None) -> int:
    """``S~``, concepts per item for zero-shot pseudo-labels: ``n_active`` when given, else the rounded
    mean number of labels per item of the training labels ``Y`` (2 without labels)."""
    if n_active is not None:
        return int(n_active)
    return estimate_n_active(Y) if Y is not None and len(Y) else 2


@dataclass(frozen=True)
class Method:
    """One method of the comparison (see the module docstring).

    Attributes
    ----------
    name : str
    description : str
    fit : callable ``fit(inputs: FitInputs, d0, *, n_iter, batch_size, seed, ridge) -> model``
    load : callable ``load(path) -> model``
    needs : tuple of str
        Keys of :data:`NEEDS`.
    dictionary : bool
        Has atoms and is fitted for every ``d0``.
    filtered : bool
        Per-concept components (False: one vector for every concept).
    stochastic : bool
        Depends on the seed in mini-batch fits (reported as mean ± std over seeds).
    query_concepts : {"labels", "zero-shot"}
        Active concepts of a query in the full decomposition ``v_j``.
    reports_batches : bool
        Its ``fit`` also takes ``callback=`` (``callback(epoch, n_epochs, batch, n_batches)`` after every
        batch, see :class:`slics_core.slics.SLiCS`); :func:`fit_method` passes a callback only to such methods.
    modes : tuple of {"partial", "full"}
        Components the method has (one kind only for the baselines).
    oracle : bool
        It is given what the paper's setting never has (the label names as its vocabulary): its row is
        shown, labelled, and left out of every comparison (:func:`contenders`).
    """

    name: str
    description: str
    fit: Callable
    load: Callable
    needs: tuple = ()
    dictionary: bool = True
    filtered: bool = True
    stochastic: bool = False
    query_concepts: str = "labels"
    modes: tuple = MODES
    reports_batches: bool = False
    oracle: bool = False


REGISTRY: dict = {}


def register(method: Method, *, replace: bool = False) -> Method:
    """Add ``method`` to :data:`REGISTRY` (``replace=True`` to redefine a name)."""
    if not isinstance(method, Method):
        raise TypeError(f"register() takes a Method, got {type(method).__name__}")
    if method.name in REGISTRY and not replace:
        raise ValueError(f"a method named {method.name!r} is already registered")
    unknown = set(method.needs) - set(NEEDS)
    if unknown:
        raise ValueError(f"method {method.name!r} needs unknown inputs {sorted(unknown)}; known: {sorted(NEEDS)}")
    REGISTRY[method.name] = method
    return method


def get_method(name) -> Method:
    """The registered method called ``name`` (a :class:`Method` is passed through)."""
    if isinstance(name, Method):
        return name
    try:
        return REGISTRY[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown method {name!r}; registered: {', '.join(REGISTRY)}") from None


def method_names(*, dictionary: bool | None = None) -> list:
    """Registered method names in registration order (optionally only (non-)dictionary methods)."""
    return [m.name for m in REGISTRY.values() if dictionary is None or m.dictionary == dictionary]


#: The method shown when none is chosen: the paper's supervised SLiCS.
DEFAULT_METHOD = "S-SLiCS"


def preferred_method(options):
    """The method to show among ``options`` when none is chosen: :data:`DEFAULT_METHOD` if offered, else the
    first; None when there is no option."""
    options = list(options)
    return DEFAULT_METHOD if DEFAULT_METHOD in options else (options[0] if options else None)


def dictionary_method_words() -> str:
    """The registered dictionary methods in words ("S-SVD, S-SLiCS or U-SLiCS"), for pages that need one."""
    names = method_names(dictionary=True)
    return ", ".join(names[:-1]) + (" or " if len(names) > 1 else "") + names[-1]


def is_oracle(name) -> bool:
    """Whether ``name`` is a registered oracle method (:attr:`Method.oracle`); False for other names."""
    m = REGISTRY.get(name) if isinstance(name, str) else name
    return bool(getattr(m, "oracle", False))


def contenders(rows, key: str = "method") -> list:
    """The rows (dicts naming a method under ``key``, or rows flagged ``"oracle"``) that may be ranked
    against each other: every row but the oracles'. The one rule of every "ranks best" sentence and mark."""
    return [r for r in rows if not (r.get("oracle") or is_oracle(r.get(key)))]


def absent(method, available) -> bool:
    """Whether ``method`` gives no row at all with ``available``: an oracle whose inputs are not given (only a
    source that gives the label names' text, the emoji world, shows it); any other method with unmet needs
    is a row that says what it needs."""
    return is_oracle(get_method(method)) and bool(missing_needs(method, available))


def missing_needs(method, available) -> list:
    """The needs of ``method`` that ``available`` (a set, or :class:`FitInputs`) does not satisfy."""
    m = get_method(method)
    have = available.available() if isinstance(available, FitInputs) else set(available)
    return [n for n in m.needs if n not in have]


def needs_message(method, available) -> str | None:
    """``"needs ..."`` naming what ``method`` lacks in ``available`` and how to get it; None when nothing is missing."""
    missing = missing_needs(method, available)
    return "needs " + "; ".join(NEEDS[n] for n in missing) if missing else None


def fit_method(method: str | Method, inputs: FitInputs, d0: int | None = None, *, n_iter: int = 10,
               batch_size: int | None = None, seed: int = 0, ridge: float = 0.0,
               callback: Callable | None = None, n_jobs: int | None = None):
    """Fit one registered method.

    Parameters
    ----------
    method : str or Method
    inputs : FitInputs
    d0 : int, optional
        Atoms per concept (dictionary methods; required there).
    n_iter, batch_size, seed, ridge
        SLiCS training parameters (``seed`` is ``random_state``).
    callback : callable, optional
        ``callback(epoch, n_epochs, batch, n_batches)`` after every batch of an iterative fit (methods with
        ``reports_batches``; the others never call it).
    n_jobs : int, optional
        Threads for the per-sample steps of the SLiCS fits (S-SVD, S-SLiCS, U-SLiCS: ``SLiCS(n_jobs=)``;
        ``None`` = 1, ``-1`` = every core; the model does not depend on it). The other methods ignore it.

    Raises
    ------
    ValueError
        The inputs lack what the method needs (the message says what and how to get it).
    """
    m = get_method(method)
    why = needs_message(m, inputs)
    if why:
        raise ValueError(f"{m.name} {why}")
    if m.dictionary and d0 is None:
        raise ValueError(f"{m.name} needs d0 (atoms per concept)")
    extra = {"callback": callback} if callback is not None and m.reports_batches else {}
    if n_jobs is not None:
        extra["n_jobs"] = n_jobs
    return m.fit(inputs, d0, n_iter=n_iter, batch_size=batch_size, seed=seed, ridge=ridge, **extra)


def active_concepts(method, Y=None, X_raw=None, concept_text=None, n_active=2, concept_names=None):
    """Active concepts of queries for the full decomposition ``v_j`` of ``method``.

    Supervised methods use the queries' labels ``Y``; U-SLiCS (``query_concepts="zero-shot"``),
    fitted without labels, uses the ``n_active`` concepts whose prompt is closest to the raw
    embedding ``X_raw`` (without the minimum-positives rule, which is for training sets).
    """
    m = get_method(method)
    if m.query_concepts == "zero-shot":
        if X_raw is None or concept_text is None:
            raise ValueError(f"{m.name} with full components needs the queries' raw embeddings and the concept "
                             "prompt embeddings")
        return np.asarray(zero_shot_labels(X_raw, concept_text, n_active=n_active, min_positives=0,
                                           concept_names=concept_names), dtype=bool)
    if Y is None:
        raise ValueError(f"{m.name} with full components needs the queries' active concepts")
    return np.asarray(Y, dtype=bool)


def _prepared_vocabulary(inputs: FitInputs, oracle: bool = False):
    """Vocabulary (the oracle's with ``oracle``) and concept prompts prepared like the paper's text embeddings
    (one place): unit, minus the vocabulary's mean, unit; the prompts centred with the same mean."""
    W = inputs.oracle_text if oracle else inputs.vocab_text
    Wp, mean = prepare_text_embeddings(np.asarray(W, dtype=np.float64))
    Cp = None
    if inputs.concept_text is not None:
        Cp, _ = prepare_text_embeddings(np.asarray(inputs.concept_text, dtype=np.float64), mean=mean)
    return Wp, Cp


# ---------------------------------------------------------------------- fit functions
def _fit_svd(inputs, d0, *, n_iter, batch_size, seed, ridge, n_jobs=None):
    return supervised_svd(d0, ridge=ridge, random_state=seed, n_jobs=n_jobs).fit(
        inputs.X, inputs.Y, concept_names=inputs.concept_names)


def _fit_slics(inputs, d0, *, n_iter, batch_size, seed, ridge, callback=None, n_jobs=None):
    return SLiCS(n_atoms=d0, n_iter=n_iter, batch_size=batch_size, ridge=ridge, random_state=seed,
                 callback=callback, n_jobs=n_jobs).fit(
        inputs.X, inputs.Y, concept_names=inputs.concept_names)


def _pseudo_labels(inputs):
    X_zs = inputs.X_raw if inputs.X_raw is not None else inputs.X
    return zero_shot_labels(X_zs, inputs.concept_text, n_active=inputs.active_count(),
                            concept_names=inputs.concept_names)


def _fit_uslics(inputs, d0, *, n_iter, batch_size, seed, ridge, callback=None, n_jobs=None):
    return SLiCS(n_atoms=d0, n_iter=n_iter, batch_size=batch_size, ridge=ridge, random_state=seed,
                 callback=callback, n_jobs=n_jobs).fit(
        inputs.X, _pseudo_labels(inputs), concept_names=inputs.concept_names)


def _fit_uf(inputs, d0, **_):
    S = len(inputs.concept_names)
    return UnfilteredModel().fit(inputs.X, concept_names=inputs.concept_names, n_concepts=S)


def _fit_splice(inputs, d0, **_):
    Wp, _ = _prepared_vocabulary(inputs)
    return SpLiCEModel(SpLiCE(Wp, words=list(inputs.vocab_words), alpha=SPLICE_L1), inputs.concept_names)


def _fit_fsplice(inputs, d0, *, oracle=False, **_):
    Wp, Cp = _prepared_vocabulary(inputs, oracle)
    words = inputs.oracle_words if oracle else inputs.vocab_words
    return FSpLiCEModel(FSpLiCE(Wp, Cp, words=list(words), alpha=SPLICE_L1), Cp, inputs.concept_names)


def _fit_fsplice_oracle(inputs, d0, **kwargs):
    return _fit_fsplice(inputs, d0, oracle=True, **kwargs)


#: The oracle row: F-SpLiCE whose vocabulary is the label names themselves (a method name is also its model's
#: file name in a workspace folder: letters, digits, ``._-`` only).
ORACLE_FSPLICE = "F-SpLiCE-oracle"


for _m in (
    Method("S-SVD", "supervised SVD: the top-d0 singular directions of each concept's embeddings (SLiCS "
           "initialisation)", _fit_svd, SLiCS.load, needs=("labels",)),
    Method("S-SLiCS", "supervised SLiCS (Algorithm 1) on the concept labels", _fit_slics, SLiCS.load,
           needs=("labels",), stochastic=True, reports_batches=True),
    Method("U-SLiCS", "unsupervised SLiCS: Algorithm 1 on zero-shot pseudo-labels", _fit_uslics, SLiCS.load,
           needs=("concept_text",), stochastic=True, query_concepts="zero-shot", reports_batches=True),
    Method("UF", "unfiltered: the whole embedding", _fit_uf, UnfilteredModel.load, dictionary=False,
           filtered=False, modes=UnfilteredModel.modes),
    Method("F-SpLiCE", "filtered SpLiCE: sparse word decomposition split by concept word groups", _fit_fsplice,
           FSpLiCEModel.load, needs=("vocabulary", "concept_text"), dictionary=False, modes=FSpLiCEModel.modes),
    Method(ORACLE_FSPLICE, "oracle: F-SpLiCE over the label names alone (given what the paper's F-SpLiCE never "
           "has); shown, never ranked", _fit_fsplice_oracle, FSpLiCEModel.load,
           needs=("label_vocabulary", "concept_text"), dictionary=False, modes=FSpLiCEModel.modes, oracle=True),
    Method("SpLiCE", "SpLiCE: sparse word reconstruction of the whole embedding", _fit_splice, SpLiCEModel.load,
           needs=("vocabulary",), dictionary=False, filtered=False, modes=SpLiCEModel.modes),
):
    register(_m)
del _m

