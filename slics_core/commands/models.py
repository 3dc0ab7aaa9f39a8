"""``slics models`` and ``slics download``: which weights are on disk, and fetching them.

``slics models`` lists the presets (encoders and generators) and whether
each one's weights are on this machine; it never uses the network.
``slics download NAME [NAME ...]`` fetches weights into the Hugging Face
cache with progress bars (``--cache-dir`` picks another cache).
``slics align SRC.npy DST.npy -o align.npz`` fits the Procrustes alignment
between two embedding spaces from paired embeddings of the same images and
prints its mean cosine on held-out pairs.
"""
from __future__ import annotations

import argparse


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "models", help="list model presets and whether their weights are on disk",
        description="List the model presets (encoders and generators) and whether their weights are on disk. "
                    "Uses no network.")
    p.add_argument("--cache-dir", default=None, help="Hugging Face hub cache to look in (default: the hub's own)")
    p.set_defaults(func=_cmd_models)

    d = subparsers.add_parser(
        "download", help="download model weights (with progress)",
        description="Download the weights of one or more presets into the Hugging Face cache, with progress bars. "
                    "Run `slics models` for the names.")
    d.add_argument("names", nargs="+", metavar="MODEL", help="preset name, e.g. ViT-B-32/openai, dinov2-base, sd-1.5")
    d.add_argument("--cache-dir", default=None, help="Hugging Face hub cache to download into")
    d.set_defaults(func=_cmd_download)

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


def _cmd_models(args: argparse.Namespace) -> int:
    from slics_core import weights

    rows = []
    for preset in weights.list_presets():
        path = weights.find_local(preset, args.cache_dir)
        rows.append((preset.name, preset.kind, "yes" if path else "no", preset.description,
                     str(path) if path else weights.fetch_command(preset)))
    header = ("MODEL", "LIBRARY", "ON DISK", "DESCRIPTION", "PATH / FETCH WITH")
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(4)]
    for r in [header] + rows:
        print("  ".join(r[i].ljust(widths[i]) for i in range(4)) + "  " + r[4])
    return 0


def _cmd_download(args: argparse.Namespace) -> int:
    from slics_core import weights

    presets = [weights.get_preset(n) for n in args.names]  # all names checked before any download
    for preset in presets:
        local = weights.find_local(preset, args.cache_dir)
        if local is not None:
            print(f"{preset.name}: already on disk at {local}")
            continue
        print(f"{preset.name}: downloading {preset.description} from {preset.repo_id} ...", flush=True)
        path = weights.download(preset, cache_dir=args.cache_dir)
        print(f"{preset.name}: done, {path}")
    return 0


def _load_npy(path: str, what: str):
    import os

    import numpy as np

    if not os.path.isfile(path):
        raise FileNotFoundError(f"{what} file {path} does not exist")
    try:
        return np.load(path, allow_pickle=False)
    except Exception as exc:
        raise ValueError(f"{what} file {path} is not a readable .npy array ({exc})") from None


def _cmd_align(args: argparse.Namespace) -> int:
    from slics_core.alignment import fit_alignment

    X = _load_npy(args.source, "source")
    Y = _load_npy(args.target, "target")
    align = fit_alignment(X, Y, test_size=args.test_size, random_state=args.seed,
                          normalize=not args.no_normalize, source_id=args.source_id, target_id=args.target_id)
    path = align.save(args.output)
    print(f"{align.n_features_in_} -> {align.n_features_out_}: mean cosine {align.train_cosine_:.4f} on "
          f"training pairs, {align.held_out_cosine_:.4f} on held-out pairs; saved to {path}")
    return 0
