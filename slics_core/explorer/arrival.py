"""The views module: what the pages show on arrival, each first view one function that reads the workspace's
store and computes and writes it when it is missing, used both by :func:`prepare_pages` (at build time) and by
the page (so a page never computes a first view its own way).

Views: Evaluate's rankings and scores (:func:`job_rankings`, :func:`job_scores`: scores with or without their
intervals), the dictionary health (:func:`health_table`, the Atoms table; :func:`health_numbers`, Evaluate's
line, counted from that table: one route), the Subspaces map (:func:`map_points_view`, :func:`map_layout_timed`,
:func:`known_map_layout`), the Atoms matrices, pool codes, label-profile energies, label-free codes and atoms'
words (:func:`atom_matrices`, :func:`pool_codes` / :func:`pool_top_items`, :func:`label_energy`,
:func:`activity_codes`, :func:`atom_words`). The settings a first view is made with (``DEFAULT_K``, the map's
defaults, which split each page reads) live in :mod:`slics_core.explorer.page_settings`; what is kept in memory
per process is kept on the workspace (:meth:`slics_core.explorer.workspace.Workspace.remember`).

What the pages need on arrival, computed once per workspace and kept in its folder for every process.

A page's first visit in a new server process used to redo work that depends only on the workspace:
Evaluate ranked every job of its d0 sweep and methods table, Subspaces ran t-SNE, Atoms sparse-coded
the validation items and the pool. These results are stored as ``.npz`` entries in the folder
``<workspace>/pagecache/`` (:data:`STORE`, named by the workspace model:
:data:`slics_core.explorer.workspace.PAGE_STORE`): a page reads an entry when it is there and writes it when it
computed one, so every process on the machine (a classroom's two servers, a restart) shares them, and
:func:`prepare_pages` fills the defaults at build time (``slics workspace``, ``slics emoji-build`` and the
app's background build call it through :func:`slics_core.explorer.build.build_workspace`).

Rules: an entry is named by what it was computed from (a hash of the inputs' description), so a stale
entry is never read; saving a workspace (``slics workspace``, a rebuild) removes the store, whose entries
describe the previous build. Entries are written
to a temporary file and renamed (a concurrent reader never sees half a file); a file over
:data:`MAX_ENTRY_BYTES`, unreadable, or missing an array is recomputed; at most :data:`MAX_ENTRIES` are
kept (least recently used go). A folder that cannot be written is used read-only, or not at all.
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
import time
import zipfile
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pandas as pd

from slics_core import __version__
from slics_core.analysis import HEALTH_FLAGS, HEALTH_RULES, atom_codes
from slics_core.captions import atom_word_ranking
from slics_core.evaluation import SWEEP_METHOD
from slics_core.explorer import scoring
from slics_core.explorer.atom_tables import (
    MAX_TOP_ITEMS,
    atom_health,
    atom_heatmaps,
    codes_top_items,
    concept_energy,
    default_sparsity,
    health_summary,
    item_codes,
    stream_atom_top_items,
)
from slics_core.explorer.encoding import prepared_vocabulary
from slics_core.explorer.layouts import tsne_embedding, tsne_fit
from slics_core.explorer.maps import map_points, map_sample
from slics_core.explorer.page_settings import DEFAULT_K, MAP_DEFAULTS, atoms_split, profile_split, sweep_splits
from slics_core.explorer.workspace import PAGE_STORE as STORE
from slics_core.explorer.workspace_files import load_workspace
from slics_core.formats import atomic_save_npz, load_npz
from slics_core.methods import preferred_method
from slics_core.metrics import NORMALIZATIONS
from slics_core.tasks import choose_jobs, one_thread, run_tasks

__all__ = ["ATOM_WORDS", "SCORES_VERSION", "STORE", "activity_codes", "atom_matrices", "atom_words",
           "default_map_points", "health_numbers", "health_table", "job_rankings", "job_scores", "kept_embedding",
           "known_map_layout", "label_energy", "layout_name", "map_embedding", "map_layout", "map_layout_timed",
           "map_points_view", "page_task_bytes", "pool_codes", "pool_top_items", "prepare_pages", "prepared", "stored",
           "stored_map_layout"]

MAX_ENTRY_BYTES = 256 * 2**20
MAX_ENTRIES = 512


def _folder(ws) -> Path | None:
    """The workspace's store folder, or None (a workspace being built, or not saved)."""
    if getattr(ws, "building", None) is not None or getattr(ws, "path", None) is None:
        return None
    path = Path(ws.path)
    return path / STORE if path.is_dir() else None


