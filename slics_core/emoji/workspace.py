"""The emoji workspace the app opens on: scenes, embeddings, fitted dictionaries.

:func:`load_or_build_workspace` renders the emoji world (training, validation,
query and candidate-pool scenes), embeds it with the shipped small and large
encoders, fits S-SVD, S-SLiCS and U-SLiCS for a few ``d0`` and caches all of it
in a folder (``cache_dir`` argument, else ``$SLICS_EMOJI_CACHE``, else
``~/.cache/slics/emoji``). A later call with the same parameters reads the
cache; a cache that is missing, from other parameters or damaged (unreadable,
truncated, wrong shapes) is rebuilt.

Embedding preprocessing (paper sec. 4.1): unit-normalise, subtract the mean of
the training scenes' unit embeddings, re-normalise
(:class:`slics_core.preprocessing.EmbeddingNormalizer` fitted on the training
split). The raw embeddings are kept for zero-shot classification.

The dictionary size is chosen as in the paper: every fitted S-SLiCS is scored on
the validation scenes (partial components, sub-label mAP@20 against the
candidate pool) and the best ``d0`` is ``Workspace.chosen_d0``
(``Workspace.d0_scores`` keeps the validation curve).
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from slics_core.emoji.catalog import ALL_COCO_CATEGORIES, SUB_TO_CONCEPT, SUPERCATEGORIES
from slics_core.emoji.scenes import ZERO_SHOT_TEMPLATE, make_scenes

__all__ = ["WorkspaceConfig", "Workspace", "default_cache_dir", "load_or_build_workspace", "center_unit",
           "validation_scores", "choose_workspace_d0"]

CACHE_VERSION = 2  # 2: EmbeddingNormalizer centring, d0 chosen on validation
WORKSPACE_SEED = 3003
_SPLITS = ("train", "val", "query", "pool")


def default_cache_dir() -> Path:
    env = os.environ.get("SLICS_EMOJI_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "slics" / "emoji"


@dataclass
class WorkspaceConfig:
    """Sizes and settings of the workspace (they key the cache)."""

    n_train: int = 3000
    n_val: int = 500
    n_query: int = 1000
    n_pool: int = 3000
    d0_values: tuple = (3, 5, 8, 10, 15, 20)
    n_iter: int = 10
    seed: int = WORKSPACE_SEED

    def __post_init__(self):
        for k in ("n_train", "n_val", "n_query", "n_pool", "n_iter"):
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"{k} must be a positive int, got {v!r}")
        self.d0_values = tuple(int(d) for d in self.d0_values)
        if not self.d0_values or min(self.d0_values) < 1:
            raise ValueError(f"d0_values must be positive ints, got {self.d0_values!r}")

    def key(self) -> str:
        blob = json.dumps({**self.__dict__, "version": CACHE_VERSION}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def center_unit(X: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """unit-normalise rows, subtract ``mean``, re-normalise (paper sec. 4.1)."""
    from slics_core.preprocessing import EmbeddingNormalizer

    return EmbeddingNormalizer(center=True, mean=mean).fit(X).transform(X)


@dataclass
class Workspace:
    """Arrays of the emoji workspace (rows: train, val, query, pool scenes in that order).

    ``index[split]`` gives each split's rows. ``X_small``/``X_large`` are
    preprocessed, ``raw_small``/``raw_large`` the encoders' unit embeddings;
    ``text_small``/``text_large`` the unit prompt embeddings of the 12 concept
    words. ``models[(method, d0)]`` are fitted :class:`slics_core.SLiCS`.
    ``chosen_d0`` is the ``d0`` with the best validation sub-label mAP@20 of
    S-SLiCS (partial components); ``d0_scores`` lists the validation scores
    (``{"d0", "general", "sub"}`` per ``d0``).
    """

    config: WorkspaceConfig
    path: Path
    images: np.ndarray
    Y: np.ndarray
    Z: np.ndarray
    captions: list
    raw_small: np.ndarray
    raw_large: np.ndarray
    X_small: np.ndarray
    X_large: np.ndarray
    mean_small: np.ndarray
    mean_large: np.ndarray
    text_small: np.ndarray
    text_large: np.ndarray
    index: dict
    models: dict = field(default_factory=dict)
    chosen_d0: int | None = None
    d0_scores: list = field(default_factory=list)
    concept_names: tuple = SUPERCATEGORIES
    sub_names: tuple = ALL_COCO_CATEGORIES

    @property
    def sub_to_concept(self) -> np.ndarray:
        return np.array(SUB_TO_CONCEPT)


_ARRAYS = ("images", "Y", "Z", "raw_small", "raw_large", "X_small", "X_large", "mean_small", "mean_large",
           "text_small", "text_large")


def _progress(progress, stage, done, total):
    if progress is not None:
        progress(stage, done, total)


def _build(cfg: WorkspaceConfig, folder: Path, progress=None, models_root=None) -> Workspace:
    from slics_core.emoji.models import encode_images, encode_texts, load_emoji_clip
    from slics_core.preprocessing import EmbeddingNormalizer

    sizes = {"train": cfg.n_train, "val": cfg.n_val, "query": cfg.n_query, "pool": cfg.n_pool}
    parts, index, start = [], {}, 0
    for k, split in enumerate(_SPLITS):
        sc = make_scenes(sizes[split], seed=cfg.seed + k,
                         progress=lambda d, n, s=split: _progress(progress, f"render {s}", d, n))
        parts.append(sc)
        index[split] = np.arange(start, start + len(sc))
        start += len(sc)
    images = np.concatenate([p.images for p in parts])
    Y = np.concatenate([p.general for p in parts]).astype(bool)
    Z = np.concatenate([p.sub for p in parts]).astype(bool)
    captions = [c for p in parts for c in p.captions]
    emb = {}
    prompts = [ZERO_SHOT_TEMPLATE.format(w) for w in SUPERCATEGORIES]
    for name in ("small", "large"):
        _progress(progress, f"embed {name}", 0, len(images))
        model, _, tok = load_emoji_clip(name, models_root)
        emb[f"raw_{name}"] = encode_images(model, images)
        emb[f"text_{name}"] = encode_texts(model, tok, prompts)
        norm = EmbeddingNormalizer(center=True).fit(emb[f"raw_{name}"][index["train"]])
        emb[f"mean_{name}"] = norm.mean_.astype(np.float32)
        emb[f"X_{name}"] = norm.transform(emb[f"raw_{name}"]).astype(np.float32)
        _progress(progress, f"embed {name}", len(images), len(images))
    ws = Workspace(cfg, folder, images, Y, Z, captions, index=index, **emb)
    ws.models = _fit_models(ws, progress)
    ws.d0_scores = validation_scores(ws, progress)
    ws.chosen_d0 = choose_workspace_d0(ws.d0_scores)
    return ws


def _eval_data(ws):
    """:class:`slics_core.evaluation.EvalData` and ``Split`` of the workspace (sub-labels with an emoji)."""
    from slics_core.evaluation import EvalData, Split

    keep = np.flatnonzero(ws.Z.any(axis=0))  # the categories with an emoji
    data = EvalData(X=ws.X_small, Y=ws.Y, concept_names=list(ws.concept_names), Z=ws.Z[:, keep],
                    sub_to_concept=ws.sub_to_concept[keep], sub_names=[ws.sub_names[i] for i in keep],
                    X_raw=ws.raw_small, concept_text=ws.text_small)
    split = Split(ws.index["train"], ws.index["val"], ws.index["query"], ws.index["pool"],
                  np.zeros(0, dtype=int), ws.config.seed)
    return data, split


def validation_scores(ws, progress=None, k: int = 20) -> list:
    """Validation mAP@``k`` of every fitted S-SLiCS (partial components; paper sec. 4.2).

    The validation scenes are the queries, the candidate pool is searched.
    Returns ``[{"d0", "general", "sub"}, ...]`` in increasing ``d0``.
    """
    from slics_core.evaluation import evaluate_rankings, rank_method

    data, split = _eval_data(ws)
    v, p = split.val, split.pool
    out = []
    d0s = sorted(d for (m, d) in ws.models if m == "S-SLiCS")
    for i, d0 in enumerate(d0s):
        _progress(progress, f"validate S-SLiCS d0={d0}", i, len(d0s))
        idx, _ = rank_method("S-SLiCS", data, split, queries="val", n_atoms=d0, k=k, mode="partial",
                             model=ws.models[("S-SLiCS", d0)])
        r = evaluate_rankings(idx, data.Y[v], data.Y[p], data.Z[v], data.Z[p], data.sub_to_concept, k)
        out.append({"d0": int(d0), "general": round(float(r["general"]), 4), "sub": round(float(r["sub"]), 4)})
    _progress(progress, "validate", len(d0s), len(d0s))
    return out


def choose_workspace_d0(scores: list) -> int:
    """The ``d0`` of the best validation sub-label mAP (ties: smaller ``d0``); see
    :func:`slics_core.evaluation.choose_d0`."""
    from slics_core.evaluation import choose_d0

    return choose_d0([dict(r, mode="partial") for r in scores], mode="partial", by="sub")


def _fit_models(ws: Workspace, progress=None) -> dict:
    from slics_core.slics import SLiCS

    tr = ws.index["train"]
    X, Y = ws.X_small[tr], ws.Y[tr]
    n_active = max(1, int(round(Y.sum(1).mean())))  # paper: S~ = round(mean #concepts) = 2
    try:
        from slics_core.unsupervised import zero_shot_labels

        Y_pseudo = np.asarray(zero_shot_labels(ws.raw_small[tr], ws.text_small, n_active=n_active))
    except ImportError:  # slics_core.unsupervised not available: top-S~ zero-shot concepts
        top = np.argsort(-(ws.raw_small[tr] @ ws.text_small.T), axis=1)[:, :n_active]
        Y_pseudo = np.zeros_like(Y)
        np.put_along_axis(Y_pseudo, top, True, axis=1)
    models = {}
    jobs = [(m, d) for d in ws.config.d0_values for m in ("S-SVD", "S-SLiCS", "U-SLiCS")]
    for i, (method, d0) in enumerate(jobs):
        _progress(progress, f"fit {method} d0={d0}", i, len(jobs))
        n_iter = 0 if method == "S-SVD" else ws.config.n_iter
        labels = Y_pseudo if method == "U-SLiCS" else Y
        models[(method, d0)] = SLiCS(n_atoms=d0, n_iter=n_iter, random_state=0).fit(X, labels.astype(float))
    _progress(progress, "fit", len(jobs), len(jobs))
    return models


def _save(ws: Workspace, folder: Path) -> None:
    tmp = folder.with_name(folder.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    (tmp / "models").mkdir(parents=True)
    np.savez(tmp / "arrays.npz", **{k: getattr(ws, k) for k in _ARRAYS},
             **{f"index_{k}": v for k, v in ws.index.items()})
    (tmp / "captions.json").write_text(json.dumps(ws.captions))
    names = {}
    for (method, d0), model in ws.models.items():
        fname = f"{method}_d0{d0}.npz"
        model.save(tmp / "models" / fname)
        names[f"{method}|{d0}"] = fname
    manifest = {"version": CACHE_VERSION, "key": ws.config.key(), "config": ws.config.__dict__ | {
        "d0_values": list(ws.config.d0_values)}, "models": names, "n": int(len(ws.images)),
        "chosen_d0": int(ws.chosen_d0), "d0_scores": ws.d0_scores}
    (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1))
    if folder.exists():
        shutil.rmtree(folder)
    tmp.rename(folder)


def _load(cfg: WorkspaceConfig, folder: Path) -> Workspace:
    from slics_core.slics import SLiCS

    manifest = json.loads((folder / "manifest.json").read_text())
    if manifest.get("version") != CACHE_VERSION or manifest.get("key") != cfg.key():
        raise ValueError("cache built with other parameters")
    with np.load(folder / "arrays.npz", allow_pickle=False) as z:
        arrays = {k: z[k] for k in _ARRAYS}
        index = {k: z[f"index_{k}"] for k in _SPLITS}
    captions = json.loads((folder / "captions.json").read_text())
    n = manifest["n"]
    if any(len(arrays[k]) != n for k in ("images", "Y", "Z", "raw_small", "raw_large", "X_small", "X_large")) \
            or len(captions) != n:
        raise ValueError("cache arrays have inconsistent lengths")
    models = {}
    for key, fname in manifest["models"].items():
        method, d0 = key.split("|")
        models[(method, int(d0))] = SLiCS.load(folder / "models" / fname)
    if set(models) != {(m, d) for d in cfg.d0_values for m in ("S-SVD", "S-SLiCS", "U-SLiCS")}:
        raise ValueError("cache lacks fitted models")
    chosen = manifest.get("chosen_d0")
    if chosen not in cfg.d0_values:
        raise ValueError(f"cache has no valid chosen d0 ({chosen!r})")
    return Workspace(cfg, folder, captions=captions, index=index, models=models, chosen_d0=int(chosen),
                     d0_scores=list(manifest.get("d0_scores", [])), **arrays)


@functools.lru_cache(maxsize=8)
def _models_fingerprint(models_root=None) -> str:
    """Short hash of the encoder weight files, so new weights never reuse an old cache.

    Hashing ~15 MB costs tens of milliseconds, so it is done once per process and folder.
    """
    from slics_core.emoji.models import WEIGHTS_NAME, model_dir

    h = hashlib.sha256()
    for name in ("small", "large"):
        w = model_dir(name, models_root) / WEIGHTS_NAME
        if w.is_file():
            with open(w, "rb") as fh:
                h.update(hashlib.sha256(fh.read()).digest())
    return h.hexdigest()[:8]


def load_or_build_workspace(cache_dir=None, config: WorkspaceConfig | None = None, progress=None,
                            rebuild: bool = False, models_root=None) -> Workspace:
    """Load the cached emoji workspace, or build (and cache) it.

    Parameters
    ----------
    cache_dir : path, optional
        Cache root; the workspace goes to ``cache_dir/<config key>``.
    config : WorkspaceConfig, optional
    progress : callable, optional
        ``progress(stage: str, done: int, total: int)``.
    rebuild : bool
        Ignore any cache.
    models_root : path, optional
        Where the encoders are (default: shipped ``assets/models``).
    """
    cfg = config or WorkspaceConfig()
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    folder = root / f"workspace-{cfg.key()}-{_models_fingerprint(models_root)}"
    if not rebuild and (folder / "manifest.json").exists():
        try:
            return _load(cfg, folder)
        except Exception as exc:  # damaged cache: rebuild, never fatal
            _progress(progress, f"cache unusable ({type(exc).__name__}: {exc}); rebuilding", 0, 1)
    root.mkdir(parents=True, exist_ok=True)
    ws = _build(cfg, folder, progress, models_root)
    try:
        _save(ws, folder)
    except OSError as exc:
        _progress(progress, f"could not write cache ({exc})", 0, 1)
    return ws
