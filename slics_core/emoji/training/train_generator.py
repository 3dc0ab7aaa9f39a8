"""Train the emoji generator's reader (large-encoder embedding -> which of the 71 objects are present).

Usage (needs ``assets/models/emoji-large``; writes ``assets/models/emoji-generator``)::

    nice -n 10 python -m slics_core.emoji.training.train_generator

Training rows, all renders of the emoji world and their large embeddings (no SLiCS output):

* ``--n-scenes`` multi-object scenes (:func:`slics_core.emoji.scenes.make_scenes`, seed
  ``TRAIN_SEED + 7``), labelled with the objects they show;
* ``--n-single`` single-object renders (:func:`~slics_core.emoji.scenes.make_single_object_scenes`,
  seed ``TRAIN_SEED + 8``);
* ``--n-sums`` sums of two of those rows' conditioning vectors, labelled with the union of
  their objects, so that a vector holding two scenes' objects is read as holding both (a
  mix of two concept components is such a sum).

Conditioning: ``normalize(normalize(x) - mean)`` with ``mean`` the mean large embedding of the
first 4000 training scenes (stored with the weights). The reader
(:func:`slics_core.emoji.generator.build_reader`) is fitted by full-batch L-BFGS on the mean
binary cross-entropy plus ``--l2`` times the squared weights. Deterministic for a seed and thread
count. Prints (and stores in ``config.json``) held-out top-1 accuracies (seed 2002).
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

from slics_core.emoji.catalog import ALL_COCO_CATEGORIES, CATEGORIES
from slics_core.emoji.generator import READER_CONFIG, EmojiGenerator, build_reader
from slics_core.emoji.models import encode_images, load_emoji_clip
from slics_core.emoji.scenes import make_scenes, make_single_object_scenes
from slics_core.emoji.training.train_clip import TRAIN_SEED
from slics_core.extras import require

__all__ = ["fit_reader", "pair_sums", "main"]

_KEEP = [ALL_COCO_CATEGORIES.index(c) for c in CATEGORIES]
HELDOUT_SEED = 2002


def pair_sums(C: np.ndarray, Y: np.ndarray, n: int, seed: int) -> tuple:
    """``n`` sums of two random rows of ``C`` (drawn from ``default_rng(seed)``) with the union of their labels."""
    rng = np.random.default_rng(seed)
    a, b = rng.integers(len(C), size=int(n)), rng.integers(len(C), size=int(n))
    return C[a] + C[b], np.maximum(Y[a], Y[b])


def fit_reader(net, C: np.ndarray, Y: np.ndarray, *, l2: float = 1e-6, max_iter: int = 500) -> float:
    """Fit ``net`` in place (full-batch L-BFGS): mean BCE of ``net(C)`` to ``Y`` + ``l2`` * sum of squared
    weights (biases unpenalised). Returns the final objective."""
    torch = require("torch")

    if len(C) != len(Y):
        raise ValueError(f"{len(C)} conditioning rows but {len(Y)} label rows")
    X = torch.as_tensor(np.asarray(C, np.float32))
    T = torch.as_tensor(np.asarray(Y, np.float32))
    weights = [p for n_, p in net.named_parameters() if n_.endswith("weight")]
    opt = torch.optim.LBFGS(net.parameters(), max_iter=int(max_iter), history_size=20, line_search_fn="strong_wolfe")
    net.train()

    def objective():
        penalty = l2 * sum((w ** 2).sum() for w in weights)
        return torch.nn.functional.binary_cross_entropy_with_logits(net(X), T) + penalty

    def closure():
        opt.zero_grad()
        loss = objective()
        loss.backward()
        return loss

    opt.step(closure)
    net.eval()
    with torch.no_grad():
        return float(objective())


def _top1(gen, C, Y) -> float:
    """Fraction of rows whose most probable object is one they show."""
    top = gen.read(C).argmax(1)
    return float(np.mean(Y[np.arange(len(Y)), top] > 0))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Train the emoji generator's reader.")
    ap.add_argument("--n-scenes", type=int, default=20000)
    ap.add_argument("--n-single", type=int, default=4000)
    ap.add_argument("--n-sums", type=int, default=10000)
    ap.add_argument("--n-mean", type=int, default=4000, help="training scenes whose mean centres the space")
    ap.add_argument("--hidden", type=int, default=READER_CONFIG["hidden"])
    ap.add_argument("--l2", type=float, default=1e-6)
    ap.add_argument("--max-iter", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--models-root", default=None, help="where emoji-large is (default: assets/models)")
    ap.add_argument("--out", default=None, help="models root to write emoji-generator into")
    args = ap.parse_args(argv)
    if min(args.n_scenes, args.n_single, args.n_sums, args.hidden) < 0 or args.n_mean < 1 \
            or args.n_mean > args.n_scenes:
        raise SystemExit("sizes must be >= 0 and 1 <= --n-mean <= --n-scenes")

    torch = require("torch")

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    t0, c0 = time.time(), time.process_time()
    enc, _, _ = load_emoji_clip("large", args.models_root)
    scenes = make_scenes(args.n_scenes, seed=TRAIN_SEED + 7)
    single = make_single_object_scenes(args.n_single, seed=TRAIN_SEED + 8)
    E = encode_images(enc, np.concatenate([single.images, scenes.images]))
    Y = np.concatenate([single.sub, scenes.sub])[:, _KEEP].astype(np.float32)
    cfg = dict(READER_CONFIG, hidden=args.hidden)
    gen = EmojiGenerator(build_reader(E.shape[1], cfg), E[args.n_single:args.n_single + args.n_mean].mean(0), cfg)
    C = gen.condition(E)
    Cs, Ys = pair_sums(C, Y, args.n_sums, args.seed + 1)
    C, Y = np.concatenate([C, Cs]), np.concatenate([Y, Ys])
    print(f"data ready: {len(C)} rows, {time.time() - t0:.0f}s", flush=True)
    loss = fit_reader(gen.net, C, Y, l2=args.l2, max_iter=args.max_iter)
    held_scenes = make_scenes(500, seed=HELDOUT_SEED)
    held_single = make_single_object_scenes(500, seed=HELDOUT_SEED)
    metrics = {"seed": args.seed, "n_scenes": args.n_scenes, "n_single": args.n_single, "n_sums": args.n_sums,
               "n_mean": args.n_mean, "hidden": args.hidden, "l2": args.l2, "max_iter": args.max_iter,
               "threads": args.threads, "final_objective": round(loss, 5),
               "heldout_scene_top1_present": round(_top1(gen, gen.condition(encode_images(enc, held_scenes.images)),
                                                         held_scenes.sub[:, _KEEP]), 4),
               "heldout_single_top1": round(_top1(gen, gen.condition(encode_images(enc, held_single.images)),
                                                  held_single.sub[:, _KEEP]), 4),
               "zero_vector_max_probability": round(float(gen.read(np.zeros((1, gen.dim))).max()), 4),
               "seconds": round(time.time() - t0), "cpu_seconds": round(time.process_time() - c0)}
    out = gen.save(args.out, metrics)
    print(json.dumps(metrics))
    print(f"saved to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