def _name(ws, kind: str, description) -> str:
    """An entry's file name: its kind and a digest of its description and of the build it was computed from
    (``ws.build_id``), so that one build's views are never read as another's."""
    described = {"build": getattr(ws, "build_id", ""), "description": description}
    digest = hashlib.sha256(json.dumps(described, sort_keys=True, default=str).encode()).hexdigest()[:24]
    return f"{kind}-{digest}.npz"


def _read(path: Path, names) -> dict | None:
    """The entry's arrays, or None when it is missing, too large, damaged or lacks one of ``names``.

    The archive's headers are checked (:func:`slics_core.formats.load_npz`: declared sizes against the
    file) before any array is read, so a forged entry cannot inflate into a huge allocation.
    """
    try:
        if not path.is_file() or path.stat().st_size > MAX_ENTRY_BYTES:
            return None
        with zipfile.ZipFile(path) as archive:
            members = [i.filename.removesuffix(".npy") for i in archive.infolist()]
        out = load_npz(path, {}, optional={m: "biufU" for m in members})
        if not set(names) <= set(out):
            return None
        os.utime(path)  # recently used
        return out
    except (OSError, ValueError, EOFError, zipfile.BadZipFile):
        return None


def _prune(folder: Path) -> None:
    entries = sorted(folder.glob("*.npz"), key=lambda p: p.stat().st_mtime)
    for p in entries[:max(0, len(entries) - MAX_ENTRIES)]:
        try:
            p.unlink()
        except OSError:
            pass


def _write(folder: Path, path: Path, arrays: dict) -> None:
    try:
        folder.mkdir(exist_ok=True)
        atomic_save_npz(path, **arrays)
        _prune(folder)
    except OSError:
        pass  # a read-only workspace: the result is still returned, only not shared


def stored(ws, kind: str, description, compute, names=None) -> dict:
    """The arrays ``compute()`` returns (a dict of ndarrays), read from ``ws``'s store when an entry made from
    the same ``description`` is there, else computed and stored.

    ``description``: JSON-able description of everything the result depends on besides the workspace.
    ``names``: arrays an entry must hold (default: those of the computed result, so a first call computes).
    """
    folder = _folder(ws)
    path = None if folder is None else folder / _name(ws, kind, description)
    if path is not None and names is not None:
        got = _read(path, names)
        if got is not None:
            return got
    out = {k: np.asarray(v) for k, v in compute().items()}
    if path is not None:
        _write(folder, path, out)
    return out


def stored_only(ws, kind: str, description, names) -> dict | None:
    """The arrays of ``ws``'s stored entry made from ``description`` (as :func:`stored` would read them), or None
    when there is none: a page asks before it starts the work in the background."""
    folder = _folder(ws)
    return None if folder is None else _read(folder / _name(ws, kind, description), names)


# ---------------------------------------------------------------------- what the pages store
def job_rankings(ws, job, depth: int, index=None) -> np.ndarray:
    """:func:`slics_core.explorer.scoring.rank_job` of ``job`` at ``depth``, stored (Evaluate)."""
    desc = {"method": job.method, "d0": job.d0, "mode": job.mode, "split": job.split, "depth": int(depth)}
    index_fn = index if callable(index) else (lambda: index)
    return stored(ws, "rank", desc, lambda: {"idx": scoring.rank_job(ws, job, depth=depth, index=index_fn())},
                  names=("idx",))["idx"]


def _layout_description(P, seed) -> dict:
    return {"points": hashlib.sha256(P.tobytes()).hexdigest(), "shape": list(P.shape), "seed": int(seed)}


