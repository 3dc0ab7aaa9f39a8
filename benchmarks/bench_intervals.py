"""What the methods table's bootstrap intervals add to Evaluate's first visit on the emoji world (not a test).

Each run is a new process (AppTest of the real app, the workspace already built): the Evaluate page's first visit,
wall and process CPU seconds, in three kinds that alternate ``--rounds`` times (medians printed):
``without`` (``scoring.intervals_of`` replaced by NaNs, scores computed on the visit), ``with`` (intervals, scores
computed on the visit: the workspace's stored scores are removed first) and ``stored`` (the scores and intervals
read from the workspace's store, as the build prepares them). On a loaded machine read the CPU column.

    python -m benchmarks.bench_intervals [--rounds 3]
"""
import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The kinds of visit, in the order they alternate.
KINDS = ("without", "with", "stored")


def _visit(kind: str) -> dict:
    """One first visit of Evaluate in this process."""
    import math

    from streamlit.testing.v1 import AppTest

    if kind == "without":
        from slics_core.explorer import scoring

        scoring.intervals_of = lambda per_query, **kw: {key: (math.nan, math.nan) for key in per_query}
    from slics_core.explorer.arrival import STORE
    from slics_core.explorer.emoji_build import open_emoji_workspace

    ws = open_emoji_workspace()
    if kind != "stored":  # scores computed on the visit, as before they were stored at build
        for entry in (ws.path / STORE).glob("scores-*.npz"):
            entry.unlink()
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600).run()
    t, c = time.perf_counter(), time.process_time()
    at.switch_page("app_pages/evaluate.py").run()
    if at.exception:
        raise SystemExit(f"Evaluate failed: {at.exception}")
    return {"wall_s": time.perf_counter() - t, "cpu_s": time.process_time() - c}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--one", choices=KINDS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(_visit(args.one)))
        return
    got = {kind: [] for kind in KINDS}
    for _ in range(args.rounds):
        for kind in KINDS:  # "stored" right after "with", which stored the real intervals
            out = subprocess.run([sys.executable, "-m", "benchmarks.bench_intervals", "--one", kind], cwd=ROOT,
                                 capture_output=True, text=True, env=dict(os.environ), check=True)
            got[kind].append(json.loads(out.stdout.strip().splitlines()[-1]))
    for kind, runs in got.items():
        wall = sorted(r["wall_s"] for r in runs)[len(runs) // 2]
        cpu = sorted(r["cpu_s"] for r in runs)[len(runs) // 2]
        print(f"Evaluate first visit, {kind}: wall {wall:.2f} s, CPU {cpu:.2f} s (median of {len(runs)})")


if __name__ == "__main__":
    main()
