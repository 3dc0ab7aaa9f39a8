"""What both diffusers routes share: seeds, input checks, placing a pipeline, the sampler.

Seeds: image ``i`` of a call uses its own CPU ``torch.Generator`` seeded with
``seed + i`` (or ``seeds[i]``), so an image does not depend on the batch it was
generated in. On a CUDA machine the pipelines run in float16 on the GPU,
otherwise in float32 on the CPU (:func:`slics_core.torch_device.device_dtype`).
The random draws never depend on that choice (:func:`seeded_noise`): the
generator draws every random tensor the pipeline needs at the start (unCLIP's
image-embedding noise, then the starting latents, in the order and shapes
diffusers itself draws them) in *float32* on the CPU, and only then are they
cast to the pipeline's dtype and device and passed in (``latents=``; the
embedding noise through ``noise_image_embeddings(noise=...)``). Drawing them in
float16, as diffusers does when given only ``generator=``, gives a different
random sequence on some torch versions, so the same seed would give a different image
on a GPU than on a CPU. On the CPU in float32 the images are exactly those of
diffusers' own ``generator=`` path. The (advanced) generators are still passed,
for schedulers that draw noise during sampling (DDPM, ancestral samplers; the
default DDIM/PNDM schedulers draw none); those later draws follow diffusers.

Every pipeline samples with DPM-Solver++ (2M, Karras sigmas; :func:`fast_scheduler`)
unless its U-Net is latent-consistency distilled (:func:`is_consistency_model`).
"""
from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from slics_core import weights as _weights
from slics_core._validation import check_k
from slics_core.extras import require
from slics_core.rows import unit_rows

__all__ = ["PipelineGenerator", "seeded_noise", "is_consistency_model", "fast_scheduler", "check_rows",
           "image_seeds", "check_run_args", "quiet_dtype_warning", "place_pipeline", "check_tokenizer",
           "resolve_pipeline_dir", "step_callback"]


def check_rows(E, dim: int, name: str = "embeddings") -> np.ndarray:
    """``E`` as a finite float64 array of shape ``(n, dim)`` (one row alone is accepted), else a ValueError."""
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


def image_seeds(seed, seeds, n: int) -> list[int]:
    """One seed per image: ``seeds`` as given (one each) or ``seed, seed + 1, ...``."""
    if seeds is not None:
        seeds = [int(s) for s in seeds]
        if len(seeds) != n:
            raise ValueError(f"got {len(seeds)} seeds for {n} images")
        return seeds
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ValueError(f"seed must be an integer, got {seed!r}")
    return [int(seed) + i for i in range(n)]


def check_run_args(steps, guidance, batch_size):
    """``(steps, guidance, batch_size)`` checked: positive integers and a finite guidance >= 0."""
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    try:
        guidance = float(guidance)
    except (TypeError, ValueError):
        raise ValueError(f"guidance must be a number, got {guidance!r}") from None
    if not np.isfinite(guidance) or guidance < 0:
        raise ValueError(f"guidance must be a finite number >= 0, got {guidance}")
    return int(steps), guidance, check_k(batch_size, "batch_size")


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
    torch = require("torch")

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
def quiet_dtype_warning():
    """``torch_dtype`` works in every supported diffusers version; newer ones warn that it was renamed."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*torch_dtype.*deprecated", category=FutureWarning)
        yield


def place_pipeline(pipe, device, dtype):
    """Move a pipeline to ``device``/``dtype`` (cast only when needed) and silence its progress bar."""
    if pipe.dtype != dtype:
        pipe = pipe.to(dtype=dtype)
    pipe = pipe.to(device)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def check_tokenizer(tokenizer, source) -> None:
    """Refuse the broken 2-token tokenizer that an offline load of a missing repo can give."""
    # Offline, CLIPTokenizer.from_pretrained of a missing repo can silently give a 2-token tokenizer.
    if tokenizer is None or len(tokenizer) <= 2:
        raise ValueError(f"the tokenizer loaded from {source} is empty or broken ({len(tokenizer) if tokenizer else 0} "
                         "tokens); the model folder is incomplete")


def resolve_pipeline_dir(model, cache_dir, allow_download) -> tuple[Path, str]:
    """The folder of a diffusers pipeline (a folder, preset or hub repo id) and its id."""
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


class PipelineGenerator:
    """What :class:`~slics_core.generators.ImageToPromptSD` and :class:`~slics_core.generators.UnCLIPGenerator` share:
    rows checked and unit-normalised, the starting latents' shape, batches drawn one call at a time."""

    embedding_dim: int

    def _prepare(self, embeddings, alignment):
        if alignment is not None:
            embeddings = alignment.transform(np.atleast_2d(np.asarray(embeddings, dtype=np.float64)))
        return unit_rows(check_rows(embeddings, self.embedding_dim),
                         name="embeddings to draw (a concept that is not active has no component)")

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
        seed_list = image_seeds(seed, seeds, n)
        images = []
        with self._call_lock:  # a pipeline (its scheduler state, the noise hook) serves one call at a time
            for start in range(0, n, batch_size):
                stop = min(n, start + batch_size)
                images.extend(call(start, stop, seed_list[start:stop]))
        return images


def step_callback(progress, steps):
    """A ``callback_on_step_end`` calling ``progress(done, steps)`` (None when there is no ``progress``)."""
    if progress is None:
        return None

    def on_step_end(pipe, i, t, kwargs):
        progress(int(i) + 1, steps)
        return kwargs

    return on_step_end


def is_consistency_model(pipe) -> bool:
    """Whether the pipeline's U-Net is latent-consistency distilled (guidance scale as a U-Net input)."""
    return getattr(pipe.unet.config, "time_cond_proj_dim", None) is not None


def fast_scheduler(pipe):
    """DPM-Solver++ (2M, Karras sigmas) built from the pipeline's own noise schedule.

    A deterministic multistep ODE solver: no noise is drawn while sampling, so the starting
    latents (:func:`seeded_noise`) alone fix the image.
    """
    DPMSolverMultistepScheduler = require("diffusers").DPMSolverMultistepScheduler

    return DPMSolverMultistepScheduler.from_config(pipe.scheduler.config, algorithm_type="dpmsolver++",
                                                   solver_order=2, use_karras_sigmas=True)