#: openTSNE embedding objects of the layouts this process computed or rebuilt, by layout name (at most
#: :data:`MAX_EMBEDDINGS`, least recently used go): they place a query on a stored map (:func:`map_embedding`).
MAX_EMBEDDINGS = 4
_EMBEDDINGS: OrderedDict = OrderedDict()
_EMBEDDINGS_LOCK = threading.Lock()


def _keep_embedding(name, embedding):
    with _EMBEDDINGS_LOCK:
        _EMBEDDINGS[name] = embedding
        _EMBEDDINGS.move_to_end(name)
        while len(_EMBEDDINGS) > MAX_EMBEDDINGS:
            _EMBEDDINGS.popitem(last=False)


def layout_name(P, seed: int, ws=None) -> str:
    """The name of the layout of the points ``P`` with ``seed`` (one layout, one name): in ``ws``'s store when
    given (named with its build), else the key that names it in this process."""
    P = np.ascontiguousarray(P, dtype=np.float64)
    return _name(ws, "tsne", _layout_description(P, seed))


def map_layout(ws, P, seed: int, progress=None) -> np.ndarray:
    """:func:`slics_core.explorer.layouts.tsne_layout` of the points ``P`` (keyed by their bytes; the engine by
    :func:`~slics_core.explorer.layouts.tsne_engine`), stored (Subspaces). An openTSNE layout's embedding object is
    kept in this process (:func:`map_embedding`). ``progress(line, done, total)`` as in
    :func:`~slics_core.explorer.layouts.tsne_fit`."""
    return map_layout_timed(ws, P, seed, progress)[0]


def map_layout_timed(ws, P, seed: int, progress=None):
    """``(xy, seconds)``: :func:`map_layout` and the wall seconds its t-SNE took when it was computed (kept with the
    layout, so a layout read back says how long it took, not how long reading it took); ``seconds`` is None for a
    layout stored before the time was kept."""
    P = np.ascontiguousarray(P, dtype=np.float64)

    def compute():
        t0 = time.perf_counter()
        xy, embedding = tsne_fit(P, random_state=int(seed), progress=progress)
        if embedding is not None:
            _keep_embedding(layout_name(P, seed), embedding)
        return {"xy": xy, "seconds": np.float64(time.perf_counter() - t0)}

    got = stored(ws, "tsne", _layout_description(P, seed), compute, names=("xy",))
    return _keep_layout(ws, P, seed, (got["xy"], float(got["seconds"]) if "seconds" in got else None))


#: Layouts kept in memory per workspace and process (:func:`known_map_layout`; least recently used go).
MAX_KEPT_LAYOUTS = 24
_LAYOUTS_LOCK = threading.Lock()


def _keep_layout(ws, P, seed, got):
    kept = ws.remember("map-layouts", OrderedDict)
    with _LAYOUTS_LOCK:
        kept[layout_name(P, seed)] = got
        kept.move_to_end(layout_name(P, seed))
        while len(kept) > MAX_KEPT_LAYOUTS:
            kept.popitem(last=False)
    return got


def known_map_layout(ws, P, seed: int):
    """``(xy, seconds)`` of the layout of ``P`` (as :func:`map_layout_timed` gives them) when it is known without
    computing it: kept in this process (on ``ws``: a rerun reads no file), else stored in the workspace (then kept);
    None when neither (the page computes a small layout, :func:`map_layout_timed`, and a large one in the
    background)."""
    P = np.ascontiguousarray(P, dtype=np.float64)
    kept = ws.remember("map-layouts", OrderedDict)
    with _LAYOUTS_LOCK:
        got = kept.get(layout_name(P, seed))
    if got is not None:
        return got
    got = stored_map_layout(ws, P, seed, with_seconds=True)
    return None if got is None else _keep_layout(ws, P, seed, got)


