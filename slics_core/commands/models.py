"""``slics models`` and ``slics download``: which weights are on disk, and fetching them.

``slics models`` lists what is usable on this machine first (the emoji world's
shipped encoders and generator, then presets whose weights are on disk), then the
presets that need a download and the command that fetches them; it never uses the network.
``slics download NAME [NAME ...]`` fetches weights into the Hugging Face
cache with progress bars (``--cache-dir`` picks another cache);
``--generator SPEC`` / ``--workspace NAME`` add exactly what drawing with a
generator needs (:func:`slics_core.generators.required_presets`), and
``--dry-run`` prints the plan without fetching.
Both use only :mod:`slics_core.weights`, which imports neither torch nor
open_clip: they answer in a fraction of a second (see README, "Choices").
"""
from __future__ import annotations

import argparse

from slics_core import weights
from slics_core.commands import CLIError

__all__ = ["EMOJI_MODELS", "cmd_download", "cmd_models"]


#: Models shipped with the emoji world (``assets/models``): usable on any machine, no download.
EMOJI_MODELS = (("emoji-small", "open_clip", "emoji world encoder (the ViT-B/32 analogue): retrieval, uploads, text"),
                ("emoji-large", "open_clip", "emoji world encoder (the ViT-L/14 analogue): generator conditioning"),
                ("emoji-generator", "slics", "emoji world image generator (decodes emoji-large embeddings)"))


def cmd_models(args: argparse.Namespace) -> int:
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


def _workspace_generator(name: str) -> tuple[str, str | None]:
    """``(generator spec, conditioning encoder)`` a workspace records (imports the workspace reader)."""
    from pathlib import Path

    from slics_core.commands.workspaces import recorded_conditioning_encoder
    from slics_core.explorer.workspace_files import load_workspace, workspace_path

    ws = load_workspace(Path(name) if Path(name).is_dir() else workspace_path(name))
    if not ws.generator or ws.generator == "emoji":
        raise CLIError(f"workspace {ws.name!r} has no generator to download weights for; add one with "
                       f"`slics align --workspace {name} --generator sd-1.5`")
    return ws.generator, recorded_conditioning_encoder(ws)


def _download_plan(args: argparse.Namespace) -> list:
    """The presets ``slics download`` fetches for ``args``: the names, then what the generator needs, once each."""
    from slics_core.generators import required_presets

    names = list(args.names)
    generator, encoder = args.generator, args.align_encoder
    if args.workspace:
        generator, recorded = _workspace_generator(args.workspace)
        encoder = encoder or recorded
    elif encoder and not generator:
        raise CLIError("--align-encoder goes with --generator SPEC (or --workspace NAME)")
    if generator:
        needed = required_presets(generator, encoder)
        if not needed and not names:
            print(f"nothing to download: generator {generator} and its conditioning encoder {encoder} need no "
                  "downloadable weights")
        names += needed
    if not names and not generator:
        raise CLIError("name what to download: MODEL names, --generator SPEC or --workspace NAME (`slics models` "
                       "lists the names)")
    presets = [weights.get_preset(n) for n in names]  # all names checked before any download
    return list({p.name: p for p in presets}.values())


def cmd_download(args: argparse.Namespace) -> int:
    presets = _download_plan(args)
    for preset in presets:
        local = weights.find_local(preset, args.cache_dir)
        if local is not None:
            print(f"{preset.name}: already on disk at {local}")
            continue
        if args.dry_run:
            what = (f" ({', '.join(weights.download_patterns(preset))})" if preset.kind == "diffusers" else "")
            print(f"{preset.name}: would download {preset.description} from {preset.repo_id}{what}")
            continue
        print(f"{preset.name}: downloading {preset.description} from {preset.repo_id} ...", flush=True)
        path = weights.download(preset, cache_dir=args.cache_dir)
        print(f"{preset.name}: done, {path}")
    return 0
