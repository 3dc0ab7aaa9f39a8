"""Turn embeddings (SLiCS components, atoms) into images with diffusers.

Two generators, both taking rows of a CLIP *image* embedding space (unit norm
or not; they are rescaled) and returning PIL images:

:class:`ImageToPromptSD` - the paper's image-to-prompt route (sec. 3.8) for
Stable Diffusion 1.x, whose U-Net is conditioned on the per-token output
``H`` (77 x 768) of the CLIP ViT-L/14 text transformer (after its final
layer norm). Exact construction used here, for a row ``v`` of the ViT-L/14
joint (image/text) space:

1. ``v`` is L2-normalised (a zero row is an error: an absent concept has no
   component to draw).
2. It is mapped back from the joint space to the text transformer's output
   space with the pseudo-inverse of CLIP's text projection ``P``
   (``text_embed = h_EOS @ P``, ``P`` of shape (768, 768) for ViT-L/14):
   ``h = v @ pinv(P)``. ``h`` is the end-of-text token state whose projection
   is ``v``.
3. ``h`` is rescaled to ``token_norm``, by default the mean norm of the
   end-of-text/padding token states of the empty prompt ``""`` (the norm the
   U-Net sees at those positions).
4. ``prompt_embeds = [H_empty[0], h, h, ..., h]``: the start token state of
   the empty prompt (it is the same for every prompt, as attention is
   causal) followed by ``h`` at every other position (1..76), i.e. at the
   end-of-text position and all the padding positions that, for a real
   prompt, carry the sentence summary. The negative (unconditional) prompt
   is the empty prompt, as in plain text-to-image.

Alignment from the SLiCS space (e.g. ViT-B/32) into ViT-L/14 is done first
with :class:`slics_core.alignment.ProcrustesAlignment` (``alignment=``).

:class:`UnCLIPGenerator` - Stable unCLIP (``StableUnCLIPImg2ImgPipeline``),
which is conditioned on a CLIP image embedding directly (``image_embeds``,
noised by ``noise_level``). Rows are rescaled to ``expected_norm``, the
root-mean-square norm implied by the pipeline's own embedding statistics
(``image_normalizer``: ``sqrt(sum(mean**2 + std**2))``). The
``sd-2.1-unclip-small`` preset takes ViT-L/14 image embeddings.

Which pipeline a workspace draws with is named by a *generator spec*
(:func:`parse_generator_spec`: ``sd-1.5``, ``unclip`` or ``local:DIR``);
:func:`load_pipeline_generator` loads it, with the text projection of the
conditioning encoder (:func:`conditioning_text_projection`) for the
image-to-prompt route, and :func:`required_presets` lists the downloadable
weights a spec and its conditioning encoder need (``slics download``).
Every pipeline samples with DPM-Solver++ (2M, Karras sigmas; :func:`fast_scheduler`),
on every device, so that a seed gives the same image on a CPU and a GPU at the
same settings; a CPU gets fewer steps and a smaller size by default
(:data:`CPU_DEFAULTS`, docs/generation.md).

:func:`interpolate_atoms` gives the atom interpolation of Fig. 3 (rows
``a*b1 + (1-a)*b2``), drawn with one seed for every ``a`` by the Generate page.

Seeds: image ``i`` of a call uses its own CPU ``torch.Generator`` seeded with
``seed + i`` (or ``seeds[i]``), so an image does not depend on the batch it was
generated in. On a CUDA machine the pipelines run in float16 on the GPU,
otherwise in float32 on the CPU. The random draws never depend on that choice
(:func:`seeded_noise`): the generator draws every random tensor the pipeline
needs at the start (unCLIP's image-embedding noise, then the starting
latents, in the order and shapes diffusers itself draws them) in *float32* on
the CPU, and only then are they cast to the pipeline's dtype and device and
passed in (``latents=``; the embedding noise through
``noise_image_embeddings(noise=...)``). Drawing them in float16, as diffusers
does when given only ``generator=``, gives a different random sequence on some
torch versions, so the same seed gave a different image on a GPU than on a
CPU. On the CPU in float32 the images are exactly those of diffusers' own
``generator=`` path. The (advanced) generators are still passed, for
schedulers that draw noise during sampling (DDPM, ancestral samplers; the
default DDIM/PNDM schedulers draw none); those later draws follow diffusers.
"""
from __future__ import annotations

import contextlib
import os
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from slics_core import weights as _weights
from slics_core.formats import read_json

