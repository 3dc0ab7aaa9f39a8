"""A tiny conditional diffusion model for the emoji world (compared with the decoder).

diffusers building blocks: a ``UNet2DModel`` (32x32, no attention) whose
timestep embedding is added to a linear projection of the conditioning
embedding (``class_embed_type="identity"``), trained with a ``DDPMScheduler``
(epsilon prediction, 1000 steps) and sampled with a ``DDIMScheduler`` and
classifier-free guidance (the condition is dropped for 10% of training
samples). Conditioning: the large encoder's centred embedding, exactly as
:class:`slics_core.emoji.generator.EmojiGenerator`, so both plug into the same
pipeline and :func:`slics_core.emoji.report.generation_concept_accuracy`.

Training (writes ``<out>/emoji-diffusion``)::

    nice -n 10 python -m slics_core.emoji.diffusion --steps 1500 --out /tmp/emoji_diffusion

The comparison with the decoder is in docs/emoji_world.md.
"""
from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np

from slics_core.emoji.catalog import MODELS_DIR
from slics_core.emoji.weight_folders import load_state, read_weights, write_weights

__all__ = ["DIFFUSION_CONFIG", "build_unet", "EmojiDiffusionGenerator", "diffusion_dir", "main"]

DIFFUSION_CONFIG = {
    "embed_dim": 96,
    "sample_size": 32,
    "block_out_channels": [32, 64, 64],
    "layers_per_block": 1,
    "norm_num_groups": 16,
    "num_train_timesteps": 1000,
    "beta_schedule": "squaredcos_cap_v2",
    "image_size": 64,
}
WEIGHTS_NAME = "unet.safetensors"


def diffusion_dir(root=None) -> Path:
    return Path(root or MODELS_DIR) / "emoji-diffusion"


def build_unet(config: dict | None = None):
    """The conditional UNet (random weights): ``net(x_t, t, cond) -> predicted noise``."""
    import torch
    from diffusers import UNet2DModel

    cfg = dict(DIFFUSION_CONFIG, **(config or {}))
    n = len(cfg["block_out_channels"])

    class CondUNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.cfg = cfg
            self.unet = UNet2DModel(
                sample_size=cfg["sample_size"], in_channels=3, out_channels=3,
                down_block_types=("DownBlock2D",) * n, up_block_types=("UpBlock2D",) * n,
                block_out_channels=tuple(cfg["block_out_channels"]), layers_per_block=cfg["layers_per_block"],
                norm_num_groups=cfg["norm_num_groups"], add_attention=False, class_embed_type="identity")
            self.proj = torch.nn.Linear(cfg["embed_dim"], cfg["block_out_channels"][0] * 4)

        def forward(self, x, t, cond):
            return self.unet(x, t, class_labels=self.proj(cond)).sample

    return CondUNet()


def _schedulers(cfg):
    from diffusers import DDIMScheduler, DDPMScheduler

    kw = dict(num_train_timesteps=cfg["num_train_timesteps"], beta_schedule=cfg["beta_schedule"],
              prediction_type="epsilon", clip_sample=True)
    return DDPMScheduler(**kw), DDIMScheduler(**kw)


