"""The emoji world's generator: large-encoder image embedding -> 64x64 image.

A small decoder built from diffusers' VAE ``Decoder`` (ResNet up-blocks with
group norm): a linear layer maps the conditioning embedding to a 4x4 latent
grid, the decoder up-samples it to 32x32 RGB, bilinearly enlarged to 64x64. It is conditioned on the
*centred* embedding space the SLiCS pipeline works in::

    c = normalize(normalize(x_large) - mean)

(``mean`` is stored with the weights), so an aligned component
``tilde v_j`` mapped into the large space can be fed as is.

Training targets (:mod:`slics_core.emoji.train_generator`): single-object,
centred renders (:func:`slics_core.emoji.scenes.make_single_object_scenes`), each
conditioned on the large encoder's centred embedding of that same render, so a
concept component decodes to one centred sprite of the category it encodes.
(Trained on whole multi-object scenes, whose positions and backgrounds the large
embedding barely encodes, the pixel-MSE optimum was a mean grey texture.)

Why a decoder and not a diffusion UNet: trained with a pixel loss plus a
consistency loss through the frozen large encoder (the generated image must
re-embed near its conditioning embedding), it is trained in minutes and samples
in one pass; a tiny conditional diffusion model
(:mod:`slics_core.emoji.diffusion`, diffusers UNet + DDPM/DDIM) trained for
twice the CPU time did not learn the conditioned concepts
(generation_concept_accuracy 0.24; docs/emoji_world.md).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from slics_core.emoji.catalog import MODELS_DIR
from slics_core.emoji.models import encode_images, zero_shot_scores
from slics_core.emoji.weight_folders import load_state, read_weights, write_weights

__all__ = ["GENERATOR_CONFIG", "build_decoder", "EmojiGenerator", "generator_dir", "unit_condition_rows",
           "concept_hit_rate"]

GENERATOR_CONFIG = {
    "embed_dim": 96,
    "latent_channels": 64,
    "block_out_channels": [32, 48, 64, 64],
    "layers_per_block": 1,
    "norm_num_groups": 16,
    "image_size": 64,
}
WEIGHTS_NAME = "decoder.safetensors"
#: :meth:`EmojiGenerator.generate` rounds the unit conditioning rows to this grid.
CONDITION_GRID = 1e-3

def generator_dir(root=None) -> Path:
    return Path(root or MODELS_DIR) / "emoji-generator"

def build_decoder(config: dict | None = None):
    """The decoder module (random weights) for ``config``."""
    import torch
    from diffusers.models.autoencoders.vae import Decoder

    cfg = dict(GENERATOR_CONFIG, **(config or {}))

    class EmojiDecoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.cfg = cfg
            self.fc = torch.nn.Linear(cfg["embed_dim"], cfg["latent_channels"] * 16)
            n = len(cfg["block_out_channels"])
            self.decoder = Decoder(
                in_channels=cfg["latent_channels"],
                out_channels=3,
                up_block_types=("UpDecoderBlock2D",) * n,
                block_out_channels=tuple(cfg["block_out_channels"]),
                layers_per_block=cfg["layers_per_block"],
                norm_num_groups=cfg["norm_num_groups"],
                mid_block_add_attention=False,
            )

        def forward(self, c):
            h = self.fc(c).view(-1, cfg["latent_channels"], 4, 4)
            y = self.decoder(h)  # (n, 3, 32, 32) with 4 blocks
            size = cfg["image_size"]
            if y.shape[-1] != size:
                y = torch.nn.functional.interpolate(y, size=(size, size), mode="bilinear", align_corners=False)
            return torch.tanh(y)  # in [-1, 1]

    return EmojiDecoder()

def unit_condition_rows(embeddings, dim: int) -> np.ndarray:
    """Conditioning rows checked (shape ``(n, dim)``, finite) and unit-normalised; zero rows stay zero."""
    E = np.asarray(embeddings, dtype=np.float32)
    if E.ndim == 1:
        E = E[None]
    if E.ndim != 2 or E.shape[1] != dim:
        raise ValueError(f"embeddings must have shape (n, {dim}), got {E.shape}")
    if not np.all(np.isfinite(E)):
        raise ValueError("embeddings contain NaN or inf")
    norms = np.linalg.norm(E, axis=1, keepdims=True)
    return np.where(norms > 1e-12, E / np.maximum(norms, 1e-12), 0.0).astype(np.float32)

def concept_hit_rate(encoder, tokenizer, images: np.ndarray, labels: np.ndarray, top: int = 2) -> float:
    """Fraction of ``images`` whose ``top`` zero-shot supercategories (``encoder``) include a true one.

    The held-out check the generator training scripts print (``labels``: (n, 12) general labels).
    """

    order = np.argsort(-zero_shot_scores(encoder, tokenizer, encode_images(encoder, images)), axis=1)[:, :top]
    return float(np.mean(np.take_along_axis(np.asarray(labels), order, axis=1).max(axis=1)))

class EmojiGenerator:
    """Trained decoder + the centring mean of its conditioning space.

    Use :meth:`load` for the shipped weights; :meth:`generate` maps embeddings
    (rows, in the centred large space) to uint8 images.
    """

    def __init__(self, decoder, mean: np.ndarray, config: dict):
        self.decoder = decoder.eval()
        self.mean = np.asarray(mean, dtype=np.float32)
        self.config = config
        self.dim = int(config["embed_dim"])

    @classmethod
    def load(cls, root=None) -> "EmojiGenerator":
        folder = generator_dir(root)
        meta, state = read_weights(folder, WEIGHTS_NAME, "emoji generator",
                                   "python -m slics_core.emoji.train_generator")
        dec = load_state(build_decoder(meta["config"]), state, folder, "emoji generator")
        return cls(dec, np.asarray(meta["mean"], dtype=np.float32), dict(GENERATOR_CONFIG, **meta["config"]))

    def save(self, root=None, metrics: dict | None = None) -> Path:
        meta = {"config": self.config, "mean": [float(v) for v in self.mean], "training": metrics or {}}
        return write_weights(generator_dir(root), WEIGHTS_NAME, self.decoder, meta)

    def condition(self, raw_embeddings: np.ndarray) -> np.ndarray:
        """Raw large-encoder image embeddings -> centred, unit conditioning vectors."""
        x = np.asarray(raw_embeddings, dtype=np.float32)
        x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
        x = x - self.mean
        return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)

    #: One deterministic pass per image: ``seed`` and ``steps`` of :meth:`generate` have no effect.
    deterministic = True

    def generate(self, embeddings: np.ndarray, *, seed: int = 0, steps: int | None = None,
                 batch_size: int = 128) -> np.ndarray:
        """Images (n, 64, 64, 3) uint8 from centred-space embeddings (n, dim); rows are re-normalised.

        Parameters
        ----------
        embeddings : array of shape (n, dim) or (dim,)
            Conditioning vectors in the centred large space (see :meth:`condition`);
            rows are re-normalised and rounded to a grid of :data:`CONDITION_GRID`.
        seed, steps : int, optional
            Accepted for the uniform generator signature (a diffusion sampler
            uses them); this decoder is deterministic and one-pass, so they
            have no effect.
        batch_size : int
            Rows per decoder pass.
        """
        import torch

        if int(batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size!r}")
        batch_size = int(batch_size)

        E = unit_condition_rows(embeddings, self.dim)
        # snap to a 1e-3 grid (far below a visible change): float-rounding differences of the same
        # embedding (e.g. one picture embedded alone or in a batch) then give the same pixels
        E = (np.round(E / CONDITION_GRID) * CONDITION_GRID).astype(np.float32)
        out = []
        with torch.no_grad():
            for i in range(0, len(E), batch_size):
                y = self.decoder(torch.from_numpy(E[i:i + batch_size]))
                out.append(((y.permute(0, 2, 3, 1).numpy() + 1) * 127.5).round().clip(0, 255).astype(np.uint8))
        return np.concatenate(out) if out else np.zeros((0, 64, 64, 3), np.uint8)
