"""``slics models`` and ``slics download``: which weights are on disk, and fetching them.

``slics models`` lists what is usable on this machine first (the emoji world's
shipped encoders and generator, then presets whose weights are on disk), then the
presets that need a download and the command that fetches them; it never uses the network.
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


#: Models shipped with the emoji world (``assets/models``): usable on any machine, no download.
EMOJI_MODELS = (("emoji-small", "open_clip", "emoji world encoder (the ViT-B/32 analogue): retrieval, uploads, text"),
                ("emoji-large", "open_clip", "emoji world encoder (the ViT-L/14 analogue): generator conditioning"),
                ("emoji-generator", "slics", "emoji world image generator (decodes emoji-large embeddings)"))


def _cmd_models(args: argparse.Namespace) -> int:
    """What is usable on this machine first (the shipped emoji models, then presets on disk), then what
    needs a download, with the command that fetches it."""
    shipped, on_disk, missing = [], [], []
    for name, library, description in EMOJI_MODELS:
        folder = weights.EMOJI_MODELS_DIR / name
        here = folder.is_dir() and any(folder.iterdir())
        (shipped if here else missing).append(
            (name, library, "yes" if here else "no", description,
             str(folder) if here else "shipped with the repository: restore assets/models"))
    for preset in weights.list_presets():
        path = weights.find_local(preset, args.cache_dir)
        (on_disk if path else missing).append(
            (preset.name, preset.kind, "yes" if path else "no", preset.description,
             str(path) if path else "download: " + weights.fetch_command(preset)))
    rows = shipped + on_disk + missing
    header = ("MODEL", "LIBRARY", "USABLE HERE", "DESCRIPTION", "PATH / HOW TO GET IT")
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
