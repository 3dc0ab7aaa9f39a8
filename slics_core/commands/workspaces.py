"""``slics workspace``, ``slics emoji-build``, ``slics emoji-report``: workspaces the app opens.

Every workspace, whatever its source, is built by
:func:`slics_core.explorer.build.build_workspace`; ``--generator`` then adds
an image generator (:func:`slics_core.explorer.generation.attach_generator`).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from slics_core import weights
from slics_core.captions import DEFAULT_VOCABULARY, VOCABULARY_SPECS
from slics_core.commands import CLIError, check_at_least
from slics_core.commands.data import resolve_encoder
from slics_core.emoji.world import EmojiWorldConfig
from slics_core.encoders import parse_encoder_spec
from slics_core.errors import user_message
from slics_core.explorer.arrival import STORE, prepare_pages
from slics_core.explorer.build import build_workspace_from_cache
from slics_core.explorer.emoji_build import open_emoji_workspace
from slics_core.explorer.emoji_report import contact_sheet, emoji_report
from slics_core.explorer.generation import DEFAULT_ALIGN_PAIRS, attach_generator, load_workspace_alignment
from slics_core.explorer.narration import d0_choice
from slics_core.explorer.workspace import check_workspace_name, workspaces_root
from slics_core.explorer.workspace_files import load_workspace, workspace_path
from slics_core.generators import DEFAULT_CONDITIONING_ENCODER, missing_presets, parse_generator_spec, required_presets
from slics_core.methods import method_names

__all__ = ["register"]


def _progress(quiet, tag):
    def report(stage, done, total):
        if not quiet:
            print(f"[{tag}] {stage}: {done}/{total}", file=sys.stderr, flush=True)
    return report


def cmd_workspace(args) -> int:
    if args.info is not None:
        if Path(args.info).is_dir():
            folder = Path(args.info)
        elif "/" in args.info or "\\" in args.info or args.info.startswith("."):
            raise CLIError(f"--info {args.info!r}: no workspace folder there; give a workspace folder or the name of "
                           f"one under {str(workspaces_root())!r}")
        else:
            folder = workspace_path(args.info)
        ws = load_workspace(folder)
        summary = ws.summary()
        if ws.generator and ws.generator != "emoji":
            try:
                align = load_workspace_alignment(ws)
                summary["generator_alignment"] = {"conditioning_encoder": align.target_id,
                                                  "held_out_cosine": align.held_out_cosine_,
                                                  "train_cosine": align.train_cosine_}
            except (OSError, ValueError) as exc:
                summary["generator_alignment"] = f"not usable: {user_message(exc)}"
        print(json.dumps(summary, indent=1))
        return 0
    if not args.cache:
        raise CLIError("slics workspace needs --cache (an embedding cache from `slics embed`) or --info NAME")
    name = check_workspace_name(args.name) if args.name is not None else None
    out = Path(args.out) if args.out else workspaces_root() / (name or check_workspace_name(
        Path(args.cache).resolve().name))
    if args.methods:
        unknown = [m for m in args.methods if m not in method_names()]
        if unknown:
            raise CLIError(f"unknown method(s) {unknown}; registered: {', '.join(method_names())}")
    if any(d < 1 for d in args.d0):
        raise CLIError(f"--d0 values must be positive; got {args.d0}")
    check_at_least(args, 1, "--n-train", "--n-query", "--n-words")
    check_at_least(args, 1 if len(set(args.d0)) > 1 else 0, "--n-val")  # the default d0 is chosen on validation
    generator = check_generator_args(args)
    encoder = resolve_encoder(args.encoder) if args.encoder else None
    ws = build_workspace_from_cache(args.cache, out, encoder=encoder, mean_file=args.mean_file, vocabulary=args.vocab,
                                    n_words=args.n_words, d0_values=tuple(args.d0), n_iter=args.n_iter,
                                    n_train=args.n_train, n_val=args.n_val, n_query=args.n_query, seed=args.seed,
                                    methods=args.methods, name=args.name, progress=_progress(args.quiet, "workspace"),
                                    overwrite=args.overwrite)
    s = ws.summary()
    print(f"workspace {s['name']!r} written to {out}: {s['n_items']} items, splits {s['splits']}, "
          f"{len(ws.models)} fitted models ({', '.join(ws.methods)}; d0 {s['d0_values']}"
          + (f"; default {d0_choice(ws)}" if ws.d0_values else "") + ")"
          + (f"; not fitted: {', '.join(f'{m} ({why})' for m, why in ws.skipped.items())}" if ws.skipped else ""))
    if generator is not None:
        try:
            add_generator(ws, generator, args)
        except (OSError, ValueError) as exc:
            raise CLIError(f"workspace {s['name']!r} is saved, but its generator was not added: {user_message(exc)} "
                           f"(add it later with `slics align --workspace {out.name} --generator {generator.text}`)") \
                from None
    return 0


def check_generator_args(args):
    """The parsed ``--generator`` (None without one), with what fitting its alignment needs checked first.

    The conditioning encoder's weights must be here (it embeds the training images) unless
    ``--align-pairs`` gives the pairs; the generator's own weights are only needed to draw.
    """
    if not getattr(args, "generator", None):
        for opt in ("align_encoder", "align_pairs"):
            if getattr(args, opt, None):
                raise CLIError(f"--{opt.replace('_', '-')} needs --generator (sd-1.5, unclip or local:DIR)")
        return None
    generator = parse_generator_spec(args.generator)
    check_at_least(args, 5, "--align-n")
    encoder = parse_encoder_spec(args.align_encoder or DEFAULT_CONDITIONING_ENCODER)
    if args.align_pairs is None and encoder.kind == "preset":
        try:
            weights.resolve(encoder.text)
        except weights.MissingWeightsError as exc:
            raise CLIError(f"the alignment embeds the training images with {encoder.text}: {exc}") from None
    return generator


def add_generator(ws, generator, args) -> None:
    """Fit and save the workspace's alignment for ``generator`` and record it; print what was done."""
    align = attach_generator(ws, generator, args.align_encoder, pairs=args.align_pairs, n_pairs=args.align_n,
                             seed=args.seed, progress=(lambda *a: None) if args.quiet else None)
    print(f"generator {generator.text} added to workspace {ws.name!r}: alignment {align.n_features_in_} -> "
          f"{align.n_features_out_} ({align.target_id}), mean cosine {align.held_out_cosine_:.3f} on held-out pairs "
          f"({align.train_cosine_:.3f} on training pairs)")
    n_fit = getattr(align, "n_pairs_", None)
    if n_fit is not None and n_fit < min(align.n_features_in_, align.n_features_out_):
        print(f"warning: {n_fit} pairs fitted a {align.n_features_in_} -> {align.n_features_out_} map, fewer than its "
              "dimension: the alignment is under-determined (see the held-out cosine); use more training images "
              "(--align-n) or a pairs file (--align-pairs)")
    missing = missing_presets(required_presets(generator, align.target_id))
    if missing:
        print(f"to draw, fetch the weights first: `slics download {' '.join(missing)}`")


