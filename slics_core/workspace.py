"""Workspaces: what the app (and any script) explores.

A :class:`Workspace` is one embedded, labelled image collection with its
fitted dictionaries: preprocessed embeddings ``X`` (rows: items), the
encoder's unit embeddings ``raw``, general labels ``Y``, optional sub-labels
``Z``, the train / val / query / pool split, and fitted models
``models[(method, d0)]`` for ``method`` in :data:`METHODS`.

Two kinds exist:

``"emoji"``
    The offline emoji world (:mod:`slics_core.emoji.workspace`), rendered,
    embedded and fitted on first use and cached on disk.
``"dataset"``
    Any dataset embedded with ``slics embed`` and turned into a workspace
    with ``slics workspace --cache CACHE --out DIR`` (:func:`build_dataset_workspace`):
    the split is drawn with :func:`slics_core.evaluation.make_splits` and the
    three methods are fitted for every ``d0``. It is saved as a folder
    (``workspace.json`` + ``arrays.npz`` + ``models/``) that
    :func:`load_workspace` opens. Images are read from their paths on demand.

Choices (the paper is silent): the query embedding of an uploaded image is
preprocessed exactly like the training embeddings (unit-normalise, subtract
the training mean of unit embeddings, re-normalise); the emoji world's word
vocabulary for captions and F-SpLiCE is the words its text encoder was trained
on (category and supercategory names); dataset workspaces use the 10 000 most
frequent English words (``wordfreq``).
"""
from __future__ import annotations

import json
import os
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = [
    "METHODS",
    "Workspace",
    "open_emoji_workspace",
    "emoji_config_from_env",
    "build_dataset_workspace",
    "load_workspace",
    "list_workspaces",
    "workspaces_root",
    "load_query_encoder",
    "embed_query",
    "workspace_vocabulary",
    "vocabulary_ready",
    "WorkspaceGenerator",
    "load_workspace_generator",
]

#: Methods fitted in every workspace (dictionary-based, so they have atoms).
METHODS = ("S-SLiCS", "U-SLiCS", "S-SVD")
_SPLITS = ("train", "val", "query", "pool")
_FORMAT = "slics-workspace-v1"


