"""How long the app's work takes on the emoji world (not a test).

The issue asks that every page does real work "in about a minute on a laptop CPU" and that
the next start is ready in a few seconds. This times, on this machine:

* the cold start: render + embed + fit the default emoji workspace into an empty cache;
* the warm start: opening the cached workspace;
* the computation behind each page for one query (what a rerun costs, without Streamlit).

    python benchmarks/bench_app.py [--scale 1.0] [--keep-cache DIR]
"""
import argparse
import os
import shutil
import tempfile
import time

import numpy as np


def _t(fn, repeat=1):
    ts, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts)), out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=float, default=1.0, help="SLICS_EMOJI_SCALE (1 = the app's default sizes)")
    ap.add_argument("--keep-cache", default=None, help="build into this folder and keep it")
    args = ap.parse_args()
    os.environ["SLICS_EMOJI_SCALE"] = str(args.scale)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from slics_core.explorer import scoring
    from slics_core.explorer.queries import concept_galleries, concept_scores, query_components
    from slics_core.explorer.maps import atom_heatmaps, caption_table, subspace_map
    from slics_core.explorer.sphere import PRESETS, decompose, direction
    from slics_core.explorer.workspace import (
        embed_query,
        load_query_encoder,
        load_workspace_generator,
        open_emoji_workspace,
        workspace_vocabulary,
    )

    cache = args.keep_cache or tempfile.mkdtemp(prefix="slics-bench-")
    rows = []
    try:
        t_cold, ws = _t(lambda: open_emoji_workspace(cache_dir=cache))
        rows.append(("cold start: render, embed, fit (empty cache)", t_cold))
        t_warm, ws = _t(lambda: open_emoji_workspace(cache_dir=cache), repeat=3)
        rows.append(("warm start: open the cached workspace", t_warm))
        q = int(ws.index["query"][np.flatnonzero(ws.Y[ws.index["query"]].sum(1) >= 2)[0]])
        model = ws.model("S-SLiCS")
        x = ws.X[q]
        concepts = np.flatnonzero(ws.Y[q])
        pool = ws.index["pool"]

        t_enc, enc = _t(lambda: load_query_encoder(ws))
        rows.append(("load the query encoder", t_enc))
        rows.append(("embed one uploaded image", _t(lambda: embed_query(ws, enc, ws.image(q)), repeat=5)[0]))

        def retrieve():
            V = query_components(model, x)
            concept_scores(model, x[None])
            return concept_galleries(V, x, ws.X, pool, concepts, 20, Y=ws.Y, Z=ws.Z,
                                     sub_to_concept=ws.sub_to_concept, query_sub=ws.Z[q])

        rows.append(("Retrieve: scores + galleries, all picked concepts, k=20", _t(retrieve, repeat=5)[0]))
        rows.append(("Subspaces: t-SNE map, 200 items + components + atoms",
                     _t(lambda: subspace_map(model, ws.X, ws.Y, ws.index["pool"], n_points=200))[0]))
        rows.append(("Atoms: co-occurrence (OMP on val) + cosines",
                     _t(lambda: atom_heatmaps(model, ws.X[ws.index["val"]]))[0]))
        t_voc, (words, W) = _t(lambda: workspace_vocabulary(ws))
        rows.append(("Captions: embed the vocabulary (first time)", t_voc))
        rows.append(("Captions: S-SLiCS + U-SLiCS table",
                     _t(lambda: caption_table({m: ws.model(m) for m in ("S-SLiCS", "U-SLiCS")},
                                              ws.concept_names, words, W))[0]))
        t_gl, gen = _t(lambda: load_workspace_generator(ws))
        rows.append(("Generate: load generator + fit alignment", t_gl))
        V = model.project(x[None], None)[0][concepts]
        rows.append((f"Generate: {1 + len(concepts)} images (query + components)",
                     _t(lambda: gen.generate(np.vstack([x[None], V])), repeat=3)[0]))
        rows.append(("Evaluate: methods table (3 methods x 2 modes + UF, query split)",
                     _t(lambda: scoring.methods_table(ws))[0]))
        rows.append((f"Evaluate: d0 sweep ({len(ws.d0_values)} d0, val + query, both modes)",
                     _t(lambda: scoring.sweep_d0(ws))[0]))
        scene = next(iter(PRESETS.values()))()
        rows.append(("Learn: decompose x* on the 3-D cones",
                     _t(lambda: decompose(scene, direction(30.0, 20.0)), repeat=20)[0]))
    finally:
        if not args.keep_cache:
            shutil.rmtree(cache, ignore_errors=True)
    sizes = {k: len(v) for k, v in ws.index.items()}
    print(f"emoji world, scale {args.scale}: {sizes}, d0 {ws.d0_values}, {os.cpu_count()} CPUs")
    width = max(len(r[0]) for r in rows)
    for name, sec in rows:
        print(f"{name:<{width}}  {sec:8.3f} s")
    print(f"cold / warm start ratio: {t_cold / max(t_warm, 1e-9):.0f}x")


if __name__ == "__main__":
    main()
