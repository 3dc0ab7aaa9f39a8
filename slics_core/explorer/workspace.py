"""Workspaces: what the app (and any script) explores. One builder for every data source.

A :class:`Workspace` is one embedded, labelled collection with its fitted
models: preprocessed embeddings ``X`` (rows: items), the encoder's embeddings
``raw``, labels ``Y`` (and sub-labels ``Z``), the train / val / query / pool
split, and ``models[(method, d0)]`` for every method of the registry
(:mod:`slics_core.methods`) whose needs the data meets.

:func:`build_workspace` makes one from :class:`slics_core.data.LabelledEmbeddings`,
whatever the source: the emoji world (:func:`open_emoji_workspace`), or an
embedding cache of COCO, MIRFlickr, a folder or precomputed embeddings
(:func:`build_workspace_from_cache`, ``slics workspace``). For all of them:

1. the split: :func:`slics_core.splits.make_split` (the emoji world passes its own
   sizes to the same function);
2. centring: the preprocessing is fitted on the training split
   (:func:`slics_core.data.preprocess`; ``clip``: the training mean, or a
   precomputed mean file the user gives);
3. every registered method is fitted on the training split, dictionary
   methods for every ``d0``; a method whose needs are not met (no concept
   prompts, no vocabulary) or whose fit fails is recorded in ``skipped`` with
   the reason, and the others are kept;
4. ``d0`` is chosen on the validation split by the paper's rule
   (:func:`slics_core.evaluation.sweep_d0` of the fitted S-SLiCS models, then
   :func:`slics_core.evaluation.choose_d0`: sub-label mAP@20 of partial components);
5. the caption vocabulary (the emoji world: the words its text encoder knows;
   datasets: the 10 000 most frequent English words, or a word list) is
   embedded with the workspace's encoder when it has a text tower;
6. the workspace is saved as a folder (``workspace.json``, ``arrays.npz``,
   ``models/``, optional ``images.npy`` and ``extra-*.npy``) with a marker file.

Safety: a folder is replaced only if it is a workspace (it holds the marker
``.slics-workspace``), atomically (written beside, then swapped); workspace names
are validated (no separators, no ``..``, not absolute). Encoder names read from a
workspace are resolved with ``trusted=False``: never ``module:factory``. The app
opens workspaces by *name* under :func:`workspaces_root` only.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import threading
import time
import warnings
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from slics_core._validation import check_embeddings
from slics_core.captions import default_vocabulary, prepare_text_embeddings
from slics_core.data import LabelledEmbeddings, eval_data, fit_inputs, load_cache, vocabulary_embeddings
from slics_core.images import ImageLoadError, load_image
from slics_core.emoji.preview_table import preview_encoder
from slics_core.emoji.world import ENCODER as EMOJI_ENCODER
from slics_core.emoji.world import (
    EmojiWorldConfig,
    config_from_env,
    default_cache_dir,
    emoji_vocabulary,
    models_fingerprint,
    preview_config,
    render_emoji_preview,
    render_emoji_world,
)
from slics_core.encoders import create_encoder
from slics_core.explorer.arrival import STORE as ARRIVAL_STORE
from slics_core.explorer.arrival import prepare_pages
from slics_core.errors import DamagedFileError, file_system_error, reading, user_message
from slics_core.evaluation import choose_d0, sweep_d0
from slics_core.explorer.uploads import DEFAULT_MAX_DECODE_BYTES
from slics_core.formats import check_npy, check_npz
from slics_core.methods import REGISTRY, fit_method, get_method, method_names, needs_message
from slics_core.preprocessing import load_mean, make_preprocessor
from slics_core.rows import unit_rows
from slics_core.splits import Split, make_split
from slics_core.store import EmbeddingStore

__all__ = [
    "Workspace",
    "EMOJI",
    "workspaces_root",
    "check_workspace_name",
    "build_workspace",
    "build_workspace_from_cache",
    "save_workspace",
    "load_workspace",
    "WorkspaceDamagedError",
    "WorkspaceExistsError",
    "list_workspaces",
    "workspace_path",
    "open_emoji_workspace",
    "BuildProgress",
    "start_emoji_workspace",
    "PROVISIONAL_D0",
    "load_query_encoder",
    "embed_query",
    "embed_text_query",
    "text_mean",
    "workspace_vocabulary",
]

FORMAT = "slics-workspace-v2"
MARKER = ".slics-workspace"
EMOJI = "emoji"
_SPLITS = ("train", "val", "query", "pool")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._ -]{0,99}$")


def workspaces_root() -> Path:
    """Where dataset workspaces are listed: ``$SLICS_WORKSPACES`` or ``~/.cache/slics/workspaces``."""
    env = os.environ.get("SLICS_WORKSPACES")
    return Path(env) if env else Path.home() / ".cache" / "slics" / "workspaces"


def check_workspace_name(name) -> str:
    """``name`` if it is a safe workspace name (a folder name under :func:`workspaces_root`).

    Raises
    ------
    ValueError
        Empty, a path (separators, ``..``, absolute) or odd characters.
    """
    if not isinstance(name, str) or not _NAME.match(name) or name in (".", "..") or ".." in name:
        raise ValueError(f"workspace name {name!r} is not allowed: use letters, digits, '.', '_', '-' or spaces "
                         "(no '/', no '..'); to write elsewhere use --out")
    return name


@dataclass
class Workspace:
    """One explorable collection (see module docstring).

    Attributes
    ----------
    name : str
    kind : {"emoji", "dataset"}
    path : Path or None
        Folder the workspace is stored in.
    X : ndarray of shape (n, d), float32
        Preprocessed embeddings (what the models were fitted on).
    raw : ndarray of shape (n, d), float32
        The encoder's unit embeddings (zero-shot classification).
    mean : ndarray of shape (d,)
        Training mean of the unit embeddings (preprocessing of new queries).
    Y : ndarray of bool, shape (n, S)
    concept_names : list of str
    Z : ndarray of bool, shape (n, L) or None
    sub_names : list of str
    sub_to_concept : ndarray of int, shape (L,) or None
    index : dict
        ``index[split]`` (train, val, query, pool) are row numbers.
    models : dict
        ``models[(method, d0)]`` -> fitted model of a registered method
        (:mod:`slics_core.methods`; ``d0`` is None for methods without a dictionary).
    concept_text : ndarray of shape (S, d) or None
        Unit text embeddings of the concept prompts (zero-shot labels).
    encoder : str or None
        Encoder spec for embedding new queries (``"emoji-small"``, ``"ViT-B-32/openai"``...).
    captions : list of str or None
        A text per item (the emoji world's scene captions).
    ids : list of str
    images : ndarray (n, H, W, 3) uint8 or None
        In-memory images (emoji world); else ``paths`` are read on demand.
    paths : list of str or None
    chosen_d0 : int or None
        ``d0`` chosen on the validation split, when known.
    preprocessing : {"clip", "unit", "token", "none"}
        How ``X`` was made from the encoder output (:func:`slics_core.preprocessing.make_preprocessor`;
        ``clip`` subtracts ``mean``).
    n_tokens : int
        Tokens per item (``token`` preprocessing).
    d0_scores : list of dict
        The validation curve ``d0`` was chosen on.
    vocab_words, vocab_text : caption vocabulary and its raw unit text embeddings (or None).
    generator : str or None
        Generator of the workspace (``"emoji"``), None when it has none.
    skipped : dict
        Methods not fitted, with the reason (e.g. no vocabulary for SpLiCE).
    extras : dict
        Other arrays aligned with the items (emoji world: ``cond``, the generator's conditioning
        embeddings).
    codebook : ndarray of shape (K, token_dim) or None
        Token codebook of token embeddings (TiTok), from the cache: the pool can also be
        searched quantized (:mod:`slics_core.explorer.quantized`).
    building : BuildProgress or None
        Set on a preview (:func:`start_emoji_workspace`) while the whole workspace is being built
        (never saved).
    """

    name: str
    kind: str
    path: Path | None
    X: np.ndarray
    raw: np.ndarray
    mean: np.ndarray
    Y: np.ndarray
    concept_names: list
    index: dict
    models: dict
    Z: np.ndarray | None = None
    sub_names: list = field(default_factory=list)
    sub_to_concept: np.ndarray | None = None
    concept_text: np.ndarray | None = None
    encoder: str | None = None
    captions: list | None = None
    ids: list = field(default_factory=list)
    images: np.ndarray | None = None
    paths: list | None = None
    chosen_d0: int | None = None
    preprocessing: str = "clip"
    n_tokens: int = 32
    d0_scores: list = field(default_factory=list)
    vocab_words: list | None = None
    vocab_text: np.ndarray | None = None
    generator: str | None = None
    skipped: dict = field(default_factory=dict)
    extras: dict = field(default_factory=dict)
    codebook: np.ndarray | None = None
    building: object = None

    # ------------------------------------------------------------------ sizes
    def __len__(self) -> int:
        return int(self.X.shape[0])

    @property
    def n_concepts(self) -> int:
        return int(self.Y.shape[1])

    @property
    def d0_values(self) -> list:
        return sorted({d for (_, d) in self.models if d is not None})

    @property
    def methods(self) -> list:
        """Registered methods with a fitted model here, in registry order."""
        fitted = {m for (m, _) in self.models}
        return [m for m in method_names() if m in fitted]

    def dictionary_methods(self) -> list:
        """The fitted methods that have atoms (one model per ``d0``)."""
        return [m for m in self.methods if get_method(m).dictionary]

    @property
    def default_d0(self) -> int | None:
        """``chosen_d0`` when known, else the middle fitted ``d0``; None when no dictionary is fitted."""
        if self.chosen_d0 in self.d0_values:
            return int(self.chosen_d0)
        d = self.d0_values
        return int(d[len(d) // 2]) if len(d) else None

    def model(self, method: str = "S-SLiCS", d0: int | None = None):
        """The fitted model of ``method`` with ``d0`` atoms per concept (default: :attr:`default_d0`;
        ignored for methods without a dictionary)."""
        if not get_method(method).dictionary:
            d0 = None
        else:
            d0 = self.default_d0 if d0 is None else int(d0)
        try:
            return self.models[(method, d0)]
        except KeyError:
            raise ValueError(f"no {method} model with d0={d0} in workspace {self.name!r}; "
                             f"fitted: {sorted(self.models)}") from None

    def summary(self) -> dict:
        """Sizes and settings, JSON-ready (Home page, CLI)."""
        return {"name": self.name, "kind": self.kind, "path": str(self.path) if self.path else None,
                "n_items": len(self), "dim": int(self.X.shape[1]), "n_concepts": self.n_concepts,
                "n_sub_labels": 0 if self.Z is None else int(self.Z.shape[1]),
                "splits": {k: int(len(v)) for k, v in self.index.items()},
                "methods": self.methods, "d0_values": self.d0_values, "chosen_d0": self.chosen_d0,
                "encoder": self.encoder, "has_concept_text": self.concept_text is not None,
                "vocabulary": len(self.vocab_words or []), "generator": self.generator,
                "preprocessing": self.preprocessing, "skipped": dict(self.skipped)}

    # ------------------------------------------------------------------ labels
    def labels_of(self, i: int) -> dict:
        """General and sub-label names of item ``i``."""
        out = {"concepts": [self.concept_names[j] for j in np.flatnonzero(self.Y[i])]}
        if self.Z is not None:
            out["sub_labels"] = [self.sub_names[j] for j in np.flatnonzero(self.Z[i])]
        return out

    # ------------------------------------------------------------------ images
    def image(self, i: int):
        """Item ``i`` as an RGB PIL image (raises :class:`slics_core.images.ImageLoadError` if unreadable)."""
        i = int(i)
        if not 0 <= i < len(self):
            raise IndexError(f"item {i} out of range (0..{len(self) - 1})")
        if self.images is not None:
            return Image.fromarray(self.images[i])
        if self.paths is None:
            raise ImageLoadError(f"workspace {self.name!r} has no images")
        if not self.paths[i]:
            raise ImageLoadError(f"item {self.ids[i] if self.ids else i} has no image file")
        # a huge file in a shared workspace is refused from its header (a grey tile), like an upload
        return load_image(self.paths[i], max_decode_bytes=DEFAULT_MAX_DECODE_BYTES)

    def thumbnail(self, i: int, size: int = 128):
        """Item ``i`` fitted in a ``size`` square (a grey tile with an X if the file is unreadable)."""
        try:
            im = self.image(i)
        except ImageLoadError:
            im = Image.new("RGB", (size, size), (200, 200, 200))
            d = ImageDraw.Draw(im)
            d.line((0, 0, size, size), fill=(120, 120, 120), width=3)
            d.line((0, size, size, 0), fill=(120, 120, 120), width=3)
            return im
        if im.width == im.height and im.width <= size:
            return im.resize((size, size), Image.NEAREST)
        im = im.copy()
        im.thumbnail((size, size))
        return im

    # ------------------------------------------------------------------ queries
    def preprocess(self, raw) -> np.ndarray:
        """Preprocess encoder embeddings like the training data (see ``preprocessing``)."""
        raw = np.asarray(raw, dtype=np.float64)
        if raw.ndim == 1:
            raw = raw[None, :]
        raw = check_embeddings(raw, n_features=self.X.shape[1], name="query embedding")
        mean = self.mean if self.preprocessing == "clip" else None
        pre = make_preprocessor(self.preprocessing, mean=mean, n_tokens=self.n_tokens).fit(raw)
        return pre.transform(raw).astype(np.float32)

    def zero_shot(self, raw) -> np.ndarray | None:
        """Cosines (n, S) between embeddings and the concept prompts (None without prompts)."""
        if self.concept_text is None:
            return None
        raw = np.atleast_2d(np.asarray(raw, dtype=np.float64))
        raw = unit_rows(raw, zero="keep", tol=1e-12)
        T = np.asarray(self.concept_text, dtype=np.float64)
        return raw @ unit_rows(T, zero="keep", tol=1e-12).T




# ---------------------------------------------------------------------- building
def _progress(progress, stage, done=0, total=1):
    if progress is not None:
        progress(stage, done, total)


def _fit_progress(progress, stage, job, n_jobs):
    """SLiCS ``callback`` that moves ``progress`` batch by batch within fit number ``job`` of ``n_jobs``.

    ``done`` / ``total`` count batches over all epochs, offset by the jobs already done
    (``job * batches_per_fit + batches_done`` of ``n_jobs * batches_per_fit``), so the fraction keeps
    counting the whole fit step and moves within one fit.
    """
    if progress is None:
        return None

    def callback(epoch, n_epochs, batch, n_batches):
        per_fit = n_epochs * n_batches
        progress(stage, job * per_fit + epoch * n_batches + batch + 1, n_jobs * per_fit)
    return callback


def _embed_vocabulary(encoder, words, store, progress):
    """Raw text embeddings of the vocabulary, or None (with a warning) when the encoder cannot."""
    if encoder is None or not words:
        return None
    if not getattr(encoder, "has_text", False):
        warnings.warn("the encoder has no text tower: no caption vocabulary, SpLiCE baselines skipped",
                      RuntimeWarning, stacklevel=3)
        return None
    _progress(progress, f"embed the vocabulary ({len(words)} words)", 0, 1)
    return vocabulary_embeddings(encoder, words, store=store)


def build_workspace(data: LabelledEmbeddings, out, *, split: Split | None = None, n_train=None, n_val=None,
                    n_query=None, seed=0, d0_values=(5, 10, 15), n_iter=10, methods=None, mean=None,
                    vocabulary=None, encoder=None, store=None, name=None, kind="dataset", generator=None,
                    progress=None, replace=True, codebook=None, source=None, overwrite=False,
                    prepare=True) -> Workspace:
    """Build, save and return a workspace from labelled embeddings (see the module docstring).

    Parameters
    ----------
    data : slics_core.data.LabelledEmbeddings
    out : path or None
        Folder to write. An existing folder is replaced only if it is a workspace. None: not saved
        (the app's preview).
    split : Split, optional
        Default :func:`slics_core.splits.make_split` with ``n_train``, ``n_val``, ``n_query``, ``seed``.
    d0_values : sequence of int
        Atoms per concept fitted for every dictionary method.
    n_iter : int
        SLiCS epochs.
    methods : sequence of str, optional
        Registered methods to fit (default: all of :data:`slics_core.methods.REGISTRY`).
    mean : array-like of shape (d,), optional
        Precomputed centring mean (``clip`` preprocessing); default: the training mean.
    vocabulary : list of str, optional
        Caption / SpLiCE vocabulary, embedded with ``encoder``; None: no vocabulary.
    encoder : encoder object, optional
        Used for the vocabulary's text embeddings.
    store : EmbeddingStore, optional
        Caches the vocabulary embeddings.
    name, kind, generator : recorded in the workspace (``kind`` is ``"emoji"`` or ``"dataset"``).
    progress : callable ``progress(stage, done, total)``, optional
    codebook : array-like of shape (K, token_dim), optional
        Token codebook (TiTok) kept with the workspace for quantized-pool retrieval.
    prepare : bool
        After saving, compute and store what the pages show on arrival
        (:func:`slics_core.explorer.arrival.prepare_pages`), so no first visit waits.
    source, overwrite : see :func:`save_workspace` (checked before anything is fitted).

    Returns
    -------
    Workspace
    """
    out = None if out is None else Path(out)
    if out is not None:
        _check_target(out, source, overwrite)
    d0_values = sorted({int(d) for d in d0_values})
    if not d0_values or d0_values[0] < 1:
        raise ValueError(f"d0 values must be positive integers; got {d0_values}")
    if split is None:
        split = make_split(data.Y, n_train, n_val, n_query, seed)
    W = _embed_vocabulary(encoder, vocabulary, store, progress)
    ed, pre = eval_data(data, split, mean=mean, vocab=None if W is None else (vocabulary, W))
    X = ed.X
    inputs = fit_inputs(ed, split.train)
    names = method_names() if methods is None else [get_method(m).name for m in methods]
    jobs, skipped = [], {}
    for m in names:
        why = needs_message(m, inputs)
        if why:
            skipped[m] = why
            continue
        jobs += [(m, d) for d in d0_values] if get_method(m).dictionary else [(m, None)]
    models = {}
    for i, (m, d0) in enumerate(jobs):
        stage = f"fit {m}" + (f" d0={d0}" if d0 is not None else "")
        _progress(progress, stage, i, len(jobs))
        try:
            models[(m, d0)] = fit_method(m, inputs, d0, n_iter=n_iter, batch_size=None, seed=seed, ridge=0.0,
                                         callback=_fit_progress(progress, stage, i, len(jobs)))
        except (ValueError, np.linalg.LinAlgError) as exc:  # one method failing never sinks the others
            skipped[m] = f"fit failed ({exc})"
            models = {k: v for k, v in models.items() if k[0] != m}
            warnings.warn(f"{m} was not fitted: {exc}", RuntimeWarning, stacklevel=2)
    _progress(progress, "fit", len(jobs), len(jobs))
    index = {"train": split.train, "val": split.val, "query": split.query, "pool": split.pool}
    extras = dict(data.extras)
    images = extras.pop("images", None)
    captions = extras.pop("captions", None)
    ws = Workspace(name=name or data.name, kind=kind, path=out, X=X, raw=np.asarray(data.raw, np.float32),
                   mean=np.asarray(getattr(pre, "mean_", np.zeros(X.shape[1])), dtype=np.float64), Y=data.Y,
                   concept_names=list(data.concept_names), index=index, models=models, Z=data.Z,
                   sub_names=list(data.sub_names), sub_to_concept=data.sub_to_concept,
                   concept_text=data.concept_text, encoder=data.encoder, captions=captions,
                   ids=list(data.ids), images=images, paths=data.paths, preprocessing=data.preprocessing,
                   n_tokens=data.n_tokens, vocab_words=inputs.vocab_words, vocab_text=inputs.vocab_text, generator=generator,
                   skipped=skipped, extras=extras,
                   codebook=None if codebook is None else np.asarray(codebook, dtype=np.float32))
    d0s = [d for d in d0_values if ("S-SLiCS", d) in models]
    if len(split.val) and len(d0s) > 1:
        _progress(progress, "choose d0 on the validation split", 0, 1)
        records = sweep_d0(ed, split, d0s, models={d: models[("S-SLiCS", d)] for d in d0s}, modes=("partial",))
        ws.d0_scores = [{"d0": r["d0"], "general": round(float(r["general"]), 4), "sub": round(float(r["sub"]), 4)}
                        for r in records]
        ws.chosen_d0 = choose_d0(records)
    elif d0s:
        ws.chosen_d0 = d0s[0]
    if out is not None:
        _progress(progress, "save the workspace", 0, 1)
        save_workspace(ws, out, source=source, overwrite=True, _warn=False)
        _progress(progress, "save the workspace", 1, 1)
        if prepare:  # what the pages show on arrival, stored in the folder for every process (issue 24)
            prepare_pages(ws, progress)
    return ws


def build_workspace_from_cache(cache, out, *, encoder=None, mean_file=None, vocabulary="wordfreq", n_words=10_000,
                               **kwargs) -> Workspace:
    """:func:`build_workspace` of an embedding cache (``slics embed``).

    Parameters
    ----------
    cache : path
    out : path
    encoder : encoder object, optional
        Text encoder for the vocabulary; default: the cache's encoder resolved with
        ``trusted=False`` (a missing one means no vocabulary, with a warning).
    mean_file : path, optional
        Precomputed centring mean (:func:`slics_core.preprocessing.load_mean`).
    vocabulary : "wordfreq", "none", or a list of words
    n_words : int
        Size of the ``wordfreq`` vocabulary.
    kwargs : passed to :func:`build_workspace`.
    """
    data = load_cache(cache)
    mean = load_mean(mean_file, dim=data.raw.shape[1]) if mean_file else None
    words = None
    if isinstance(vocabulary, (list, tuple)):
        words = [str(w) for w in vocabulary]
    elif vocabulary == "wordfreq":
        words = default_vocabulary(n_words)
    elif vocabulary not in (None, "none"):
        raise ValueError(f"vocabulary must be 'wordfreq', 'none' or a list of words; got {vocabulary!r}")
    if encoder is None and words and data.encoder:
        try:
            encoder = create_encoder(data.encoder, trusted=False)
        except (OSError, ValueError, RuntimeError) as exc:
            warnings.warn(f"no caption vocabulary: the cache's encoder {data.encoder!r} cannot be loaded here ({exc})",
                          RuntimeWarning, stacklevel=2)
    store = EmbeddingStore(cache)
    kwargs.setdefault("codebook", store.load_codebook())
    kwargs.setdefault("source", str(Path(cache).resolve()))
    return build_workspace(data, out, mean=mean, vocabulary=words, encoder=encoder, store=store, **kwargs)


# ---------------------------------------------------------------------- saving and opening
#: Files a workspace writes (relative to its folder); a rebuild replaces or removes only these.
_OWN_FILE = re.compile(r"^(workspace\.json|arrays\.npz|images\.npy|extra-[A-Za-z0-9_]+\.npy|models/[A-Za-z0-9][A-Za-z0-9._-]*\.npz)$")
_TMP_PREFIX = ".slics-new-"
_MAX_HEADER_BYTES = 1 << 30  # workspace.json holds ids, paths and captions: ~100 MB for a million items
_MAX_MARKER_BYTES = 1 << 20


class WorkspaceExistsError(ValueError):
    """The target folder holds a workspace built from another cache (pass ``overwrite=True``)."""


def _is_workspace(folder: Path) -> bool:
    return (folder / MARKER).is_file()


def _marker(folder: Path) -> dict:
    """The marker of the workspace in ``folder`` (``{}`` when unreadable)."""
    try:
        if (folder / MARKER).stat().st_size > _MAX_MARKER_BYTES:
            return {}
        info = json.loads((folder / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def _check_target(out: Path, source=None, overwrite=False, warn=True) -> None:
    """Refuse a target that is a file, a folder that is not a workspace, or a workspace of another cache."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"{str(out)!r} exists and is a file, not a workspace folder; choose another --out")
    if out.is_dir() and any(p.name != MARKER for p in out.iterdir()) and not _is_workspace(out):
        raise ValueError(f"{str(out)!r} exists and is not a SLiCS workspace (no {MARKER}); it is left untouched: "
                         "choose another name or --out")
    old = _marker(out).get("source") if out.is_dir() else None
    if source is not None and isinstance(old, str) and old != str(source):
        if not overwrite:
            raise WorkspaceExistsError(
                f"workspace folder {str(out)!r} was built from {old!r}, not {str(source)!r}; pass --overwrite to "
                "replace it (files you added there are kept), or choose another --name")
        if warn:
            warnings.warn(f"workspace folder {str(out)!r} was built from {old!r}; replacing it with a build of "
                          f"{str(source)!r} (files you added there are kept)", UserWarning, stacklevel=3)


def _write_files(ws: Workspace, tmp: Path) -> list:
    """Write the workspace's files into ``tmp``; their paths relative to it."""
    (tmp / "models").mkdir()
    arrays = {"X": ws.X, "raw": ws.raw, "mean": ws.mean, "Y": ws.Y}
    if ws.Z is not None:
        arrays.update(Z=ws.Z, sub_to_concept=np.asarray(ws.sub_to_concept))
    if ws.concept_text is not None:
        arrays["concept_text"] = ws.concept_text
    if ws.vocab_text is not None:
        arrays["vocab_text"] = ws.vocab_text
    if ws.codebook is not None:
        arrays["codebook"] = ws.codebook
    arrays.update({f"index_{k}": np.asarray(v) for k, v in ws.index.items()})
    np.savez(tmp / "arrays.npz", **arrays)
    written = ["arrays.npz"]
    if ws.images is not None:
        np.save(tmp / "images.npy", np.asarray(ws.images, dtype=np.uint8), allow_pickle=False)
        written.append("images.npy")
    extra_names = []
    for k, v in ws.extras.items():
        if isinstance(v, np.ndarray) and v.dtype != object and re.fullmatch(r"[A-Za-z0-9_]+", k):
            np.save(tmp / f"extra-{k}.npy", v, allow_pickle=False)
            extra_names.append(k)
            written.append(f"extra-{k}.npy")
    names = {}
    for (method, d0), model in ws.models.items():
        fname = f"{method}_d0{d0}.npz" if d0 is not None else f"{method}.npz"
        model.save(tmp / "models" / fname)
        names[f"{method}|{'' if d0 is None else d0}"] = fname
        written.append(f"models/{fname}")
    head = {"format": FORMAT, "name": ws.name, "kind": ws.kind, "concept_names": ws.concept_names,
            "sub_names": ws.sub_names, "encoder": ws.encoder, "ids": ws.ids, "paths": ws.paths,
            "captions": ws.captions, "chosen_d0": ws.chosen_d0, "d0_scores": ws.d0_scores,
            "preprocessing": ws.preprocessing, "n_tokens": ws.n_tokens, "models": names, "n": len(ws),
            "vocab_words": ws.vocab_words, "generator": ws.generator, "skipped": ws.skipped,
            "extras": extra_names}
    (tmp / "workspace.json").write_text(json.dumps(head))
    return written + ["workspace.json"]


@contextmanager
def _naming(out: Path):
    """Like :func:`slics_core.errors.writing`, also for errors that name a file inside the hidden folder."""
    try:
        yield
    except OSError as exc:
        raise file_system_error(OSError(exc.errno, exc.strerror or str(exc)), out) from exc


def save_workspace(ws: Workspace, out, *, source=None, overwrite=False, _warn=True) -> Path:
    """Write ``ws`` to the folder ``out``, replacing only the files a workspace writes.

    The files are written into a hidden folder inside ``out``, then moved into place one by one
    (``workspace.json`` last); files of the previous build that this one does not write are removed;
    everything else in ``out`` (a teacher's ``notes.txt``) is kept, and the hidden folder is removed
    whatever happens.

    Parameters
    ----------
    source : str, optional
        The cache the workspace was built from, recorded in the marker: rebuilding a folder built
        from another cache is refused unless ``overwrite``.

    Raises
    ------
    ValueError
        ``out`` exists and is not a workspace (nothing is deleted); :class:`WorkspaceExistsError`
        for a workspace of another cache.
    slics_core.errors.FileSystemError
        Writing failed (disk full, read-only...): the message names ``out``; the previous build is kept.
    """
    out = Path(out)
    _check_target(out, source, overwrite, warn=_warn)
    previous = _marker(out).get("files") if out.is_dir() else None
    with _naming(out):
        out.mkdir(parents=True, exist_ok=True)
        for stale in out.glob(_TMP_PREFIX + "*"):  # left by a killed build
            shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=_TMP_PREFIX, dir=out))
        try:
            written = _write_files(ws, tmp)
            (out / "models").mkdir(exist_ok=True)
            for rel in written:  # workspace.json comes last
                os.replace(tmp / rel, out / rel)
            old = [f for f in previous if isinstance(f, str) and _OWN_FILE.match(f)] if isinstance(previous, list) \
                else []
            for rel in set(old) - set(written):
                (out / rel).unlink(missing_ok=True)
            # what the pages stored from the previous build (arrival.STORE) describes that build, not this one
            shutil.rmtree(out / ARRIVAL_STORE, ignore_errors=True)
            marker = {"format": FORMAT, "name": ws.name, "files": written,
                      "note": "SLiCS Explorer workspace folder: `slics workspace` may replace the files listed here, "
                              "and only those"}
            if source is not None:
                marker["source"] = str(source)
            # the marker also carries the display name, so listing workspaces never parses the large header
            (tmp / MARKER).write_text(json.dumps(marker))
            os.replace(tmp / MARKER, out / MARKER)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    ws.path = out
    return out


