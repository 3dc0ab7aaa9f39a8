"""``slics workspace``: turn an embedded dataset into a workspace the app can open."""
from __future__ import annotations

import json
import sys


def cmd_workspace(args) -> int:
    from pathlib import Path

    from slics_core.workspace import build_dataset_workspace, load_workspace, workspaces_root

    if args.info:
        print(json.dumps(load_workspace(args.info).summary(), indent=1))
        return 0
    if not args.cache:
        raise ValueError("slics workspace needs --cache (an embedding cache from `slics embed`) or --info DIR")
    out = Path(args.out) if args.out else workspaces_root() / (args.name or Path(args.cache).resolve().name)

    def progress(stage, done, total):
        if not args.quiet:
            print(f"[workspace] {stage}: {done}/{total}", file=sys.stderr, flush=True)

    ws = build_dataset_workspace(args.cache, out, d0_values=tuple(args.d0), n_iter=args.n_iter,
                                 n_train=args.n_train, n_val=args.n_val, n_query=args.n_query, seed=args.seed,
                                 name=args.name, progress=progress)
    s = ws.summary()
    print(f"workspace {s['name']!r} written to {out}: {s['n_items']} items, splits {s['splits']}, "
          f"{len(ws.models)} fitted dictionaries (d0 {s['d0_values']}, default {ws.default_d0})")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("workspace", help="split, fit S-SVD/S-SLiCS/U-SLiCS for several d0 and save a "
                                                "workspace the app can open")
    p.add_argument("--cache", default=None, help="embedding cache directory (from `slics embed`)")
    p.add_argument("--out", default=None, help="workspace folder (default $SLICS_WORKSPACES/<name>, "
                                               "i.e. ~/.cache/slics/workspaces/<name>, where the app lists them)")
    p.add_argument("--name", default=None, help="display name (default: the cache folder's name)")
    p.add_argument("--d0", type=int, nargs="+", default=[5, 10, 15], help="atoms per concept to fit (5 10 15)")
    p.add_argument("--n-iter", type=int, default=10)
    p.add_argument("--n-train", type=int, default=None, help="training items (default 60%% of the rest)")
    p.add_argument("--n-val", type=int, default=500)
    p.add_argument("--n-query", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--info", default=None, metavar="DIR", help="print the summary of an existing workspace")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_workspace)
