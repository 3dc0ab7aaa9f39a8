"""Workspace-level image generation: a component in the workspace's space -> the generator's image.

The paper's image-to-prompt route (sec. 3.8): orthogonal Procrustes from the
workspace's encoder space into the generator's conditioning space, then the
generator. :func:`load_workspace_generator` picks the generator a workspace
records; the pipelines themselves live in :mod:`slics_core.generators` (real
diffusion models) and :mod:`slics_core.emoji.generator` (the emoji world).

A dataset workspace gets a generator with :func:`attach_generator` (``slics
workspace --generator SPEC`` and ``slics align --workspace NAME --generator
SPEC``): the alignment is fitted from the workspace space (its preprocessed
embeddings ``X``) into the conditioning encoder's image-embedding space, on the
workspace's own training images embedded by that encoder (or on a pairs file),
and saved as :data:`ALIGNMENT_FILE` in the workspace folder; the workspace
header records the generator spec. Choices and measurements: docs/generation.md.
"""
from __future__ import annotations

import hashlib
import re
import shutil
import time
from pathlib import Path

import numpy as np
from PIL import Image

from slics_core import generators as _gens
from slics_core._validation import check_embeddings
from slics_core.alignment import ProcrustesAlignment, fit_alignment
from slics_core.embed import embed_dataset
from slics_core.emoji.generator import EmojiGenerator
from slics_core.encoders import create_encoder, parse_encoder_spec
from slics_core.errors import explain
from slics_core.explorer.workspace import Workspace
from slics_core.explorer.workspace_files import recorded_generator, set_workspace_generator
from slics_core.formats import load_npz
from slics_core.rows import ZERO_NORM
from slics_core.weights import get_preset

__all__ = ["WorkspaceGenerator", "load_workspace_generator", "attach_generator", "fit_workspace_alignment",
           "load_workspace_alignment", "generator_version", "read_pairs", "ALIGNMENT_FILE", "DEFAULT_ALIGN_PAIRS"]

