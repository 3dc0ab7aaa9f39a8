"""What each page's first view costs computed (no store) and read back from the workspace's store, in one process:
the views of :mod:`slics_core.explorer.arrival` at the pages' first settings (:mod:`slics_core.explorer.page_settings`),
wall and CPU seconds side by side, with the 1-minute load average.

The workspace's store must hold the build's first views (``slics workspace`` / ``slics emoji-build`` prepare them);
"computed" is the same function on a copy of the workspace object without a folder (nothing is read or written).

    python -m benchmarks.bench_views WORKSPACE_FOLDER
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import time

from slics_core.explorer import arrival, page_settings, scoring
from slics_core.explorer.atom_tables import default_sparsity
from slics_core.explorer.workspace_files import load_workspace
from slics_core.methods import preferred_method
from slics_core.metrics import NORMALIZATIONS


def timed(f):
    w, c = time.perf_counter(), time.process_time()
    f()
    return time.perf_counter() - w, time.process_time() - c


def views(ws):
    """``(name, call)`` of every first view of the default dictionary (the Evaluate scores: the methods table)."""
    method, d0 = preferred_method(ws.dictionary_methods()), int(ws.default_d0)
    split = page_settings.atoms_split(ws)
    model = ws.model(method, d0)
    out = [("Atoms matrices", lambda: arrival.atom_matrices(ws, method, d0, default_sparsity(model), split)),
           ("Atoms health table", lambda: arrival.health_table(ws, method, d0)),
           ("Atoms label profile", lambda: arrival.label_energy(ws, method, d0)),
           ("Atoms activations", lambda: arrival.activity_codes(ws, method, d0)),
           ("Subspaces map points", lambda: arrival.map_points_view(ws, method, d0))]
    if not ws.sharded:
        out.append(("Atoms pool codes", lambda: arrival.pool_codes(ws, method, d0)))
    out += [(f"Evaluate health of {m}", lambda m=m: arrival.health_numbers(ws, m, d0, split))
            for m in ws.dictionary_methods()]
    if "query" in page_settings.sweep_splits(ws):
        jobs = scoring.table_jobs(ws, d0, split="query")
        out.append((f"Evaluate methods table ({len(jobs)} jobs, intervals)",
                    lambda: [arrival.job_scores(ws, j, page_settings.DEFAULT_K, NORMALIZATIONS[0], intervals=True)
                             for j in jobs]))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", help="a saved workspace whose store the build filled")
    a = ap.parse_args()
    stored = load_workspace(a.folder)
    fresh = dataclasses.replace(stored, path=None)  # no store, nothing kept: every view computed
    print(f"workspace {stored.name} ({len(stored)} items, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f})")
    print(f"  {'view':<44} computed wall / CPU s   stored wall / CPU s")
    for (name, compute), (_, read) in zip(views(fresh), views(stored)):
        cw, cc = timed(compute)
        sw, sc = timed(read)
        print(f"  {name:<44} {cw:7.3f} / {cc:7.3f}       {sw:7.3f} / {sc:7.3f}")


if __name__ == "__main__":
    main()
