"""``slics emoji-build`` and ``slics emoji-report``: the offline emoji world."""
from __future__ import annotations

import json
import sys


def _config(args):
    from slics_core.emoji.workspace import WorkspaceConfig

    d0 = tuple(args.d0) if args.d0 else WorkspaceConfig().d0_values
    return WorkspaceConfig(n_train=args.n_train, n_val=args.n_val, n_query=args.n_query, n_pool=args.n_pool,
                           d0_values=d0)


def _progress(quiet):
    def report(stage, done, total):
        if not quiet:
            print(f"[emoji] {stage}: {done}/{total}", file=sys.stderr, flush=True)
    return report


def _add_common(p):
    p.add_argument("--cache-dir", default=None, help="workspace cache root (default $SLICS_EMOJI_CACHE or "
                                                     "~/.cache/slics/emoji)")
    p.add_argument("--n-train", type=int, default=3000)
    p.add_argument("--n-val", type=int, default=500)
    p.add_argument("--n-query", type=int, default=1000)
    p.add_argument("--n-pool", type=int, default=3000)
    p.add_argument("--d0", type=int, nargs="+", default=None,
                   help="dictionary sizes to fit (default 3 5 8 10 15 20); the best on validation is used")
    p.add_argument("--rebuild", action="store_true", help="ignore the cache")
    p.add_argument("--quiet", action="store_true")


def cmd_build(args) -> int:
    from slics_core.emoji.workspace import load_or_build_workspace

    ws = load_or_build_workspace(args.cache_dir, _config(args), _progress(args.quiet), rebuild=args.rebuild)
    print(f"emoji workspace ready at {ws.path}: {len(ws.images)} scenes, "
          f"{len(ws.models)} fitted dictionaries, d0 chosen on validation: {ws.chosen_d0}")
    return 0


def cmd_report(args) -> int:
    from slics_core.emoji.report import emoji_report
    from slics_core.emoji.workspace import load_or_build_workspace

    prog = _progress(args.quiet)
    ws = load_or_build_workspace(args.cache_dir, _config(args), prog, rebuild=args.rebuild)
    rep = emoji_report(ws, prog)
    if not args.quiet:
        print(f"[emoji] d0 chosen on validation (sub-label mAP@20): {rep['chosen_d0']}", file=sys.stderr)
    if args.json:
        print(json.dumps(rep, indent=1))
    else:
        for k, v in rep.items():
            print(f"{k}: {v}")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("emoji-build", help="render, embed and fit the offline emoji workspace (cached)")
    _add_common(p)
    p.set_defaults(func=cmd_build)
    p = subparsers.add_parser("emoji-report", help="quality numbers of the emoji world")
    _add_common(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_report)
