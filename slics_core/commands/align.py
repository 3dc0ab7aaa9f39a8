"""``slics align``: the Procrustes alignment between two embedding spaces.

``slics align SRC.npy DST.npy -o align.npz`` fits the alignment from paired
embeddings of the same images and prints its mean cosine on held-out pairs.
"""
from __future__ import annotations

import argparse
import os

import numpy as np

from slics_core.alignment import fit_alignment

__all__ = ["register"]


def register(subparsers) -> None:
    a = subparsers.add_parser(
        "align", help="fit a Procrustes alignment between two embedding spaces",
        description="Fit the (semi-)orthogonal map W from source to target embeddings of the same images "
                    "(rows paired), report the mean cosine on held-out pairs, and save it.")
    a.add_argument("source", help=".npy file (n, d_src), e.g. ViT-B/32 embeddings")
    a.add_argument("target", help=".npy file (n, d_dst), e.g. ViT-L/14 embeddings of the same images")
    a.add_argument("-o", "--output", required=True, help="where to write the alignment (.npz)")
    a.add_argument("--test-size", type=float, default=0.2, help="fraction of pairs held out (default 0.2)")
    a.add_argument("--seed", type=int, default=0)
    a.add_argument("--no-normalize", action="store_true", help="do not L2-normalise rows before fitting")
    a.add_argument("--source-id", default=None)
    a.add_argument("--target-id", default=None)
    a.set_defaults(func=_cmd_align)


def _load_npy(path: str, what: str):
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{what} file {path} does not exist")
    try:
        return np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:  # not an array, truncated, pickled objects
        raise ValueError(f"{what} file {path} is not a readable .npy array ({exc})") from None


def _cmd_align(args: argparse.Namespace) -> int:
    X = _load_npy(args.source, "source")
    Y = _load_npy(args.target, "target")
    align = fit_alignment(X, Y, test_size=args.test_size, random_state=args.seed,
                          normalize=not args.no_normalize, source_id=args.source_id, target_id=args.target_id)
    path = align.save(args.output)
    print(f"{align.n_features_in_} -> {align.n_features_out_}: mean cosine {align.train_cosine_:.4f} on "
          f"training pairs, {align.held_out_cosine_:.4f} on held-out pairs; saved to {path}")
    return 0
