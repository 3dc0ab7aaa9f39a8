"""``slics models`` and ``slics download``: which weights are on disk, and fetching them.

``slics models`` lists the presets (encoders and generators) and whether
each one's weights are on this machine; it never uses the network.
``slics download NAME [NAME ...]`` fetches weights into the Hugging Face
cache with progress bars (``--cache-dir`` picks another cache).
Both use only :mod:`slics_core.weights`, which imports neither torch nor
open_clip: they answer in a fraction of a second (see README, "Choices").
"""
from __future__ import annotations

import argparse

from slics_core import weights

__all__ = ["register"]


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


def _cmd_models(args: argparse.Namespace) -> int:
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