def workspaces_root() -> Path:
    """Where dataset workspaces are looked for: ``$SLICS_WORKSPACES`` or ``~/.cache/slics/workspaces``."""
    env = os.environ.get("SLICS_WORKSPACES")
    return Path(env) if env else Path.home() / ".cache" / "slics" / "workspaces"


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
        ``models[(method, d0)]`` -> fitted :class:`slics_core.SLiCS`.
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
    preprocessing : {"clip", "unit", "none"}
        How ``X`` was made from the encoder output: ``clip`` = unit-normalise,
        subtract ``mean``, re-normalise (sec. 4.1); ``unit``; ``none``.
    extras : dict
        Kind-specific arrays (emoji: ``raw_large``, ``X_large``, ``mean_large``, ``text_large``).
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
    extras: dict = field(default_factory=dict)

    # ------------------------------------------------------------------ sizes
    def __len__(self) -> int:
        return int(self.X.shape[0])

    @property
    def n_concepts(self) -> int:
        return int(self.Y.shape[1])

    @property
    def d0_values(self) -> list:
        return sorted({d for (_, d) in self.models})

    @property
    def methods(self) -> list:
        return [m for m in METHODS if any(k[0] == m for k in self.models)]

    @property
    def default_d0(self) -> int:
        """``chosen_d0`` when known, else the middle fitted ``d0``."""
        if self.chosen_d0 in self.d0_values:
            return int(self.chosen_d0)
        d = self.d0_values
        return int(d[len(d) // 2])

    def model(self, method: str = "S-SLiCS", d0: int | None = None):
        """The fitted model of ``method`` with ``d0`` atoms per concept (default: :attr:`default_d0`)."""
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
                "encoder": self.encoder, "has_concept_text": self.concept_text is not None}

    # ------------------------------------------------------------------ labels
    def labels_of(self, i: int) -> dict:
        """General and sub-label names of item ``i``."""
        out = {"concepts": [self.concept_names[j] for j in np.flatnonzero(self.Y[i])]}
        if self.Z is not None:
            out["sub_labels"] = [self.sub_names[j] for j in np.flatnonzero(self.Z[i])]
        return out

    # ------------------------------------------------------------------ images
    def image(self, i: int):
        """Item ``i`` as an RGB PIL image (raises :class:`slics_core.datasets.ImageLoadError` if unreadable)."""
        from PIL import Image

        i = int(i)
        if not 0 <= i < len(self):
            raise IndexError(f"item {i} out of range (0..{len(self) - 1})")
        if self.images is not None:
            return Image.fromarray(self.images[i])
        if self.paths is None:
            raise ValueError(f"workspace {self.name!r} has no images")
        from slics_core.datasets import load_image

        return load_image(self.paths[i])

    def thumbnail(self, i: int, size: int = 128):
        """Item ``i`` fitted in a ``size`` square (a grey tile with an X if the file is unreadable)."""
        from PIL import Image, ImageDraw

        from slics_core.datasets import ImageLoadError

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
        from slics_core._validation import check_embeddings
        from slics_core.preprocessing import EmbeddingNormalizer, normalize_rows

        raw = np.asarray(raw, dtype=np.float64)
        if raw.ndim == 1:
            raw = raw[None, :]
        raw = check_embeddings(raw, n_features=self.X.shape[1], name="query embedding")
        if self.preprocessing == "none":
            return raw.astype(np.float32)
        if self.preprocessing == "unit":
            return normalize_rows(raw).astype(np.float32)
        if self.preprocessing != "clip":
            raise ValueError(f"queries cannot be preprocessed for {self.preprocessing!r} workspaces")
        return EmbeddingNormalizer(center=True, mean=self.mean).fit(raw).transform(raw).astype(np.float32)

    def zero_shot(self, raw) -> np.ndarray | None:
        """Cosines (n, S) between unit embeddings and the concept prompts (None without prompts)."""
        if self.concept_text is None:
            return None
        raw = np.atleast_2d(np.asarray(raw, dtype=np.float64))
        raw = raw / np.maximum(np.linalg.norm(raw, axis=1, keepdims=True), 1e-12)
        return raw @ np.asarray(self.concept_text, dtype=np.float64).T


# ---------------------------------------------------------------------- emoji
def emoji_config_from_env():
    """The emoji workspace configuration, scaled by ``$SLICS_EMOJI_SCALE`` (default 1).

    A scale of 0.2 gives 600 training / 100 val / 200 query / 600 pool scenes
    (tests and quick demos).
    """
    from slics_core.emoji.workspace import WorkspaceConfig

    raw = os.environ.get("SLICS_EMOJI_SCALE", "").strip()
    if not raw:
        return WorkspaceConfig()
    try:
        s = float(raw)
    except ValueError:
        raise ValueError(f"SLICS_EMOJI_SCALE must be a number, got {raw!r}") from None
    if not 0 < s <= 10:
        raise ValueError(f"SLICS_EMOJI_SCALE must be in (0, 10], got {s}")
    base = WorkspaceConfig()
    return WorkspaceConfig(n_train=max(60, int(base.n_train * s)), n_val=max(20, int(base.n_val * s)),
                           n_query=max(20, int(base.n_query * s)), n_pool=max(60, int(base.n_pool * s)),
                           d0_values=base.d0_values, n_iter=base.n_iter, seed=base.seed)


def open_emoji_workspace(cache_dir=None, config=None, progress=None, rebuild: bool = False) -> Workspace:
    """The emoji world as a :class:`Workspace` (built and cached on first use).

    Parameters
    ----------
    cache_dir : path, optional
        Default: ``$SLICS_EMOJI_CACHE`` or ``~/.cache/slics/emoji``.
    config : slics_core.emoji.workspace.WorkspaceConfig, optional
        Default: :func:`emoji_config_from_env`.
    progress : callable, optional
        ``progress(stage, done, total)``.
    """
    from slics_core.emoji.workspace import load_or_build_workspace

    cfg = config or emoji_config_from_env()
    ews = load_or_build_workspace(cache_dir=cache_dir, config=cfg, progress=progress, rebuild=rebuild)
    n = len(ews.images)
    return Workspace(
        name="emoji world", kind="emoji", path=Path(ews.path), X=ews.X_small, raw=ews.raw_small,
        mean=np.asarray(ews.mean_small), Y=np.asarray(ews.Y, bool), concept_names=list(ews.concept_names),
        index={k: np.asarray(v) for k, v in ews.index.items()}, models=dict(ews.models),
        Z=np.asarray(ews.Z, bool), sub_names=list(ews.sub_names), sub_to_concept=np.asarray(ews.sub_to_concept),
        concept_text=np.asarray(ews.text_small), encoder="emoji-small", captions=list(ews.captions),
        ids=[f"{s}-{j}" for s in _SPLITS for j in range(len(ews.index[s]))][:n], images=ews.images,
        chosen_d0=getattr(ews, "chosen_d0", None),
        extras={"raw_large": ews.raw_large, "X_large": ews.X_large, "mean_large": ews.mean_large,
                "text_large": ews.text_large, "emoji": ews},
    )


# ---------------------------------------------------------------------- datasets
def build_dataset_workspace(cache, out, *, d0_values=(5, 10, 15), n_iter: int = 10, n_train: int | None = None,
                            n_val: int = 500, n_query: int = 1000, seed: int = 0, name: str | None = None,
                            progress=None) -> Workspace:
    """Turn an embedding cache (``slics embed``) into a saved workspace.

    Parameters
    ----------
    cache : path
        Embedding cache directory with labels.
    out : path
        Folder to write (created; an existing workspace there is replaced).
    d0_values : sequence of int
        Atoms per concept to fit for every method.
    n_iter : int
        SLiCS epochs (S-SVD is the 0-epoch initialisation).
    n_train, n_val, n_query : int
        Split sizes (:func:`slics_core.evaluation.make_splits`); ``n_train``
        defaults to 60 % of what is left after validation and query.
    seed : int

    The default ``d0`` of the workspace (:attr:`Workspace.chosen_d0`) is chosen on the
    validation split by S-SLiCS's sub-label mAP@20 of partial components (the paper's rule,
    :func:`slics_core.scoring.choose_d0`).
    """
    from slics_core.commands.data import load_eval_data
    from slics_core.evaluation import make_splits
    from slics_core.slics import SLiCS

    data, store, meta = load_eval_data(cache)
    E, ids, _ = store.load()
    labelled = data.Y.any(axis=1)
    n_avail = int(labelled.sum())
    if n_avail < 50:
        raise ValueError(f"only {n_avail} labelled items in {cache}; a workspace needs at least 50")
    n_val = min(n_val, n_avail // 10)
    n_query = min(n_query, n_avail // 5)
    if n_train is None:
        n_train = int(0.6 * (n_avail - n_val - n_query))
    split = make_splits(data.Y, n_train, n_val=n_val, n_query=n_query, random_state=seed)
    index = {"train": split.train, "val": split.val, "query": split.query, "pool": split.pool}
    kind = (meta.get("preprocessing") or {}).get("embedding", "clip")
    if kind not in ("clip", "unit", "none"):
        raise ValueError(f"workspaces support clip/unit/none preprocessing, the cache uses {kind!r}")
    raw_unit = data.X_raw / np.maximum(np.linalg.norm(data.X_raw, axis=1, keepdims=True), 1e-12)
    mean = raw_unit[split.train].mean(0)
    if kind == "clip":  # centre with the training mean only, as new queries will be
        from slics_core.preprocessing import EmbeddingNormalizer

        data.X = EmbeddingNormalizer(center=True, mean=mean).fit(raw_unit).transform(raw_unit)
    models = {}
    Xtr, Ytr = data.X[split.train], data.Y[split.train].astype(float)
    Y_pseudo = None
    if data.concept_text is not None:
        from slics_core.unsupervised import zero_shot_labels

        Y_pseudo = np.asarray(zero_shot_labels(data.X_raw[split.train], data.concept_text,
                                               Y_ref=data.Y[split.train])).astype(float)
    jobs = [(m, int(d)) for d in d0_values for m in METHODS if m != "U-SLiCS" or Y_pseudo is not None]
    for i, (method, d0) in enumerate(jobs):
        if progress:
            progress(f"fit {method} d0={d0}", i, len(jobs))
        labels = Y_pseudo if method == "U-SLiCS" else Ytr
        models[(method, d0)] = SLiCS(n_atoms=d0, n_iter=0 if method == "S-SVD" else n_iter,
                                     random_state=seed).fit(Xtr, labels, concept_names=data.concept_names)
    if progress:
        progress("fit", len(jobs), len(jobs))
    # ids / paths of the kept rows (load_eval_data drops rows whose embedding is zero)
    nz = np.linalg.norm(E, axis=1) > 0
    kept_ids = [str(x) for x, k in zip(ids, nz) if k]
    paths = _paths_for(store, kept_ids)
    ws = Workspace(name=name or Path(out).name, kind="dataset", path=Path(out), X=data.X.astype(np.float32),
                   raw=raw_unit.astype(np.float32), mean=mean, Y=data.Y.astype(bool),
                   concept_names=list(data.concept_names), index=index, models=models,
                   Z=None if data.Z is None else data.Z.astype(bool), sub_names=list(data.sub_names or []),
                   sub_to_concept=data.sub_to_concept, concept_text=data.concept_text,
                   encoder=(meta.get("dataset") or {}).get("encoder_spec") or meta.get("encoder_id"), ids=kept_ids, paths=paths,
                   preprocessing=kind)
    if len(index["val"]) and len(ws.d0_values) > 1:  # the paper's rule: best validation sub-label mAP@20
        from slics_core.scoring import choose_d0, sweep_d0

        if progress:
            progress("choose d0 on the validation split", 0, 1)
        ws.chosen_d0 = int(choose_d0(sweep_d0(ws, splits=("val",), modes=("partial",))))
    save_workspace(ws, out)
    return ws


def _paths_for(store, ids):
    """Image paths of ``ids`` as recorded by ``slics embed`` (``meta['dataset']['paths']``), else the ids."""
    meta = store.meta()
    paths = (meta.get("dataset") or {}).get("paths")
    try:
        all_ids = json.loads((Path(store.path) / "items.json").read_text())
    except (OSError, ValueError):
        all_ids = []
    if paths and len(paths) == len(all_ids):
        by_id = dict(zip(all_ids, paths))
        return [by_id.get(i) or i for i in ids]
    return list(ids)


def save_workspace(ws: Workspace, out) -> Path:
    """Write a dataset workspace folder (atomically: a temp folder renamed at the end)."""
    import shutil

    out = Path(out)
    tmp = out.with_name(out.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    (tmp / "models").mkdir(parents=True)
    arrays = {"X": ws.X, "raw": ws.raw, "mean": ws.mean, "Y": ws.Y}
    if ws.Z is not None:
        arrays.update(Z=ws.Z, sub_to_concept=np.asarray(ws.sub_to_concept))
    if ws.concept_text is not None:
        arrays["concept_text"] = ws.concept_text
    arrays.update({f"index_{k}": np.asarray(v) for k, v in ws.index.items()})
    np.savez(tmp / "arrays.npz", **arrays)
    names = {}
    for (method, d0), model in ws.models.items():
        fname = f"{method}_d0{d0}.npz"
        model.save(tmp / "models" / fname)
        names[f"{method}|{d0}"] = fname
    head = {"format": _FORMAT, "name": ws.name, "kind": ws.kind, "concept_names": ws.concept_names,
            "sub_names": ws.sub_names, "encoder": ws.encoder, "ids": ws.ids, "paths": ws.paths,
            "captions": ws.captions, "chosen_d0": ws.chosen_d0, "preprocessing": ws.preprocessing, "models": names, "n": len(ws)}
    (tmp / "workspace.json").write_text(json.dumps(head))
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    ws.path = out
    return out


def load_workspace(path) -> Workspace:
    """Open a workspace folder written by :func:`build_dataset_workspace`.

    Raises
    ------
    FileNotFoundError
        No workspace there.
    ValueError
        The folder is damaged (unreadable or inconsistent files).
    """
    from slics_core.slics import SLiCS

    path = Path(path)
    head_file = path / "workspace.json"
    if not head_file.is_file():
        raise FileNotFoundError(f"no workspace in {path} (missing workspace.json; build one with `slics workspace`)")
    try:
        head = json.loads(head_file.read_text())
        if head.get("format") != _FORMAT:
            raise ValueError(f"unknown format {head.get('format')!r}")
        with np.load(path / "arrays.npz", allow_pickle=False) as z:
            arr = {k: z[k] for k in z.files}
        models = {}
        for key, fname in head["models"].items():
            method, d0 = key.split("|")
            models[(method, int(d0))] = SLiCS.load(path / "models" / fname)
        n = int(head["n"])
        for k in ("X", "raw", "Y"):
            if arr[k].shape[0] != n:
                raise ValueError(f"{k} has {arr[k].shape[0]} rows, expected {n}")
        index = {k: arr[f"index_{k}"] for k in _SPLITS}
    except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise ValueError(f"workspace {path} is damaged: {type(exc).__name__}: {exc}") from exc
    return Workspace(name=head["name"], kind=head.get("kind", "dataset"), path=path, X=arr["X"], raw=arr["raw"],
                     mean=arr["mean"], Y=arr["Y"].astype(bool), concept_names=list(head["concept_names"]),
                     index=index, models=models, Z=arr["Z"].astype(bool) if "Z" in arr else None,
                     sub_names=list(head.get("sub_names") or []), sub_to_concept=arr.get("sub_to_concept"),
                     concept_text=arr.get("concept_text"), encoder=head.get("encoder"),
                     captions=head.get("captions"), ids=list(head.get("ids") or []), paths=head.get("paths"),
                     chosen_d0=head.get("chosen_d0"), preprocessing=head.get("preprocessing", "clip"))


def list_workspaces(root=None) -> list:
    """``[(name, path), ...]`` of the dataset workspaces under ``root`` (default :func:`workspaces_root`)."""
    root = Path(root) if root is not None else workspaces_root()
    if not root.is_dir():
        return []
    out = []
    for p in sorted(root.iterdir()):
        head = p / "workspace.json"
        if head.is_file():
            try:
                out.append((json.loads(head.read_text()).get("name", p.name), p))
            except (OSError, json.JSONDecodeError):
                out.append((f"{p.name} (damaged)", p))
    return out


# ---------------------------------------------------------------------- encoders, vocabulary
def load_query_encoder(ws: Workspace):
    """The encoder that embeds new queries for ``ws`` (``encode_images(list of PIL) -> (n, d)``).

    Raises
    ------
    FileNotFoundError
        Its weights are not on this machine (the message says how to get them).
    """
    if ws.encoder is None:
        raise FileNotFoundError(f"workspace {ws.name!r} records no encoder; uploads cannot be embedded")
    if ws.encoder.startswith("emoji-"):
        from slics_core.emoji.models import load_emoji_encoder

        return load_emoji_encoder(ws.encoder.split("-", 1)[1])
    from slics_core.commands.data import resolve_encoder

    try:
        return resolve_encoder(ws.encoder.split("/file:")[0])
    except Exception as exc:  # noqa: BLE001 - any loader failure means: weights not usable here
        raise FileNotFoundError(f"encoder {ws.encoder!r} cannot be loaded here ({exc}); "
                                f"download its weights with `slics download` on a machine with network") from exc


def embed_query(ws: Workspace, encoder, image) -> tuple:
    """``(raw, x)``: unit encoder embedding and preprocessed embedding (both (d,)) of one PIL image."""
    e = np.asarray(encoder.encode_images([image]), dtype=np.float64)
    if e.ndim != 2 or e.shape[0] != 1:
        raise ValueError(f"encoder returned shape {e.shape} for one image")
    if e.shape[1] != ws.X.shape[1]:
        raise ValueError(f"encoder gives {e.shape[1]}-d embeddings but the workspace is {ws.X.shape[1]}-d")
    if not np.all(np.isfinite(e)) or not np.linalg.norm(e) > 0:
        raise ValueError("the encoder returned a zero or non-finite embedding for this image")
    raw = e[0] / np.linalg.norm(e[0])
    return raw.astype(np.float32), ws.preprocess(raw)[0]


def _emoji_vocabulary_words(n_common: int = 0) -> list:
    """Words the emoji text encoder was trained on (category and supercategory names), plus
    ``n_common`` frequent English words as distractors (the encoder never saw those)."""
    from slics_core.emoji.catalog import CATEGORIES, SUPERCATEGORIES

    words = set(CATEGORIES) | set(SUPERCATEGORIES)
    if n_common:
        from slics_core.captions import default_vocabulary

        words |= set(default_vocabulary(n_common))
    return sorted(words)


def _vocabulary_words(ws: Workspace, n_common: int = 0) -> list:
    if ws.kind == "emoji":
        return _emoji_vocabulary_words(n_common)
    from slics_core.captions import default_vocabulary

    return default_vocabulary(10_000)


def _vocabulary_cache(ws: Workspace, words) -> Path | None:
    import hashlib

    if not ws.path:
        return None
    return Path(ws.path) / f"vocab-{hashlib.sha256(chr(10).join(words).encode()).hexdigest()[:12]}.npy"


def vocabulary_ready(ws: Workspace) -> bool:
    """Whether :func:`workspace_vocabulary` is cheap (emoji world, or already embedded and cached)."""
    if ws.kind == "emoji":
        return True
    cache = _vocabulary_cache(ws, _vocabulary_words(ws))
    return cache is not None and cache.is_file()


def workspace_vocabulary(ws: Workspace, n_common: int = 0) -> tuple:
    """``(words, W)``: caption vocabulary and its raw unit text embeddings for ``ws``.

    Emoji world: the words its text encoder was trained on (the 71 category and 12
    supercategory names; ``n_common`` frequent English words may be added as distractors,
    but the tiny encoder never saw them, so they land anywhere), embedded with the small
    encoder's text tower. Dataset workspaces: the ``wordfreq`` top 10 000 words (SpLiCE's
    vocabulary size) embedded with the workspace's encoder. Both are cached next to the
    workspace (``vocab-<hash>.npy``), keyed by the word list.

    Raises
    ------
    FileNotFoundError
        No usable text encoder for this workspace here.
    """
    words = _vocabulary_words(ws, n_common)
    cache = _vocabulary_cache(ws, words)
    if cache is not None and cache.is_file():
        try:
            W = np.load(cache)
            if W.shape == (len(words), ws.X.shape[1]):
                return list(words), W
        except (OSError, ValueError):
            pass  # damaged: recompute
    enc = load_query_encoder(ws)
    W = np.asarray(enc.encode_texts(words), dtype=np.float32)
    W = W / np.maximum(np.linalg.norm(W, axis=1, keepdims=True), 1e-12)
    if cache is not None:
        try:
            from slics_core.store import atomic_save_npy

            atomic_save_npy(cache, W)
        except OSError:
            pass
    return list(words), W


# ---------------------------------------------------------------------- generation
class WorkspaceGenerator:
    """Image generation from rows of the workspace's (preprocessed) embedding space.

    The paper's image-to-prompt route (sec. 3.8): a component in the SLiCS
    space -> orthogonal Procrustes (fitted on the training items' paired
    embeddings) -> the generator's conditioning space -> generator.

    Attributes
    ----------
    name : str
    alignment : slics_core.alignment.ProcrustesAlignment
    deterministic : bool
        True when ``seed`` and ``steps`` have no effect (a one-pass decoder).
    """

    def __init__(self, name, alignment, generate_fn, deterministic, info=None):
        self.name = name
        self.alignment = alignment
        self._generate = generate_fn
        self.deterministic = bool(deterministic)
        self.info = dict(info or {})

    def generate(self, V, *, seed: int = 0, steps: int | None = None) -> list:
        """PIL images, one per row of ``V`` (n, d) in the workspace space (zero rows are an error)."""
        from slics_core._validation import check_embeddings

        V = np.atleast_2d(np.asarray(V, dtype=np.float64))
        V = check_embeddings(V, name="embeddings to generate from", allow_zero_rows=True)
        if np.any(np.linalg.norm(V, axis=1) <= 1e-12):
            raise ValueError("a zero component has no direction to draw (the concept is absent from this query)")
        return self._generate(self.alignment.transform(V), int(seed), steps)


def load_workspace_generator(ws: Workspace) -> WorkspaceGenerator:
    """The generator of ``ws`` with its fitted alignment.

    Emoji world: the shipped emoji generator conditioned on the large
    encoder; alignment small (preprocessed) -> large conditioning space.

    Raises
    ------
    FileNotFoundError
        No generator is available for this workspace here (e.g. Stable
        Diffusion weights are not downloaded); the message says what is missing.
    """
    from PIL import Image

    from slics_core.alignment import ProcrustesAlignment

    if ws.kind != "emoji":
        raise FileNotFoundError(
            f"no generator for workspace {ws.name!r} on this machine: image-to-prompt generation needs "
            "Stable Diffusion and CLIP ViT-L/14 embeddings of the same images (`slics download sd-1.5`)")
    from slics_core.emoji.generator import EmojiGenerator

    gen = EmojiGenerator.load()
    tr = ws.index["train"]
    align = ProcrustesAlignment(normalize=True).fit(ws.X[tr], gen.condition(ws.extras["raw_large"][tr]))
    import inspect

    params = inspect.signature(gen.generate).parameters
    stochastic = "seed" in params

    def run(C, seed, steps):
        kw = {}
        if stochastic:
            kw["seed"] = seed
            if steps is not None and "steps" in params:
                kw["steps"] = steps
        arr = gen.generate(C, **kw)
        return [Image.fromarray(a) for a in arr]

    return WorkspaceGenerator("emoji generator", align, run, deterministic=not stochastic or getattr(
        gen, "deterministic", False), info={"alignment_train_cosine": float(align.train_cosine_)})
