"""Train the emoji generator (decoder conditioned on the large encoder's embedding).

Usage (needs ``assets/models/emoji-large``; writes ``assets/models/emoji-generator``)::

    nice -n 10 python -m slics_core.emoji.train_generator

Loss: pixel MSE to the scene + ``--consistency`` * (1 - cos(E_large(G(c)), x)),
with ``x`` the scene's large embedding and ``c`` its centred version.
Deterministic for a given seed and thread count.
"""
from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np

from slics_core.emoji.generator import GENERATOR_CONFIG, EmojiGenerator, build_decoder
from slics_core.emoji.models import PREPROCESS_CFG, encode_images, load_emoji_clip, zero_shot_scores
from slics_core.emoji.scenes import make_scenes
from slics_core.emoji.train_clip import TRAIN_SEED


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Train the emoji generator.")
    ap.add_argument("--n-train", type=int, default=16000)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--consistency", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    t0 = time.time()
    enc, _, tok = load_emoji_clip("large", args.out)
    for p in enc.parameters():
        p.requires_grad_(False)
    scenes = make_scenes(args.n_train, seed=TRAIN_SEED + 7)
    raw = encode_images(enc, scenes.images)  # unit rows
    mean = raw.mean(0)
    cfg = dict(GENERATOR_CONFIG, embed_dim=int(raw.shape[1]))
    gen = EmojiGenerator(build_decoder(cfg), mean, cfg)
    cond = torch.from_numpy(gen.condition(raw))
    target_raw = torch.from_numpy(raw)
    imgs = torch.from_numpy(scenes.images).permute(0, 3, 1, 2).float() / 127.5 - 1
    print(f"data ready {time.time() - t0:.0f}s", flush=True)
    dec = gen.decoder.train()
    opt = torch.optim.AdamW(dec.parameters(), lr=args.lr, weight_decay=0.0)
    cm = torch.tensor(PREPROCESS_CFG["mean"]).view(1, 3, 1, 1)
    cs = torch.tensor(PREPROCESS_CFG["std"]).view(1, 3, 1, 1)
    rng = np.random.default_rng(args.seed)
    history = []
    for step in range(args.steps):
        lr = args.lr * min(1.0, (step + 1) / 50) * 0.5 * (1 + math.cos(math.pi * step / args.steps))
        for g in opt.param_groups:
            g["lr"] = lr
        idx = torch.from_numpy(rng.choice(len(imgs), size=args.batch_size, replace=False))
        y = dec(cond[idx])
        mse = torch.mean((y - imgs[idx]) ** 2)
        e = enc.encode_image(((y + 1) / 2 - cm) / cs)
        cons = 1 - torch.nn.functional.cosine_similarity(e, target_raw[idx]).mean()
        loss = mse + args.consistency * cons
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if (step + 1) % 100 == 0 or step + 1 == args.steps:
            history.append({"step": step + 1, "mse": round(float(mse.detach()), 4),
                            "consistency": round(float(cons.detach()), 4)})
            print(f"step {step + 1} mse {float(mse.detach()):.4f} cons {float(cons.detach()):.4f} {time.time() - t0:.0f}s",
                  flush=True)
    dec.eval()
    # held-out check: does the large encoder see the scene's top concepts in the generated image?
    held = make_scenes(300, seed=2002)
    gen_imgs = gen.generate(gen.condition(encode_images(enc, held.images)))
    s = zero_shot_scores(enc, tok, encode_images(enc, gen_imgs))
    top = np.argsort(-s, axis=1)[:, :2]
    hit = float(np.mean([held.general[i, top[i]].max() for i in range(len(held))]))
    metrics = {"seed": args.seed, "steps": args.steps, "batch_size": args.batch_size, "lr": args.lr,
               "consistency": args.consistency, "n_train": args.n_train,
               "heldout_top2_hit_rate": round(hit, 4), "seconds": round(time.time() - t0), "history": history}
    out = gen.save(args.out, metrics)
    print(json.dumps({k: v for k, v in metrics.items() if k != "history"}))
    print(f"saved to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
