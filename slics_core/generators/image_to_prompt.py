"""The paper's image-to-prompt route (sec. 3.8): Stable Diffusion 1.x with an image embedding as the prompt.

:class:`ImageToPromptSD` drives Stable Diffusion 1.x, whose U-Net is conditioned on the per-token output
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

:func:`load_text_projection` reads ``P`` from a checkpoint, an array or an encoder.
"""
from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from slics_core import weights as _weights
from slics_core.extras import require
from slics_core.generators.pipeline import (
    PipelineGenerator,
    check_run_args,
    check_tokenizer,
    place_pipeline,
    quiet_dtype_warning,
    resolve_pipeline_dir,
    seeded_noise,
    step_callback,
)
from slics_core.rows import unit_rows
from slics_core.torch_device import device_dtype

#: The encoder whose space SD 1.x is conditioned in: CLIP ViT-L/14 (its text states; its text projection maps
#: an image embedding to a prompt token). Stable unCLIP small reads the same model's image embeddings.
CONDITIONING_ENCODER = "ViT-L-14/openai"

__all__ = ["ImageToPromptSD", "load_text_projection"]


def load_text_projection(source=CONDITIONING_ENCODER, *, cache_dir=None, allow_download: bool = False) -> np.ndarray:
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
        safe_open = require("safetensors").safe_open

        with safe_open(str(path), framework="pt") as fh:
            keys = [k for k in fh.keys() if k == "text_projection" or k.endswith(".text_projection")
                    or k.endswith("text_projection.weight")]
            if not keys:
                raise ValueError(f"{path} holds no text_projection tensor")
            t = fh.get_tensor(keys[0])
            key = keys[0]
    else:
        torch = require("torch")

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


class ImageToPromptSD(PipelineGenerator):
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
        torch = require("torch")

        self.device, self.dtype = device_dtype(device, half)
        self._call_lock = threading.Lock()
        check_tokenizer(getattr(pipe, "tokenizer", None), "the pipeline")
        self.pipe = place_pipeline(pipe, self.device, self.dtype)
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
    def from_pretrained(cls, model="sd-1.5", text_projection=CONDITIONING_ENCODER, *, cache_dir=None,
                        allow_download: bool = False, device=None, half=None, token_norm=None):
        """Load a Stable Diffusion 1.x pipeline from a preset, hub repo id or local folder.

        ``text_projection`` is loaded with :func:`load_text_projection`
        (default: read from the ViT-L/14 OpenAI checkpoint); pass ``None`` to
        give embeddings in the text encoder's output space.
        Missing weights raise :class:`~slics_core.weights.MissingWeightsError` at once.
        """
        folder, _ = resolve_pipeline_dir(model, cache_dir, allow_download)
        if isinstance(text_projection, (str, os.PathLike)):
            text_projection = load_text_projection(text_projection, cache_dir=cache_dir,
                                                   allow_download=allow_download)
        StableDiffusionPipeline = require("diffusers").StableDiffusionPipeline

        _, dtype = device_dtype(device, half)
        with quiet_dtype_warning():
            pipe = StableDiffusionPipeline.from_pretrained(
                folder, safety_checker=None, requires_safety_checker=False, feature_extractor=None,
                torch_dtype=dtype, local_files_only=True)
        return cls(pipe, text_projection=text_projection, token_norm=token_norm, device=device, half=half)

    def token_states(self, embeddings, alignment=None) -> np.ndarray:
        """Steps 1-3: rows of the joint space -> rescaled token states ``(n, width)``."""
        V = self._prepare(embeddings, alignment)
        Hs = V @ self._back if self._back is not None else V
        return unit_rows(Hs, name="mapped embeddings") * self.token_norm

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
        torch = require("torch")

        steps, guidance, batch_size = check_run_args(steps, guidance, batch_size)
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
                                callback_on_step_end=step_callback(progress, steps))
            return list(out.images)

        return self._run(call, len(pe), seed, seeds, batch_size)