def stored_map_layout(ws, P, seed: int, with_seconds: bool = False):
    """The stored layout of :func:`map_layout`, or None when none is stored (the page then computes it in the
    background); ``with_seconds``: ``(xy, seconds)`` as :func:`map_layout_timed` gives them."""
    P = np.ascontiguousarray(P, dtype=np.float64)
    got = stored_only(ws, "tsne", _layout_description(P, seed), ("xy",))
    if not with_seconds:
        return None if got is None else got["xy"]
    return None if got is None else (got["xy"], float(got["seconds"]) if "seconds" in got else None)


def kept_embedding(P, seed: int):
    """The embedding object of the layout of ``P`` this process holds (:func:`map_embedding`), or None."""
    P = np.ascontiguousarray(P, dtype=np.float64)
    with _EMBEDDINGS_LOCK:
        return _EMBEDDINGS.get(layout_name(P, seed))


def map_embedding(ws, P, seed: int):
    """openTSNE's embedding object of the stored layout of ``P`` (:func:`map_layout`): the one this process
    computed, else rebuilt from the stored coordinates (:func:`~slics_core.explorer.layouts.tsne_embedding`; the
    points' neighbours are computed, the layout is not). None when no layout is stored."""
    P = np.ascontiguousarray(P, dtype=np.float64)
    name = layout_name(P, seed)
    with _EMBEDDINGS_LOCK:
        if name in _EMBEDDINGS:
            _EMBEDDINGS.move_to_end(name)
            return _EMBEDDINGS[name]
    xy = stored_map_layout(ws, P, seed)
    if xy is None:
        return None
    embedding = tsne_embedding(P, xy, random_state=int(seed))
    _keep_embedding(name, embedding)
    return embedding


def atom_matrices(ws, method: str, d0: int, n_nonzero: int, split: str) -> dict:
    """:func:`slics_core.explorer.atom_tables.atom_heatmaps` of the ``split`` items, stored (Atoms)."""
    def compute():
        m = atom_heatmaps(ws.model(method, d0), ws.X[ws.index[split]], n_nonzero=n_nonzero)
        return {"cooccurrence": m["cooccurrence"], "cosine": m["cosine"], "codes": m["codes"], "usage": m["usage"],
                "n_nonzero": m["n_nonzero"], "summary": json.dumps(m["summary"])}

    keep = ("cooccurrence", "cosine", "codes", "usage", "n_nonzero", "summary")
    got = stored(ws, "atoms", {"method": method, "d0": int(d0), "n_nonzero": int(n_nonzero), "split": split},
                 compute, names=keep)
    out = dict(got)
    out["summary"] = json.loads(str(got["summary"]))
    out["n_nonzero"] = int(got["n_nonzero"])
    return out


def pool_codes(ws, method: str, d0: int) -> np.ndarray:
    """:func:`slics_core.explorer.atom_tables.item_codes` of the pool (labelled concepts), stored (Atoms)."""
    pool = ws.index["pool"]
    return stored(ws, "codes", {"method": method, "d0": int(d0)},
                  lambda: {"codes": item_codes(ws.model(method, d0), ws.X[pool], ws.Y[pool])},
                  names=("codes",))["codes"]


def pool_top_items(ws, method: str, d0: int) -> tuple:
    """The Atoms page's pool images per atom: ``(positions, coefficients)`` in ``ws.pool``
    (:data:`~slics_core.explorer.atom_tables.MAX_TOP_ITEMS` per atom, best first, ``-1`` past the last). A pool of
    rows of ``X``: from its stored :func:`pool_codes` (labelled concepts,
    :func:`~slics_core.explorer.atom_tables.codes_top_items`); a pool of shards: their codes over every concept
    (they carry no labels), read block by block (:func:`~slics_core.explorer.atom_tables.stream_atom_top_items`),
    stored."""
    if ws.pool.kind != "shards":
        return codes_top_items(pool_codes(ws, method, d0), MAX_TOP_ITEMS)

    def compute():
        model = ws.model(method, d0)
        blocks = ((start, ws.preprocess(raw)) for start, raw in ws.shards().blocks())
        p, c = stream_atom_top_items(model, blocks, MAX_TOP_ITEMS)
        return {"positions": p, "coefficients": c}

    got = stored(ws, "top-items", {"method": method, "d0": int(d0), "k": MAX_TOP_ITEMS,
                                   "shards": ws.pool_shards}, compute, names=("positions", "coefficients"))
    return got["positions"], got["coefficients"]