class WorkspaceDamagedError(DamagedFileError):
    """A workspace folder whose files cannot be read back or do not fit together."""


def _need(cond, what):
    if not cond:
        raise ValueError(what)


def _str_list(head, key, n=None, *, optional=True, items=(str,)):
    v = head.get(key)
    if v is None and optional:
        return None
    _need(isinstance(v, list) and all(isinstance(x, items) for x in v),
          f"field {key!r} must be a list of {' or '.join(t.__name__ for t in items)}")
    if n is not None:
        _need(len(v) in n, f"field {key!r} has {len(v)} entries, expected {' or '.join(map(str, n))}")
    return v


def _check_head(head) -> dict:
    """The header's fields, type-checked (raises ValueError naming the field)."""
    _need(isinstance(head, dict), "workspace.json is not a JSON object")
    _need(head.get("format") == FORMAT, f"unknown format {head.get('format')!r} (rebuild it with `slics workspace`)")
    for key, types in (("name", str), ("n", int), ("models", dict)):
        _need(key in head, f"field {key!r} is missing")
        _need(isinstance(head[key], types) and not isinstance(head[key], bool),
              f"field {key!r} must be a {types.__name__}")
    n = head["n"]
    _need(n >= 1, "field 'n' must be positive")
    _need(head.get("kind", "dataset") in ("emoji", "dataset"), "field 'kind' must be 'emoji' or 'dataset'")
    _need(head.get("preprocessing", "clip") in ("clip", "unit", "token", "none"),
          "field 'preprocessing' must be clip, unit, token or none")
    for key in ("encoder", "generator"):
        _need(head.get(key) is None or isinstance(head[key], str), f"field {key!r} must be a string")
    for key, low in (("chosen_d0", 1), ("n_tokens", 1)):
        v = head.get(key)
        _need(v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= low),
              f"field {key!r} must be a positive whole number")
    _need("concept_names" in head, "field 'concept_names' is missing")
    _str_list(head, "concept_names", optional=False)
    _str_list(head, "sub_names")
    _str_list(head, "ids", (0, n))
    _str_list(head, "paths", (n,), items=(str, type(None)))
    _str_list(head, "captions", (n,))
    _str_list(head, "vocab_words")
    _str_list(head, "extras")
    _need(all(re.fullmatch(r"[A-Za-z0-9_]+", k) for k in head.get("extras") or []), "field 'extras' names a bad file")
    _need(isinstance(head.get("d0_scores", []), list) and all(isinstance(r, dict) for r in head.get("d0_scores", [])),
          "field 'd0_scores' must be a list of objects")
    skipped = head.get("skipped", {})
    _need(skipped is None or isinstance(skipped, dict) and all(isinstance(v, str) for v in skipped.values()),
          "field 'skipped' must map methods to reasons")
    models = {}
    for key, fname in head["models"].items():
        method, _, d0 = key.partition("|")
        _need(_ == "|" and (d0 == "" or d0.isdigit()) and isinstance(fname, str) and _OWN_FILE.match(f"models/{fname}"),
              f"model entry {key!r}: {fname!r} is not a model of this workspace")
        models[(method, int(d0) if d0 else None)] = fname
    return models


