"""Train an emoji CLIP-style encoder contrastively on scenes and captions.

Usage (writes ``assets/models/emoji-<size>/``)::

    nice -n 10 python -m slics_core.emoji.train_clip --size small
    nice -n 10 python -m slics_core.emoji.train_clip --size large

Training scenes are ``make_scenes(n_train, seed=TRAIN_SEED)``; they never
overlap the evaluation/workspace scenes (other seeds). Each step pairs a batch
of scenes with one caption variant per scene: the scene caption (categories
and supercategories), categories only, or supercategories only, so both kinds
of word are aligned with the image. Loss: open_clip's symmetric ``ClipLoss``.
Deterministic for a given seed and thread count.
"""
from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np

from slics_core.emoji.catalog import CATEGORY_SUPER
from slics_core.emoji.models import (
    EMOJI_CLIP_CONFIGS,
    create_emoji_clip,
    encode_images,
    images_to_tensor,
    save_emoji_clip,
    zero_shot_scores,
)
from slics_core.emoji.scenes import make_caption, make_scenes

TRAIN_SEED = 1001
HELDOUT_SEED = 2002  # used only for the progress metric printed during training


def caption_variants(objects, rng: np.random.Generator) -> list[str]:
    """Three captions of one scene: full, categories only, supercategories only."""
    full = make_caption(objects, rng)
    cats = list(dict.fromkeys(objects))
    cats = [cats[i] for i in rng.permutation(len(cats))]
    supers = list(dict.fromkeys(CATEGORY_SUPER[c] for c in cats))

    def join(words):
        return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]

    return [full, "a picture of " + join(cats), "a picture of " + join(supers)]


def precision_at_2(scores: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    """(precision of top-min(2, #true) concepts, precision of top-2 concepts)."""
    order = np.argsort(-scores, axis=1)
    n_true = labels.sum(1)
    hits_k, total_k, hits2 = 0, 0, 0
    for i in range(len(scores)):
        k = int(min(2, n_true[i]))
        hits_k += int(labels[i, order[i, :k]].sum())
        total_k += k
        hits2 += int(labels[i, order[i, :2]].sum())
    return hits_k / max(total_k, 1), hits2 / (2 * max(len(scores), 1))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Train an emoji CLIP-style encoder.")
    ap.add_argument("--size", choices=sorted(EMOJI_CLIP_CONFIGS), default="small")
    ap.add_argument("--n-train", type=int, default=24000)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--out", default=None, help="models root (default assets/models)")
    ap.add_argument("--init", default=None,
                    help="models root to continue training from (its emoji-<size> weights)")
    args = ap.parse_args(argv)

    import torch
    from open_clip.loss import ClipLoss
    import open_clip

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    t0 = time.time()
    train = make_scenes(args.n_train, seed=TRAIN_SEED + 100 * args.seed)  # seed 0 -> 1001
    held = make_scenes(500, seed=HELDOUT_SEED)
    print(f"scenes ready in {time.time() - t0:.0f}s", flush=True)

    tokenizer = open_clip.get_tokenizer("ViT-B-32", context_length=EMOJI_CLIP_CONFIGS[args.size]["text_cfg"]["context_length"])
    rng = np.random.default_rng(args.seed)
    variants = [caption_variants(o, rng) for o in train.objects]
    flat = [v for vs in variants for v in vs]
    cache: dict[str, torch.Tensor] = {}
    toks = torch.empty((len(flat), tokenizer.context_length), dtype=torch.long)
    for i, s in enumerate(flat):
        if s not in cache:
            cache[s] = tokenizer([s])[0]
        toks[i] = cache[s]
    toks = toks.view(len(train), 3, -1)
    print(f"tokenised {len(flat)} captions ({len(cache)} distinct) in {time.time() - t0:.0f}s", flush=True)

    model = create_emoji_clip(args.size, seed=args.seed)
    previous = []
    if args.init:
        from slics_core.emoji.models import load_emoji_clip, model_dir

        model.load_state_dict(load_emoji_clip(args.size, args.init)[0].state_dict())
        cfg = json.loads((model_dir(args.size, args.init) / "open_clip_config.json").read_text())
        previous = cfg.get("training", {}).get("runs", []) + [
            {k: v for k, v in cfg.get("training", {}).items() if k != "runs"}]
        print(f"continuing from {args.init}", flush=True)
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"{args.size}: {n_params / 1e6:.2f}M parameters", flush=True)
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "embedding" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.ndim >= 2 and "embedding" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05},
                             {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, betas=(0.9, 0.98))
    warm = max(1, args.steps // 20)

    def lr_at(step):
        if step < warm:
            return args.lr * (step + 1) / warm
        return 0.5 * args.lr * (1 + math.cos(math.pi * (step - warm) / max(1, args.steps - warm)))

    loss_fn = ClipLoss()
    images_all = images_to_tensor(train.images)
    history = []
    for step in range(args.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        idx = torch.from_numpy(rng.choice(len(train), size=args.batch_size, replace=False))
        which = torch.from_numpy(rng.integers(0, 3, size=args.batch_size))
        img = images_all[idx]
        txt = toks[idx, which]
        img_f, txt_f, scale = model(img, txt)
        loss = loss_fn(img_f, txt_f, scale)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        with torch.no_grad():
            model.logit_scale.clamp_(0, math.log(100))
        if (step + 1) % args.eval_every == 0 or step + 1 == args.steps:
            model.eval()
            emb = encode_images(model, held.images)
            p_k, p_2 = precision_at_2(zero_shot_scores(model, tokenizer, emb), held.general)
            model.train()
            history.append({"step": step + 1, "loss": round(float(loss.detach()), 4),
                            "zero_shot_p_at_2": round(p_k, 4), "zero_shot_p_at_2_strict": round(p_2, 4)})
            print(f"step {step + 1} loss {float(loss.detach()):.3f} zs@2 {p_k:.3f} (strict {p_2:.3f}) "
                  f"{time.time() - t0:.0f}s", flush=True)
    model.eval()
    metrics = {"seed": args.seed, "steps": args.steps, "batch_size": args.batch_size, "lr": args.lr,
               "n_train": args.n_train, "train_seed": TRAIN_SEED + 100 * args.seed, "heldout_seed": HELDOUT_SEED,
               "parameters": n_params, "seconds": round(time.time() - t0), "history": history,
               "init": args.init, "runs": previous}
    out = save_emoji_clip(model, args.size, args.out, metrics)
    print(json.dumps({k: v for k, v in metrics.items() if k not in ("history", "runs")}))
    print(f"saved to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