def add_generator_options(p, *, required=False) -> None:
    """``--generator``, ``--align-encoder``, ``--align-pairs``, ``--align-n`` (``slics workspace``, ``slics align``)."""
    p.add_argument("--generator", default=None, required=required, metavar="SPEC",
                   help="image generator of the workspace: sd-1.5 (image embedding as the prompt, the paper's "
                        "route), unclip (Stable unCLIP on ViT-L/14 image embeddings) or local:DIR (a diffusers "
                        "pipeline folder)")
    p.add_argument("--align-encoder", default=None, metavar="ENCODER",
                   help=f"encoder of the generator's conditioning space (default {DEFAULT_CONDITIONING_ENCODER}); it "
                        "embeds the training images the alignment is fitted on")
    p.add_argument("--align-pairs", default=None, metavar="FILE.npz",
                   help="fit the alignment on these pairs instead: arrays 'source' (workspace encoder) and "
                        "'target' (conditioning encoder) of the same images")
    p.add_argument("--align-n", type=int, default=DEFAULT_ALIGN_PAIRS,
                   help=f"training images embedded for the alignment (default {DEFAULT_ALIGN_PAIRS}; 20%% held out)")


def _emoji_config(args):
    d0 = tuple(args.d0) if args.d0 else EmojiWorldConfig().d0_values
    return EmojiWorldConfig(n_train=args.n_train, n_val=args.n_val, n_query=args.n_query, n_pool=args.n_pool,
                            d0_values=d0)


def cmd_emoji_build(args) -> int:
    prog = _progress(args.quiet, "emoji")
    ws = open_emoji_workspace(args.cache_dir, _emoji_config(args), prog, rebuild=args.rebuild)
    # a world cached before the pages' store existed (or with entries evicted) gets them now; present ones are
    # only read
    prepare_pages(ws, prog)
    print(f"emoji workspace ready at {ws.path}: {len(ws)} scenes, {len(ws.models)} fitted models, "
          f"default {d0_choice(ws)}; first page views prepared in {ws.path / STORE}")
    return 0


