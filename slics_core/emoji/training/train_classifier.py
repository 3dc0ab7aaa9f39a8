"""Train the emoji judge (:mod:`slics_core.emoji.judge`) and write ``assets/models/emoji-judge``.

Deterministic for a seed and thread count::

    nice -n 10 python -m slics_core.emoji.training.train_classifier

Held-out check (seed ``seed + 1000``, never trained on): category and
supercategory accuracy on clean object renders, the no-object class's recall,
the fraction of clean objects wrongly judged "no object", and, on clean
multi-object scenes (:func:`slics_core.emoji.scenes.make_scenes`), how often
the judge names an object present in the scene; all recorded in the
weights' ``config.json``.
"""
from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np

from slics_core.emoji.catalog import CATEGORIES, CATEGORY_SUPER
from slics_core.emoji.judge import (
    CLASSES,
    NO_OBJECT,
    EmojiJudge,
    build_judge,
    judge_rates,
    judge_training_set,
    no_object_images,
    object_images,
)
from slics_core.emoji.scenes import make_scenes
from slics_core.extras import require

__all__ = ["train_judge", "heldout_metrics", "main"]


def train_judge(net, images: np.ndarray, labels: np.ndarray, *, epochs: int = 6, batch_size: int = 128,
                lr: float = 3e-3, seed: int = 0, log=None) -> list:
    """Train ``net`` in place (AdamW, cosine schedule, random horizontal flips); returns the loss history."""
    torch = require("torch")

    g = torch.Generator().manual_seed(int(seed))
    X = torch.from_numpy(images).permute(0, 3, 1, 2).float() / 255.0
    size = int(net.cfg["input_size"])
    X = torch.nn.functional.interpolate(X, size=(size, size), mode="area")  # once, not per step
    y = torch.from_numpy(labels)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, y), batch_size=int(batch_size),
                                         shuffle=True, generator=g, drop_last=True)
    total = max(1, epochs * len(loader))
    opt = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 50) * 0.5 * (1 + math.cos(math.pi * min(s, total) / total)))
    net.train()
    history = []
    for epoch in range(int(epochs)):
        losses = []
        for xb, yb in loader:
            flip = torch.rand(len(xb), generator=g) < 0.5
            xb = torch.where(flip[:, None, None, None], xb.flip(-1), xb)
            loss = torch.nn.functional.cross_entropy(net(xb), yb, label_smoothing=0.05)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            losses.append(float(loss.detach()))
        history.append({"epoch": epoch + 1, "loss": round(float(np.mean(losses)), 4)})
        if log:
            log(f"epoch {epoch + 1}/{epochs} loss {np.mean(losses):.4f}")
    net.eval()
    return history


def heldout_metrics(judge, seed: int, n_objects: int = 1420, n_no_object: int = 400, n_scenes: int = 500) -> dict:
    """Held-out accuracy of ``judge`` (see the module doc)."""
    none = CLASSES.index(NO_OBJECT)
    X1, y1 = object_images(n_objects, seed, categories=CATEGORIES)
    p1 = judge.predict(X1)
    sup = np.array([CATEGORY_SUPER[c] for c in CLASSES[:-1]] + [NO_OBJECT])
    X0 = no_object_images(n_no_object, seed)
    p0 = judge.predict(X0)
    kinds = np.arange(n_no_object) % 4
    sc = make_scenes(n_scenes, seed=seed)
    ps = judge.predict(sc.images)
    scene_rates = judge_rates(ps, [set(o) for o in sc.objects], [{CATEGORY_SUPER[c] for c in o} for o in sc.objects])
    return {
        "objects_category_accuracy": round(float(np.mean(p1 == y1)), 4),
        "objects_concept_accuracy": round(float(np.mean(sup[p1] == sup[y1])), 4),
        "objects_judged_no_object": round(float(np.mean(p1 == none)), 4),
        "no_object_recall": round(float(np.mean(p0 == none)), 4),
        "no_object_recall_by_kind": {k: round(float(np.mean(p0[kinds == i] == none)), 4) for i, k in
                                     enumerate(("blurred render", "mixture of renders", "colour field",
                                                "soft ellipses"))},
        "scenes_names_object_present": scene_rates["right_category"],
        "scenes_names_concept_present": scene_rates["right_concept"],
        "scenes_judged_no_object": scene_rates["no_object"],
        "n_heldout": {"objects": n_objects, "no_object": n_no_object, "scenes": n_scenes},
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Train the emoji judge (an independent classifier of generated "
                                             "pictures) and write assets/models/emoji-judge.")
    ap.add_argument("--n-objects", type=int, default=7100, help="object renders (100 per category)")
    ap.add_argument("--n-no-object", type=int, default=1600, help="no-object images")
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=None, help="models root to write emoji-judge into (default assets/models)")
    args = ap.parse_args(argv)

    torch = require("torch")

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    t0, c0 = time.time(), time.process_time()
    X, y = judge_training_set(args.n_objects, args.n_no_object, args.seed)
    print(f"data: {len(X)} images in {time.time() - t0:.0f} s", flush=True)
    net = build_judge()
    history = train_judge(net, X, y, epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, seed=args.seed,
                          log=lambda m: print(f"{m} ({time.time() - t0:.0f} s)", flush=True))
    judge = EmojiJudge(net)
    wall, cpu = time.time() - t0, time.process_time() - c0
    metrics = heldout_metrics(judge, args.seed + 1000)
    record = {"args": vars(args), "train_wall_seconds": round(wall), "train_cpu_seconds": round(cpu),
              "heldout": metrics, "history": history}
    out = judge.save(args.out, record)
    print(json.dumps({k: v for k, v in record.items() if k != "history"}, indent=1))
    print(f"saved to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
