"""Text queries of two objects on the emoji world (issue 24, item 5): a fixed set of 50 phrases.

Not a test: the numbers a retrained text tower must beat. Each phrase names two emoji categories of
different supercategories ("a cat next to a pizza"); the set is drawn once from the catalog with a fixed
seed, so before/after runs use the same phrases. For every phrase, through the app's own text path
(`embed_text_query`, S-SLiCS at the workspace's d0):

* pre-selection: both objects' concepts among the two best-scoring concepts (the app pre-selects one);
* unfiltered P@20: pool images whose labels hold both objects' concepts, among the top 20 by the whole
  text embedding;
* concept-gallery P@20: for each object, the gallery ranked by that concept's component (ṽⱼ) of the text,
  relevant when the image holds *that object* (its sub-label), averaged over the two;
* zero-shot accuracy of the encoder on the workspace's concept names (images -> names, the U-SLiCS input).

    python -m benchmarks.bench_text_queries [--scale 1.0] [--cache DIR]
"""
import argparse
import os
import time

import numpy as np

N_PHRASES = 50


def phrases(ws, n=N_PHRASES, seed=0):
    """``[(phrase, sub_a, sub_b)]``: two sub-labels (emoji categories) of different concepts, fixed by ``seed``."""
    from slics_core.emoji.phrases import benchmark_phrases

    return benchmark_phrases(ws.sub_names, ws.sub_to_concept, n=n, seed=seed)


def measure(ws, k=20):
    from slics_core.explorer.encoding import embed_text_query, load_query_encoder
    from slics_core.explorer.narration import text_tower_check
    from slics_core.explorer.pool import memory_pool
    from slics_core.explorer.queries import concept_scores

    enc = load_query_encoder(ws)
    model = ws.model("S-SLiCS", ws.default_d0)
    pool = memory_pool(ws.X, ws.index["pool"])
    s2c = np.asarray(ws.sub_to_concept)
    pre, unf, gal = [], [], []
    for text, a, b in phrases(ws):
        _, x = embed_text_query(ws, enc, text)
        ca, cb = int(s2c[a]), int(s2c[b])
        sc = concept_scores(model, x)
        pre.append({ca, cb} <= set(np.argsort(-sc)[:2].tolist()))
        rows = pool.search(x, k).rows
        unf.append(float(np.mean(ws.Y[rows, ca] & ws.Y[rows, cb])))
        V = model.project(x[None], None)[0]
        p = []
        for sub, c in ((a, ca), (b, cb)):
            if np.linalg.norm(V[c]) <= 1e-12:
                p.append(0.0)
                continue
            r = pool.search(V[c], k).rows
            p.append(float(np.mean(ws.Z[r, sub])))
        gal.append(float(np.mean(p)))
    zs = text_tower_check(ws)
    return {"preselect_both": float(np.mean(pre)), "unfiltered_P@20_both": float(np.mean(unf)),
            "concept_gallery_P@20_object": float(np.mean(gal)), "zero_shot_top1": zs["accuracy"],
            "zero_shot_chance": zs["chance"], "encoder": ws.encoder}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=float, default=1.0, help="SLICS_EMOJI_SCALE")
    ap.add_argument("--cache", default=None, help="emoji cache (default $SLICS_EMOJI_CACHE)")
    args = ap.parse_args()
    os.environ["SLICS_EMOJI_SCALE"] = str(args.scale)
    from slics_core.explorer.emoji_build import open_emoji_workspace

    ws = open_emoji_workspace(cache_dir=args.cache)
    t, c = time.perf_counter(), time.process_time()
    res = measure(ws)
    print(f"emoji world, scale {args.scale}, {len(ws.index['pool'])} pool images, {N_PHRASES} phrases "
          f"(e.g. {phrases(ws)[0][0]!r}); {time.perf_counter() - t:.1f} s wall, {time.process_time() - c:.1f} s CPU")
    for key, v in res.items():
        print(f"  {key:<30} {v:.3f}" if isinstance(v, float) else f"  {key:<30} {v}")


if __name__ == "__main__":
    main()
