"""Labelled embeddings and what evaluation needs: the one chain of data holders.

``slics evaluate``, ``slics fit``, ``slics captions``, ``slics reproduce`` and
every workspace (:mod:`slics_core.explorer.build`) go through here:

1. :func:`load_cache` reads an embedding cache (``slics embed``; any source:
   COCO, MIRFlickr, a folder, precomputed embeddings, the emoji world) into a
   :class:`LabelledEmbeddings`;
2. :func:`slics_core.splits.make_split` draws the train / val / query / pool split;
3. :func:`preprocess` fits the preprocessing on the *training* split only
   (``clip``: unit, minus the training mean of unit embeddings, unit; or a
   precomputed mean given by the user, e.g. SpLiCE's CLIP means, sec. 4.1) and
   applies it to every item, exactly as it will be applied to new queries;
4. :func:`eval_data` makes the :class:`EvalData` of :mod:`slics_core.evaluation`
   from a :class:`LabelledEmbeddings` (handing on its :class:`~slics_core.labels.Labels`), and
   :func:`fit_inputs` the :class:`slics_core.methods.FitInputs` of its training rows
   (the one place that cuts them out).

Choices (the paper is silent): items whose embedding is all zero are dropped
(they have no direction); concepts no item has are dropped, with a warning.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import warnings
from dataclasses import dataclass, field

import numpy as np

from slics_core._validation import check_embeddings
from slics_core.encoders import encoder_spec_of
from slics_core.formats import read_json
from slics_core.labels import CarriesLabels, Labels
from slics_core.methods import FitInputs
from slics_core.preprocessing import make_preprocessor
from slics_core.rows import unit_rows
from slics_core.splits import Split
from slics_core.store import EmbeddingStore

__all__ = ["LabelledEmbeddings", "EvalData", "fit_inputs", "load_cache", "drop_empty_concepts", "preprocess",
           "eval_data", "vocabulary_embeddings",
           "apply_preprocessing", "cache_labels", "has_direction", "present_concepts"]


@dataclass
class LabelledEmbeddings(CarriesLabels):
    """An embedded, labelled collection (rows: items).

    Attributes
    ----------
    raw : ndarray of shape (n, d), float32
        The encoder's embeddings, as stored.
    ids : list of str
    labels : slics_core.labels.Labels
        General labels, sub-labels and their names (``Y``, ``concept_names``, ``Z``, ``sub_names``,
        ``sub_to_concept`` read it).
    concept_text : ndarray of shape (S, d), optional
        Raw text embeddings of the concept prompts (zero-shot, U-SLiCS, F-SpLiCE).
    encoder : str or None
        Encoder name that made the embeddings (:func:`slics_core.encoders.create_encoder`).
    preprocessing : {"clip", "unit", "token", "none"}
    n_tokens : int
        Tokens per item for ``token`` preprocessing.
    paths : list of str or None
        Image files of the items (thumbnails), when known.
    name : str
    extras : dict
        Other arrays aligned with the rows (e.g. the emoji world's images, captions and
        generator-conditioning embeddings).
    """

    raw: np.ndarray
    ids: list
    labels: Labels
    concept_text: np.ndarray | None = None
    encoder: str | None = None
    preprocessing: str = "clip"
    n_tokens: int = 32
    paths: list | None = None
    name: str = "dataset"
    extras: dict = field(default_factory=dict)

    def __post_init__(self):
        self._check_labels(int(np.shape(self.raw)[0]), "embeddings")

    def __len__(self):
        return int(self.raw.shape[0])

    def subset(self, keep):
        """The rows ``keep`` (bool mask or indices), every aligned field included."""
        keep = np.flatnonzero(keep) if np.asarray(keep).dtype == bool else np.asarray(keep, dtype=int)

        def rows(v):
            return None if v is None else v[keep] if isinstance(v, np.ndarray) else [v[i] for i in keep]

        return dataclasses.replace(self, raw=self.raw[keep], ids=rows(self.ids), labels=self.labels.take(keep),
                                   paths=rows(self.paths), extras={k: rows(v) for k, v in self.extras.items()})


@dataclass
class EvalData(CarriesLabels):
    """Everything evaluation needs: a :class:`LabelledEmbeddings` preprocessed (:func:`eval_data`).

    Attributes
    ----------
    X : ndarray of shape (n, d)
        Preprocessed image embeddings (e.g. unit / centred / unit for CLIP).
    labels : slics_core.labels.Labels
        General labels (at least one concept), sub-labels and their names (``Y``, ``concept_names``,
        ``Z``, ``sub_names``, ``sub_to_concept`` read it).
    X_raw : ndarray of shape (n, d), optional
        Raw encoder embeddings, used for zero-shot pseudo-labels (U-SLiCS);
        ``X`` is used when absent.
    concept_text : ndarray of shape (S, d), optional
        Raw text embeddings of the concept prompts (zero-shot labels, F-SpLiCE grouping).
    vocab_text : ndarray of shape (V, d), optional
        Raw text embeddings of the vocabulary words (SpLiCE dictionary; the
        methods prepare them, :mod:`slics_core.methods`).
    vocab_words : list of str, optional
    oracle_words, oracle_text : optional
        The label names and their raw text embeddings, the oracle row's vocabulary
        (:data:`slics_core.methods.ORACLE_FSPLICE`; the emoji world gives them).
    """

    X: np.ndarray
    labels: Labels
    X_raw: np.ndarray | None = None
    concept_text: np.ndarray | None = None
    vocab_text: np.ndarray | None = None
    vocab_words: list | None = None
    oracle_words: list | None = None
    oracle_text: np.ndarray | None = None

    def __post_init__(self):
        self.X = check_embeddings(self.X, name="X", allow_zero_rows=True)
        self._check_labels(self.X.shape[0], "rows of X")
        if not self.labels.n_concepts:
            raise ValueError("Y has no concept columns.")
        if self.X_raw is not None:
            self.X_raw = check_embeddings(self.X_raw, name="X_raw", allow_zero_rows=True)
            if self.X_raw.shape[0] != self.X.shape[0]:
                raise ValueError("X_raw must have as many rows as X.")

    @classmethod
    def of_checked(cls, **fields):
        """An :class:`EvalData` of arrays already checked (e.g. a loaded workspace's), used as they are.

        No check and no copy (the constructor checks its arrays and makes ``X`` float64); the
        fields are those of the constructor.
        """
        obj = cls.__new__(cls)
        for f in dataclasses.fields(cls):
            setattr(obj, f.name, fields.pop(f.name, f.default))
        if fields:
            raise TypeError(f"EvalData has no field(s) {sorted(fields)}")
        return obj


def fit_inputs(data, rows, n_active=None):
    """:class:`slics_core.methods.FitInputs` of the items ``rows`` of ``data`` (training split)."""

    rows = np.asarray(rows, dtype=int)
    return FitInputs(X=data.X[rows], Y=data.Y[rows], concept_names=list(data.concept_names),
                     X_raw=None if data.X_raw is None else data.X_raw[rows], concept_text=data.concept_text,
                     vocab_words=data.vocab_words, vocab_text=data.vocab_text, n_active=n_active,
                     oracle_words=data.oracle_words, oracle_text=data.oracle_text)


def load_cache(cache) -> LabelledEmbeddings:
    """Read a finished embedding cache with labels (``slics embed``).

    Raises
    ------
    FileNotFoundError
        No cache or no labels there (the message says which command makes them).
    ValueError
        Unfinished or damaged cache, or labels that do not match the embeddings.
    """
    store = EmbeddingStore(cache)
    if not store.exists():
        raise FileNotFoundError(f"no embedding cache at {os.fspath(cache)!r}; make one with `slics embed`")
    E, ids, meta = store.load()
    labels = cache_labels(store, E.shape[0])
    W, _ = store.load_array("concept_text")
    dataset = meta.get("dataset") or {}
    prep = meta.get("preprocessing") or {}
    paths = dataset.get("paths")
    if paths is not None:
        try:
            all_ids = read_json(store.path / "items.json")
        except (OSError, ValueError):
            all_ids = []
        by_id = dict(zip(all_ids, paths)) if len(paths) == len(all_ids) else {}
        paths = [by_id.get(i) for i in ids] if by_id else None
    data = LabelledEmbeddings(
        raw=np.asarray(E, dtype=np.float32), ids=[str(i) for i in ids], labels=labels,
        concept_text=None if W is None else np.asarray(W, dtype=np.float32), encoder=encoder_spec_of(meta),
        preprocessing=str(prep.get("embedding", "clip")), n_tokens=int(prep.get("n_tokens", 32)), paths=paths,
        name=str(dataset.get("name") or os.path.basename(os.path.abspath(os.fspath(cache)))))
    nonzero = has_direction(data.raw)
    data = data if nonzero.all() else data.subset(nonzero)
    return drop_empty_concepts(data)


def cache_labels(store: EmbeddingStore, n_rows: int) -> Labels:
    """The labels of cache ``store``, one row per embedded item (``n_rows`` of them), in the order of
    :meth:`~slics_core.store.EmbeddingStore.positions`.

    Raises
    ------
    ValueError
        No ``Y`` / concept names, another number of rows, or labels that break a rule of :class:`Labels`.
    """
    cache = store.path
    lab = store.load_labels()
    if "Y" not in lab or "concept_names" not in lab:
        raise ValueError(f"labels of cache {os.fspath(cache)!r} lack Y / concept_names; re-embed with a label file")
    if lab["Y"].shape[0] != n_rows:
        raise ValueError(f"cache {os.fspath(cache)!r}: {lab['Y'].shape[0]} label rows for {n_rows} embeddings; "
                         "re-run `slics embed --overwrite`")
    try:
        return Labels.from_arrays(lab)
    except ValueError as exc:
        raise ValueError(f"labels of cache {os.fspath(cache)!r}: {exc} Re-embed with a corrected label file.") from None


def has_direction(E) -> np.ndarray:
    """Which rows of the embeddings ``E`` are kept: those that are not all zero (bool, shape (n,))."""
    return np.linalg.norm(E, axis=1) > 0


def present_concepts(labels: Labels, stacklevel: int = 1) -> np.ndarray | None:
    """Indices of the concepts some item of ``labels`` has; None when every one has an item.

    A concept with no example cannot get atoms: a ``RuntimeWarning`` names those left out
    (``stacklevel`` 1: at the caller).
    """
    present = labels.Y.any(axis=0)
    if present.all():
        return None
    gone = [name for name, p in zip(labels.concept_names, present) if not p]
    warnings.warn(f"concept(s) {', '.join(gone)} have no labelled item and are left out", RuntimeWarning,
                  stacklevel=stacklevel + 1)
    return np.flatnonzero(present)


def drop_empty_concepts(data: LabelledEmbeddings) -> LabelledEmbeddings:
    """``data`` without the concepts no item has (e.g. COCO supercategories absent from an excerpt).

    Its label column, prompt embedding and sub-labels are removed (:func:`present_concepts`).
    """
    keep = present_concepts(data.labels, stacklevel=2)
    if keep is None:
        return data
    return dataclasses.replace(data, labels=data.labels.keep_concepts(keep),
                               concept_text=None if data.concept_text is None else data.concept_text[keep])


def preprocess(raw, kind, train_rows, *, mean=None, n_tokens=32):
    """Fit the preprocessing on the training rows and apply it to every row.

    Returns
    -------
    X : ndarray of shape (n, d), float32
    preprocessor : fitted transformer (applies the same step to new queries)
    """
    raw = np.asarray(raw, dtype=np.float64)
    pre = make_preprocessor(kind, mean=mean, n_tokens=n_tokens).fit(raw[np.asarray(train_rows, dtype=int)])
    return apply_preprocessing(pre, raw), pre


def apply_preprocessing(pre, raw) -> np.ndarray:
    """Rows ``raw`` preprocessed by the fitted ``pre`` (computed in float64, returned as float32)."""
    return pre.transform(np.asarray(raw, dtype=np.float64)).astype(np.float32)


def eval_data(data: LabelledEmbeddings, split: Split, *, mean=None, vocab=None, oracle_vocab=None):
    """:class:`EvalData` of ``data`` preprocessed on ``split``'s training rows.

    Parameters
    ----------
    vocab : (words, W), optional
        Vocabulary and its raw text embeddings (SpLiCE baselines).
    oracle_vocab : (words, W), optional
        The label names and their raw text embeddings (the oracle row, :class:`EvalData`).

    Returns
    -------
    EvalData, fitted preprocessor
    """
    X, pre = preprocess(data.raw, data.preprocessing, split.train, mean=mean, n_tokens=data.n_tokens)
    ed = EvalData(X=X, labels=data.labels, X_raw=data.raw, concept_text=data.concept_text)
    if vocab is not None:
        ed.vocab_words, ed.vocab_text = list(vocab[0]), np.asarray(vocab[1], dtype=np.float32)
    if oracle_vocab is not None:
        ed.oracle_words, ed.oracle_text = list(oracle_vocab[0]), np.asarray(oracle_vocab[1], dtype=np.float32)
    return ed, pre


def vocabulary_embeddings(encoder, words, *, store=None, batch_size=256):
    """Raw text embeddings of ``words`` (unit rows), cached in ``store`` (an :class:`EmbeddingStore`) by word list.

    Raises
    ------
    ValueError
        The encoder has no text tower.
    """
    if not getattr(encoder, "has_text", False):
        raise ValueError(f"encoder {getattr(encoder, 'spec', getattr(encoder, 'id', '?'))!r} has no text tower; "
                         "vocabularies need a CLIP-like encoder")
    words = [str(w) for w in words]
    digest = hashlib.sha256("\n".join(words).encode()).hexdigest()[:16]
    name = f"vocab-{digest}"
    ident = getattr(encoder, "id", None)
    if store is not None:
        arr, info = store.load_array(name)
        if arr is not None and info.get("encoder_id") == ident and arr.shape[0] == len(words):
            return arr
    V = np.asarray(encoder.encode_texts(words, batch_size=batch_size), dtype=np.float32)
    V = unit_rows(V, zero="keep")
    if store is not None:
        store.save_array(name, V, encoder_id=ident, n=len(words))
    return V
