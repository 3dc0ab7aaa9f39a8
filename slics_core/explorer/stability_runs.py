"""The Evaluate page's stability section: seed stability and U-SLiCS at chosen S~ of a workspace, computed in
a background thread with progress, and stored in the workspace's store (:mod:`slics_core.explorer.arrival`).

* :class:`StabilitySettings` - what one run depends on (its stored entry is named by them).
* :func:`stability_result` - the stored result of some settings, or computes and stores it:
  :func:`slics_core.stability.seed_stability` (the rule lives there) on the workspace's splits
  (:func:`slics_core.explorer.scoring.eval_view`) and :func:`slics_core.stability.evaluate_n_active`.
* :class:`StabilityRun` - one such run in a daemon thread (:mod:`slics_core.explorer.background`): progress,
  error and result, thread-safe, for any number of readers (every tab of the app).
* :func:`stability_frame` / :func:`n_active_frame` / :func:`atom_frame` / :func:`pairs_frame` - the result as
  tables (the page shows them, CSV exports them): per concept, per S~, per atom (across seeds or methods), per
  pair of dictionaries.

Choices: the seeds' fits are mini-batch fits (``batch_size``; a full-batch fit may not depend on the seed, and
then every matched cos is 1); the compared methods (S-SVD, U-SLiCS) are fitted with the first seed and the same
batches; the S~ rows are one full-batch fit each (seed 0), as the workspace's own fits.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass

import pandas as pd

from slics_core.evaluation import RECALL_KS, SWEEP_METHOD, SWEEP_MODE, recall_keys
from slics_core.explorer.arrival import stored, stored_only
from slics_core.explorer.background import BackgroundRun as _Run
from slics_core.explorer.scoring import eval_view
from slics_core.stability import (
    COMPARE_METHODS,
    N_ACTIVE_METHOD,
    check_n_active,
    evaluate_n_active,
    seed_stability,
)

__all__ = ["StabilitySettings", "StabilityRun", "stability_result", "stored_result", "stability_frame",
           "n_active_frame", "atom_frame", "pairs_frame", "N_ACTIVE_DEFAULT"]

#: The S~ values the page offers first.
N_ACTIVE_DEFAULT = (1, 2, 3, 4)
_KIND = "stability"
_NAMES = ("seeds", "n_active")


@dataclass(frozen=True)
class StabilitySettings:
    """One stability run: ``n_seeds`` mini-batch fits of S-SLiCS at ``d0`` (``batch_size``, ``n_iter`` epochs),
    U-SLiCS at every ``S~`` in ``n_active`` (may be empty), all scored at ``k`` with ``normalization``."""

    n_seeds: int
    d0: int
    batch_size: int
    n_iter: int = 10
    k: int = 20
    normalization: str = "retrieved"
    n_active: tuple = N_ACTIVE_DEFAULT

    def steps(self) -> int:
        """Fits the run makes (its progress counts them): the seeds, the compared methods, the S~ rows (a method
        the workspace cannot fit is skipped, so the count may end one or two early)."""
        return int(self.n_seeds) + len(COMPARE_METHODS) + len(self.n_active)


def _json(obj) -> str:
    return json.dumps(obj, default=lambda o: o.item() if hasattr(o, "item") else str(o))


def _description(settings: StabilitySettings) -> dict:
    # "matching": stored results of the |cos| matching (before per-atom rows) are not read as these
    return dict(asdict(settings), n_active=list(settings.n_active), method=SWEEP_METHOD, mode=SWEEP_MODE,
                matching="signed", compare=list(COMPARE_METHODS))


def _decode(got) -> dict:
    seeds = json.loads(str(got["seeds"]))
    return {"records": seeds["records"], "summary": seeds["summary"], "atoms": seeds["atoms"],
            "n_active": json.loads(str(got["n_active"]))}


def stored_result(ws, settings: StabilitySettings) -> dict | None:
    """The stored result of ``settings`` (:func:`stability_result`'s dict), or None when none is stored."""
    got = stored_only(ws, _KIND, _description(settings), _NAMES)
    return None if got is None else _decode(got)


def stability_result(ws, settings: StabilitySettings, progress=None) -> dict:
    """Seed stability and the S~ rows of ``ws`` with ``settings``, from the store or computed and stored.

    ``progress(line, done, total)`` is called after every fit. Returns ``records``, ``summary`` and ``atoms``
    (:func:`slics_core.stability.seed_stability`) and ``n_active`` (rows of
    :func:`slics_core.stability.evaluate_n_active`; empty when U-SLiCS is not in the workspace).
    """
    s = settings
    if s.n_active:
        check_n_active(s.n_active, ws.n_concepts)

    def compute():
        data, split = eval_view(ws)
        done = [0]

        def step(line):
            done[0] += 1
            if progress is not None:
                progress(line, done[0], s.steps())

        records, summary, atoms = seed_stability(data, split, range(int(s.n_seeds)), n_atoms=int(s.d0),
                                                 n_iter=int(s.n_iter), batch_size=int(s.batch_size), k=int(s.k),
                                                 mode=SWEEP_MODE, normalization=s.normalization, progress=step)
        rows = []
        if s.n_active and N_ACTIVE_METHOD in ws.methods:
            rows = evaluate_n_active(data, split, list(s.n_active), n_atoms=int(s.d0), n_iter=int(s.n_iter),
                                     seeds=(0,), k=int(s.k), mode=SWEEP_MODE, normalization=s.normalization,
                                     on_run=lambda: step(f"{N_ACTIVE_METHOD} fitted"))
            for r in rows:
                r.pop("runs", None)
        return {"seeds": _json({"records": records, "summary": summary, "atoms": atoms}), "n_active": _json(rows)}

    return _decode(stored(ws, _KIND, _description(s), compute, names=_NAMES))


class StabilityRun(_Run):
    """:func:`stability_result` of one workspace and settings in a daemon thread
    (:class:`slics_core.explorer.background.BackgroundRun`), read by any number of readers."""

    def __init__(self, ws, settings: StabilitySettings):
        self.settings = settings
        super().__init__(lambda progress: stability_result(ws, settings, progress), settings.steps(),
                         name="slics-stability")


def _pm(mean, std) -> str:
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return ""
    return f"{mean:.3f}" if std is None or (isinstance(std, float) and math.isnan(std)) else f"{mean:.3f} ± {std:.3f}"


def stability_frame(result) -> pd.DataFrame:
    """One row per concept: ``concept``, ``matched cos``, ``min cos`` and the mAP@k mean and std over the seeds."""
    k = result["summary"]["k"]
    df = pd.DataFrame(result["records"])
    return pd.DataFrame({"concept": df["concept"], "matched cos": df["matched_cos"], "min cos": df["min_cos"],
                         f"Gen. mAP@{k} mean": df["general_mean"], f"Gen. mAP@{k} std": df["general_std"],
                         f"Sub. mAP@{k} mean": df["sub_mean"], f"Sub. mAP@{k} std": df["sub_std"]})


def atom_frame(result, kind="seeds") -> pd.DataFrame:
    """One row per atom of the first seed's fit (:func:`slics_core.stability.atom_matches`): ``concept``, ``atom``,
    then its matched atom and signed cos in every later seed (``kind="seeds"``) or every compared method's
    dictionary (``kind="methods"``), then the mean and the minimum cos. Empty when there is none."""
    rows = result["atoms"][kind]
    df = pd.DataFrame(rows)
    return df.rename(columns={"mean_cos": "mean cos", "min_cos": "min cos"}) if len(df) else df


def pairs_frame(result) -> pd.DataFrame:
    """One row per pair of dictionaries (the first seed's fit and each compared method's): mean and smallest
    matched cos over the atoms."""
    pairs = result["atoms"]["pairs"]
    return pd.DataFrame({"dictionaries": [f"{p['a']} vs {p['b']}" for p in pairs],
                         "matched cos": [p["matched_cos"] for p in pairs], "min cos": [p["min_cos"] for p in pairs]})


def n_active_frame(result, k) -> pd.DataFrame:
    """One row per S~: ``Method``, ``S~``, mAP@k and Recall@20 / @100 (general and sub-labels)."""
    rows = result["n_active"]
    cols = {"Method": [r["method"] for r in rows], "S̃": [r["n_active"] for r in rows],
            f"Gen. mAP@{k}": [r.get("general_mean") for r in rows], f"Sub. mAP@{k}": [r.get("sub_mean") for r in rows]}
    for rk in RECALL_KS:
        g, s = recall_keys(rk)
        cols[f"Gen. Recall@{rk}"] = [r.get(f"{g}_mean") for r in rows]
        cols[f"Sub. Recall@{rk}"] = [r.get(f"{s}_mean") for r in rows]
    return pd.DataFrame(cols)
