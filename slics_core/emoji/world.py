"""The offline emoji world as a data source of the one workspace pipeline.

:func:`render_emoji_world` renders the emoji scenes (one seeded set), embeds
them with the shipped ``emoji-small`` encoder through the ordinary encoder
resolver (:func:`slics_core.encoders.create_encoder`), and returns them as
:class:`slics_core.data.LabelledEmbeddings` with the split drawn by
:func:`slics_core.splits.make_split`, exactly like any embedded dataset. The
workspace builder (:func:`slics_core.explorer.build.build_workspace`) then
centres, fits and chooses ``d0`` as for every other source.

Emoji-specific parts, carried in ``extras``: the scene images (``images``,
uint8, so thumbnails need no files), their captions, and the ``emoji-large``
embeddings (``cond``) the emoji generator is conditioned on. Sub-labels are
the 71 COCO categories that have an emoji. Vocabularies (``docs/emoji_world.md``):
:func:`emoji_vocabulary`, the words the tiny text encoder was trained on (category and
supercategory names), is the caption vocabulary and the oracle F-SpLiCE row's; the SpLiCE
baselines decompose over :func:`splice_vocabulary`, general English words, as in the paper.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import numpy as np
from PIL import Image

from slics_core.captions import default_vocabulary
from slics_core.data import LabelledEmbeddings
from slics_core.datasets import ImageDataset
from slics_core.emoji.catalog import (
    ALL_COCO_CATEGORIES,
    CATEGORIES,
    EMOJI_FOR_CATEGORY,
    SUB_TO_CONCEPT,
    SUPERCATEGORIES,
)
from slics_core.emoji.models import weights_digest
from slics_core.emoji.scenes import SCENE_CHUNK, ZERO_SHOT_TEMPLATE, make_scenes
from slics_core.encoders import create_encoder
from slics_core.labels import Labels
from slics_core.splits import make_split
from slics_core.tasks import choose_jobs, sigterm_interrupts

__all__ = ["EmojiWorldConfig", "WORLD_SEED", "PREVIEW_SCENES", "EMBED_BATCH", "DATASET_NAME", "PROMPT_TEMPLATE",
           "default_cache_dir", "config_from_env", "render_emoji_world", "render_emoji_preview", "preview_config",
           "world_encoder", "emoji_vocabulary", "SPLICE_WORDS", "splice_vocabulary", "vocabulary_fingerprint",
           "models_fingerprint", "world_labels", "emoji_dataset", "world_split", "DatasetDefaults", "WORLD_DEFAULTS"]

CACHE_VERSION = 3  # 3: the one workspace pipeline (one render, make_split, registry methods)
WORLD_SEED = 3003
ENCODER = "emoji-small"
CONDITION_ENCODER = "emoji-large"
#: Name of the world as a dataset (``slics embed/reproduce --dataset emoji`` records it in the cache).
DATASET_NAME = "emoji world"
#: Prompt of a concept's zero-shot text embedding (the template the emoji text encoder was trained on).
PROMPT_TEMPLATE = ZERO_SHOT_TEMPLATE
#: Scenes embedded per batch (the preview is a multiple of it).
EMBED_BATCH = 256
#: Images per forward pass of an emoji encoder (within each :data:`EMBED_BATCH`): with torch's own number of threads
#: the same embeddings, bit for bit, as 256 at once, and the large encoder a fifth faster (docs/performance.md,
#: "The emoji world's serial steps"; at another number of threads the last bits may differ, so the build leaves
#: torch's threads as they are).
MODEL_BATCH = 32
#: Scenes of the preview the app opens on while the whole world is built (2 batches).
PREVIEW_SCENES = 2 * EMBED_BATCH


def default_cache_dir() -> Path:
    """``$SLICS_EMOJI_CACHE`` or ``~/.cache/slics/emoji``."""
    env = os.environ.get("SLICS_EMOJI_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "slics" / "emoji"


@dataclass
class EmojiWorldConfig:
    """Sizes and settings of the emoji world (they key its cache)."""

    n_train: int = 3000
    n_val: int = 500
    n_query: int = 1000
    n_pool: int = 3000
    d0_values: tuple = (3, 5, 8, 10, 15, 20)
    n_iter: int = 10
    seed: int = WORLD_SEED

    def __post_init__(self):
        for k in ("n_train", "n_val", "n_query", "n_pool", "n_iter"):
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"{k} must be a positive int, got {v!r}")
        self.d0_values = tuple(int(d) for d in self.d0_values)
        if not self.d0_values or min(self.d0_values) < 1:
            raise ValueError(f"d0_values must be positive ints, got {self.d0_values!r}")

    @property
    def n_total(self) -> int:
        return self.n_train + self.n_val + self.n_query + self.n_pool

    def key(self) -> str:
        blob = json.dumps({**self.__dict__, "d0_values": list(self.d0_values), "version": CACHE_VERSION},
                          sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def config_from_env() -> EmojiWorldConfig:
    """The configuration scaled by ``$SLICS_EMOJI_SCALE`` (default 1; 0.2 gives 600/100/200/600 scenes)."""
    raw = os.environ.get("SLICS_EMOJI_SCALE", "").strip()
    if not raw:
        return EmojiWorldConfig()
    try:
        s = float(raw)
    except ValueError:
        raise ValueError(f"SLICS_EMOJI_SCALE must be a number, got {raw!r}") from None
    if not 0 < s <= 10:
        raise ValueError(f"SLICS_EMOJI_SCALE must be in (0, 10], got {s}")
    b = EmojiWorldConfig()
    return EmojiWorldConfig(n_train=max(60, int(b.n_train * s)), n_val=max(20, int(b.n_val * s)),
                            n_query=max(20, int(b.n_query * s)), n_pool=max(60, int(b.n_pool * s)),
                            d0_values=b.d0_values, n_iter=b.n_iter, seed=b.seed)


def models_fingerprint() -> str:
    """Short hash of the contents of the shipped encoders' weights (image *and* text towers), so new
    weights, e.g. a retrained text tower whose concept prompts and vocabulary differ, never reuse an old
    cache; a copy that keeps the same weights keeps its key."""
    h = hashlib.sha256()
    for name in ("small", "large"):
        h.update(f"{name}:{weights_digest(name)};".encode())
    return h.hexdigest()[:8]


def emoji_vocabulary() -> list:
    """The caption vocabulary: the words the emoji text encoder was trained on (the 82 category and
    supercategory names, i.e. the label names). Also the vocabulary of the oracle row
    ``F-SpLiCE-oracle``, which no paper setting has."""
    return sorted(set(CATEGORIES) | set(SUPERCATEGORIES))


#: Words of the SpLiCE baselines' vocabulary: the paper's 10 000 LAION words cost about 40 times more
#: (the non-negative lasso over V words) than the whole build can afford (``docs/emoji_world.md``).
SPLICE_WORDS = 1000


def splice_vocabulary(n_words: int | None = None) -> list:
    """The SpLiCE baselines' vocabulary, general words with distractors as in the paper (SpLiCE's most
    frequent LAION words there): wordfreq's ``n_words`` most frequent English words
    (:func:`slics_core.captions.default_vocabulary`), embedded by the emoji text tower. Label names are in
    it only where they are such words (``dog``, ``food``; not ``teddy bear``). ``n_words`` defaults to
    :data:`SPLICE_WORDS`."""
    return default_vocabulary(SPLICE_WORDS if n_words is None else n_words)


def vocabulary_fingerprint() -> str:
    """Short hash of what the world's vocabularies are made of (the caption words, the SpLiCE source, size
    and the installed wordfreq release), part of its cache key: a changed vocabulary never reuses an old
    cache. Computed without building the word lists (no wordfreq or scikit-learn import on the app's start)."""
    try:
        release = metadata.version("wordfreq")
    except metadata.PackageNotFoundError:
        release = None
    blob = json.dumps({"captions": emoji_vocabulary(), "splice": ["wordfreq", SPLICE_WORDS, release]})
    return hashlib.sha256(blob.encode()).hexdigest()[:8]


def _embed(encoder, images, progress, stage, batch=EMBED_BATCH):
    out = []
    for s in range(0, len(images), batch):
        out.append(np.asarray(encoder.encode_images([Image.fromarray(a) for a in images[s:s + batch]],
                                                    batch_size=MODEL_BATCH), dtype=np.float32))
        if progress:
            progress(stage, min(len(images), s + batch), len(images))
    return np.concatenate(out) if out else np.zeros((0, 0), np.float32)


@dataclass
class _Rows:
    """Rendered and embedded scenes ``0 .. n-1`` (what a preview hands on to the whole world)."""

    images: np.ndarray
    general: np.ndarray
    sub: np.ndarray
    captions: list
    raw: np.ndarray

    def __len__(self):
        return len(self.images)


@functools.cache
def world_encoder(name: str):
    """The emoji encoder ``name`` (:data:`ENCODER` or :data:`CONDITION_ENCODER`) as the world is made with it: on
    the CPU, in float32, built once per process (the render, the build, the preview's table and the staged build
    share it; it is never changed after it is built)."""
    return create_encoder(name, device="cpu", half=False)


def render_jobs(n_jobs, n_scenes, say=None) -> int:
    """Worker processes rendering ``n_scenes`` scenes (:func:`slics_core.tasks.choose_jobs`, one task per
    :data:`~slics_core.emoji.scenes.SCENE_CHUNK` scenes, its images the task's memory)."""
    n_tasks = -(-int(n_scenes) // SCENE_CHUNK)
    n, why = choose_jobs(n_jobs, n_tasks, 2 * SCENE_CHUNK * 64 * 64 * 3)
    if say is not None:
        say(f"render: {why}")
    return n


def _scenes(seed, start, n, progress, n_jobs=1, say=None, workers=None):
    if workers is not None:  # the caller's early start of the workers (tasks.start_workers) finishes first
        workers.wait()
    return make_scenes(n, seed=seed, start=start, n_jobs=1 if n_jobs == 1 else render_jobs(n_jobs, n, say),
                       progress=(lambda d, t: progress("render scenes", d, t)) if progress else None)


def _rows(scenes, small, progress) -> _Rows:
    raw = _embed(small, scenes.images, progress, f"embed with {ENCODER}")
    return _Rows(np.asarray(scenes.images, np.uint8), np.asarray(scenes.general, bool), np.asarray(scenes.sub, bool),
                 list(scenes.captions), raw)


def _render_rows(seed, start, n, small, progress, n_jobs=1, say=None) -> _Rows:
    return _rows(_scenes(seed, start, n, progress, n_jobs, say), small, progress)


def _concat(a: _Rows, b: _Rows) -> _Rows:
    if len(b) == 0:
        return a
    return _Rows(np.concatenate([a.images, b.images]), np.concatenate([a.general, b.general]),
                 np.concatenate([a.sub, b.sub]), a.captions + b.captions, np.concatenate([a.raw, b.raw]))


def world_labels():
    """The world's labels: its concepts (the supercategories) and sub-labels (the COCO categories that have
    an emoji), as columns of a scene set's ``sub`` matrix.

    Returns
    -------
    concept_names : list of str
    keep : list of int
        Columns of :attr:`slics_core.emoji.scenes.SceneSet.sub` that are sub-labels.
    sub_names : list of str
    sub_to_concept : ndarray of int
    """
    keep = [i for i, c in enumerate(ALL_COCO_CATEGORIES) if c in EMOJI_FOR_CATEGORY]
    return (list(SUPERCATEGORIES), keep, [ALL_COCO_CATEGORIES[i] for i in keep],
            np.asarray(SUB_TO_CONCEPT, dtype=int)[keep])


def _labels(general, sub) -> Labels:
    """The :class:`~slics_core.labels.Labels` of scenes' ``general`` and (all-category) ``sub`` matrices."""
    concepts, keep, sub_names, sub_to_concept = world_labels()
    return Labels(np.asarray(general, dtype=bool), concepts, np.asarray(sub, dtype=bool)[:, keep], sub_names,
                  sub_to_concept)


def _ids(n):
    return [f"scene-{i}" for i in range(n)]


def _labelled(rows: _Rows, small, cond, name) -> LabelledEmbeddings:
    labels = _labels(rows.general, rows.sub)
    prompts = [PROMPT_TEMPLATE.format(w) for w in labels.concept_names]
    concept_text = np.asarray(small.encode_texts(prompts), dtype=np.float32)
    extras = {"images": rows.images, "captions": list(rows.captions)}
    if cond is not None:
        extras["cond"] = cond
    return LabelledEmbeddings(
        raw=rows.raw, ids=_ids(len(rows)), labels=labels, concept_text=concept_text, encoder=ENCODER,
        preprocessing="clip", name=name, extras=extras)


def emoji_dataset(config: EmojiWorldConfig | None = None) -> ImageDataset:
    """The world's scenes as an image dataset (``slics embed/reproduce --dataset emoji``): the scenes,
    labels, ids and name of :func:`render_emoji_world`, rendered on demand (``dataset.loader(i)``).
    The commands use :data:`WORLD_DEFAULTS` for it and for caches of its name (:data:`DATASET_NAME`).

    ``config`` defaults to :func:`config_from_env` (``$SLICS_EMOJI_SCALE``), as the app's world.
    """
    cfg = config or config_from_env()
    scenes = make_scenes(cfg.n_total, seed=cfg.seed)
    ds = ImageDataset(list(range(len(scenes))), _ids(len(scenes)), _labels(scenes.general, scenes.sub),
                      name=DATASET_NAME)
    ds.loader = scenes.pil
    return ds


def world_split(Y, config: EmojiWorldConfig | None = None, n_train=None, n_val=None, n_query=None, seed=None):
    """The world's split of labels ``Y`` (:func:`render_emoji_world`'s): sizes and seed of ``config``
    (default :func:`config_from_env`) unless given."""
    cfg = config or config_from_env()

    def pick(given, default):
        return default if given is None else given

    return make_split(Y, pick(n_train, cfg.n_train), pick(n_val, cfg.n_val), pick(n_query, cfg.n_query),
                      seed=pick(seed, cfg.seed))


@dataclass(frozen=True)
class DatasetDefaults:
    """What the commands use for a dataset unless told otherwise (``slics embed``, ``fit``,
    ``evaluate``, ``captions``, ``reproduce`` read them from here, for the dataset or its cache).

    Attributes
    ----------
    encoder : str or None
        Encoder spec when ``--encoder`` is not given (None: the command needs one).
    prompt_template : str
        Template (or template set name) of the concepts' zero-shot text embeddings.
    vocabulary : callable or None
        ``vocabulary()`` gives the caption words when ``--vocab`` is not given (None: the command's own
        default, ``wordfreq``).
    split : callable
        ``split(Y, n_train, n_val, n_query, seed)``, sizes and seed None when not given.
    splice_vocabulary : callable or None
        ``splice_vocabulary()`` gives the SpLiCE baselines' words when ``--vocab`` is not given and they are
        not the caption words (None: the caption words).
    oracle_vocabulary : callable or None
        ``oracle_vocabulary()`` gives the oracle row's words, the label names (None: no oracle row).
    """

    encoder: str | None
    prompt_template: str
    vocabulary: Callable[[], list] | None
    split: Callable
    splice_vocabulary: Callable[[], list] | None = None
    oracle_vocabulary: Callable[[], list] | None = None


def _world_split(Y, n_train, n_val, n_query, seed):
    return world_split(Y, None, n_train, n_val, n_query, seed)


#: The emoji world's defaults: its encoder, the prompt its text tower was trained on, its own words and
#: the app's split (sizes and seed of :func:`config_from_env`).
WORLD_DEFAULTS = DatasetDefaults(encoder=ENCODER, prompt_template=PROMPT_TEMPLATE, vocabulary=emoji_vocabulary,
                                 split=_world_split, splice_vocabulary=splice_vocabulary,
                                 oracle_vocabulary=emoji_vocabulary)


def preview_config(config: EmojiWorldConfig, n_scenes: int = PREVIEW_SCENES) -> EmojiWorldConfig | None:
    """Sizes of the preview of ``config``: its first ``n_scenes`` scenes split in the world's proportions.

    None when the world is not at least twice as large (then it is built at once).
    """
    if n_scenes % EMBED_BATCH or n_scenes < EMBED_BATCH:
        raise ValueError(f"the preview must be a positive multiple of {EMBED_BATCH} scenes; got {n_scenes}")
    if 2 * n_scenes > config.n_total:
        return None
    f = n_scenes / config.n_total
    n_train, n_val, n_query = (max(20, round(v * f)) for v in (config.n_train, config.n_val, config.n_query))
    return EmojiWorldConfig(n_train=n_train, n_val=n_val, n_query=n_query,
                            n_pool=n_scenes - n_train - n_val - n_query, d0_values=config.d0_values,
                            n_iter=config.n_iter, seed=config.seed)


def render_emoji_preview(config: EmojiWorldConfig | None = None, progress=None, encoder=None,
                         n_scenes: int = PREVIEW_SCENES):
    """Render and embed the preview: the first ``n_scenes`` scenes of the world (no generator embeddings).

    Returns
    -------
    data : LabelledEmbeddings
        As :func:`render_emoji_world`, without ``extras["cond"]``.
    split : Split
        Of the preview's sizes (:func:`preview_config`).
    rows : the rendered rows, to pass as ``prefix=`` to :func:`render_emoji_world`.

    Raises
    ------
    ValueError
        The world is too small for a preview (:func:`preview_config` is None).
    """
    cfg = config or EmojiWorldConfig()
    pc = preview_config(cfg, n_scenes)
    if pc is None:
        raise ValueError(f"a world of {cfg.n_total} scenes is built at once (no preview of {n_scenes} scenes)")
    small = encoder if encoder is not None else world_encoder(ENCODER)
    rows = _render_rows(cfg.seed, 0, pc.n_total, small, progress)
    data = _labelled(rows, small, None, "emoji world (preview)")
    return data, make_split(data.Y, pc.n_train, pc.n_val, pc.n_query, seed=cfg.seed), rows


def render_emoji_world(config: EmojiWorldConfig | None = None, progress=None, encoder=None, *, prefix=None,
                       n_jobs=1, say=None, workers=None):
    """Render and embed the emoji world.

    Parameters
    ----------
    config : EmojiWorldConfig, optional
    progress : callable ``progress(stage, done, total)``, optional
    encoder : the ``emoji-small`` encoder, optional
        Passed by callers that use it afterwards (loaded here otherwise: while the scenes render, when workers
        render them).
    prefix : rows returned by :func:`render_emoji_preview`, optional
        Scenes already rendered and embedded; the rest are rendered after them.
    n_jobs : int or None
        Worker processes rendering the scenes in chunks (:func:`render_jobs`; None or -1: every core, as
        memory allows); the world is the same for every ``n_jobs``.
    say : callable ``say(line)``, optional
        Gets one line saying how many workers render, and why.
    workers : slics_core.tasks.StartedWorkers, optional
        The ``n_jobs`` workers the caller has started (importing what its later stages need): the scenes are
        sent to them once they have started.

    Returns
    -------
    data : slics_core.data.LabelledEmbeddings
        ``encoder="emoji-small"``, ``preprocessing="clip"``; ``extras``: ``images``,
        ``captions``, ``cond`` (``emoji-large`` embeddings for the generator).
    split : slics_core.splits.Split
        ``n_train`` / ``n_val`` / ``n_query`` scenes, the rest (``n_pool``) is the pool.
    """
    cfg = config or EmojiWorldConfig()
    m = 0 if prefix is None else len(prefix)
    if m % EMBED_BATCH or m > cfg.n_total:
        raise ValueError(f"prefix of {m} scenes: it must be a multiple of {EMBED_BATCH} and at most {cfg.n_total}")
    n = cfg.n_total - m
    if n_jobs == 1:  # rendered here, then the encoders load
        scenes = _scenes(cfg.seed, m, n, progress)
        if encoder is None and progress is not None:
            progress(f"load the {ENCODER} encoder", 0, 1)
    else:  # the scenes render on workers (sent from a thread) while the encoders load here: both cores busy
        with sigterm_interrupts(), ThreadPoolExecutor(max_workers=1, thread_name_prefix="slics-render") as thread:
            rendering = thread.submit(_scenes, cfg.seed, m, n, progress, n_jobs, say, workers)
            for name in ((ENCODER,) if encoder is None else ()) + (CONDITION_ENCODER,):
                world_encoder(name)  # built now, kept for below
            scenes = rendering.result()
    small = encoder if encoder is not None else world_encoder(ENCODER)
    rest = _rows(scenes, small, progress)
    large = world_encoder(CONDITION_ENCODER)
    rows = rest if prefix is None else _concat(prefix, rest)
    cond = _embed(large, rows.images, progress, f"embed with {CONDITION_ENCODER} (generator conditioning)")
    data = _labelled(rows, small, cond, DATASET_NAME)
    return data, world_split(data.Y, cfg)