#: Arrays of ``arrays.npz``: dtype kinds; required ones.
_ARRAYS = {"X": "f", "raw": "f", "mean": "f", "Y": "biu", "Z": "biu", "sub_to_concept": "iu", "concept_text": "f",
           "vocab_text": "f", "codebook": "f", **{f"index_{k}": "iu" for k in _SPLITS}}
_REQUIRED = {"X", "raw", "mean", "Y", *(f"index_{k}" for k in _SPLITS)}
_DENSE = ("X", "raw", "concept_text", "vocab_text", "codebook")


def _check_shapes(shapes, head) -> None:
    n, S = head["n"], len(head["concept_names"])
    L = len(head.get("sub_names") or [])
    d = shapes["X"][0][1] if len(shapes["X"][0]) == 2 else -1
    want = {"X": (n, d), "raw": (n, d), "mean": (d,), "Y": (n, S), "Z": (n, L), "sub_to_concept": (L,),
            "concept_text": (S, d)}
    if head.get("vocab_words") is not None:
        want["vocab_text"] = (len(head["vocab_words"]), d)
    for k, shape in want.items():
        if k in shapes:
            _need(shapes[k][0] == shape, f"array {k!r} has shape {shapes[k][0]}, expected {shape}")
    _need(("Z" in shapes) == ("sub_to_concept" in shapes), "arrays 'Z' and 'sub_to_concept' come together")
    _need(L == 0 or "Z" in shapes, f"{L} sub-label names but no array 'Z'")
    for k, (shape, _) in shapes.items():
        if k.startswith("index_"):
            _need(len(shape) == 1, f"array {k!r} must be one-dimensional")
        elif k == "codebook":
            _need(len(shape) == 2, "array 'codebook' must be two-dimensional")


