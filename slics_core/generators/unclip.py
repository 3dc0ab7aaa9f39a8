"""Stable unCLIP (``StableUnCLIPImg2ImgPipeline``), conditioned on a CLIP image embedding directly.

:class:`UnCLIPGenerator` passes rows as ``image_embeds`` (noised by ``noise_level``). Rows are
rescaled to ``expected_norm``, the root-mean-square norm implied by the pipeline's own embedding
statistics (``image_normalizer``: ``sqrt(sum(mean**2 + std**2))``). The ``sd-2.1-unclip-small``
preset takes ViT-L/14 image embeddings.
"""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence

import numpy as np

from slics_core.extras import require
from slics_core.generators.pipeline import (
    PipelineGenerator,
    check_run_args,
    check_tokenizer,
    place_pipeline,
    quiet_dtype_warning,
    resolve_pipeline_dir,
    seeded_noise,
)
from slics_core.torch_device import device_dtype

__all__ = ["UnCLIPGenerator"]


class UnCLIPGenerator(PipelineGenerator):
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
        self.device, self.dtype = device_dtype(device, half)
        self._call_lock = threading.Lock()
        check_tokenizer(getattr(pipe, "tokenizer", None), "the pipeline")
        self.pipe = place_pipeline(pipe, self.device, self.dtype)
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
        folder, _ = resolve_pipeline_dir(model, cache_dir, allow_download)
        StableUnCLIPImg2ImgPipeline = require("diffusers").StableUnCLIPImg2ImgPipeline

        _, dtype = device_dtype(device, half)
        with quiet_dtype_warning():
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
        torch = require("torch")

        steps, guidance, batch_size = check_run_args(steps, guidance, batch_size)
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