def label_energy(ws, method: str, d0: int) -> np.ndarray:
    """:func:`slics_core.explorer.atom_tables.concept_energy` (decomposed without labels) of the items of
    :func:`profile_split`, stored (the Atoms page's label profile)."""
    split = profile_split(ws)
    rows = ws.index[split]
    return stored(ws, "energy", {"method": method, "d0": int(d0), "split": split},
                  lambda: {"energy": concept_energy(ws.model(method, d0), ws.X[rows])}, names=("energy",))["energy"]


def activity_codes(ws, method: str, d0: int) -> np.ndarray:
    """Label-free codes (:func:`slics_core.analysis.atom_codes`, ``mode="full"`` over every concept) of the items of
    :func:`profile_split`, stored: the firing frequencies and activation statistics of
    :mod:`slics_core.explorer.inspection` (Retrieve, Subspaces, Atoms)."""
    split = profile_split(ws)
    rows = ws.index[split]
    return stored(ws, "free-codes", {"method": method, "d0": int(d0), "split": split},
                  lambda: {"codes": atom_codes(ws.model(method, d0), ws.X[rows])}, names=("codes",))["codes"]


#: Words kept per atom by :func:`atom_words` (an item's atoms table shows them).
ATOM_WORDS = 3


def atom_words(ws, method: str, d0: int) -> list:
    """Every atom's :data:`ATOM_WORDS` closest caption words (:func:`slics_core.captions.atom_word_ranking`, the
    Atoms page's rule), best first, stored: an item's atoms table reads them instead of preparing the vocabulary
    (0.6 s of CPU for 10 000 words of 768 dimensions) and ranking it per item.

    Raises
    ------
    FileNotFoundError
        The workspace has no word vocabulary (nothing is stored).
    """

    def compute():
        words, Wp = prepared_vocabulary(ws)
        index, _ = atom_word_ranking(ws.model(method, d0).atoms_, Wp, ATOM_WORDS)
        return {"words": np.array([[words[i] for i in row] for row in index], dtype=str)}

    got = stored(ws, "atom-words", {"method": method, "d0": int(d0), "k": ATOM_WORDS}, compute, names=("words",))
    return [[str(w) for w in row] for row in got["words"]]


def _health_description(method, d0) -> dict:
    # the rules' words name the entry too: a table stored under other rules is not read back as this one
    rules = hashlib.sha256(json.dumps(HEALTH_RULES, sort_keys=True).encode("utf-8")).hexdigest()[:16]
    return {"method": method, "d0": int(d0), "split": "train", "rules": rules}


def health_table(ws, method: str, d0: int):
    """:func:`slics_core.explorer.atom_tables.atom_health` of one dictionary on the training split, stored: the
    one health route, the Atoms page's table and the counts of Evaluate's health line (:func:`health_numbers`).

    Stored column by column (strings as text arrays, the flags as a boolean matrix over
    :data:`slics_core.analysis.HEALTH_FLAGS`) and read back as the same frame, columns in the same order.
    """
    def compute():
        tr = ws.index["train"]
        table = atom_health(ws.model(method, d0), ws.X[tr], ws.Y[tr], ws.concept_names)
        out = {"columns": np.array(json.dumps([c for c in table.columns])),
               "flags": np.array([[f in fl for f in HEALTH_FLAGS] for fl in table["flags"]],
                                 dtype=bool).reshape(len(table), len(HEALTH_FLAGS))}
        for i, c in enumerate(table.columns):
            if c != "flags":
                col = table[c]
                out[f"c{i}"] = col.to_numpy() if col.dtype.kind in "biuf" else np.array(col.tolist(), dtype=str)
        return out

    got = stored(ws, "health-table", _health_description(method, d0), compute, names=("columns", "flags"))
    columns = json.loads(str(got["columns"]))
    frame = {}
    for i, c in enumerate(columns):
        if c == "flags":
            frame[c] = [[f for f, on in zip(HEALTH_FLAGS, row) if on] for row in got["flags"]]
        else:
            v = got[f"c{i}"]
            frame[c] = [str(x) for x in v] if v.dtype.kind == "U" else v
    return pd.DataFrame(frame, columns=columns)