def _read_array(file, kinds, shape_ok, what):
    """One ``.npy`` file, its header and size checked before it is read."""
    shape, _ = check_npy(file, kinds)
    _need(shape_ok(shape), f"{what} has shape {shape}")
    with reading(file):
        return np.load(file, allow_pickle=False)


def _read_workspace(path: Path) -> Workspace:
    head = _read_header(path)
    model_files = _check_head(head)
    n = head["n"]
    names = set(zipfile.ZipFile(path / "arrays.npz").namelist()) if (path / "arrays.npz").is_file() else set()
    members = {m.removesuffix(".npy") for m in names}
    _need(not (_REQUIRED - members), f"arrays.npz lacks {sorted(_REQUIRED - members)}")
    _need(members <= set(_ARRAYS), f"arrays.npz holds unknown arrays {sorted(members - set(_ARRAYS))}")
    shapes = check_npz(path / "arrays.npz", {k: _ARRAYS[k] for k in members}, dense=[k for k in _DENSE if k in members])
    _check_shapes(shapes, head)
    with np.load(path / "arrays.npz", allow_pickle=False) as z:
        arr = {k: z[k] for k in z.files}
    d = arr["X"].shape[1]
    index = {}
    for k in _SPLITS:
        idx = arr[f"index_{k}"].astype(np.int64)
        _need(idx.size == 0 or (idx.min() >= 0 and idx.max() < n), f"split {k!r} has item numbers outside 0..{n - 1}")
        index[k] = idx
    if "sub_to_concept" in arr:
        s2c = arr["sub_to_concept"]
        _need(s2c.size == 0 or (s2c.min() >= 0 and s2c.max() < arr["Y"].shape[1]),
              "array 'sub_to_concept' names concepts that do not exist")
    images = None
    if (path / "images.npy").is_file():
        images = _read_array(path / "images.npy", "u",
                             lambda s: len(s) == 4 and s[0] == n and s[3] == 3, f"images.npy (expected ({n}, H, W, 3))")
    extras = {k: _read_array(path / f"extra-{k}.npy", "fiub", lambda s: len(s) >= 1 and s[0] == n,
                             f"extra-{k}.npy (expected {n} rows)") for k in head.get("extras") or []}
    models = {}
    for (method, d0), fname in model_files.items():
        if method not in REGISTRY:
            continue  # a method no longer registered here
        model = _load_model(method, path / "models" / fname)
        got = (getattr(model, "n_features_in_", d), getattr(model, "n_concepts_", arr["Y"].shape[1]))
        _need(got == (d, arr["Y"].shape[1]), f"model {fname!r} is for {got[0]}-d embeddings and {got[1]} concepts, "
                                             f"the workspace has {d} and {arr['Y'].shape[1]}")
        models[(method, d0)] = model
    return Workspace(name=head["name"], kind=head.get("kind", "dataset"), path=path, X=arr["X"], raw=arr["raw"],
                     mean=arr["mean"], Y=arr["Y"].astype(bool), concept_names=list(head["concept_names"]),
                     index=index, models=models, Z=arr["Z"].astype(bool) if "Z" in arr else None,
                     sub_names=list(head.get("sub_names") or []), sub_to_concept=arr.get("sub_to_concept"),
                     concept_text=arr.get("concept_text"), encoder=head.get("encoder"),
                     captions=head.get("captions"), ids=list(head.get("ids") or []), images=images,
                     paths=head.get("paths"), chosen_d0=head.get("chosen_d0"),
                     preprocessing=head.get("preprocessing", "clip"), n_tokens=int(head.get("n_tokens") or 32),
                     d0_scores=list(head.get("d0_scores") or []), vocab_words=head.get("vocab_words"),
                     vocab_text=arr.get("vocab_text"), generator=head.get("generator"),
                     skipped=dict(head.get("skipped") or {}), extras=extras, codebook=arr.get("codebook"))


