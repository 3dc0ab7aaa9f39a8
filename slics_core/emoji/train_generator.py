"""Train the emoji generator (decoder conditioned on the large encoder's embedding).

Usage (needs ``assets/models/emoji-large``; writes ``assets/models/emoji-generator``)::

    nice -n 10 python -m slics_core.emoji.train_generator

Training pairs (``--data single``, default): single-object, centred renders
(:func:`slics_core.emoji.scenes.make_single_object_scenes`: one sprite at 60-75 %
of the frame on a plain light background, mild flip/rotation/colour jitter) as
targets, each conditioned on the large encoder's centred embedding of that same
render; a ``--scene-fraction`` of every batch can be multi-object scenes
(:func:`~slics_core.emoji.scenes.make_scenes`) instead. The centring mean is
that of the large embeddings of ``--n-mean`` training scenes, the space the SLiCS
pipeline works in. ``--data scenes`` trains on scenes only (the earlier model,
whose pixel-MSE optimum is a mean grey picture).

Loss: pixel MSE to the target + ``--consistency`` * (1 - cos(E_large(G(c)), x)),
with ``x`` the target's large embedding and ``c`` its centred version
(optionally perturbed by ``--cond-noise`` Gaussian noise and re-normalised).
Deterministic for a given seed and thread count.
"""
from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np

from slics_core.emoji.generator import GENERATOR_CONFIG, EmojiGenerator, build_decoder, concept_hit_rate
from slics_core.emoji.models import PREPROCESS_CFG, encode_images, load_emoji_clip
from slics_core.emoji.scenes import make_scenes, make_single_object_scenes
from slics_core.emoji.train_clip import TRAIN_SEED

__all__ = ["train_decoder", "main"]


def train_decoder(dec, cond, targets, steps, *, batch_size=64, lr=2e-3, encoder=None, target_raw=None,
                  consistency=0.0, consistency_blur=0.0, cond_noise=0.0, groups=None, group_weights=None,
                  seed=0, log_every=100, log=None):
    """Train ``dec`` in place: pixel MSE (+ consistency through ``encoder``); returns the loss history.

    Parameters
    ----------
    dec : torch.nn.Module
        Decoder mapping (b, dim) conditioning rows to images (b, 3, H, W) in [-1, 1].
    cond : tensor (n, dim)
        Conditioning rows (unit).
    targets : tensor (n, 3, H, W)
        Target images in [-1, 1].
    steps, batch_size, lr : int, int, float
        AdamW with 50 warm-up steps and a cosine schedule.
    encoder, target_raw, consistency : optional
        Frozen open_clip model, the targets' unit embeddings (n, dim) and the weight of
        ``1 - cos(encoder(G(c)), target_raw)``; skipped when ``consistency`` is 0.
    consistency_blur : float
        Std (pixels) of a Gaussian blur applied to the generated images before the encoder
        sees them in the consistency term, so the decoder cannot satisfy the encoder with
        pixel-level textures (0: none).
    cond_noise : float
        Std of Gaussian noise added to the conditioning rows (then re-normalised).
    groups, group_weights : optional
        Row group ids (n,) and the fraction of every batch drawn from each group.
    seed : int
        Seeds batch sampling and the conditioning noise.

    Returns
    -------
    list of dict
        ``{"step", "mse", "consistency"}`` every ``log_every`` steps and at the end.
    """
    import torch

    if consistency and (encoder is None or target_raw is None):
        raise ValueError("a consistency weight needs the encoder and the targets' embeddings")
    n = len(cond)
    if len(targets) != n:
        raise ValueError(f"{n} conditioning rows but {len(targets)} targets")
    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(int(seed))
    if groups is not None:
        groups = np.asarray(groups)
        pools = [np.flatnonzero(groups == g) for g in range(len(group_weights))]
        counts = np.floor(np.asarray(group_weights, float) * batch_size).astype(int)
        counts[0] += batch_size - counts.sum()
    cm = torch.tensor(PREPROCESS_CFG["mean"]).view(1, 3, 1, 1)
    cs = torch.tensor(PREPROCESS_CFG["std"]).view(1, 3, 1, 1)
    kernel = None
    if consistency_blur > 0:
        r = max(1, int(math.ceil(2.5 * consistency_blur)))
        k1 = torch.exp(-torch.arange(-r, r + 1, dtype=torch.float32) ** 2 / (2 * consistency_blur ** 2))
        k1 = k1 / k1.sum()
        kernel = (k1[:, None] * k1[None, :]).expand(3, 1, 2 * r + 1, 2 * r + 1).contiguous()
    opt = torch.optim.AdamW(dec.parameters(), lr=lr, weight_decay=0.0)
    dec.train()
    history = []
    for step in range(steps):
        cur = lr * min(1.0, (step + 1) / 50) * 0.5 * (1 + math.cos(math.pi * step / steps))
        for g in opt.param_groups:
            g["lr"] = cur
        if groups is None:
            idx = rng.choice(n, size=min(batch_size, n), replace=False)
        else:
            idx = np.concatenate([rng.choice(p, size=min(k, len(p)), replace=False)
                                  for p, k in zip(pools, counts) if k > 0])
        idx = torch.from_numpy(idx)
        c = cond[idx]
        if cond_noise:
            c = torch.nn.functional.normalize(c + cond_noise * torch.randn(c.shape, generator=gen), dim=1)
        y = dec(c)
        mse = torch.mean((y - targets[idx]) ** 2)
        loss = mse
        cons = torch.zeros(())
        if consistency:
            yb = y
            if kernel is not None:
                pad = kernel.shape[-1] // 2
                yb = torch.nn.functional.conv2d(torch.nn.functional.pad(y, (pad,) * 4, mode="replicate"),
                                                kernel, groups=3)
            e = encoder.encode_image(((yb + 1) / 2 - cm) / cs)
            cons = 1 - torch.nn.functional.cosine_similarity(e, target_raw[idx]).mean()
            loss = mse + consistency * cons
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if (step + 1) % log_every == 0 or step + 1 == steps:
            history.append({"step": step + 1, "mse": round(float(mse.detach()), 4),
                            "consistency": round(float(cons.detach()), 4)})
            if log:
                log(history[-1])
    dec.eval()
    return history