def health_numbers(ws, method: str, d0: int, split: str) -> dict:
    """:func:`slics_core.explorer.atom_tables.health_summary` of one dictionary: the flag counts of its stored
    :func:`health_table` (the table Atoms shows), active atoms and cos(x, x̂) on ``split``, stored (Evaluate's
    health line)."""
    def compute():
        ev = ws.index[split]
        h = health_summary(health_table(ws, method, d0), ws.model(method, d0), ws.X[ev], ws.Y[ev])
        return {"counts": np.array([h["counts"][f] for f in HEALTH_FLAGS]), "n_atoms": h["n_atoms"],
                "active_per_item": h["active_per_item"], "mean_cos": h["mean_cos"], "n_eval": h["n_eval"]}

    keep = ("counts", "n_atoms", "active_per_item", "mean_cos", "n_eval")
    got = stored(ws, "health", {**_health_description(method, d0), "split": split, "route": "table"}, compute,
                 names=keep)
    return {"counts": dict(zip(HEALTH_FLAGS, (int(c) for c in got["counts"]))), "n_atoms": int(got["n_atoms"]),
            "active_per_item": float(got["active_per_item"]), "mean_cos": float(got["mean_cos"]),
            "n_eval": int(got["n_eval"])}


def map_points_view(ws, method: str, d0: int, settings=None):
    """``(P, table)``: the points of a Subspaces map (:func:`slics_core.explorer.maps.map_points` of the
    :func:`~slics_core.explorer.maps.map_sample` of its items) for ``method``, ``d0`` and ``settings`` (the keys of
    :data:`~slics_core.explorer.page_settings.MAP_DEFAULTS`; default: the page's first view, the one
    :func:`prepare_pages` lays out). The page and the build ask this one function, so the layout the build stored
    is the one the page's first view looks up."""
    m = MAP_DEFAULTS if settings is None else {**MAP_DEFAULTS, **settings}
    concepts = [c for c in m["concepts"] if c in ws.concept_names] or None  # as the page's widget keeps them
    rows = map_sample(ws.Y, ws.index[m["split"]], int(m["n_points"]), random_state=int(m["seed"]), concepts=concepts,
                      concept_names=ws.concept_names, include=[])
    return map_points(ws.model(method, d0), ws.X, ws.Y, rows, kinds=list(m["kinds"]), component=m["component"],
                      concepts=concepts, Z=ws.Z, sub_to_concept=ws.sub_to_concept, concept_names=ws.concept_names,
                      sub_names=ws.sub_names)


def default_map_points(ws, method: str, d0: int):
    """``(P, table)`` of the Subspaces page's first view (:data:`MAP_DEFAULTS`): :func:`map_points_view`."""
    return map_points_view(ws, method, d0)


#: The version of the stored job scores: raise it when what :func:`slics_core.explorer.scoring.run_job` computes
#: changes, so that scores stored by an older release are computed again instead of shown.
SCORES_VERSION = 1


def job_scores(ws, job, k: int, normalization: str, *, intervals: bool = False, index=None, rankings=None) -> dict:
    """:func:`slics_core.explorer.scoring.run_job` of ``job`` on its stored rankings (:func:`job_rankings` at
    :func:`~slics_core.explorer.scoring.stored_depth`; or ``rankings()``, a callable giving them, e.g. a page's
    shared copy), stored: the build prepares Evaluate's first view at :data:`DEFAULT_K`, so a first visit reads
    its scores (and their bootstrap intervals) instead of computing them.
    """
    depth = scoring.stored_depth(k)
    desc = {"method": job.method, "d0": job.d0, "mode": job.mode, "split": job.split, "k": int(k),
            "normalization": normalization, "intervals": bool(intervals), "version": SCORES_VERSION}

    def compute():
        idx = rankings() if rankings is not None else job_rankings(ws, job, depth, index)
        rec = scoring.run_job(ws, job, k=k, normalization=normalization, rankings=idx, intervals=intervals)
        return {"record": np.array(json.dumps(rec))}

    return json.loads(str(stored(ws, "scores", desc, compute, names=("record",))["record"]))