#: The fitted alignment of a workspace's generator, inside the workspace folder.
ALIGNMENT_FILE = "generator-alignment.npz"
#: Training images embedded for the alignment by default (a random subset when there are more).
DEFAULT_ALIGN_PAIRS = 5000
#: Largest pairs file read (``--align-pairs``).
_MAX_PAIRS_BYTES = 2 << 30
#: Seconds per guided denoising step per U-Net parameter per latent pixel before anything was measured
#: here: full-size SD 1.5 (859.5 M U-Net parameters) took 9 s per guided step at 256 x 256 (32 x 32
#: latents) on the project's shared 2-core machine (7.9 CPU s in benchmarks/bench_generate.py).
_CPU_PRIOR = 9.0 / (859.5e6 * 32 * 32)
#: An unguided step (one U-Net pass instead of two, e.g. an LCM) costs this fraction of a guided one on a
#: CPU: 6.62 vs 7.89 CPU s per step at 256 x 256, measured in one run (docs/generation.md).
_UNGUIDED = 6.62 / 7.89
_GPU_SPEEDUP = 100.0


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
        True when ``seed`` and ``steps`` have no effect (a deterministic generator).
    pipeline : ImageToPromptSD or UnCLIPGenerator or None
        The diffusion pipeline it draws with (None for the emoji world's decoder).
    defaults : dict
        Sampling settings a diffusion pipeline takes (``size``, ``steps``, ``guidance``), the
        device's defaults; empty for a deterministic generator. ``generate`` accepts them as keywords.
    """

    def __init__(self, name, alignment, generate_fn, deterministic, info=None, describe_fn=None, defaults=None,
                 estimate_fn=None, pipeline=None):
        self.name = name
        self.pipeline = pipeline
        self.alignment = alignment
        self._generate = generate_fn
        self._describe = describe_fn
        self._estimate = estimate_fn
        self.deterministic = bool(deterministic)
        self.info = dict(info or {})
        self.defaults = dict(defaults or {})

    def generate(self, V, *, seed: int = 0, steps: int | None = None, **settings) -> list:
        """PIL images, one per row of ``V`` (n, d) in the workspace space (zero rows are an error).

        ``settings``: ``size``, ``guidance`` and ``progress(done, total)`` (called after each
        denoising step) for a diffusion pipeline (see :attr:`defaults`).
        """
        V = np.atleast_2d(np.asarray(V, dtype=np.float64))
        V = check_embeddings(V, name="embeddings to generate from", allow_zero_rows=True)
        if np.any(np.linalg.norm(V, axis=1) <= ZERO_NORM):
            raise ValueError("a zero component has no direction to draw (the concept is absent from this query)")
        return self._generate(self.alignment.transform(V), int(seed), steps, **settings)

    def describe(self, V) -> list | None:
        """What the generator reads in each row of ``V`` (its decoded "prompt"), or None when it cannot say.

        One entry per row: a list of ``(label, probability)`` pairs, most likely first.
        """
        if self._describe is None:
            return None
        V = np.atleast_2d(np.asarray(V, dtype=np.float64))
        V = check_embeddings(V, name="embeddings to describe", allow_zero_rows=True)
        return self._describe(self.alignment.transform(V))

    def estimate_seconds(self, n_images: int, steps: int, size: int | None = None,
                         guidance: float | None = None) -> float | None:
        """Expected seconds to draw ``n_images`` (None for a deterministic generator)."""
        if self._estimate is None:
            return None
        return float(self._estimate(int(n_images), int(steps), size, guidance))


#: Workspace folder -> the alignment file version whose generator record ``ws.generator`` holds.
_seen_versions: dict = {}


def generator_version(ws: Workspace) -> str:
    """Changes when ``slics align --workspace`` gives ``ws`` another generator (a cache key for the app)."""
    if ws.path is None:
        return ""
    try:
        return str(workspace_alignment_path(ws).stat().st_mtime_ns)
    except OSError:
        return ""


def workspace_alignment_path(ws: Workspace) -> Path:
    """Where the workspace's generator alignment is stored (:data:`ALIGNMENT_FILE` in its folder)."""
    if ws.path is None:
        raise ValueError(f"workspace {ws.name!r} is not saved in a folder")
    return Path(ws.path) / ALIGNMENT_FILE


def load_workspace_alignment(ws: Workspace) -> ProcrustesAlignment:
    """The alignment :func:`attach_generator` saved for ``ws``.

    Raises
    ------
    FileNotFoundError
        None saved (the message says which command fits it).
    ValueError
        The file is damaged or does not fit the workspace's dimension.
    """
    path = workspace_alignment_path(ws)
    if not path.is_file():
        fix = f"fit it with `slics align --workspace {_quote(ws)} --generator {ws.generator or 'sd-1.5'}`"
        raise explain(FileNotFoundError(f"workspace {ws.name!r} has no generator alignment; {fix}"),
                      f"workspace {ws.name!r} has no generator alignment", operator_fix=fix)
    align = ProcrustesAlignment.load(path)
    if align.n_features_in_ != ws.X.shape[1]:
        failed = (f"the generator alignment of workspace {ws.name!r} maps {align.n_features_in_}-d embeddings "
                  f"but the workspace is {ws.X.shape[1]}-d")
        fix = f"fit it again with `slics align --workspace {_quote(ws)} ...`"
        raise explain(ValueError(f"{path} maps {align.n_features_in_}-d embeddings but workspace {ws.name!r} is "
                                 f"{ws.X.shape[1]}-d; {fix}"), failed, operator_fix=fix)
    return align


def _quote(ws: Workspace) -> str:
    name = Path(ws.path).name if ws.path is not None else ws.name
    return name if re.match(r"^[A-Za-z0-9._-]+$", name) else f"'{name}'"


def read_pairs(path, ws: Workspace) -> tuple[np.ndarray, np.ndarray]:
    """``(X, Y)`` of a pairs file: ``source`` rows preprocessed like the workspace, ``target`` rows as given.

    The file (``.npz``) holds ``source`` (n, d): embeddings of some images by the workspace's encoder,
    and ``target`` (n, d'): the same images by the conditioning encoder (e.g. Flickr30K in both
    spaces, as the paper aligns). Sizes are checked before any array is read.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"pairs file {path} does not exist")
    if path.stat().st_size > _MAX_PAIRS_BYTES:
        raise ValueError(f"pairs file {path} is larger than {_MAX_PAIRS_BYTES >> 30} GiB")

    def check(shapes):
        (s_shape, _), (t_shape, _) = shapes["source"], shapes["target"]
        if len(s_shape) != 2 or len(t_shape) != 2 or s_shape[0] != t_shape[0]:
            raise ValueError(f"pairs file {path}: source {s_shape} and target {t_shape} must be (n, d) arrays with "
                             "the same number of rows (one per image)")
        if s_shape[1] != ws.X.shape[1]:
            raise ValueError(f"pairs file {path}: source rows are {s_shape[1]}-d but workspace {ws.name!r} is "
                             f"{ws.X.shape[1]}-d (embed the images with the workspace's encoder {ws.encoder!r})")

    z = load_npz(path, {"source": "f", "target": "f"}, dense=("source", "target"), check=check,
                 fix="write it with np.savez(FILE, source=..., target=...)")
    S, T = np.asarray(z["source"], np.float64), np.asarray(z["target"], np.float64)
    return ws.preprocess(S).astype(np.float64), T


def _training_images(ws: Workspace, n_pairs: int, seed: int) -> np.ndarray:
    tr = np.asarray(ws.index["train"])
    if n_pairs < len(tr):
        tr = np.sort(np.random.default_rng(seed).choice(tr, n_pairs, replace=False))
    return tr


def _embed_training_images(ws, rows, encoder, progress):
    """Target-space embeddings of the workspace rows ``rows`` and the rows that could be embedded.

    Through the embedding cache (:func:`slics_core.embed.embed_dataset`) in the workspace folder, so an
    interrupted run resumes; unreadable images are left out.
    """
    if ws.paths is None:
        raise ValueError(f"workspace {ws.name!r} keeps no image files, so its training images cannot be embedded "
                         "by the conditioning encoder; give embeddings of the same images in both spaces with "
                         "--align-pairs FILE.npz")
    paths = [ws.paths[int(r)] for r in rows]
    ids = [str(int(r)) for r in rows]
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", str(getattr(encoder, "spec", None) or encoder.id))[-60:]
    digest = hashlib.sha1(",".join(ids).encode()).hexdigest()[:10]  # which images: another subset, another cache
    folder = Path(ws.path) / "align-embeddings"
    cache = folder / f"{name}-{digest}"
    if progress is not None:
        progress(f"embed {len(rows)} training images with the conditioning encoder", 0, 1)
    store, _ = embed_dataset(paths, ids, encoder, cache, batch_size=32, progress=progress is None)
    E, got, _ = store.load()
    for old in folder.iterdir():  # only the newest finished cache is kept
        if old != cache and old.is_dir():
            shutil.rmtree(old, ignore_errors=True)
    if progress is not None:
        progress(f"embed {len(rows)} training images with the conditioning encoder", 1, 1)
    return np.asarray(E, np.float64), np.array([int(i) for i in got], dtype=np.int64)


def fit_workspace_alignment(ws: Workspace, conditioning_encoder=None, *, pairs=None,
                            n_pairs: int = DEFAULT_ALIGN_PAIRS, seed: int = 0, encoder=None,
                            progress=None) -> ProcrustesAlignment:
    """The paper's Procrustes map from the workspace space into the conditioning encoder's space.

    Parameters
    ----------
    ws : Workspace
    conditioning_encoder : str, optional
        Encoder spec of the generator's conditioning space (default
        :data:`slics_core.generators.DEFAULT_CONDITIONING_ENCODER`); recorded as the alignment's ``target_id``.
    pairs : path, optional
        A pairs file (:func:`read_pairs`) instead of the workspace's training images.
    n_pairs : int
        Training images embedded (a random subset of the training split when it has more).
    encoder : encoder object, optional
        The loaded conditioning encoder (default: created from ``conditioning_encoder``).
    progress : callable ``progress(stage, done, total)``, optional
        Called before and after embedding; None shows the embedding's own progress bar (stderr) instead.

    Returns
    -------
    ProcrustesAlignment
        Fitted on 80 % of the pairs, with ``held_out_cosine_`` measured on the other 20 %.
    """
    target = parse_encoder_spec(conditioning_encoder or _gens.DEFAULT_CONDITIONING_ENCODER).text
    if pairs is not None:
        X, Y = read_pairs(pairs, ws)
    else:
        if isinstance(n_pairs, bool) or not isinstance(n_pairs, (int, np.integer)) or n_pairs < 5:
            raise ValueError(f"the alignment needs at least 5 training images; got n_pairs={n_pairs!r}")
        enc = encoder if encoder is not None else create_encoder(target)
        rows = _training_images(ws, int(n_pairs), seed)
        Y, got = _embed_training_images(ws, rows, enc, progress)
        X = np.asarray(ws.X[got], np.float64)
    if len(X) < 5:
        raise ValueError(f"only {len(X)} image pairs to fit the alignment on; it needs at least 5")
    return fit_alignment(X, Y, test_size=0.2, random_state=seed, source_id=ws.encoder, target_id=target)


def attach_generator(ws: Workspace, generator, conditioning_encoder=None, **fit_kwargs) -> ProcrustesAlignment:
    """Give the saved workspace ``ws`` a generator: fit and save its alignment, record the spec.

    Nothing else in the workspace is refitted or rewritten. The generator's own weights are not
    needed here (only when drawing). ``fit_kwargs`` go to :func:`fit_workspace_alignment`.
    """
    spec = _gens.parse_generator_spec(generator)
    path = workspace_alignment_path(ws)
    align = fit_workspace_alignment(ws, conditioning_encoder, **fit_kwargs)
    align.save(path)
    set_workspace_generator(ws, spec.text)
    return align


def load_workspace_generator(ws: Workspace) -> WorkspaceGenerator:
    """The generator of ``ws`` with its fitted alignment.

    Emoji world: the shipped emoji generator conditioned on the ``emoji-large`` embeddings
    (``extras["cond"]``); alignment: workspace space -> conditioning space, fitted on the
    training items. A dataset workspace: the diffusion pipeline its header names
    (:func:`attach_generator`) with the saved alignment.

    Raises
    ------
    FileNotFoundError
        No generator is available for this workspace here; the message says what is missing
        (missing weights: the exact ``slics download ...`` command).
    """
    if ws.building is not None:
        failed = (f"the generator needs the whole emoji world, which is being built in the background "
                  f"({ws.building.percent():.0f} %)")
        raise explain(FileNotFoundError(f"{failed}; this page works when it is done"), failed,
                      visitor_fix="this page works when it is done")
    if ws.generator == "emoji" and "cond" in ws.extras:
        return _emoji_generator(ws)
    version = generator_version(ws)
    if ws.kind != "emoji" and version and _seen_versions.get(str(ws.path)) != version:
        ws.generator = recorded_generator(ws)  # `slics align --workspace` may have run since ws was opened
        _seen_versions[str(ws.path)] = version
    if not ws.generator or ws.generator == "emoji":
        fix = (f"give it the paper's image-to-prompt generator with "
               f"`slics align --workspace {_quote(ws) if ws.path else ws.name} --generator sd-1.5` "
               "(Stable Diffusion 1.5 and CLIP ViT-L/14 embeddings of its training images)")
        raise explain(FileNotFoundError(f"workspace {ws.name!r} has no generator: {fix}"),
                      f"workspace {ws.name!r} has no generator", operator_fix=fix)
    return _pipeline_generator(ws)


#: How each route feeds the image embedding to the pipeline (a local folder's name says which).
_ROUTES = {"sd": "image embedding as the prompt", "unclip": "image-embedding conditioning"}


def _display_name(spec) -> str:
    """The pages' name of a generator (a spec or its text): its weights preset's description
    (:data:`slics_core.weights.PRESETS`), or a local pipeline folder's name (not its path: the pages show
    it to visitors) and route."""
    spec = _gens.parse_generator_spec(spec)
    if spec.preset is not None:
        return get_preset(spec.preset).description
    return f"local pipeline {Path(spec.path).name!r} ({_ROUTES[spec.route]})"  # its folder's name, not the path


def _pipeline_generator(ws: Workspace) -> WorkspaceGenerator:
    spec = _gens.parse_generator_spec(ws.generator)
    align = load_workspace_alignment(ws)
    pipe = _gens.load_pipeline_generator(spec, align.target_id)
    if pipe.embedding_dim != align.n_features_out_:
        failed = (f"the alignment of workspace {ws.name!r} maps into {align.n_features_out_}-d "
                  f"({align.target_id}) but its generator takes {pipe.embedding_dim}-d embeddings")
        fix = (f"fit it again with `slics align --workspace {_quote(ws)} --generator {spec.text} "
               "--align-encoder ENCODER`")
        raise explain(ValueError(f"{failed.replace('its generator', f'generator {spec.text!r}')}: {fix}"),
                      failed, operator_fix=fix)
    on_gpu = pipe.device.type == "cuda"
    native = pipe.native_size
    defaults = dict(_gens.GPU_DEFAULTS if on_gpu else _gens.CPU_DEFAULTS)
    consistency = _gens.is_consistency_model(pipe.pipe)
    if consistency:
        defaults.update(_gens.LCM_DEFAULTS)
    defaults["size"] = min(defaults["size"], native)
    timer = _StepTimer(pipe, on_gpu)
    route = _ROUTES[spec.route]
    sampler = "LCM" if consistency else "DPM-Solver++"

    def run(C, seed, steps, size=None, guidance=None, progress=None):
        steps = int(steps or defaults["steps"])
        size = int(size or defaults["size"])
        guidance = float(defaults["guidance"] if guidance is None else guidance)
        kw = {"noise_level": 0} if spec.route == "unclip" else {}
        t0 = time.perf_counter()
        images = pipe.generate(C, seed=seed, steps=steps, guidance=guidance, height=size, width=size,
                               batch_size=1, progress=progress, **kw)
        timer.record(time.perf_counter() - t0, len(images), steps, size, guidance)
        return images

    name = _display_name(spec)
    info = {"alignment_held_out_cosine": align.held_out_cosine_, "alignment_train_cosine": align.train_cosine_,
            "conditioning_encoder": align.target_id, "spec": spec.text, "device": str(pipe.device), "route": route,
            "native_size": native, "sampler": sampler}
    info = {k: v for k, v in info.items() if v is not None}
    return WorkspaceGenerator(name, align, run, deterministic=False, info=info, defaults=defaults,
                              estimate_fn=timer.estimate, pipeline=pipe)


class _StepTimer:
    """Expected drawing time: a prior from the U-Net's size, replaced by this machine's measured speed.

    Before any measurement the cost of a step is taken proportional to U-Net parameters x latent
    pixels (less without a classifier-free guidance pass, :data:`_UNGUIDED`), with one more step's worth for the
    VAE decoding. Once images were drawn at a size, the measured seconds per step at that size are
    used (at another size, the nearest measured size scaled by latent pixels).
    """

    def __init__(self, pipe, on_gpu):
        self.params = float(sum(p.numel() for p in pipe.pipe.unet.parameters()))
        self.factor = float(pipe.pipe.vae_scale_factor)
        self.prior = _CPU_PRIOR / (_GPU_SPEEDUP if on_gpu else 1.0)
        self.guidance_branch = not _gens.is_consistency_model(pipe.pipe)  # an LCM has no unconditional pass
        self.measured = {}  # (size, guided) -> seconds per image-step

    def _pixels(self, size):
        return (float(size) / self.factor) ** 2

    def record(self, seconds, n_images, steps, size, guidance):
        if n_images > 0 and seconds > 0:
            self.measured[(int(size), self.guidance_branch and guidance > 1.0)] = seconds / (n_images * (steps + 1))

    def estimate(self, n_images, steps, size, guidance):
        size = int(size or 512)
        guided = self.guidance_branch and (guidance is None or guidance > 1.0)
        per_step = self.measured.get((size, guided))
        if per_step is None:
            same = [(s, v) for (s, g), v in self.measured.items() if g == guided]
            if same:
                s, v = min(same, key=lambda sv: abs(sv[0] - size))
                per_step = v * self._pixels(size) / self._pixels(s)
            else:
                per_step = self.prior * self.params * self._pixels(size) * (1.0 if guided else _UNGUIDED)
        return n_images * (steps + 1) * per_step


def _emoji_generator(ws: Workspace) -> WorkspaceGenerator:
    """The emoji world's generator, aligned from the workspace space to its conditioning space.

    It reads each aligned row as the objects of a scene and draws them with the world's sprites
    (:mod:`slics_core.emoji.generator`), so it can say what it read: ``describe`` gives the top
    objects with their probabilities.
    """
    gen = EmojiGenerator.load()
    tr = ws.index["train"]
    align = ProcrustesAlignment(normalize=True).fit(ws.X[tr], gen.condition(ws.extras["cond"][tr]))

    def run(C, seed, steps):
        return [Image.fromarray(a) for a in gen.generate(C)]

    return WorkspaceGenerator("emoji generator", align, run, deterministic=True,
                              info={"alignment_train_cosine": float(align.train_cosine_)},
                              describe_fn=gen.describe)