def _to_tensor(images):
    import torch

    return torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2).float() / 127.5 - 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Train the emoji generator.")
    ap.add_argument("--data", choices=["single", "scenes"], default="single",
                    help="targets: single-object centred renders (default) or multi-object scenes")
    ap.add_argument("--n-train", type=int, default=12000, help="training targets of the main kind")
    ap.add_argument("--scene-fraction", type=float, default=0.0,
                    help="with --data single: fraction of each batch drawn from multi-object scenes")
    ap.add_argument("--n-mean", type=int, default=4000, help="training scenes whose mean centres the space")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--consistency", type=float, default=0.0)
    ap.add_argument("--consistency-blur", type=float, default=0.0,
                    help="Gaussian blur std (px) of generated images before the consistency encoder")
    ap.add_argument("--cond-noise", type=float, default=0.0)
    ap.add_argument("--blocks", default=None,
                    help="decoder block_out_channels, comma-separated (5 blocks: 64x64 output directly)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--models-root", default=None, help="where emoji-large is (default: assets/models)")
    ap.add_argument("--out", default=None, help="models root to write emoji-generator into")
    args = ap.parse_args(argv)
    if not 0 <= args.scene_fraction <= 1:
        raise SystemExit("--scene-fraction must be in [0, 1]")

    import torch

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    t0 = time.time()
    enc, _, tok = load_emoji_clip("large", args.models_root)
    for p in enc.parameters():
        p.requires_grad_(False)
    mean_scenes = make_scenes(args.n_mean, seed=TRAIN_SEED + 7)
    mean = encode_images(enc, mean_scenes.images).mean(0)
    cfg = dict(GENERATOR_CONFIG, embed_dim=int(mean.shape[0]))
    if args.blocks:
        cfg["block_out_channels"] = [int(v) for v in args.blocks.split(",")]
    gen = EmojiGenerator(build_decoder(cfg), mean, cfg)
    groups, weights = None, None
    if args.data == "scenes":
        images = make_scenes(args.n_train, seed=TRAIN_SEED + 7).images
    else:
        images = make_single_object_scenes(args.n_train, seed=TRAIN_SEED + 8).images
        if args.scene_fraction > 0:
            n_sc = max(args.batch_size, int(round(args.n_train * args.scene_fraction)))
            images = np.concatenate([images, mean_scenes.images[:n_sc]])
            groups = np.r_[np.zeros(args.n_train, int), np.ones(len(images) - args.n_train, int)]
            weights = [1 - args.scene_fraction, args.scene_fraction]
    raw = encode_images(enc, images)
    cond = torch.from_numpy(gen.condition(raw))
    print(f"data ready: {len(images)} targets, {time.time() - t0:.0f}s", flush=True)
    history = train_decoder(
        gen.decoder, cond, _to_tensor(images), args.steps, batch_size=args.batch_size, lr=args.lr,
        encoder=enc, target_raw=torch.from_numpy(raw), consistency=args.consistency,
        consistency_blur=args.consistency_blur,
        cond_noise=args.cond_noise, groups=groups, group_weights=weights, seed=args.seed,
        log=lambda h: print(f"step {h['step']} mse {h['mse']:.4f} cons {h['consistency']:.4f} "
                            f"{time.time() - t0:.0f}s", flush=True))
    # held-out checks: does the large encoder see the target's concepts in the generated image?
    held = make_scenes(300, seed=2002)
    hit = concept_hit_rate(enc, tok, gen.generate(gen.condition(encode_images(enc, held.images))), held.general)
    single = make_single_object_scenes(300, seed=2002)
    rec = gen.generate(gen.condition(encode_images(enc, single.images)))
    hit1 = concept_hit_rate(enc, tok, rec, single.general, top=1)
    metrics = {"data": args.data, "scene_fraction": args.scene_fraction, "seed": args.seed, "steps": args.steps,
               "batch_size": args.batch_size, "lr": args.lr, "consistency": args.consistency,
               "consistency_blur": args.consistency_blur, "cond_noise": args.cond_noise,
               "blocks": cfg["block_out_channels"], "n_train": args.n_train, "n_mean": args.n_mean,
               "threads": args.threads,
               "heldout_top2_hit_rate": round(hit, 4), "heldout_single_top1_hit_rate": round(hit1, 4),
               "seconds": round(time.time() - t0), "history": history}
    out = gen.save(args.out, metrics)
    print(json.dumps({k: v for k, v in metrics.items() if k != "history"}))
    print(f"saved to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