def set_workspace_generator(ws: Workspace, generator: str | None) -> None:
    """Record ``generator`` (a generator spec, or None) in ``ws`` and in its saved header, nothing else.

    The header is rewritten beside and renamed into place; no model is refitted or rewritten.
    """
    from slics_core.formats import atomic_write_json

    if ws.path is None or not _is_workspace(Path(ws.path)):
        raise ValueError(f"workspace {ws.name!r} is not saved in a folder; build it with `slics workspace`")
    head = _header(Path(ws.path))
    head["generator"] = generator
    atomic_write_json(Path(ws.path) / "workspace.json", head)
    ws.generator = generator


def recorded_generator(ws: Workspace) -> str | None:
    """The generator spec the saved header of ``ws`` records now (it may have been set by another
    process, `slics align --workspace`, after ``ws`` was opened); ``ws.generator`` when unsaved."""
    if ws.path is None or not (Path(ws.path) / "workspace.json").is_file():
        return ws.generator
    return _header(Path(ws.path)).get("generator")


def _read_header(folder: Path):
    """``workspace.json`` of ``folder`` parsed, its size checked first (ValueError naming the problem)."""
    head_file = folder / "workspace.json"
    size = head_file.stat().st_size
    _need(size <= _MAX_HEADER_BYTES, f"workspace.json is {size} bytes (at most {_MAX_HEADER_BYTES})")
    return json.loads(head_file.read_text(encoding="utf-8"))


