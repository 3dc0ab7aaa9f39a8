"""``slics align``: the Procrustes alignment between two embedding spaces.

``slics align SRC.npy DST.npy -o align.npz`` fits the alignment from paired
embeddings of the same images and prints its mean cosine on held-out pairs.
``slics align --workspace NAME --generator SPEC`` adds (or replaces) the image
generator of an existing workspace: it fits the alignment from the workspace's
space into the generator's conditioning space and saves it in the workspace,
refitting nothing else (:func:`slics_core.explorer.generation.attach_generator`).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from slics_core.alignment import fit_alignment
from slics_core.commands import CLIError
from slics_core.commands.workspaces import add_generator, add_generator_options, check_generator_args
from slics_core.formats import load_user_array

__all__ = ["register"]


def register(subparsers) -> None:
    a = subparsers.add_parser(
        "align", help="fit a Procrustes alignment between two embedding spaces, or give a workspace a generator",
        description="Fit the (semi-)orthogonal map W from source to target embeddings of the same images "
                    "(rows paired), report the mean cosine on held-out pairs, and save it. With --workspace: "
                    "fit the map from that workspace's space into the generator's conditioning space and make "
                    "the generator the workspace's (nothing else is refitted).")
    a.add_argument("source", nargs="?", help=".npy file (n, d_src), e.g. ViT-B/32 embeddings")
    a.add_argument("target", nargs="?", help=".npy file (n, d_dst), e.g. ViT-L/14 embeddings of the same images")
    a.add_argument("-o", "--output", default=None, help="where to write the alignment (.npz)")
    a.add_argument("--test-size", type=float, default=0.2, help="fraction of pairs held out (default 0.2)")
    a.add_argument("--seed", type=int, default=0)
    a.add_argument("--no-normalize", action="store_true", help="do not L2-normalise rows before fitting")
    a.add_argument("--source-id", default=None)
    a.add_argument("--target-id", default=None)
    a.add_argument("--workspace", default=None, metavar="NAME",
                   help="a workspace (name under $SLICS_WORKSPACES, or its folder) to give the generator")
    add_generator_options(a)
    a.add_argument("--quiet", action="store_true")
    a.set_defaults(func=_cmd_align)


def _load_npy(path: str, what: str):
    """The ``what`` embeddings in the user's ``path``: one line naming the file and what to give otherwise."""
    return load_user_array(path, "fiu", what=f"{what} embeddings",
                           fix=f"give a .npy file of numeric {what} embeddings, one row per image (np.save)")


def _cmd_align(args: argparse.Namespace) -> int:
    if args.workspace is not None:
        return _cmd_align_workspace(args)
    if args.generator or args.align_pairs or args.align_encoder:
        raise CLIError("--generator, --align-encoder and --align-pairs go with --workspace NAME")
    if not (args.source and args.target and args.output):
        raise CLIError("give SOURCE.npy TARGET.npy -o ALIGN.npz, or --workspace NAME --generator SPEC")
    X = _load_npy(args.source, "source")
    Y = _load_npy(args.target, "target")
    align = fit_alignment(X, Y, test_size=args.test_size, random_state=args.seed,
                          normalize=not args.no_normalize, source_id=args.source_id, target_id=args.target_id)
    path = align.save(args.output)
    print(f"{align.n_features_in_} -> {align.n_features_out_}: mean cosine {align.train_cosine_:.4f} on "
          f"training pairs, {align.held_out_cosine_:.4f} on held-out pairs; saved to {path}")
    return 0


def _cmd_align_workspace(args: argparse.Namespace) -> int:
    from slics_core.explorer.workspace_files import load_workspace, workspace_path

    if args.source or args.target or args.output:
        raise CLIError("--workspace fits the alignment from the workspace itself: give no SOURCE/TARGET/-o")
    folder = Path(args.workspace) if Path(args.workspace).is_dir() else workspace_path(args.workspace)
    ws = load_workspace(folder)
    if not args.generator:
        if not ws.generator or ws.generator == "emoji":
            raise CLIError(f"workspace {ws.name!r} has no generator yet: name one with --generator "
                           "(sd-1.5, unclip or local:DIR)")
        args.generator = ws.generator
    add_generator(ws, check_generator_args(args), args)
    return 0
