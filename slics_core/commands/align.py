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
from slics_core.commands.workspaces import add_generator, check_generator_args, recorded_conditioning_encoder
from slics_core.errors import user_message
from slics_core.explorer.workspace_files import load_workspace, workspace_path
from slics_core.formats import load_user_array
from slics_core.generators import parse_generator_spec
from slics_core.generators.registry import generator_names_text

__all__ = ["cmd_align"]


def _load_npy(path: str, what: str):
    """The ``what`` embeddings in the user's ``path``: one line naming the file and what to give otherwise."""
    return load_user_array(path, "fiu", what=f"{what} embeddings",
                           fix=f"give a .npy file of numeric {what} embeddings, one row per image (np.save)")


def cmd_align(args: argparse.Namespace) -> int:
    if args.workspace is not None:
        return _cmd_align_workspace(args)
    # the form and its files were checked before this module was imported (options._check_align)
    X = _load_npy(args.source, "source")
    Y = _load_npy(args.target, "target")
    align = fit_alignment(X, Y, test_size=args.test_size, random_state=args.seed,
                          normalize=not args.no_normalize, source_id=args.source_id, target_id=args.target_id)
    path = align.save(args.output)
    print(f"{align.n_features_in_} -> {align.n_features_out_}: mean cosine {align.train_cosine_:.4f} on "
          f"training pairs, {align.held_out_cosine_:.4f} on held-out pairs; saved to {path}")
    return 0


def _cmd_align_workspace(args: argparse.Namespace) -> int:
    folder = Path(args.workspace) if Path(args.workspace).is_dir() else workspace_path(args.workspace)
    ws = load_workspace(folder)
    recorded = ws.generator if ws.generator and ws.generator != "emoji" else None
    if not args.generator:
        if recorded is None:
            raise CLIError(f"workspace {ws.name!r} has no generator yet: name one with --generator "
                           f"({generator_names_text()})")
        try:
            parse_generator_spec(recorded)
        except (OSError, ValueError) as exc:  # a local: pipeline folder moved or deleted
            raise CLIError(f"workspace {ws.name!r} records the generator {recorded}, which cannot be opened: "
                           f"{user_message(exc)}; name it again with `slics align --workspace {args.workspace} "
                           f"--generator local:NEW_DIR` (or {generator_names_text(local=False)})") from None
        args.generator = recorded
    if args.align_encoder is None:  # refit into the conditioning space the workspace recorded
        try:
            args.align_encoder = recorded_conditioning_encoder(ws)
        except ValueError as exc:
            raise CLIError(f"{user_message(exc)}; or name the conditioning encoder with --align-encoder") from None
    add_generator(ws, check_generator_args(args), args)
    return 0