def _header(folder: Path) -> dict:
    """The JSON header ``workspace.json`` of a workspace folder, as a dict (ValueError naming the folder)."""
    try:
        head = _read_header(folder)
    except (OSError, ValueError) as exc:
        raise ValueError(f"workspace {folder} is damaged: {type(exc).__name__}: {exc}") from exc
    if not isinstance(head, dict):
        raise ValueError(f"workspace {folder} is damaged: its header is not a JSON object")
    return head


def _load_model(method, path):
    m = REGISTRY.get(method)
    if m is None:
        raise ValueError(f"model of unknown method {method!r}")
    return m.load(path)


def load_workspace(path) -> Workspace:
    """Open a workspace folder written by :func:`save_workspace`: the one checked reader.

    Every field of ``workspace.json`` is type-checked, every array's header and size checked
    against its zip entry before it is read (:func:`slics_core.formats.check_npz`), shapes checked
    against each other, split indices against the number of items, and each model's width and
    concepts against the workspace's.

    Raises
    ------
    FileNotFoundError
        No workspace there.
    WorkspaceDamagedError
        (a ``ValueError``) Anything else: one line, "workspace '<folder>' is damaged: <what>".
    """
    path = Path(path)
    head_file = path / "workspace.json"
    if not head_file.is_file():
        raise FileNotFoundError(f"no workspace in {str(path)!r} (missing workspace.json; build one with "
                                "`slics workspace`)")
    try:
        return _read_workspace(path)
    except (OSError, KeyError, ValueError, TypeError, AttributeError, IndexError, EOFError, RecursionError,
            zipfile.BadZipFile, UnicodeDecodeError) as exc:
        detail = user_message(exc) if isinstance(exc, (OSError, ValueError)) else f"{type(exc).__name__}: {exc}"
        detail = " ".join(detail.split())[:400]
        raise WorkspaceDamagedError(f"workspace {str(path)!r} is damaged: {detail}; rebuild it with `slics "
                                    "workspace` (or delete the folder)", path=path) from exc


def list_workspaces(root=None) -> list:
    """``[(name, folder), ...]`` of the workspaces under ``root`` (default :func:`workspaces_root`).

    ``name`` is the display name (``"<folder> (damaged)"`` when its header cannot be read).
    """
    root = Path(root) if root is not None else workspaces_root()
    if not root.is_dir():
        return []
    out = []
    for p in sorted(root.iterdir()):
        if p.name.startswith(".") or not (p / "workspace.json").is_file():
            continue
        name = _marker(p).get("name")  # the small marker names the workspace; the large header is not read
        out.append((name, p) if isinstance(name, str) and name.strip() else (f"{p.name} (damaged)", p))
    return out


def workspace_path(name, root=None) -> Path:
    """The folder of the workspace called ``name`` (a folder name) under ``root``.

    Raises
    ------
    ValueError
        ``name`` is not a plain name (a path, ``..``).
    FileNotFoundError
        No workspace of that name there.
    """
    root = Path(root) if root is not None else workspaces_root()
    folder = root / check_workspace_name(str(name))
    if not (folder / "workspace.json").is_file():
        raise FileNotFoundError(f"no workspace named {name!r} under {root}")
    return folder


def _emoji_folder(cache_dir, cfg) -> Path:
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return root / f"workspace-{cfg.key()}-{models_fingerprint()}"


def _make_cache_root(folder: Path) -> None:
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OSError(exc.errno, f"cannot create the emoji cache folder {folder.parent} ({exc.strerror}); set "
                                 "SLICS_EMOJI_CACHE to a writable folder") from None


def _open_emoji_cache(folder: Path, progress):
    """The cached emoji workspace, or None (absent, or damaged: then it is rebuilt, never fatal)."""
    if (folder / "workspace.json").is_file():
        try:
            return load_workspace(folder)
        except ValueError as exc:
            _progress(progress, f"cache unusable ({exc}); rebuilding", 0, 1)
    return None


def _build_emoji(cfg, folder, encoder, progress, prefix=None) -> Workspace:
    data, split = render_emoji_world(cfg, progress, encoder=encoder, prefix=prefix)
    return build_workspace(data, folder, split=split, d0_values=cfg.d0_values, n_iter=cfg.n_iter, seed=0,
                           vocabulary=emoji_vocabulary(), encoder=encoder, name="emoji world", kind=EMOJI,
                           generator="emoji", progress=progress)


def open_emoji_workspace(cache_dir=None, config: EmojiWorldConfig | None = None, progress=None,
                         rebuild: bool = False) -> Workspace:
    """The emoji world as a workspace: opened from its cache, or rendered, embedded and built.

    Parameters
    ----------
    cache_dir : path, optional
        Default ``$SLICS_EMOJI_CACHE`` or ``~/.cache/slics/emoji``; the workspace is the folder
        ``workspace-<config key>-<weights fingerprint>`` there. A damaged one is rebuilt.
    config : slics_core.emoji.world.EmojiWorldConfig, optional
        Default: :func:`slics_core.emoji.world.config_from_env` (``$SLICS_EMOJI_SCALE``).
    progress : callable ``progress(stage, done, total)``, optional
    rebuild : bool
        Ignore the cache.
    """
    cfg = config or config_from_env()
    folder = _emoji_folder(cache_dir, cfg)
    ws = None if rebuild else _open_emoji_cache(folder, progress)
    if ws is not None:
        return ws
    _make_cache_root(folder)
    return _build_emoji(cfg, folder, create_encoder(EMOJI_ENCODER, device="cpu", half=False), progress)