class EmojiDiffusionGenerator:
    """Trained conditional UNet + the centring mean of its conditioning space.

    Same interface as :class:`slics_core.emoji.generator.EmojiGenerator`
    (``condition``, ``generate``, ``dim``), but stochastic: ``seed`` fixes the
    starting noise of every row, ``steps`` the number of DDIM steps.
    """

    deterministic = False

    def __init__(self, net, mean: np.ndarray, config: dict, guidance: float = 2.0, default_steps: int = 20):
        self.net = net.eval()
        self.mean = np.asarray(mean, dtype=np.float32)
        self.config = dict(DIFFUSION_CONFIG, **config)
        self.dim = int(self.config["embed_dim"])
        self.guidance = float(guidance)
        self.default_steps = int(default_steps)

    @classmethod
    def load(cls, root=None) -> "EmojiDiffusionGenerator":
        folder = diffusion_dir(root)
        meta, state = read_weights(folder, WEIGHTS_NAME, "emoji diffusion model",
                                   "python -m slics_core.emoji.diffusion")
        net = load_state(build_unet(meta["config"]), state, folder, "emoji diffusion")
        return cls(net, np.asarray(meta["mean"], np.float32), meta["config"], meta.get("guidance", 2.0))

    def save(self, root=None, metrics: dict | None = None) -> Path:
        meta = {"config": self.config, "mean": [float(v) for v in self.mean], "guidance": self.guidance,
                "training": metrics or {}}
        return write_weights(diffusion_dir(root), WEIGHTS_NAME, self.net, meta)

    def condition(self, raw_embeddings: np.ndarray) -> np.ndarray:
        """Raw large-encoder image embeddings -> centred, unit conditioning vectors."""
        from slics_core.emoji.generator import EmojiGenerator

        return EmojiGenerator.condition(self, raw_embeddings)

    def generate(self, embeddings: np.ndarray, *, seed: int = 0, steps: int | None = None,
                 batch_size: int = 64) -> np.ndarray:
        """Images (n, 64, 64, 3) uint8; row ``i`` starts from the noise of ``seed + i``.

        ``steps`` DDIM steps (default 20); classifier-free guidance ``self.guidance``.
        """
        import torch

        from slics_core.emoji.generator import unit_condition_rows
        from slics_core.generators import seeded_noise

        E = unit_condition_rows(embeddings, self.dim)
        steps = self.default_steps if steps is None else int(steps)
        if steps < 1 or int(batch_size) < 1:
            raise ValueError(f"steps and batch_size must be >= 1, got {steps}, {batch_size}")
        s = self.config["sample_size"]
        _, ddim = _schedulers(self.config)
        out = []
        with torch.no_grad():
            for b in range(0, len(E), int(batch_size)):
                c = torch.from_numpy(E[b:b + int(batch_size)])
                # float32 on a CPU generator per row, whatever the device (one rule for every generator)
                (x,), _ = seeded_noise([int(seed) + b + i for i in range(len(c))], [(3, s, s)])
                ddim.set_timesteps(steps)
                for t in ddim.timesteps:
                    tt = torch.full((len(c),), int(t), dtype=torch.long)
                    eps_c = self.net(x, tt, c)
                    if self.guidance != 1.0:
                        eps_u = self.net(x, tt, torch.zeros_like(c))
                        eps = eps_u + self.guidance * (eps_c - eps_u)
                    else:
                        eps = eps_c
                    x = ddim.step(eps, t, x).prev_sample
                size = self.config["image_size"]
                y = torch.nn.functional.interpolate(x.clamp(-1, 1), size=(size, size), mode="bilinear",
                                                    align_corners=False)
                out.append(((y.permute(0, 2, 3, 1).numpy() + 1) * 127.5).round().clip(0, 255).astype(np.uint8))
        return np.concatenate(out) if out else np.zeros((0, 64, 64, 3), np.uint8)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Train the emoji conditional diffusion model (comparison).")
    ap.add_argument("--n-train", type=int, default=16000)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--p-uncond", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-eval", type=int, default=300, help="held-out scenes for the printed check")
    ap.add_argument("--max-minutes", type=float, default=None, help="stop early after this wall time")
    ap.add_argument("--out", default=None, help="models root to write emoji-diffusion into")
    ap.add_argument("--encoders", default=None, help="models root holding emoji-large (default assets/models)")
    args = ap.parse_args(argv)

    import torch

    from slics_core.emoji.generator import concept_hit_rate
    from slics_core.emoji.models import encode_images, load_emoji_clip
    from slics_core.emoji.scenes import make_scenes
    from slics_core.emoji.train_clip import TRAIN_SEED

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    t0 = time.time()
    enc, _, tok = load_emoji_clip("large", args.encoders)
    scenes = make_scenes(args.n_train, seed=TRAIN_SEED + 7)
    raw = encode_images(enc, scenes.images)
    cfg = dict(DIFFUSION_CONFIG, embed_dim=int(raw.shape[1]))
    gen = EmojiDiffusionGenerator(build_unet(cfg), raw.mean(0), cfg)
    cond = torch.from_numpy(gen.condition(raw))
    s = cfg["sample_size"]
    imgs = torch.from_numpy(scenes.images).permute(0, 3, 1, 2).float() / 127.5 - 1
    imgs = torch.nn.functional.interpolate(imgs, size=(s, s), mode="area")
    ddpm, _ = _schedulers(cfg)
    net = gen.net.train()
    opt = torch.optim.AdamW(net.parameters(), lr=args.lr, weight_decay=0.0)
    rng = np.random.default_rng(args.seed)
    history = []
    print(f"data ready {time.time() - t0:.0f}s; {sum(p.numel() for p in net.parameters()) / 1e6:.2f}M params",
          flush=True)
    steps_done = 0
    for step in range(args.steps):
        lr = args.lr * min(1.0, (step + 1) / 50) * 0.5 * (1 + math.cos(math.pi * step / args.steps))
        for g in opt.param_groups:
            g["lr"] = lr
        idx = torch.from_numpy(rng.choice(len(imgs), size=args.batch_size, replace=False))
        x0, c = imgs[idx], cond[idx].clone()
        c[torch.from_numpy(rng.random(args.batch_size) < args.p_uncond)] = 0
        noise = torch.randn_like(x0)
        t = torch.randint(0, cfg["num_train_timesteps"], (args.batch_size,))
        loss = torch.mean((net(ddpm.add_noise(x0, noise, t), t, c) - noise) ** 2)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        steps_done = step + 1
        if steps_done % 100 == 0 or steps_done == args.steps:
            history.append({"step": steps_done, "loss": round(float(loss.detach()), 4)})
            print(f"step {steps_done} loss {float(loss.detach()):.4f} {time.time() - t0:.0f}s", flush=True)
        if args.max_minutes and time.time() - t0 > 60 * args.max_minutes:
            print(f"stopping at step {steps_done} (--max-minutes)", flush=True)
            break
    net.eval()
    train_seconds = time.time() - t0
    held = make_scenes(args.n_eval, seed=2002)
    t1 = time.time()
    gen_imgs = gen.generate(gen.condition(encode_images(enc, held.images)), seed=0)
    sample_seconds = time.time() - t1
    hit = concept_hit_rate(enc, tok, gen_imgs, held.general)
    metrics = {"seed": args.seed, "steps": steps_done, "batch_size": args.batch_size, "lr": args.lr,
               "n_train": args.n_train, "heldout_top2_hit_rate": round(hit, 4),
               "train_seconds": round(train_seconds), "sample_seconds_per_image": round(sample_seconds / max(1, args.n_eval), 4),
               "history": history}
    out = gen.save(args.out, metrics)
    print(json.dumps({k: v for k, v in metrics.items() if k != "history"}))
    print(f"saved to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
