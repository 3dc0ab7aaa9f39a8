"""Server CPU of the inspector's views (issue 38) on the emoji world (not a test).

Per pick, on a warm workspace, AppTest runs of the real pages (process CPU and wall of the script run, median of
``--rounds``):

* Atoms: picking another atom (its activation histogram, three example galleries and an item's atoms);
  picking another item whose atoms are listed; a click on one of that item's atoms (it becomes the picked atom);
* Retrieve: picking another query (its atoms beside it);
* Subspaces: picking a point (the previewed item's atoms under the picked points).

and beside them the computation behind the new views alone (no Streamlit; the stored label-free codes already
read): :func:`slics_core.explorer.inspection.item_atom_table` for a new item (NNLS of one item, words of its
atoms) and :func:`~slics_core.explorer.inspection.atom_activation_view` for a new atom.

First visits: ``python -m benchmarks.bench_app --pages --keep-cache DIR`` (every page, in a new process), once
with this tree and once with an older one on the same built world, compares them.

    python -m benchmarks.bench_inspect [--scale 0.2] [--keep-cache DIR] [--rounds 5]
"""
import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np

#: The app whose pages are clicked: this tree's, or ``$SLICS_BENCH_TREE`` (an older checkout, to compare; the
#: picks of widgets it lacks are left out).
ROOT = Path(os.environ.get("SLICS_BENCH_TREE") or Path(__file__).resolve().parent.parent)


def _timed(fn):
    c, t = time.process_time(), time.perf_counter()
    fn()
    return time.perf_counter() - t, time.process_time() - c


def library_costs(ws, rounds):
    """Seconds (wall, CPU) of the new views' computation for a new item and a new atom (median over rounds)."""
    from slics_core.explorer import arrival
    from slics_core.explorer.atom_tables import atom_labels
    from slics_core.explorer.inspection import atom_activation_view, atom_frequencies, item_atom_table

    method, d0 = "S-SLiCS", int(ws.default_d0)
    model = ws.model(method, d0)
    split = arrival.profile_split(ws)
    first = _timed(lambda: arrival.activity_codes(ws, method, d0))
    from slics_core.analysis import atom_codes

    computed = _timed(lambda: atom_codes(model, ws.X[ws.index[split]]))
    codes = arrival.activity_codes(ws, method, d0)
    freq = atom_frequencies(codes)
    words = _timed(lambda: arrival.atom_words(ws, method, d0))
    every = arrival.atom_words(ws, method, d0)
    labels = atom_labels(model.groups_, ws.concept_names)
    rows = ws.index["query"][:rounds]
    items = [_timed(lambda r=r: item_atom_table(model, ws.X[int(r)], labels, freq, every)) for r in rows]
    atoms = [_timed(lambda a=a: atom_activation_view(codes, a, ws.index[split], ws.Y, int(model.groups_[a])))
             for a in range(rounds)]
    return [("label-free codes of the items (read from the store, or computed and stored)", first),
            (f"label-free codes of the {len(ws.index[split])} {split} items, computed", computed),
            ("every atom's words (read from the store, or computed and stored)", words),
            ("item_atom_table, a new item", tuple(np.median(items, axis=0))),
            ("atom_activation_view, a new atom", tuple(np.median(atoms, axis=0)))]


def page_clicks(ws, rounds):
    """(name, wall, CPU) medians of the picks on the real pages (AppTest, warm: every page visited once first)."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=900)
    at.run()
    out = []

    def median(name, acts):
        try:
            times = [_timed(a) for a in acts]
        except (KeyError, IndexError):  # an older tree without the inspector's widgets (compare: ROOT below)
            return
        assert not at.exception, [e.value for e in at.exception]
        out.append((name, *np.median(times, axis=0)))

    at.switch_page("app_pages/atoms.py").run()
    at.switch_page("app_pages/atoms.py").run()
    key = f"atom_{at.session_state['method']}_d0{at.session_state['d0']}"
    median("Atoms: pick another atom",
           [lambda a=a: at.selectbox(key=key).set_value(a).run() for a in range(1, rounds + 1)])

    def pick_item(i):  # options read "#<row> · <labels>"
        box = at.selectbox(key="atom_item")
        box.set_value(int(box.options[min(i, len(box.options) - 1)].split(" ")[0][1:])).run()

    median("Atoms: pick another item (its atoms)", [lambda i=i: pick_item(i) for i in range(1, rounds + 1)])

    def click_atom():
        b = [b for b in at.button if b.key.startswith("open_atom_atoms_")]
        b[-1].click().run()

    median("Atoms: click an item's atom (picks it)", [click_atom for _ in range(rounds)])
    at.switch_page("app_pages/retrieve.py").run()
    queries = [int(q) for q in ws.index["query"][1:rounds + 1]]
    median("Retrieve: pick another query (its atoms too)",
           [lambda q=q: at.selectbox(key="query_pick").set_value(q).run() for q in queries])
    assert at.session_state["query"] == queries[-1]
    at.session_state["n_points"] = 200
    at.switch_page("app_pages/subspaces.py").run()
    at.switch_page("app_pages/subspaces.py").run()
    median("Subspaces: pick a point (the item's atoms too)",  # points 0, 1, ...: the map's first items
           [lambda p=p: at.multiselect(key="picked_points").set_value([p]).run() for p in range(rounds)])
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=float, default=0.2, help="SLICS_EMOJI_SCALE (1 = the app's default sizes)")
    ap.add_argument("--keep-cache", default=None, help="the emoji world's cache folder (built there if empty)")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    os.environ["SLICS_EMOJI_SCALE"] = str(args.scale)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    cache = args.keep_cache or tempfile.mkdtemp(prefix="slics-bench-")
    os.environ["SLICS_EMOJI_CACHE"] = cache
    from slics_core.explorer.emoji_build import open_emoji_workspace

    ws = open_emoji_workspace(cache_dir=cache)
    try:
        rows = library_costs(ws, args.rounds)
    except ImportError:  # an older tree (SLICS_BENCH_TREE on PYTHONPATH): its pages only
        rows = []
    clicks = page_clicks(ws, args.rounds)
    sizes = {k: len(v) for k, v in ws.index.items()}
    print(f"emoji world, scale {args.scale}: {sizes}; {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    width = max(len(r[0]) for r in rows + clicks)
    for name, (wall, cpu) in rows:
        print(f"  {name:<{width}}  wall {wall:7.3f} s  CPU {cpu:7.3f} s")
    for name, wall, cpu in clicks:
        flag = "" if cpu <= 0.3 else "   > 0.3 s CPU"
        print(f"  {name:<{width}}  wall {wall:7.3f} s  CPU {cpu:7.3f} s{flag}")


if __name__ == "__main__":
    main()
