"""slics_core.explorer.stability_runs: the Evaluate page's background stability run, off the page."""
from pathlib import Path

import numpy as np

from slics_core.explorer.arrival import STORE
from slics_core.explorer.scoring import eval_view
from slics_core.explorer.stability_runs import (
    StabilityRun,
    StabilitySettings,
    atom_frame,
    n_active_frame,
    pairs_frame,
    stability_frame,
    stored_result,
)
from slics_core.stability import seed_stability


def test_a_background_run_gives_seed_stabilitys_numbers_and_stores_them(ws):
    for old in (Path(ws.path) / STORE).glob("stability-*.npz"):  # what an earlier run of this test stored
        old.unlink()
    settings = StabilitySettings(n_seeds=2, d0=int(ws.default_d0), batch_size=150, n_iter=1, n_active=(2,))
    run = StabilityRun(ws, settings).start()
    run.join(600)
    snap = run.snapshot()
    assert snap["finished"] and snap["error"] is None
    assert (snap["done"], snap["total"]) == (5, 5)  # two seeds, S-SVD and U-SLiCS to compare, one S~
    data, split = eval_view(ws)
    records, summary, atoms = seed_stability(data, split, range(2), n_atoms=settings.d0, n_iter=1, batch_size=150)
    frame = stability_frame(snap["result"])
    # one row per atom: its match in seed 1, and in the S-SVD and U-SLiCS dictionaries
    per_atom = atom_frame(snap["result"])
    assert len(per_atom) == settings.d0 * ws.n_concepts
    assert per_atom["seed 1 atom"].tolist() == [r["seed 1 atom"] for r in atoms["seeds"]]
    np.testing.assert_allclose(per_atom["mean cos"], [r["mean_cos"] for r in atoms["seeds"]])
    methods = atom_frame(snap["result"], "methods")
    np.testing.assert_allclose(methods["S-SVD cos"], [r["S-SVD cos"] for r in atoms["methods"]])
    assert pairs_frame(snap["result"])["dictionaries"].tolist() == ["S-SLiCS vs S-SVD", "S-SLiCS vs U-SLiCS",
                                                                    "S-SVD vs U-SLiCS"]
    np.testing.assert_allclose(frame["matched cos"], [r["matched_cos"] for r in records])
    np.testing.assert_allclose(frame["Gen. mAP@20 mean"], [r["general_mean"] for r in records])
    assert n_active_frame(snap["result"], 20)["S̃"].tolist() == [2]
    again = stored_result(ws, settings)
    assert again is not None and again["summary"]["matched_cos"] == summary["matched_cos"]


def test_a_failed_run_reports_one_line(ws):
    settings = StabilitySettings(n_seeds=2, d0=int(ws.default_d0), batch_size=50, n_active=(ws.n_concepts + 1,))
    run = StabilityRun(ws, settings).start()
    run.join(60)
    snap = run.snapshot()
    assert snap["finished"] and snap["result"] is None
    assert "S~ (--n-active) must be between 1" in snap["error"] and "\n" not in snap["error"]