#: d0 of the preview's S-SLiCS model, before d0 is chosen on validation (the full world's choice, README).
PROVISIONAL_D0 = 5

#: Relative cost of the steps of a staged emoji build (CPU seconds measured on the default world, 2 cores),
#: used to turn per-step progress into one overall fraction.
_STEPS = (("preview render", 3.5), ("preview embed", 4.0), ("preview fit", 1.0), ("render", 21.0),
          ("embed with emoji-small", 24.0), ("embed with emoji-large", 40.0), ("embed the vocabulary", 0.5),
          ("fit", 90.0), ("choose d0", 10.0), ("save", 2.0), ("prepare the pages", 30.0))


class BuildProgress:
    """Progress and result of a workspace build running in a background thread, shared by every reader.

    The builder calls it as ``progress(stage, done, total)``; readers call :meth:`snapshot`
    (thread-safe). :attr:`workspace` is the newest usable workspace (the preview, then the whole
    one); :attr:`generation` counts publications, so a reader knows when to reload.

    Attributes
    ----------
    workspace : Workspace or None
    generation : int
    finished : bool
        The whole workspace is built (or the build failed: see :attr:`error`).
    error : str or None
        One-line message of a failed build.
    """

    def __init__(self, steps=_STEPS):
        self._lock = threading.Lock()
        self._steps = [(str(k), float(w)) for k, w in steps]
        self._total_weight = sum(w for _, w in self._steps) or 1.0
        self._step = 0
        self._frac = 0.0
        self.stage, self.done, self.total = "starting", 0, 1
        self.started = time.monotonic()
        self.stage_started = self.started
        self.workspace = None
        self.generation = 0
        self.finished = False
        self.error = None
        self.process = None
        self._phase = ""

    def phase(self, name: str) -> None:
        """Prefix the next stages with ``name`` (``"preview"``; ``""`` for the whole world)."""
        with self._lock:
            self._phase = name

    def __call__(self, stage, done=0, total=1):
        with self._lock:
            key = f"{self._phase} {stage}".strip()
            for i in range(self._step, len(self._steps)):  # steps only move forward
                if key.startswith(self._steps[i][0]):
                    self._step = i
                    break
            if stage != self.stage:
                self.stage_started = time.monotonic()
            self.stage, self.done, self.total = str(stage), int(done), int(total)
            before = sum(w for _, w in self._steps[:self._step])
            within = self._steps[self._step][1] * (min(1.0, max(0.0, done / total)) if total else 0.0)
            self._frac = max(self._frac, min(0.999, (before + within) / self._total_weight))

    def publish(self, ws, *, final=False) -> None:
        with self._lock:
            self.workspace = ws
            self.generation += 1
            if final:
                self.finished, self._frac = True, 1.0

    def fail(self, error) -> None:
        """Record a failed build (``error``: a one-line message or an exception)."""
        with self._lock:
            self.error = error if isinstance(error, str) else user_error(error)
            self.finished = True

    def percent(self) -> float:
        with self._lock:
            return 100.0 * self._frac

    def snapshot(self) -> dict:
        """``stage``, ``done``, ``total``, ``percent``, ``elapsed`` (s), ``stage_elapsed`` (s), ``generation``,
        ``finished``, ``error``, ``preview`` (the published workspace is a preview)."""
        with self._lock:
            now = time.monotonic()
            return {"stage": self.stage, "done": self.done, "total": self.total, "percent": 100.0 * self._frac,
                    "elapsed": now - self.started, "stage_elapsed": now - self.stage_started,
                    "generation": self.generation, "finished": self.finished, "error": self.error,
                    "preview": self.workspace is not None and self.workspace.building is not None}


def _staged_build(cfg, folder: Path, n_preview: int, progress, publish) -> None:
    """The staged emoji build: ``publish("preview", ws)`` (when the world is large enough), then
    ``publish("final", ws)`` with the whole workspace, saved in ``folder``."""
    pc = preview_config(cfg, n_preview)
    progress.phase("preview" if pc is not None else "")

    def load_encoder():
        progress(f"load the {EMOJI_ENCODER} encoder", 0, 1)
        return create_encoder(EMOJI_ENCODER, device="cpu", half=False)

    # The preview's embeddings come from the shipped table when it has them (no torch import on the
    # way to the first page); anything it lacks is computed by the real encoder.
    fast = preview_encoder(load_encoder) if pc is not None else None
    encoder = fast if fast is not None else load_encoder()
    prefix = None
    if pc is not None:
        data, split, prefix = render_emoji_preview(cfg, progress, encoder=encoder, n_scenes=n_preview)
        ws = build_workspace(data, None, split=split, d0_values=[PROVISIONAL_D0], n_iter=cfg.n_iter, seed=0,
                             methods=["S-SLiCS", "UF"], vocabulary=emoji_vocabulary(), encoder=encoder,
                             name="emoji world (preview)", kind=EMOJI, generator="emoji", progress=progress)
        ws.chosen_d0 = None
        publish("preview", ws)
        progress.phase("")
    if fast is not None:
        encoder = fast.real()
        if fast.hits:  # the whole world is embedded by the real encoder, like a direct build
            prefix = None
    publish("final", _build_emoji(cfg, folder, encoder, progress, prefix=prefix))


def _preview_folder(folder: Path) -> Path:
    return folder.with_name(folder.name + "-preview")


class _LineProgress:
    """Progress of the build process, written as JSON lines on stdout (read by :class:`BuildProgress`)."""

    def __init__(self):
        self._phase = ""
        self._parent = os.getppid()

    def phase(self, name):
        self._phase = name

    def __call__(self, stage, done=0, total=1):
        if os.getppid() != self._parent:  # the server is gone: stop building for nobody
            os._exit(3)
        print(json.dumps({"phase": self._phase, "stage": str(stage), "done": int(done), "total": int(total)}),
              flush=True)


def _emoji_build_worker(argv=None) -> int:
    """Entry point of the build process started by :func:`start_emoji_workspace` (not a public command:
    ``slics emoji-build`` is). ``argv``: cache folder, config JSON, preview size, niceness."""
    import sys

    cache_dir, cfg_json, n_preview, nice = (argv or sys.argv[1:])[:4]
    if int(nice):
        try:
            os.nice(int(nice))
        except OSError:
            pass
    cfg = EmojiWorldConfig(**json.loads(cfg_json))
    folder = _emoji_folder(cache_dir, cfg)
    progress = _LineProgress()

    def publish(kind, ws):
        if kind == "preview":
            out = save_workspace(ws, _preview_folder(folder))
        else:
            out = ws.path
            shutil.rmtree(_preview_folder(folder), ignore_errors=True) if _is_workspace(_preview_folder(folder)) \
                else None
        print(json.dumps({"publish": kind, "path": str(out)}), flush=True)

    try:
        _staged_build(cfg, folder, int(n_preview), progress, publish)
    except Exception as exc:  # one line for the server to show
        print(json.dumps({"error": user_error(exc)}), flush=True)
        return 1
    return 0


def user_error(exc) -> str:
    """One line for a failed build (OS errors and bad data as they are, others with their type)."""
    return str(exc) if isinstance(exc, (OSError, ValueError)) else f"{type(exc).__name__}: {exc}"