def cmd_emoji_report(args) -> int:
    prog = _progress(args.quiet, "emoji")
    ws = open_emoji_workspace(args.cache_dir, _emoji_config(args), prog, rebuild=args.rebuild)
    if args.contact_sheet:
        try:
            contact_sheet(ws, n_queries=args.sheet_queries, seed=args.sheet_seed).save(args.contact_sheet)
        except (OSError, ValueError) as exc:
            raise CLIError(f"could not write the contact sheet {args.contact_sheet}: {exc}") from None
        print(f"contact sheet of {args.sheet_queries} query scenes written to {args.contact_sheet}",
              file=sys.stderr)
    rep = emoji_report(ws, prog)
    if args.json:
        print(json.dumps(rep, indent=1))
    else:
        for k, v in rep.items():
            print(f"{k}: {v}")
    return 0


def _add_emoji(p):
    p.add_argument("--cache-dir", default=None, help="workspace cache root (default $SLICS_EMOJI_CACHE or "
                                                     "~/.cache/slics/emoji)")
    p.add_argument("--n-train", type=int, default=3000)
    p.add_argument("--n-val", type=int, default=500)
    p.add_argument("--n-query", type=int, default=1000)
    p.add_argument("--n-pool", type=int, default=3000)
    p.add_argument("--d0", type=int, nargs="+", default=None,
                   help="dictionary sizes to fit (default 3 5 8 10 15 20); the best on validation is the default")
    p.add_argument("--rebuild", action="store_true", help="ignore the cache")
    p.add_argument("--quiet", action="store_true")


def register(subparsers) -> None:
    p = subparsers.add_parser("workspace", help="split, fit every registered method for several d0 and save a "
                                                "workspace the app can open")
    p.add_argument("--cache", default=None, help="embedding cache directory (from `slics embed`)")
    p.add_argument("--name", default=None, help="workspace name: the folder under $SLICS_WORKSPACES (default: the "
                                                "cache folder's name); letters, digits, '.', '_', '-', spaces")
    p.add_argument("--out", default=None, help="write the workspace folder here instead (the app lists only "
                                               "$SLICS_WORKSPACES, i.e. ~/.cache/slics/workspaces)")
    p.add_argument("--overwrite", action="store_true", help="replace a workspace folder built from another cache "
                                                             "(files you added there are kept)")
    p.add_argument("--encoder", default=None, help="text encoder for the vocabulary (default: the cache's encoder)")
    p.add_argument("--d0", type=int, nargs="+", default=[5, 10, 15], help="atoms per concept to fit (5 10 15)")
    p.add_argument("--methods", nargs="+", default=None, help="registered methods to fit (default: all)")
    p.add_argument("--n-iter", type=int, default=10)
    p.add_argument("--n-train", type=int, default=None, help="training items (default 60%% of the rest)")
    p.add_argument("--n-val", type=int, default=None, help="validation items (default 500, at most 10%%)")
    p.add_argument("--n-query", type=int, default=None, help="query items (default 1000, at most 20%%)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--mean-file", default=None, help="precomputed centring mean (default: the training mean)")
    p.add_argument("--vocab", default=DEFAULT_VOCABULARY, help=f"caption vocabulary: {VOCABULARY_SPECS}")
    p.add_argument("--n-words", type=int, default=10_000)
    p.add_argument("--info", default=None, metavar="NAME", help="print the summary of an existing workspace")
    add_generator_options(p)
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_workspace)

    p = subparsers.add_parser("emoji-build", help="render, embed and fit the offline emoji workspace (cached)")
    _add_emoji(p)
    p.set_defaults(func=cmd_emoji_build)
    p = subparsers.add_parser("emoji-report", help="quality numbers of the emoji world")
    _add_emoji(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--contact-sheet", default=None, metavar="PNG", help="also write a labelled sheet of random "
                   "query scenes: the scene, its own embedding's image and each concept component's image")
    p.add_argument("--sheet-queries", type=int, default=16, help="query scenes on the contact sheet (16)")
    p.add_argument("--sheet-seed", type=int, default=0, help="seed drawing the contact sheet's queries (0)")
    p.set_defaults(func=cmd_emoji_report)