def _page_steps(ws) -> list:
    """What :func:`prepare_pages` computes, as independent steps ``(name, step)``; a step is a small tuple."""
    sweep, table = [], []
    if SWEEP_METHOD in ws.methods and ws.d0_values and sweep_splits(ws):  # on scoring.eval_pool (labelled rows)
        sweep = scoring.sweep_jobs(ws, SWEEP_METHOD, splits=sweep_splits(ws))
        table = [j for split in ("query", "val") if split in sweep_splits(ws)
                 for j in scoring.table_jobs(ws, ws.default_d0, split=split)]
    # each job's rankings, then the scores its first view shows: the methods table's with intervals, the
    # sweep's without (a job in both: both)
    steps = [(f"Evaluate {job.label()}", ("rank", job, (True,) * (job in table) + (False,) * (job in sweep)))
             for job in dict.fromkeys(sweep + table)]
    dicts = ws.dictionary_methods()
    method = preferred_method(dicts)
    healthy = dicts if (len(ws.index.get("train", [])) and ws.default_d0 is not None) else []
    if method is not None and ws.default_d0 is not None:
        d0 = int(ws.default_d0)
        if len(ws.index.get(MAP_DEFAULTS["split"], [])) > 0:
            steps.append(("Subspaces map", ("map", method, d0)))
        steps += [("Atoms matrices", ("atoms", method, d0)), ("Atoms pool codes", ("codes", method, d0)),
                  ("Atoms label profile", ("energy", method, d0)), ("Atoms activations", ("free-codes", method, d0))]
        if ws.vocab_text is not None and ws.vocab_words:
            steps.append(("Atoms words", ("words", method, d0)))
    steps += [(f"Atoms and Evaluate health of {m}", ("health", m, int(ws.default_d0))) for m in healthy]
    return steps


def _run_step(ws, step, cache: dict) -> None:
    """Compute and store one step of :func:`_page_steps` (``cache`` keeps the evaluation index between steps)."""
    kind, *args = step
    if kind == "rank":
        if "index" not in cache:
            cache["index"] = ws.eval_pool.index
        job, variants = args
        for intervals in variants:
            job_scores(ws, job, DEFAULT_K, NORMALIZATIONS[0], intervals=intervals, index=cache["index"])
    elif kind == "map":
        P, _ = default_map_points(ws, *args)
        map_layout(ws, P, MAP_DEFAULTS["seed"])
    elif kind == "atoms":
        atom_matrices(ws, *args, default_sparsity(ws.model(*args)), atoms_split(ws))
    elif kind == "codes":
        pool_top_items(ws, *args)
    elif kind == "energy":
        label_energy(ws, *args)
    elif kind == "free-codes":
        activity_codes(ws, *args)
    elif kind == "words":
        atom_words(ws, *args)
    elif kind == "health":  # the table Atoms shows, then Evaluate's line from it (the one health route)
        health_table(ws, *args)
        health_numbers(ws, *args, atoms_split(ws))


#: A worker process's opened workspace and evaluation index, by folder (its header's time and size: a rebuilt
#: workspace is opened again).
_WORKER_WORKSPACES: dict = {}


def _page_task(path, step) -> str:
    """One step of :func:`prepare_pages` on a worker process: the saved workspace at ``path`` is opened once
    per worker, the step's result stored in its folder (what every process reads)."""
    head = Path(path) / "workspace.json"
    key = (str(path), head.stat().st_mtime_ns, head.stat().st_size)
    if key not in _WORKER_WORKSPACES:
        _WORKER_WORKSPACES.clear()
        _WORKER_WORKSPACES[key] = (load_workspace(path), {})
    ws, cache = _WORKER_WORKSPACES[key]
    _run_step(ws, step, cache)
    return step[0]