def start_emoji_workspace(cache_dir=None, config: EmojiWorldConfig | None = None, *,
                          preview_scenes=None, nice: int = 10) -> BuildProgress:
    """Open the emoji workspace without waiting for a cold build: the app's start.

    A cached workspace is opened at once (the returned handle is finished). Otherwise a build
    *process* is started (a separate process, so that the server's own threads never wait for it;
    ``nice`` lowers its priority) and a reader thread publishes on the handle first a *preview* — the
    first :data:`slics_core.emoji.world.PREVIEW_SCENES` scenes of the same world (same row numbers and
    images) with S-SLiCS at the provisional ``d0`` :data:`PROVISIONAL_D0` and UF, ``building`` set —
    then the whole workspace, exactly as :func:`open_emoji_workspace` builds and caches it (the
    preview's scenes and embeddings are reused). Worlds smaller than twice the preview are built at
    once (no preview). The process stops when the server does.

    Parameters
    ----------
    cache_dir, config : as :func:`open_emoji_workspace`.
    preview_scenes : int, optional
        Size of the preview (a multiple of 256; default :data:`slics_core.emoji.world.PREVIEW_SCENES`).
    nice : int
        Niceness added to the build process, so that pages stay responsive while it runs.

    Raises
    ------
    OSError
        The cache folder cannot be created (one line, raised here).
    ValueError
        ``preview_scenes`` is not a positive multiple of 256.
    """
    import subprocess
    import sys
    from dataclasses import asdict

    from slics_core.emoji.world import PREVIEW_SCENES

    cfg = config or config_from_env()
    folder = _emoji_folder(cache_dir, cfg)
    n_preview = PREVIEW_SCENES if preview_scenes is None else int(preview_scenes)
    pc = preview_config(cfg, n_preview)
    handle = BuildProgress(_STEPS if pc is not None else _STEPS[3:])
    ws = _open_emoji_cache(folder, handle)
    if ws is not None:
        handle.publish(ws, final=True)
        return handle
    _make_cache_root(folder)
    cfg_json = json.dumps({**asdict(cfg), "d0_values": list(cfg.d0_values)})
    code = "import sys; from slics_core.explorer.workspace import _emoji_build_worker as w; sys.exit(w())"
    proc = subprocess.Popen([sys.executable, "-c", code, str(folder.parent), cfg_json, str(n_preview), str(int(nice))],
                            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, bufsize=1,
                            cwd=os.getcwd(), env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                p for p in sys.path if p)})

    def read():
        try:
            for line in proc.stdout:
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue  # a library printed something: not ours
                if "stage" in msg:
                    handle.phase(msg.get("phase", ""))
                    handle(msg["stage"], msg.get("done", 0), msg.get("total", 1))
                elif "publish" in msg:
                    ws = load_workspace(msg["path"])
                    final = msg["publish"] == "final"
                    if not final:
                        ws.building = handle
                    handle.publish(ws, final=final)
                elif "error" in msg:
                    handle.fail(msg["error"])
            code = proc.wait()
            if not handle.finished:
                handle.fail(f"the build process stopped (exit code {code}) before the workspace was ready")
        except Exception as exc:  # never a silent death of the reader
            handle.fail(user_error(exc))

    threading.Thread(target=read, name="slics-emoji-build-reader", daemon=True).start()
    handle.process = proc
    return handle


# ---------------------------------------------------------------------- encoders, vocabulary
def load_query_encoder(ws: Workspace):
    """The encoder that embeds new queries for ``ws`` (``encode_images(list of PIL) -> (n, d)``).

    The name comes from the workspace file, so it is resolved with ``trusted=False``:
    presets and local checkpoints only, never ``module:factory``.

    Raises
    ------
    FileNotFoundError
        No usable encoder here (the message says what is missing and how to get it).
    """
    if ws.encoder is None:
        raise FileNotFoundError(f"workspace {ws.name!r} records no encoder (precomputed embeddings?); uploads "
                                "and text queries cannot be embedded: rebuild it from a cache made with --encoder")
    try:
        return create_encoder(ws.encoder, trusted=False)
    except (OSError, ValueError, RuntimeError) as exc:
        raise FileNotFoundError(f"encoder {ws.encoder!r} of workspace {ws.name!r} cannot be loaded here ({exc})") \
            from exc


def embed_query(ws: Workspace, encoder, image) -> tuple:
    """``(raw, x)``: the encoder's embedding and the preprocessed embedding (both (d,)) of one PIL image."""
    e = np.asarray(encoder.encode_images([image]), dtype=np.float64)
    if e.ndim != 2 or e.shape[0] != 1:
        raise ValueError(f"encoder returned shape {e.shape} for one image")
    if e.shape[1] != ws.X.shape[1]:
        raise ValueError(f"encoder gives {e.shape[1]}-d embeddings but the workspace is {ws.X.shape[1]}-d")
    if not np.all(np.isfinite(e)) or not np.linalg.norm(e) > 0:
        raise ValueError("the encoder returned a zero or non-finite embedding for this image")
    return e[0].astype(np.float32), ws.preprocess(e[0])[0]


def embed_text_query(ws: Workspace, encoder, text: str) -> tuple:
    """``(raw, x)`` of a text query: the encoder's unit text embedding and its preprocessed form, both (d,).

    The paper is silent on text queries; the choice here follows its caption step (sec. 3.7) and
    SpLiCE: a text embedding is unit-normalised, centred on the *text* mean and re-normalised, while
    images are centred on the image mean. The text mean is that of the workspace's caption vocabulary
    (its raw text embeddings); a workspace without a vocabulary centres with the image mean instead.
    Centring each modality on its own mean removes most of CLIP's modality gap, so the prepared text
    lands among the images it describes and can be projected on the concept cones like an image.

    Raises
    ------
    ValueError
        Empty text, an encoder without a text tower, or an embedding of the wrong size.
    """
    text = " ".join(str(text).split())
    if not text:
        raise ValueError("the text query is empty: type a phrase, e.g. 'a dog on a beach'")
    if not getattr(encoder, "has_text", False):
        raise ValueError(f"the encoder of workspace {ws.name!r} has no text tower, so it cannot embed text")
    e = np.asarray(encoder.encode_texts([text]), dtype=np.float64)
    if e.ndim != 2 or e.shape[0] != 1 or e.shape[1] != ws.X.shape[1]:
        raise ValueError(f"the text encoder returned shape {e.shape}; the workspace is {ws.X.shape[1]}-d")
    n = np.linalg.norm(e[0])
    if not np.all(np.isfinite(e)) or not n > 0:
        raise ValueError("the encoder returned a zero or non-finite embedding for this text")
    raw = e[0] / n
    if ws.vocab_text is not None and len(ws.vocab_text) and ws.preprocessing == "clip":
        x = prepare_text_embeddings(raw[None], mean=text_mean(ws))[0][0]
    else:
        x = ws.preprocess(raw)[0]
    return raw.astype(np.float32), np.asarray(x, dtype=np.float32)


def text_mean(ws: Workspace) -> np.ndarray:
    """Mean of the unit-normalised vocabulary text embeddings (the centre of text queries)."""
    W = np.asarray(ws.vocab_text, dtype=np.float64)
    W = unit_rows(W, zero="keep", tol=1e-12)
    return W.mean(axis=0)


def workspace_vocabulary(ws: Workspace) -> tuple:
    """``(words, W)``: the caption vocabulary and its raw unit text embeddings, embedded at build time.

    Raises
    ------
    FileNotFoundError
        The workspace has no vocabulary (its encoder has no text tower or was not available).
    """
    if ws.vocab_text is None or not ws.vocab_words:
        raise FileNotFoundError(f"workspace {ws.name!r} has no word vocabulary (it needs an encoder with a text "
                                "tower when it is built: `slics workspace --encoder ...`)")
    return list(ws.vocab_words), np.asarray(ws.vocab_text, dtype=np.float32)
