"""The pages' first settings and the split each page reads: what a first visit shows before a visitor picks
anything. The pages' widgets start at these values, and :mod:`slics_core.explorer.arrival` prepares the first
views with exactly them (at build time, :func:`~slics_core.explorer.arrival.prepare_pages`), so a first visit
reads what the build stored."""
from __future__ import annotations

__all__ = ["DEFAULT_K", "MAP_DEFAULTS", "atoms_split", "profile_split", "sweep_splits"]

#: The Subspaces page's first view: every one of its map widgets starts at these values (app_pages/subspaces.py
#: reads them), and :func:`~slics_core.explorer.arrival.prepare_pages` prepares exactly this view at build time.
MAP_DEFAULTS = {"kinds": ("embedding", "component", "atom"), "component": "partial", "n_points": 200,
                "concepts": (), "split": "pool", "seed": 0}
#: The app's shared k before a visitor picks one (app_pages/_state.py, which the pages read it from): k of
#: mAP@k on Evaluate and images per gallery on Retrieve / Mix. Evaluate's first view is prepared at this k.
DEFAULT_K = 20


def atoms_split(ws) -> str:
    """The items the Atoms page sparse-codes: the validation split (the paper's), else the training split."""
    return "val" if len(ws.index.get("val", [])) else "train"


def profile_split(ws) -> str:
    """The labelled items of the Atoms page's label profile: the pool, else (a sharded pool carries no labels)
    :func:`atoms_split`."""
    return "pool" if len(ws.index.get("pool", [])) else atoms_split(ws)


def sweep_splits(ws) -> tuple:
    """The splits Evaluate's d0 sweep scores: validation (where d0 is chosen) and query, those with items."""
    return tuple(s for s in ("val", "query") if len(ws.index.get(s, [])))