def page_task_bytes(ws) -> int:
    """Estimated memory of one worker of :func:`prepare_pages`: its own copy of the workspace's arrays (the
    items, their raw embeddings, the pool's evaluation index) and room for the step's rankings and codes."""
    return int(3 * (np.asarray(ws.X).nbytes + np.asarray(ws.raw).nbytes))


def _prepared_description(ws) -> dict:
    """What a finished :func:`prepare_pages` is named by: the release, the steps and the settings they were made
    with (a workspace built by another release, or before a step was added, is prepared again)."""
    rules = hashlib.sha256(json.dumps(HEALTH_RULES, sort_keys=True).encode("utf-8")).hexdigest()[:16]
    return {"release": __version__, "steps": [repr(step) for _, step in _page_steps(ws)], "k": DEFAULT_K,
            "map": MAP_DEFAULTS, "scores": SCORES_VERSION, "rules": rules}


def prepared(ws) -> bool:
    """Whether :func:`prepare_pages` finished on ``ws``'s store with this release's steps (it leaves a mark when
    done); True when there is no store to prepare (a workspace being built, or not saved). The app prepares a
    store that is not in the background (``app_pages/_workspace.py``, ``prepare_in_background``), so that a
    workspace built by an earlier release does not compute its first views while a visitor waits."""
    if _folder(ws) is None:
        return True
    return stored_only(ws, "prepared", _prepared_description(ws), ("steps",)) is not None


def prepare_pages(ws, progress=None, n_jobs=1, say=None) -> list:
    """Compute and store what the pages show on arrival with their default settings: Evaluate's d0 sweep and
    methods table (rankings at :func:`~slics_core.explorer.scoring.stored_depth`, deep enough for Recall@100
    and any k up to it, and the scores and intervals shown at :data:`DEFAULT_K`: :func:`job_scores`) and its health
    line of every dictionary method, the Subspaces map and the Atoms matrices, pool codes, label-profile energies,
    label-free codes (:func:`activity_codes`) and atoms' words (:func:`atom_words`) of the default method and d0.
    Returns the names of what was prepared.

    Needs a saved workspace (``ws.path``); does nothing for one being built. ``n_jobs`` worker processes
    (:func:`slics_core.tasks.run_tasks`) take the independent steps (each ranking job, the map, the Atoms
    matrices...), each worker opening the saved workspace once; every step stores its own entry, the same
    whatever ``n_jobs``. 1 (the default): one after another here; None or -1: every core, as memory allows
    (:func:`slics_core.tasks.choose_jobs` with :func:`page_task_bytes`; ``say(line)`` gets the reason).
    """
    if _folder(ws) is None:
        return []
    steps = _page_steps(ws)
    total = len(steps)
    done = []
    if n_jobs != 1 and total > 1:
        n_jobs, why = choose_jobs(n_jobs, total, page_task_bytes(ws))
        if say is not None:
            say(f"pages: {why}")
    if n_jobs > 1 and total > 1:  # the map (t-SNE), the longest step, first: no worker is left with it at the end
        run_tasks(_page_task, sorted((step for _, step in steps), key=lambda st: st[0] != "map"),
                  shared=str(ws.path), n_jobs=n_jobs,
                  progress=None if progress is None else
                  (lambda _stage, d, t: progress(f"prepare the pages: {min(d, t)} of {t} steps on {n_jobs} workers",
                                                 d, t)))
        done = [name for name, _ in steps]
    else:
        cache = {}
        for name, step in steps:
            if progress is not None:
                progress(f"prepare the pages: {name}", len(done), total)
            done.append(name)
            with one_thread():  # as on a worker: the same rankings, to the order of near ties, for any n_jobs
                _run_step(ws, step, cache)
    stored(ws, "prepared", _prepared_description(ws), lambda: {"steps": np.array(done, dtype=str)})
    if progress is not None:
        progress("prepare the pages", total, total)
    return done