__all__ = [
    "ImageToPromptSD",
    "UnCLIPGenerator",
    "GeneratorSpec",
    "CPU_DEFAULTS",
    "GPU_DEFAULTS",
    "LCM_DEFAULTS",
    "is_consistency_model",
    "DEFAULT_CONDITIONING_ENCODER",
    "parse_generator_spec",
    "required_presets",
    "missing_presets",
    "conditioning_text_projection",
    "fast_scheduler",
    "load_pipeline_generator",
    "load_text_projection",
    "seeded_noise",
    "interpolate_atoms",
    "concept_atoms",
]


def _device_dtype(device=None, half=None):
    import torch

    device = torch.device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
    if half is None:
        half = device.type == "cuda"
    return device, (torch.float16 if half else torch.float32)


def _unit_rows(V: np.ndarray, name: str = "embeddings") -> np.ndarray:
    norms = np.linalg.norm(V, axis=1, keepdims=True)
    zero = np.flatnonzero(norms[:, 0] <= 1e-12)
    if zero.size:
        raise ValueError(f"{name} row(s) {zero[:5].tolist()} are zero: a concept that is not active has no "
                         "component to draw")
    return V / norms


def _check_rows(E, dim: int, name: str = "embeddings") -> np.ndarray:
    try:
        E = np.asarray(E, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a numeric array") from None
    if E.ndim == 1:
        E = E[None, :]
    if E.ndim != 2 or E.shape[0] == 0:
        raise ValueError(f"{name} must have shape (n, {dim}), got {E.shape}")
    if E.shape[1] != dim:
        raise ValueError(f"{name} have {E.shape[1]} dimensions but this generator takes {dim} "
                         "(align them first with a ProcrustesAlignment)")
    if not np.all(np.isfinite(E)):
        raise ValueError(f"{name} contain NaN or infinite values")
    return E


def _seed_list(seed, seeds, n: int) -> list[int]:
    if seeds is not None:
        seeds = [int(s) for s in seeds]
        if len(seeds) != n:
            raise ValueError(f"got {len(seeds)} seeds for {n} images")
        return seeds
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ValueError(f"seed must be an integer, got {seed!r}")
    return [int(seed) + i for i in range(n)]


def _check_run_args(steps, guidance, batch_size):
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    try:
        guidance = float(guidance)
    except (TypeError, ValueError):
        raise ValueError(f"guidance must be a number, got {guidance!r}") from None
    if not np.isfinite(guidance) or guidance < 0:
        raise ValueError(f"guidance must be a finite number >= 0, got {guidance}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    return int(steps), guidance, int(batch_size)


def seeded_noise(seeds: Sequence[int], shapes, *, dtype=None, device=None):
    """Standard normal noise that depends only on the seeds, never on the device or dtype.

    For each seed, a CPU ``torch.Generator`` seeded with it draws, in order,
    one float32 tensor of shape ``(1, *shape)`` per entry of ``shapes`` (how
    diffusers' ``randn_tensor`` draws one image's noise from its generator).
    The rows of all seeds are stacked, then cast to ``dtype`` and moved to
    ``device``.

    Parameters
    ----------
    seeds : sequence of int
        One seed per row (image).
    shapes : sequence of tuple of int
        Per-image shapes, drawn in this order from each seed's generator.
    dtype, device : optional
        Target dtype and device (default float32 on the CPU).

    Returns
    -------
    tensors : list of torch.Tensor
        One tensor of shape ``(len(seeds), *shape)`` per entry of ``shapes``.
    generators : list of torch.Generator
        The CPU generators, advanced past these draws (for any later draw).
    """
    import torch

    seeds = [int(s) for s in seeds]
    shapes = [tuple(int(v) for v in shape) for shape in shapes]
    gens = [torch.Generator("cpu").manual_seed(s) for s in seeds]
    drawn = [[] for _ in shapes]
    for g in gens:
        for k, shape in enumerate(shapes):
            drawn[k].append(torch.randn((1, *shape), generator=g, dtype=torch.float32, device="cpu"))
    out = []
    for rows, shape in zip(drawn, shapes):
        t = torch.cat(rows) if rows else torch.zeros((0, *shape), dtype=torch.float32)
        out.append(t.to(device=device or "cpu", dtype=dtype or torch.float32))
    return out, gens


@contextlib.contextmanager
def _quiet_dtype_warning():
    """``torch_dtype`` works in every supported diffusers version; newer ones warn that it was renamed."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*torch_dtype.*deprecated", category=FutureWarning)
        yield


def _place(pipe, device, dtype):
    """Move a pipeline to ``device``/``dtype`` (cast only when needed) and silence its progress bar."""
    if pipe.dtype != dtype:
        pipe = pipe.to(dtype=dtype)
    pipe = pipe.to(device)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def _check_tokenizer(tokenizer, source) -> None:
    # Offline, CLIPTokenizer.from_pretrained of a missing repo can silently give a 2-token tokenizer.
    if tokenizer is None or len(tokenizer) <= 2:
        raise ValueError(f"the tokenizer loaded from {source} is empty or broken ({len(tokenizer) if tokenizer else 0} "
                         "tokens); the model folder is incomplete")


def _resolve_pipeline_dir(model, cache_dir, allow_download) -> tuple[Path, str]:
    if os.path.isdir(str(model)):
        return Path(model), f"dir:{Path(model).resolve()}"
    try:
        preset = _weights.get_preset(str(model))
    except ValueError:
        preset = _weights.ModelPreset(name=str(model), kind="diffusers", repo_id=str(model),
                                      description=f"diffusers pipeline {model}", files=("model_index.json",))
    if preset.kind != "diffusers":
        raise ValueError(f"{preset.name!r} is not a diffusers pipeline")
    return _weights.resolve(preset, cache_dir=cache_dir, allow_download=allow_download), preset.repo_id


def load_text_projection(source="ViT-L-14/openai", *, cache_dir=None, allow_download: bool = False) -> np.ndarray:
    """CLIP text projection ``P`` (width, dim) such that ``text_embed = h_EOS @ P``.

    Parameters
    ----------
    source : str, path, ndarray or encoder
        An open_clip preset name (only the ``text_projection`` tensor is read
        from its checkpoint), a checkpoint file (``.safetensors``/``.bin``/
        ``.pt``), an array, or an :class:`~slics_core.encoders.OpenCLIPEncoder`.
    """
    if hasattr(source, "text_projection") and not isinstance(source, (str, os.PathLike, np.ndarray)):
        P = source.text_projection
        if P is None:
            raise ValueError(f"{source!r} has no text projection")
        return np.asarray(P, dtype=np.float64)
    if isinstance(source, np.ndarray) or (hasattr(source, "__array__") and not isinstance(source, (str, os.PathLike))):
        P = np.asarray(source, dtype=np.float64)
        if P.ndim != 2 or not np.all(np.isfinite(P)):
            raise ValueError(f"text projection must be a finite 2-D matrix, got shape {P.shape}")
        return P
    path = Path(str(source))
    if not path.is_file():
        path = _weights.resolve(str(source), cache_dir=cache_dir, allow_download=allow_download)
    if path.suffix == ".safetensors":
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as fh:
            keys = [k for k in fh.keys() if k == "text_projection" or k.endswith(".text_projection")
                    or k.endswith("text_projection.weight")]
            if not keys:
                raise ValueError(f"{path} holds no text_projection tensor")
            t = fh.get_tensor(keys[0])
            key = keys[0]
    else:
        import torch

        sd = torch.load(str(path), map_location="cpu", weights_only=True)
        if isinstance(sd, dict) and "state_dict" in sd:
            sd = sd["state_dict"]
        keys = [k for k in sd if k.endswith("text_projection") or k.endswith("text_projection.weight")]
        if not keys:
            raise ValueError(f"{path} holds no text_projection tensor")
        key = keys[0]
        t = sd[key]
    P = t.float().numpy().astype(np.float64)
    if key.endswith(".weight"):  # nn.Linear stores the transpose
        P = P.T
    return P


class _Generator:
    embedding_dim: int

    def _prepare(self, embeddings, alignment):
        if alignment is not None:
            embeddings = alignment.transform(np.atleast_2d(np.asarray(embeddings, dtype=np.float64)))
        return _unit_rows(_check_rows(embeddings, self.embedding_dim))

    def _latent_shape(self, height, width) -> tuple[int, int, int]:
        """One image's starting latents ``(channels, h, w)``, with the pipelines' default size rule."""
        pipe = self.pipe
        size = pipe.unet.config.sample_size
        size_h, size_w = (size, size) if isinstance(size, int) else (size[0], size[1])
        f = int(pipe.vae_scale_factor)
        height = int(height) if height else int(size_h) * f
        width = int(width) if width else int(size_w) * f
        return int(pipe.unet.config.in_channels), height // f, width // f

    @property
    def native_size(self) -> int:
        """Side in pixels of the images the pipeline was trained at (its default size)."""
        return int(self._latent_shape(None, None)[1] * self.pipe.vae_scale_factor)

    def _run(self, call, n, seed, seeds, batch_size):
        seed_list = _seed_list(seed, seeds, n)
        images = []
        with self._call_lock:  # a pipeline (its scheduler state, the noise hook) serves one call at a time
            for start in range(0, n, batch_size):
                stop = min(n, start + batch_size)
                images.extend(call(start, stop, seed_list[start:stop]))
        return images


class ImageToPromptSD(_Generator):
    """Stable Diffusion 1.x driven by image embeddings as prompts (see module doc).

    Parameters
    ----------
    pipe : diffusers.StableDiffusionPipeline
    text_projection : array (width, dim), optional
        CLIP text projection of the pipeline's text encoder (ViT-L/14 for
        SD 1.x, see :func:`load_text_projection`). ``None`` means embeddings
        are given directly in the text transformer's output space.
    token_norm : float, optional
        Norm of the injected token states; default: mean norm of the
        end-of-text/padding states of the empty prompt.
    device, half : optional
        Default: CUDA + float16 if available, else CPU + float32.
    """

    def __init__(self, pipe, text_projection=None, token_norm: float | None = None, device=None, half=None):
        import torch

        self.device, self.dtype = _device_dtype(device, half)
        self._call_lock = threading.Lock()
        _check_tokenizer(getattr(pipe, "tokenizer", None), "the pipeline")
        self.pipe = _place(pipe, self.device, self.dtype)
        width = int(pipe.text_encoder.config.hidden_size)
        if text_projection is not None:
            P = load_text_projection(text_projection)
            if P.shape[0] != width:
                raise ValueError(f"text projection has {P.shape[0]} rows but the text encoder width is {width}")
            self.text_projection = P
            self._back = np.linalg.pinv(P)  # (dim, width)
            self.embedding_dim = P.shape[1]
        else:
            self.text_projection = None
            self._back = None
            self.embedding_dim = width
        tok = pipe.tokenizer
        ids = tok([""], padding="max_length", max_length=tok.model_max_length, truncation=True,
                  return_tensors="pt").input_ids.to(self.device)
        with torch.inference_mode():
            H = pipe.text_encoder(ids)[0]
        self.empty_prompt_embeds = H.detach().float().cpu().numpy()[0]  # (L, width)
        ref = float(np.linalg.norm(self.empty_prompt_embeds[1:], axis=1).mean())
        self.token_norm = float(token_norm) if token_norm is not None else ref
        if not np.isfinite(self.token_norm) or self.token_norm <= 0:
            raise ValueError(f"token_norm must be positive, got {self.token_norm}")

    @classmethod
    def from_pretrained(cls, model="sd-1.5", text_projection="ViT-L-14/openai", *, cache_dir=None,
                        allow_download: bool = False, device=None, half=None, token_norm=None):
        """Load a Stable Diffusion 1.x pipeline from a preset, hub repo id or local folder.

        ``text_projection`` is loaded with :func:`load_text_projection`
        (default: read from the ViT-L/14 OpenAI checkpoint); pass ``None`` to
        give embeddings in the text encoder's output space.
        Missing weights raise :class:`~slics_core.weights.MissingWeightsError` at once.
        """
        folder, _ = _resolve_pipeline_dir(model, cache_dir, allow_download)
        if isinstance(text_projection, (str, os.PathLike)):
            text_projection = load_text_projection(text_projection, cache_dir=cache_dir,
                                                   allow_download=allow_download)
        from diffusers import StableDiffusionPipeline

        _, dtype = _device_dtype(device, half)
        with _quiet_dtype_warning():
            pipe = StableDiffusionPipeline.from_pretrained(
                folder, safety_checker=None, requires_safety_checker=False, feature_extractor=None,
                torch_dtype=dtype, local_files_only=True)
        return cls(pipe, text_projection=text_projection, token_norm=token_norm, device=device, half=half)

    def token_states(self, embeddings, alignment=None) -> np.ndarray:
        """Steps 1-3: rows of the joint space -> rescaled token states ``(n, width)``."""
        V = self._prepare(embeddings, alignment)
        Hs = V @ self._back if self._back is not None else V
        return _unit_rows(Hs, "mapped embeddings") * self.token_norm

    def prompt_embeds(self, embeddings, alignment=None) -> np.ndarray:
        """The full conditioning ``(n, 77, width)`` passed as ``prompt_embeds``."""
        h = self.token_states(embeddings, alignment)
        L = self.empty_prompt_embeds.shape[0]
        out = np.repeat(h[:, None, :], L, axis=1)
        out[:, 0, :] = self.empty_prompt_embeds[0]
        return out.astype(np.float32)

    def generate(self, embeddings, *, seed: int = 0, seeds: Sequence[int] | None = None, steps: int = 30,
                 guidance: float = 7.5, height: int | None = None, width: int | None = None,
                 negative_prompt: str | None = None, alignment=None, batch_size: int = 4,
                 output_type: str = "pil", progress=None) -> list:
        """Images for the rows of ``embeddings`` (n, dim) -> list of ``n`` PIL images.

        ``output_type="np"`` returns float arrays in [0, 1] instead. ``progress(done, total)``, when
        given, is called after every denoising step of every batch (``total = steps``).
        """
        import torch

        steps, guidance, batch_size = _check_run_args(steps, guidance, batch_size)
        pe = self.prompt_embeds(embeddings, alignment)

        shape = self._latent_shape(height, width)

        def call(start, stop, chunk_seeds):
            chunk = torch.from_numpy(pe[start:stop]).to(self.device, self.dtype)
            neg = None if negative_prompt is None else [negative_prompt] * (stop - start)
            # drawn in float32 on the CPU, then cast (see module doc); the pipeline scales them by
            # its scheduler's init_noise_sigma as it does its own draw
            (latents,), gens = seeded_noise(chunk_seeds, [shape], dtype=self.dtype, device=self.device)
            with torch.inference_mode():
                out = self.pipe(prompt_embeds=chunk, negative_prompt=neg, num_inference_steps=steps,
                                guidance_scale=guidance, generator=gens, height=height, width=width,
                                latents=latents, output_type=output_type,
                                callback_on_step_end=_step_callback(progress, steps))
            return list(out.images)

        return self._run(call, len(pe), seed, seeds, batch_size)


class UnCLIPGenerator(_Generator):
    """Stable unCLIP conditioned on image embeddings (``image_embeds``, ``noise_level``).

    Parameters
    ----------
    pipe : diffusers.StableUnCLIPImg2ImgPipeline
    expected_norm : float, optional
        Norm the rows are rescaled to; default from the pipeline's
        ``image_normalizer`` statistics, ``sqrt(sum(mean**2 + std**2))``.
    device, half : optional
    """

    def __init__(self, pipe, expected_norm: float | None = None, device=None, half=None):
        self.device, self.dtype = _device_dtype(device, half)
        self._call_lock = threading.Lock()
        _check_tokenizer(getattr(pipe, "tokenizer", None), "the pipeline")
        self.pipe = _place(pipe, self.device, self.dtype)
        mean = pipe.image_normalizer.mean.detach().float().cpu().numpy().ravel()
        std = pipe.image_normalizer.std.detach().float().cpu().numpy().ravel()
        self.embedding_dim = int(mean.size)
        ref = float(np.sqrt(np.sum(mean.astype(np.float64) ** 2 + std.astype(np.float64) ** 2)))
        self.expected_norm = float(expected_norm) if expected_norm is not None else ref
        if not np.isfinite(self.expected_norm) or self.expected_norm <= 0:
            raise ValueError(f"expected_norm must be positive, got {self.expected_norm}")
        self.max_noise_level = int(pipe.image_noising_scheduler.config.num_train_timesteps) - 1

    @classmethod
    def from_pretrained(cls, model="sd-2.1-unclip-small", *, cache_dir=None, allow_download: bool = False,
                        device=None, half=None, expected_norm=None):
        """Load Stable unCLIP from a preset, hub repo id or local folder."""
        folder, _ = _resolve_pipeline_dir(model, cache_dir, allow_download)
        from diffusers import StableUnCLIPImg2ImgPipeline

        _, dtype = _device_dtype(device, half)
        with _quiet_dtype_warning():
            pipe = StableUnCLIPImg2ImgPipeline.from_pretrained(folder, torch_dtype=dtype, local_files_only=True)
        return cls(pipe, expected_norm=expected_norm, device=device, half=half)

    def image_embeds(self, embeddings, alignment=None) -> np.ndarray:
        """Rows unit-normalised and rescaled to ``expected_norm``."""
        return self._prepare(embeddings, alignment) * self.expected_norm

    def generate(self, embeddings, *, seed: int = 0, seeds: Sequence[int] | None = None, steps: int = 20,
                 guidance: float = 10.0, noise_level: int = 0, prompt: str = "",
                 negative_prompt: str | None = None, height: int | None = None, width: int | None = None,
                 alignment=None, batch_size: int = 4, output_type: str = "pil", progress=None) -> list:
        """Images for the rows of ``embeddings`` (n, dim) -> list of ``n`` images (``progress`` as for SD)."""
        import torch

        steps, guidance, batch_size = _check_run_args(steps, guidance, batch_size)
        if isinstance(noise_level, bool) or not isinstance(noise_level, (int, np.integer)) \
                or not 0 <= noise_level <= self.max_noise_level:
            raise ValueError(f"noise_level must be an integer in [0, {self.max_noise_level}], got {noise_level!r}")
        if not isinstance(prompt, str):
            raise ValueError("prompt must be a string")
        E = self.image_embeds(embeddings, alignment)

        shape = self._latent_shape(height, width)

        def call(start, stop, chunk_seeds):
            n = stop - start
            chunk = torch.from_numpy(E[start:stop].astype(np.float32)).to(self.device, self.dtype)
            neg = None if negative_prompt is None else [negative_prompt] * n
            # diffusers draws the embedding noise (used at every noise_level, negligible at 0) first,
            # then the latents, from each image's generator: same order and shapes, in float32 on the CPU
            (emb_noise, latents), gens = seeded_noise(chunk_seeds, [(self.embedding_dim,), shape],
                                                      dtype=self.dtype, device=self.device)
            # this pipeline uses given latents as they are (its own draw is scaled by init_noise_sigma,
            # which for some schedulers depends on the number of steps)
            self.pipe.scheduler.set_timesteps(steps, device=self.device)
            latents = latents * self.pipe.scheduler.init_noise_sigma
            with torch.inference_mode(), _given_embedding_noise(self.pipe, emb_noise):
                out = self.pipe(prompt=[prompt] * n, negative_prompt=neg, image_embeds=chunk,
                                noise_level=int(noise_level), num_inference_steps=steps, guidance_scale=guidance,
                                generator=gens, height=height, width=width, latents=latents,
                                output_type=output_type,
                                callback=None if progress is None else (lambda i, t, x: progress(i + 1, steps)))
            return list(out.images)

        return self._run(call, len(E), seed, seeds, batch_size)


@contextlib.contextmanager
def _given_embedding_noise(pipe, given):
    """Make ``pipe.noise_image_embeddings`` use the noise ``given`` (the pipeline's call has no argument for it)."""
    original = pipe.noise_image_embeddings  # bound method of the pipeline's class

    def noise_image_embeddings(image_embeds, noise_level, noise=None, generator=None):
        if image_embeds.shape != given.shape:
            raise RuntimeError(f"embedding noise of shape {tuple(given.shape)} drawn for image embeddings of "
                               f"shape {tuple(image_embeds.shape)}")
        return original(image_embeds, noise_level, noise=given.to(image_embeds.device, image_embeds.dtype),
                        generator=generator)

    pipe.noise_image_embeddings = noise_image_embeddings
    try:
        yield
    finally:
        del pipe.noise_image_embeddings


def _step_callback(progress, steps):
    """A ``callback_on_step_end`` calling ``progress(done, steps)`` (None when there is no ``progress``)."""
    if progress is None:
        return None

    def on_step_end(pipe, i, t, kwargs):
        progress(int(i) + 1, steps)
        return kwargs

    return on_step_end


# --------------------------------------------------------------- generator specs
#: The conditioning encoder of both preset generators: SD 1.x reads CLIP ViT-L/14 text states, the
#: ``sd-2.1-unclip-small`` U-Net CLIP ViT-L/14 image embeddings.
DEFAULT_CONDITIONING_ENCODER = "ViT-L-14/openai"

#: Generator spec -> (weights preset, route).
_PRESET_GENERATORS = {"sd-1.5": ("sd-1.5", "sd"), "unclip": ("sd-2.1-unclip-small", "unclip"),
                      "lcm": ("lcm-dreamshaper-v7", "sd")}

#: Default sampling settings on a CPU: 256 x 256 and few DPM-Solver++ steps (docs/generation.md).
CPU_DEFAULTS = {"size": 256, "steps": 12, "guidance": 7.5}
#: A latent-consistency (LCM-distilled) U-Net: few steps and no classifier-free guidance branch on any
#: device (its guidance scale is an input of the U-Net), so a step costs half a guided one.
LCM_DEFAULTS = {"steps": 4, "guidance": 8.0}
#: Default sampling settings on a GPU: the pipelines' native 512 x 512.
GPU_DEFAULTS = {"size": 512, "steps": 25, "guidance": 7.5}

_MAX_INDEX_BYTES = 1 << 20


@dataclass(frozen=True)
class GeneratorSpec:
    """A parsed generator name (:func:`parse_generator_spec`).

    Attributes
    ----------
    text : str
        Canonical spelling (``sd-1.5``, ``unclip``, ``local:/abs/dir``), what a workspace records.
    route : {"sd", "unclip"}
        Image-to-prompt through SD 1.x's text states, or Stable unCLIP's image embeddings.
    preset : str or None
        Weights preset of :mod:`slics_core.weights` (None for a local folder).
    path : str or None
        The diffusers pipeline folder of ``local:DIR``.
    """

    text: str
    route: str
    preset: str | None = None
    path: str | None = None


def _pipeline_class(folder: Path) -> str:
    index = folder / "model_index.json"
    if not index.is_file():
        raise FileNotFoundError(f"{folder} is not a diffusers pipeline folder (no model_index.json); save one "
                                "with pipe.save_pretrained(DIR)")
    if index.stat().st_size > _MAX_INDEX_BYTES:
        raise ValueError(f"{index} is larger than {_MAX_INDEX_BYTES} bytes: not a diffusers model index")
    try:
        name = read_json(index).get("_class_name")
    except (ValueError, AttributeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{index} is not a readable diffusers model index ({exc})") from None
    return str(name)


def parse_generator_spec(spec) -> GeneratorSpec:
    """Parse a generator name; the only place generator names are read.

    Accepted forms: ``sd-1.5`` (Stable Diffusion 1.5, image embedding as the prompt: the paper's
    route), ``unclip`` (Stable unCLIP 2.1 small, conditioned on ViT-L/14 image embeddings), ``lcm``
    (the latent-consistency distilled Dreamshaper v7, an SD 1.5 fine-tune, by the paper's route in 4
    steps) and ``local:DIR`` (a diffusers ``StableDiffusionPipeline``, ``LatentConsistencyModelPipeline``
    or ``StableUnCLIPImg2ImgPipeline`` folder; its ``model_index.json`` says which).

    Raises
    ------
    ValueError
        Another name, or a folder holding another pipeline.
    FileNotFoundError
        ``local:DIR`` without a pipeline there.
    """
    if isinstance(spec, GeneratorSpec):
        return spec
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"generator name must be a non-empty string, got {spec!r}")
    text = spec.strip()
    if text.lower() in _PRESET_GENERATORS:
        preset, route = _PRESET_GENERATORS[text.lower()]
        return GeneratorSpec(text.lower(), route, preset=preset)
    if text.startswith("local:"):
        path = Path(os.path.abspath(os.path.expanduser(text[len("local:"):])))
        cls = _pipeline_class(path)
        routes = {"StableDiffusionPipeline": "sd", "LatentConsistencyModelPipeline": "sd",
                  "StableUnCLIPImg2ImgPipeline": "unclip"}
        if cls not in routes:
            raise ValueError(f"generator folder {path} holds a {cls}; image-to-prompt needs a "
                             "StableDiffusionPipeline or a StableUnCLIPImg2ImgPipeline")
        return GeneratorSpec(f"local:{path}", routes[cls], path=str(path))
    raise ValueError(f"unknown generator {text!r}: use sd-1.5, unclip, lcm or local:DIR (a diffusers pipeline "
                     "folder)")


def required_presets(generator, conditioning_encoder=None) -> list[str]:
    """Names of the downloadable presets that drawing with ``generator`` needs (``slics download`` them).

    The generator's own weights (none for ``local:DIR``), and, for the conditioning encoder
    (default :data:`DEFAULT_CONDITIONING_ENCODER`), its weights when it is a preset: the
    image-to-prompt route reads its text projection, and the alignment embeds the workspace's
    training images with it. Never imports torch.
    """
    from slics_core.encoders import parse_encoder_spec

    spec = parse_generator_spec(generator)
    names = [spec.preset] if spec.preset else []
    enc = parse_encoder_spec(conditioning_encoder or DEFAULT_CONDITIONING_ENCODER)
    if enc.kind == "preset":
        names.append(_weights.get_preset(enc.text).name)
    return names


def missing_presets(names, cache_dir=None) -> list[str]:
    """The presets of ``names`` whose weights are not on disk (no network)."""
    return [n for n in names if not _weights.is_available(n, cache_dir)]


def conditioning_text_projection(encoder_spec=DEFAULT_CONDITIONING_ENCODER, *, cache_dir=None) -> np.ndarray:
    """The CLIP text projection ``P`` of a conditioning encoder (``text_embed = h_EOS @ P``).

    A preset or checkpoint: only the ``text_projection`` tensor is read from its weights file; a
    ``local:DIR`` open_clip folder: from its weights file; any other encoder spec: from the loaded
    encoder.
    """
    from slics_core.encoders import create_encoder, parse_encoder_spec

    enc = parse_encoder_spec(encoder_spec)
    if enc.kind == "preset":
        return load_text_projection(enc.text, cache_dir=cache_dir)
    if enc.kind == "checkpoint":
        return load_text_projection(enc.path)
    if enc.kind == "local":
        files = [Path(enc.path) / f for f in _weights.OPEN_CLIP_FILES if (Path(enc.path) / f).is_file()]
        if not files:
            raise FileNotFoundError(f"open_clip folder {enc.path} holds no weights file "
                                    f"({' or '.join(_weights.OPEN_CLIP_FILES)})")
        return load_text_projection(files[0])
    return load_text_projection(create_encoder(enc, trusted=False))


def is_consistency_model(pipe) -> bool:
    """Whether the pipeline's U-Net is latent-consistency distilled (guidance scale as a U-Net input)."""
    return getattr(pipe.unet.config, "time_cond_proj_dim", None) is not None


def fast_scheduler(pipe):
    """DPM-Solver++ (2M, Karras sigmas) built from the pipeline's own noise schedule.

    A deterministic multistep ODE solver: no noise is drawn while sampling, so the starting
    latents (:func:`seeded_noise`) alone fix the image.
    """
    from diffusers import DPMSolverMultistepScheduler

    return DPMSolverMultistepScheduler.from_config(pipe.scheduler.config, algorithm_type="dpmsolver++",
                                                   solver_order=2, use_karras_sigmas=True)


def load_pipeline_generator(generator, conditioning_encoder=None, *, cache_dir=None, device=None, half=None):
    """The :class:`ImageToPromptSD` or :class:`UnCLIPGenerator` of a generator spec, on DPM-Solver++.

    Parameters
    ----------
    generator : str or GeneratorSpec
    conditioning_encoder : str, optional
        Encoder spec of the conditioning space (default :data:`DEFAULT_CONDITIONING_ENCODER`); the
        SD route reads its text projection.

    Raises
    ------
    slics_core.weights.MissingWeightsError
        Weights not on disk: one line naming the ``slics download ...`` command for all that is missing.
    """
    spec = parse_generator_spec(generator)
    enc = conditioning_encoder or DEFAULT_CONDITIONING_ENCODER
    need = required_presets(spec, enc) if spec.route == "sd" else ([spec.preset] if spec.preset else [])
    missing = missing_presets(need, cache_dir)
    if missing:
        what = ", ".join(_weights.get_preset(n).description for n in missing)
        raise _weights.MissingWeightsError(
            f"generator {spec.text!r} needs weights not on this machine ({what}); fetch them with "
            f"`slics download {' '.join(missing)}`")
    model = spec.path or spec.preset
    if spec.route == "sd":
        projection = conditioning_text_projection(enc, cache_dir=cache_dir)
        gen = ImageToPromptSD.from_pretrained(model, text_projection=projection, cache_dir=cache_dir, device=device,
                                              half=half)
    else:
        gen = UnCLIPGenerator.from_pretrained(model, cache_dir=cache_dir, device=device, half=half)
    if not is_consistency_model(gen.pipe):  # an LCM keeps its own LCMScheduler
        gen.pipe.scheduler = fast_scheduler(gen.pipe)
    gen.spec = spec
    return gen


# --------------------------------------------------------------- interpolation
def interpolate_atoms(b1, b2, alphas: Sequence[float] = (0.25, 0.5, 0.75, 1.0)) -> np.ndarray:
    """Rows ``a*b1 + (1-a)*b2`` for each ``a`` in ``alphas`` (Fig. 3 of the paper).

    Returns
    -------
    ndarray of shape (len(alphas), d)
    """
    b1 = np.asarray(b1, dtype=np.float64)
    b2 = np.asarray(b2, dtype=np.float64)
    if b1.ndim != 1 or b1.shape != b2.shape:
        raise ValueError(f"b1 and b2 must be 1-D vectors of the same length, got {b1.shape} and {b2.shape}")
    if not (np.all(np.isfinite(b1)) and np.all(np.isfinite(b2))):
        raise ValueError("atoms contain NaN or infinite values")
    a = np.asarray(alphas, dtype=np.float64).ravel()
    if a.size == 0 or not np.all(np.isfinite(a)):
        raise ValueError("alphas must be a non-empty list of finite numbers")
    return a[:, None] * b1[None, :] + (1.0 - a[:, None]) * b2[None, :]


def concept_atoms(model, concept: int) -> np.ndarray:
    """Atoms ``(k, d)`` of concept ``concept`` of a fitted SLiCS model."""
    if not hasattr(model, "atoms_") or not hasattr(model, "groups_"):
        raise ValueError("model must be a fitted SLiCS model (with atoms_ and groups_)")
    groups = np.asarray(model.groups_)
    if isinstance(concept, bool) or not isinstance(concept, (int, np.integer)) or not 0 <= concept <= groups.max():
        raise ValueError(f"concept must be an integer in [0, {int(groups.max())}], got {concept!r}")
    return np.asarray(model.atoms_)[groups == concept]
