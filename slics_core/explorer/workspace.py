"""The workspace model: :class:`Workspace`, its fields (each declared once with where it is saved) and names.

A :class:`Workspace` is one embedded, labelled collection with its fitted models: preprocessed
embeddings ``X`` (rows: items), the encoder's embeddings ``raw``, labels ``Y`` (and sub-labels
``Z``), the train / val / query / pool split, and ``models[(method, d0)]`` for every method of the
registry (:mod:`slics_core.methods`) whose needs the data meets. It is built by
:mod:`slics_core.explorer.build` (every data source) and, for the emoji world, by
:mod:`slics_core.explorer.emoji_build`; its folder (saving, the one checked reader, listing) is
:mod:`slics_core.explorer.workspace_files`, which reads the field declarations here.

Workspace names are validated (no separators, no ``..``, not absolute); the app opens workspaces by
*name* under :func:`workspaces_root` only.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from slics_core._validation import check_embeddings
from slics_core.errors import DamagedFileError, FileSystemError, damaged_file_error
from slics_core.evaluation import fallback_d0
from slics_core.explorer.pool import Pool, labelled_pool, quantized_pool, workspace_pool
from slics_core.explorer.uploads import DEFAULT_MAX_DECODE_BYTES
from slics_core.explorer.workspace_names import check_workspace_name, workspaces_root
from slics_core.extras import MissingExtraError, require
from slics_core.formats import read_json
from slics_core.images import ImageLoadError, load_image
from slics_core.labels import CarriesLabels, Labels
from slics_core.methods import DEFAULT_METHOD, get_method, method_names
from slics_core.ondisk_index import SETTINGS_FILE, open_ondisk_index
from slics_core.preprocessing import make_preprocessor
from slics_core.retrieval import StreamingIndex, build_index
from slics_core.rows import unit_rows
from slics_core.search_index import index_kind
from slics_core.shards import PoolShards

__all__ = ["Workspace", "open_pool_index", "pool_index_kind", "EMOJI", "workspaces_root", "check_workspace_name",
           "SPLITS", "PAGE_STORE", "POOL_INDEX", "POOL_RECALL"]

#: ``kind`` of the emoji world's workspace, and the app's name for it (``?ws=`` absent).
EMOJI = "emoji"
#: The four parts of a workspace's split.
SPLITS = ("train", "val", "query", "pool")
#: The folder inside a workspace's folder where the pages keep what they computed from it
#: (:mod:`slics_core.explorer.arrival`); saving a workspace removes it (it describes the previous build).
PAGE_STORE = "pagecache"
#: The folder inside a sharded workspace's folder that holds its pool's on-disk index
#: (:mod:`slics_core.ondisk_index`; written by :func:`slics_core.explorer.build.build_pool_index`). Saving a
#: workspace keeps it (it is not one of the files a save writes); a new ``--pool-shards`` build replaces it.
POOL_INDEX = "pool_index"
#: The file in :data:`POOL_INDEX` with the index's recall against exact search, measured when it was built
#: (:func:`slics_core.explorer.build.measure_pool_index`; goes with the index it describes).
POOL_RECALL = "recall.json"
_RECALL_KEYS = {"k": int, "recall": float, "n_queries": int, "rerank": int, "seed": int, "query_rows": list}


def _in_header(**kw):
    """A field saved in ``workspace.json`` (as JSON; a missing or null entry reads back as the default)."""
    return field(metadata={"stored": "header"}, **kw)


def _in_arrays(kinds: str, *, dense: bool = False, **kw):
    """A field saved in ``arrays.npz``: its allowed dtype kinds, whether it must be dense (its size is
    checked against its shape); optional when it has a default (None: not saved)."""
    return field(metadata={"stored": "array", "kinds": kinds, "dense": dense}, **kw)


@dataclass
class Workspace(CarriesLabels):
    """One explorable collection (see module docstring).

    Each field is declared once, with where it is saved: ``_in_header()`` fields in ``workspace.json``,
    ``_in_arrays()`` fields in ``arrays.npz`` (:func:`save_workspace` and :func:`load_workspace` read this
    declaration); ``labels`` (``arrays.npz`` and ``workspace.json``), ``index`` (``arrays.npz``), ``models``
    (``models/``), ``images`` (``images.npy``) and ``extras`` (``extra-*.npy``) have files of their own;
    ``path`` and ``building`` are not saved.

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
    labels : slics_core.labels.Labels
        General labels, sub-labels and their names (``Y``, ``concept_names``, ``Z``, ``sub_names``,
        ``sub_to_concept`` read it); saved as arrays ``Y``, ``Z``, ``sub_to_concept`` in ``arrays.npz``
        and ``concept_names``, ``sub_names`` in ``workspace.json``.
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
        ``d0`` chosen on the validation split, when it was (None: no validation split, or not chosen yet;
        :attr:`default_d0` then applies the fallback rule).
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
    pool_shards : dict or None
        A sharded workspace's pool (:mod:`slics_core.shards`): ``folder``, ``counts`` (rows per shard),
        ``dim``, ``dtype``, ``n_rows``, ``remote_thumbnails`` and ``remote_hosts`` (the hosts the thumbnails
        load from, when remote). Its pool is those shards in shard order, not
        rows of ``X`` (``index["pool"]`` is empty); None for an ordinary workspace.
    build_id : str
        Set by every save (:func:`~slics_core.explorer.workspace_files.save_workspace`): a digest of the files it
        writes. The page views stored in the folder (:mod:`slics_core.explorer.arrival`) are named with it, so views
        computed from one build are never read as another's (two builds of one folder at once, or a server holding
        an older build open), while builds of the same content share them. Empty for a workspace saved before it
        existed.
    pool_sample, pool_sample_rows : ndarray or None
        A sharded workspace's seeded sample of the pool (preprocessed rows, and their positions in shard
        order) kept for maps and heatmaps.
    building : BuildProgress or None
        Set on a preview (:func:`slics_core.explorer.emoji_build.start_emoji_workspace`) while the
        whole workspace is being built (never saved).
    """

    name: str = _in_header()
    kind: str = _in_header()
    path: Path | None = field()
    X: np.ndarray = _in_arrays("f", dense=True)
    raw: np.ndarray = _in_arrays("f", dense=True)
    mean: np.ndarray = _in_arrays("f")
    labels: Labels = field(metadata={"stored": "labels"})
    index: dict = field()
    models: dict = field()
    concept_text: np.ndarray | None = _in_arrays("f", dense=True, default=None)
    encoder: str | None = _in_header(default=None)
    captions: list | None = _in_header(default=None)
    ids: list = _in_header(default_factory=list)
    images: np.ndarray | None = None
    paths: list | None = _in_header(default=None)
    chosen_d0: int | None = _in_header(default=None)
    preprocessing: str = _in_header(default="clip")
    n_tokens: int = _in_header(default=32)
    d0_scores: list = _in_header(default_factory=list)
    vocab_words: list | None = _in_header(default=None)
    vocab_text: np.ndarray | None = _in_arrays("f", dense=True, default=None)
    generator: str | None = _in_header(default=None)
    skipped: dict = _in_header(default_factory=dict)
    extras: dict = field(default_factory=dict)
    codebook: np.ndarray | None = _in_arrays("f", dense=True, default=None)
    pool_shards: dict | None = _in_header(default=None)
    build_id: str = _in_header(default="")
    pool_sample: np.ndarray | None = _in_arrays("f", dense=True, default=None)
    pool_sample_rows: np.ndarray | None = _in_arrays("iu", default=None)
    building: object = None
    _opened: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self):
        self._check_labels(int(np.shape(self.X)[0]), "items")

    # ------------------------------------------------------------------ kept values
    def remember(self, name, factory):
        """The value kept on this instance under ``name`` (any hashable), else ``factory()``, kept and returned:
        what is opened or computed once per workspace and process (an evaluation index, a shard reader) lives here,
        on the one object every page and the builder share, instead of in each caller's own cache.

        ``factory`` is called at most once per name and instance while the value is kept (not under a lock: two
        threads asking at once may both compute, and the first kept wins, so keep factories free of side effects).
        """
        kept = self._opened
        if name not in kept:
            value = factory()
            kept.setdefault(name, value)
        return kept[name]

    def forget(self, name) -> None:
        """Drop the value kept under ``name`` (:meth:`remember`), if any: the next :meth:`remember` computes it."""
        self._opened.pop(name, None)

    # ------------------------------------------------------------------ sizes
    def __len__(self) -> int:
        return int(self.X.shape[0])

    @property
    def n_concepts(self) -> int:
        return self.labels.n_concepts

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
    def d0_on_validation(self) -> bool:
        """Whether :attr:`default_d0` was chosen on the validation split (the build's sweep, kept in
        ``d0_scores``) rather than by :func:`slics_core.evaluation.fallback_d0`."""
        return self.chosen_d0 in self.d0_values and bool(self.d0_scores)

    @property
    def default_d0(self) -> int | None:
        """``chosen_d0`` when it was chosen on validation (:attr:`d0_on_validation`), else
        :func:`slics_core.evaluation.fallback_d0` of the fitted ``d0`` (the one fallback rule, the
        build's too); None when no dictionary is fitted."""
        if self.d0_on_validation:
            return int(self.chosen_d0)
        return fallback_d0(self.d0_values)

    def model(self, method: str = DEFAULT_METHOD, d0: int | None = None):
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

    # ------------------------------------------------------------------ the pool
    @property
    def sharded(self) -> bool:
        """Whether the pool is clip-retrieval shards (:attr:`pool_shards`) rather than rows of ``X``."""
        return self.pool_shards is not None

    @property
    def n_pool(self) -> int:
        return int(self.pool_shards["n_rows"]) if self.sharded else int(len(self.index["pool"]))

    def shards(self):
        """The pool's :class:`slics_core.shards.PoolShards` (opened once; each shard checked against the
        counts recorded at build time). Raises ValueError on an ordinary workspace."""
        if not self.sharded:
            raise ValueError(f"workspace {self.name!r} has no sharded pool")
        info = self.pool_shards
        return self.remember("shards", lambda: PoolShards(info["folder"], dim=self.X.shape[1], counts=info["counts"]))

    @property
    def remote_thumbnails(self) -> bool:
        """Whether pool thumbnails may be remote URLs (``--remote-thumbnails``; only for a sharded pool)."""
        return bool(self.sharded and self.pool_shards.get("remote_thumbnails"))

    def pool_item(self, position: int) -> dict:
        """``shard``, ``row``, ``id``, ``path``, ``url`` of a sharded pool's row (:meth:`PoolShards.item`); ``url``
        is None unless the workspace opted in to remote thumbnails."""
        return self.shards().item(position, remote=self.remote_thumbnails)

    def pool_index(self):
        """The one search index over the pool that every page uses: :func:`open_pool_index`, opened once and kept
        on the instance (:meth:`forget_pool_index` drops it after a new index is built).

        ``search(Q, k)`` returns ``(positions, scores)``: positions in the pool (rows of
        ``X[index["pool"]]``, or positions in shard order for a sharded workspace), best first.
        """
        return self.remember("index", lambda: open_pool_index(self))

    @property
    def pool(self) -> Pool:
        """The workspace's pool (:func:`slics_core.explorer.pool.workspace_pool`: rows of ``X`` with labels, or its
        shards without), opened once and kept on the instance; ``pool.search(Q, k)`` returns
        :class:`~slics_core.explorer.pool.Hits`."""
        return self.remember("pool", lambda: workspace_pool(self))

    @property
    def eval_pool(self) -> Pool:
        """The labelled pool every label-based score ranks (:func:`slics_core.explorer.pool.labelled_pool`): the
        workspace's :attr:`pool` itself, or, for a sharded workspace, its labelled rows; kept on the instance."""
        return self.remember("eval_pool", lambda: labelled_pool(self))

    @property
    def quantized_pool(self) -> Pool | None:
        """The pool searched quantized (:func:`slics_core.explorer.pool.quantized_pool`; its index is built at the
        first search), or None when the workspace has none; kept on the instance."""
        return self.remember("quantized_pool", lambda: quantized_pool(self))

    def forget_pool_index(self) -> None:
        """Drop the opened pool index (the builder calls it before it builds a new one)."""
        self.forget("index")

    def pool_index_recall(self) -> dict | None:
        """The on-disk pool index's recall measured at build (:data:`POOL_RECALL`: ``k``, ``recall``,
        ``n_queries``, ``rerank``, ``seed``, ``query_rows``), or None when none was measured (an ordinary
        workspace, no on-disk index, or one built before the measurement). Raises DamagedFileError when the
        file is unreadable or lacks a field."""
        path = None if self.path is None or not self.sharded else Path(self.path) / POOL_INDEX / POOL_RECALL
        if path is None or not path.is_file():
            return None
        fix = "rebuild the workspace with `slics workspace --pool-shards`"
        rec = read_json(path, fix=fix, max_bytes=1 << 20)
        bad = [key for key, kind in _RECALL_KEYS.items()
               if not isinstance(rec, dict) or not isinstance(rec.get(key), (int, float) if kind is float else kind)
               or isinstance(rec.get(key), bool)]
        if bad:
            raise damaged_file_error(path, f"field {bad[0]!r} is missing or of the wrong type", fix)
        return rec

    def summary(self) -> dict:
        """Sizes and settings, JSON-ready (Home page, CLI)."""
        return {"name": self.name, "kind": self.kind, "path": str(self.path) if self.path else None,
                "n_items": len(self), "dim": int(self.X.shape[1]), "n_concepts": self.n_concepts,
                "n_sub_labels": self.labels.n_sub,
                "splits": {k: int(len(v)) for k, v in self.index.items()},
                "methods": self.methods, "d0_values": self.d0_values, "chosen_d0": self.chosen_d0,
                "encoder": self.encoder, "has_concept_text": self.concept_text is not None,
                "vocabulary": len(self.vocab_words or []), "generator": self.generator,
                "preprocessing": self.preprocessing, "skipped": dict(self.skipped),
                **({"pool_shards": dict(self.pool_shards)} if self.sharded else {})}

    # ------------------------------------------------------------------ labels
    def labels_of(self, i: int) -> dict:
        """General and sub-label names of item ``i`` (:meth:`slics_core.labels.Labels.names_of`)."""
        return self.labels.names_of(i)

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
        return _fitted(lambda: self.image(i), size)

    def pool_thumbnail(self, position: int, size: int = 128):
        """A sharded pool row's thumbnail: its local file fitted in a ``size`` square; else, when the workspace
        opted in to remote thumbnails, its checked http(s) URL (a str the viewer's browser loads; the server
        fetches nothing); else the grey tile."""
        item = self.pool_item(position)
        if item["path"] is None and item["url"] is not None:
            return item["url"]

        def load():
            if item["path"] is None:
                raise ImageLoadError(f"pool item {item['id']} has no image file")
            return load_image(item["path"], max_decode_bytes=DEFAULT_MAX_DECODE_BYTES)
        return _fitted(load, size)


    # ------------------------------------------------------------------ queries
    def preprocess(self, raw) -> np.ndarray:
        """Preprocess encoder embeddings like the training data (see ``preprocessing``)."""
        raw = np.asarray(raw, dtype=np.float64)
        if raw.ndim == 1:
            raw = raw[None, :]
        raw = check_embeddings(raw, n_features=self.X.shape[1], name="query embedding")
        mean = self.mean if self.preprocessing == "clip" else None
        # the fitted step depends on the settings and the width only (the mean is given): fitted once, kept, so
        # streaming the shards (exact search) pays for the transform alone
        key = (self.preprocessing, self.n_tokens, raw.shape[1], None if mean is None else np.asarray(mean).tobytes())
        step = self.remember(("preprocessor", key), lambda: make_preprocessor(
            self.preprocessing, mean=mean, n_tokens=self.n_tokens).fit(raw[:1]))
        return step.transform(raw).astype(np.float32)

    def zero_shot(self, raw) -> np.ndarray | None:
        """Cosines (n, S) between embeddings and the concept prompts (None without prompts)."""
        if self.concept_text is None:
            return None
        raw = np.atleast_2d(np.asarray(raw, dtype=np.float64))
        raw = unit_rows(raw, zero="keep")
        T = np.asarray(self.concept_text, dtype=np.float64)
        return raw @ unit_rows(T, zero="keep").T


def _fitted(load, size: int):
    """``load()`` (a PIL image) fitted in a ``size`` square; a grey tile with an X if it raises ImageLoadError."""
    try:
        im = load()
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


def pool_index_kind(ws: Workspace) -> str:
    """The kind of index ``ws``'s pool gets: :func:`slics_core.search_index.index_kind` of its size (the one rule;
    the builder and :func:`open_pool_index` both ask it). ``"exact"``, ``"faiss"`` or ``"ondisk"``."""
    return index_kind(ws.n_pool, sharded=ws.sharded)


def open_pool_index(ws: Workspace):
    """The search index over ``ws``'s pool, of the kind :func:`pool_index_kind` chooses: the one opener (used by
    :meth:`Workspace.pool_index` and by :func:`slics_core.explorer.build.build_pool_index`).

    An ordinary workspace: :func:`slics_core.retrieval.build_index` of ``X[pool]`` (exact; FAISS's flat index for
    a very large pool). A sharded one below :data:`slics_core.search_index.EXACT_MAX_ROWS` rows: exact search,
    streamed over the memory-mapped shards (:class:`slics_core.retrieval.StreamingIndex`, preprocessed as
    :meth:`Workspace.preprocess`; recall 1.0). From there: the on-disk IVF-PQ index the build wrote in
    ``ws.path / POOL_INDEX`` (:func:`slics_core.ondisk_index.open_ondisk_index`, re-ranking read from the shards
    and preprocessed as the index was built); without one (a workspace built before, FAISS not installed, a
    damaged index) the same exact streamed search, with a one-line ``RuntimeWarning`` saying why. Every kind
    returns ``(positions, scores)``.
    """
    kind = pool_index_kind(ws)
    if not ws.sharded:
        return build_index(ws.X[ws.index["pool"]], kind)
    if kind == "exact":
        return StreamingIndex(ws.shards(), ws.preprocess)
    folder = None if ws.path is None else Path(ws.path) / POOL_INDEX
    why = "it has no on-disk pool index"
    if folder is not None and (folder / SETTINGS_FILE).is_file():
        try:
            return open_ondisk_index(folder, ws.shards().arrays, transform=ws.preprocess)
        except (MissingExtraError, DamagedFileError, FileSystemError, ValueError) as exc:
            why = f"its on-disk pool index cannot be opened ({str(exc).splitlines()[0]})"
    else:
        try:
            require("faiss", "the on-disk pool index")
        except MissingExtraError as exc:
            why = f"it has no on-disk pool index ({str(exc).splitlines()[0]})"
    warnings.warn(f"workspace {ws.name!r}: {why}, so the {ws.n_pool} pool rows are searched exactly, block by "
                  "block (slower); rebuild it with `slics workspace --pool-shards` to make one", RuntimeWarning,
                  stacklevel=2)
    return StreamingIndex(ws.shards(), ws.preprocess)
