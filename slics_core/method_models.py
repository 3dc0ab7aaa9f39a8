"""The models of the methods without a dictionary (UF, SpLiCE, F-SpLiCE), registered in :mod:`slics_core.methods`.

Each exposes the interface every fitted model of the registry has (:mod:`slics_core.methods`' notes:
``n_concepts_``, ``n_features_in_``, ``concept_names_``, ``project``, ``components``, ``modes``, ``save`` /
``load``) and is a scikit-learn estimator made whole by its constructor arguments (no training: SpLiCE's
vocabulary is given), so ``clone`` gives an equal model. :class:`UnfilteredModel` and :class:`SpLiCEModel`
are unfiltered (one vector per query, used for every concept); :class:`FSpLiCEModel` splits the SpLiCE
reconstruction by word groups. Their files are the baseline model file
(:func:`slics_core.formats.save_baseline_model`); which arrays each kind saves is :data:`_STATE_MEMBERS`.
"""
from __future__ import annotations

import os

import numpy as np
from sklearn.base import BaseEstimator

from slics_core._validation import check_concept, check_embeddings, check_targets
from slics_core.baselines import FSpLiCE, SpLiCE
from slics_core.formats import load_baseline_model, save_baseline_model

__all__ = ["UnfilteredModel", "SpLiCEModel", "FSpLiCEModel"]

#: The arrays each kind of model without a dictionary saves (the baseline model file,
#: :func:`slics_core.formats.save_baseline_model`), and their dtype kinds.
_STATE_MEMBERS = {
    "UF": {"n_features": "iu"},
    "SpLiCE": {"vocabulary": "f", "words": "U", "alpha": "f"},
    "F-SpLiCE": {"vocabulary": "f", "words": "U", "alpha": "f", "concepts": "f"},
}


def _load_state(path, kind, build):
    """``build(arrays, concept_names)`` of a baseline model file of ``kind``, checked before it is read."""
    return load_baseline_model(path, kind, _STATE_MEMBERS[kind], build, dense=("vocabulary",))


def _vocab_arrays(splice):
    return {"vocabulary": splice.dictionary, "words": np.array(list(splice.words or []), dtype=str),
            "alpha": np.array(splice.alpha)}


class _Broadcast(BaseEstimator):
    """Shared behaviour of the unfiltered models: one vector per query, used for every concept."""

    filtered = False
    modes = ("partial",)

    def _vectors(self, X):  # pragma: no cover - abstract
        raise NotImplementedError

    def _check(self, X):
        return check_embeddings(X, n_features=self.n_features_in_, name="X", allow_zero_rows=True)

    def project(self, X, concept: int | None = None) -> np.ndarray:
        """The model's vector for every concept: ``(n, S, d)``, or ``(n, d)`` for one concept."""
        V = self._vectors(self._check(X))
        if concept is not None:
            check_concept(concept, self.n_concepts_)
            return V
        return np.repeat(V[:, None, :], self.n_concepts_, axis=1)

    def components(self, X, Y=None) -> np.ndarray:
        """Same as :meth:`project` (an unfiltered method has one kind of component)."""
        return self.project(X)


class UnfilteredModel(_Broadcast):
    """UF: the whole query embedding ranks the pool for every concept."""

    def fit(self, X, Y=None, concept_names=None, n_concepts: int | None = None) -> UnfilteredModel:
        """Record the embedding width and the concepts (from ``Y``, ``n_concepts`` or ``concept_names``)."""
        X = check_embeddings(X, name="X", allow_zero_rows=True)
        if n_concepts is None and Y is None and concept_names is not None:
            n_concepts = len(concept_names)
        S = int(n_concepts if n_concepts is not None else check_targets(Y, X.shape[0])[0].shape[1])
        self.n_features_in_ = int(X.shape[1])
        self.n_concepts_ = S
        self.concept_names_ = list(concept_names) if concept_names is not None else [f"concept {j}" for j in range(S)]
        return self

    def _vectors(self, X):
        return np.asarray(X, dtype=np.float64)

    def save(self, path: str | os.PathLike) -> None:
        save_baseline_model(path, "UF", self.concept_names_, n_features=np.array(self.n_features_in_))

    @classmethod
    def load(cls, path: str | os.PathLike):
        return _load_state(path, "UF", lambda z, names: cls().fit(np.ones((1, int(z["n_features"]))),
                                                                   concept_names=names, n_concepts=len(names)))


class _GivenVocabulary(BaseEstimator):
    """A SpLiCE model: whole once its constructor has the vocabulary (``splice``) and the concept names."""

    def __sklearn_is_fitted__(self):
        return self.splice is not None and self.concept_names is not None

    def fit(self, X=None, y=None):
        """Nothing to learn (the vocabulary is given); checks ``X``'s width if given. Returns ``self``."""
        if X is not None:
            check_embeddings(X, n_features=self.n_features_in_, name="X", allow_zero_rows=True)
        return self

    @property
    def n_features_in_(self) -> int:
        return int(self.splice.dictionary.shape[1])

    @property
    def concept_names_(self) -> list:
        return list(self.concept_names)

    @property
    def n_concepts_(self) -> int:
        return len(self.concept_names)


class SpLiCEModel(_Broadcast, _GivenVocabulary):
    """SpLiCE, unfiltered: the query's sparse reconstruction over the vocabulary ranks the pool.

    Parameters
    ----------
    splice : slics_core.baselines.SpLiCE
    concept_names : list of str
    """

    def __init__(self, splice=None, concept_names=None):
        self.splice = splice
        self.concept_names = concept_names

    def _vectors(self, X):
        return np.asarray(self.splice.reconstruct(X))

    def save(self, path: str | os.PathLike) -> None:
        save_baseline_model(path, "SpLiCE", self.concept_names_, **_vocab_arrays(self.splice))

    @classmethod
    def load(cls, path: str | os.PathLike):
        return _load_state(path, "SpLiCE", lambda z, names: cls(
            SpLiCE(z["vocabulary"], words=[str(w) for w in z["words"]], alpha=float(z["alpha"])), names))


class FSpLiCEModel(_GivenVocabulary):
    """F-SpLiCE: the SpLiCE reconstruction split by word groups (one per concept).

    Parameters
    ----------
    fsplice : slics_core.baselines.FSpLiCE
    concepts : array-like of shape (S, d)
        The prepared concept prompt embeddings the words were grouped by (saved with the model).
    concept_names : list of str
        One per word group.
    """

    filtered = True
    modes = ("partial",)

    def __init__(self, fsplice=None, concepts=None, concept_names=None):
        self.fsplice = fsplice
        self.concepts = concepts
        self.concept_names = concept_names
        if fsplice is not None and concept_names is not None and len(concept_names) != fsplice.n_concepts:
            raise ValueError(f"{len(concept_names)} concept names for {fsplice.n_concepts} word groups")

    @property
    def splice(self):
        return self.fsplice

    @property
    def concepts_(self) -> np.ndarray:
        return np.asarray(self.concepts, dtype=np.float64)

    def project(self, X, concept: int | None = None) -> np.ndarray:
        """Per-group parts of the reconstruction, ``(n, S, d)`` (or ``(n, d)`` for one concept)."""
        X = check_embeddings(X, n_features=self.n_features_in_, name="X", allow_zero_rows=True)
        V = np.asarray(self.fsplice.components(X))
        return V if concept is None else V[:, check_concept(concept, self.n_concepts_)]

    def components(self, X, Y=None) -> np.ndarray:
        """Same as :meth:`project` (F-SpLiCE has one kind of component)."""
        return self.project(X)

    def save(self, path: str | os.PathLike) -> None:
        save_baseline_model(path, "F-SpLiCE", self.concept_names_, concepts=self.concepts_,
                            **_vocab_arrays(self.fsplice))

    @classmethod
    def load(cls, path: str | os.PathLike):
        return _load_state(path, "F-SpLiCE", lambda z, names: cls(
            FSpLiCE(z["vocabulary"], z["concepts"], words=[str(w) for w in z["words"]], alpha=float(z["alpha"])),
            z["concepts"], names))
