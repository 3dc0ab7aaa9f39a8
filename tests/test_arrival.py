"""What the pages need on arrival is computed at build time and shared through the workspace folder
(slics_core.explorer.arrival; issue 24, item 1)."""
import io
import zipfile
from pathlib import Path

import numpy as np
from streamlit.testing.v1 import AppTest
from test_cli_data import toy  # noqa: F401  (fixture)
from test_workspace import dataset_ws  # noqa: F401  (fixture)

from slics_core import formats
from slics_core.explorer import arrival, page_settings, scoring
from slics_core.explorer.workspace_files import load_workspace

ROOT = Path(__file__).resolve().parent.parent


def test_stored_computes_once_and_recovers_from_damage(dataset_ws, monkeypatch):  # noqa: F811
    ws = load_workspace(dataset_ws[1])
    calls = []

    def compute():
        calls.append(1)
        return {"a": np.arange(5) * len(calls)}

    first = arrival.stored(ws, "t", {"x": 1}, compute, names=("a",))
    again = arrival.stored(ws, "t", {"x": 1}, compute, names=("a",))
    assert len(calls) == 1 and np.array_equal(first["a"], again["a"])
    other = arrival.stored(ws, "t", {"x": 2}, compute, names=("a",))  # another description: computed
    assert len(calls) == 2 and np.array_equal(other["a"], np.arange(5) * 2)
    entry = ws.path / arrival.STORE / arrival._name(ws, "t", {"x": 1})
    entry.write_bytes(b"not an npz")  # damaged: recomputed and rewritten
    assert np.array_equal(arrival.stored(ws, "t", {"x": 1}, compute, names=("a",))["a"], np.arange(5) * 3)
    monkeypatch.setattr(arrival, "MAX_ENTRY_BYTES", 10)  # over the size limit: not loaded
    arrival.stored(ws, "t", {"x": 1}, compute, names=("a",))
    assert len(calls) == 4
    monkeypatch.setattr(arrival, "MAX_ENTRIES", 2)  # bounded: the least recently used go
    for i in range(4):
        arrival.stored(ws, "t", {"y": i}, compute, names=("a",))
    assert len(list((ws.path / arrival.STORE).glob("*.npz"))) == 2


def test_a_forged_entry_is_recomputed_without_allocating_it(dataset_ws, monkeypatch):  # noqa: F811
    """An entry whose header declares 2**40 floats in a few bytes is not loaded (checked before reading)."""
    ws = load_workspace(dataset_ws[1])
    entry = ws.path / arrival.STORE / arrival._name(ws, "t", {"forged": 1})
    entry.parent.mkdir(exist_ok=True)
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f4", "fortran_order": False, "shape": (2 ** 20, 2 ** 20)})
    with zipfile.ZipFile(entry, "w") as z:
        z.writestr("a.npy", buf.getvalue() + b"\0" * 64)
    loads = []
    real_load = np.load
    monkeypatch.setattr(arrival.np, "load", lambda *a, **k: loads.append(a) or real_load(*a, **k))
    got = arrival.stored(ws, "t", {"forged": 1}, lambda: {"a": np.arange(3)}, names=("a",))
    assert np.array_equal(got["a"], np.arange(3)) and loads == []  # refused from its header, then recomputed


def test_build_prepares_every_default_job_and_the_pages_use_it(dataset_ws, monkeypatch):  # noqa: F811
    ws = load_workspace(dataset_ws[1])
    store = ws.path / arrival.STORE
    assert store.is_dir() and len(list(store.glob("rank-*.npz"))) >= len(scoring.sweep_jobs(ws))
    # a stored ranking is the ranking
    job = scoring.Job("S-SLiCS", ws.default_d0, "partial", "query")
    np.testing.assert_array_equal(arrival.job_rankings(ws, job, 50), scoring.rank_job(ws, job, depth=50))

    # a new process (empty in-memory caches) opening Evaluate, Subspaces and Atoms ranks, lays out and codes
    # nothing: everything comes from the folder
    def refuse(*a, **k):
        raise AssertionError("computed on arrival")

    monkeypatch.setattr(scoring, "rank_job", refuse)
    monkeypatch.setattr(scoring, "score_rankings", refuse)  # Evaluate's first view: scores and intervals stored
    monkeypatch.setattr("slics_core.explorer.layouts.tsne_layout", refuse)
    monkeypatch.setattr("slics_core.explorer.arrival.tsne_fit", refuse)
    monkeypatch.setattr("slics_core.explorer.atom_tables.atom_heatmaps", refuse)
    monkeypatch.setattr("slics_core.explorer.atom_tables.item_codes", refuse)
    monkeypatch.setattr("slics_core.explorer.arrival.concept_energy", refuse)  # the Atoms page's label profile
    monkeypatch.setattr("slics_core.explorer.arrival.atom_codes", refuse)  # the inspector's label-free codes
    monkeypatch.setattr("slics_core.explorer.arrival.atom_word_ranking", refuse)  # ... and its atoms' words
    import streamlit as st

    st.cache_data.clear()
    st.cache_resource.clear()
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.query_params["ws"] = ws.path.name
    at.run()
    for page in ("evaluate", "subspaces", "atoms", "retrieve"):
        at.switch_page(f"app_pages/{page}.py").run()
        assert not at.exception, (page, [e.value for e in at.exception])
    at.switch_page("app_pages/evaluate.py").run()
    shown = at.dataframe[0].value
    r = shown[shown.Method == "S-SLiCS"].iloc[0]
    monkeypatch.undo()
    expected = scoring.run_job(ws, scoring.Job("S-SLiCS", int(r["d0"]), "partial", "query"), k=20, intervals=True)
    assert r["Gen. mAP@20"] == f"{expected['general']:.3f} [{expected['general_lo']:.3f}, {expected['general_hi']:.3f}]"


def test_stored_job_scores_are_run_job_and_follow_their_settings(dataset_ws):  # noqa: F811
    """A stored job's record is run_job's own, for each k / normalisation / intervals asked; another setting is
    another entry (never the first one's numbers)."""
    ws = load_workspace(dataset_ws[1])
    job = scoring.Job("S-SLiCS", ws.default_d0, "partial", "query")
    for k, norm, intervals in ((20, "retrieved", True), (10, "min", False), (20, "retrieved", False)):
        got = arrival.job_scores(ws, job, k, norm, intervals=intervals)
        want = scoring.run_job(ws, job, k=k, normalization=norm, intervals=intervals)
        assert got.keys() == want.keys()
        for key, value in want.items():
            assert (got[key] == value) or (isinstance(value, float) and np.isnan(value) and np.isnan(got[key])), key
    assert arrival.job_scores(ws, job, 20, "retrieved", intervals=True) != arrival.job_scores(ws, job, 10, "min")


def test_views_of_one_build_are_never_read_as_another_builds(dataset_ws):  # noqa: F811
    """Two builds of one folder at once (or a server holding an older build): build A's views, written after build
    B saved its models, are not B's views; B computes its own. A build is named by a digest of what it saved."""
    from slics_core.explorer.workspace_files import save_workspace

    a = load_workspace(dataset_ws[1])
    b = load_workspace(dataset_ws[1])
    save_workspace(b, dataset_ws[1], overwrite=True)  # the same content saved again: the same build
    assert a.build_id and b.build_id == a.build_id
    model = b.models[next(iter(b.models))]
    model.atoms_[0] = -model.atoms_[0]  # build B (other atoms) replaces the folder while A is still open
    save_workspace(b, dataset_ws[1], overwrite=True)
    assert a.build_id != b.build_id
    assert load_workspace(dataset_ws[1]).build_id == b.build_id
    arrival.stored(a, "t", {"x": 2}, lambda: {"v": np.array([1.0])})  # build A writes its view into the folder
    reopened = load_workspace(dataset_ws[1])
    assert arrival.stored_only(reopened, "t", {"x": 2}, ("v",)) is None  # not read as build B's
    got = arrival.stored(reopened, "t", {"x": 2}, lambda: {"v": np.array([2.0])}, names=("v",))
    assert got["v"].tolist() == [2.0]
    assert arrival.stored_only(load_workspace(dataset_ws[1]), "t", {"x": 2}, ("v",))["v"].tolist() == [2.0]


def test_prepare_pages_skips_a_workspace_being_built(dataset_ws):  # noqa: F811
    ws = load_workspace(dataset_ws[1])
    ws.building = object()
    assert arrival.prepare_pages(ws) == []
    ws.building, ws.path = None, None
    assert arrival.prepare_pages(ws) == []


def test_unwritable_workspace_still_answers(dataset_ws, monkeypatch):  # noqa: F811
    """A folder that cannot be written (a shared read-only install): the result is computed and returned."""
    ws = load_workspace(dataset_ws[1])

    def no_write(*a, **k):
        raise PermissionError(13, "read-only file system")

    monkeypatch.setattr(formats.tempfile, "mkstemp", no_write)
    got = arrival.stored(ws, "t", {"ro": 1}, lambda: {"a": np.ones(3)}, names=("a",))
    assert np.array_equal(got["a"], np.ones(3))
    assert not (ws.path / arrival.STORE / arrival._name(ws, "t", {"ro": 1})).exists()


def test_stored_health_counts_are_read_back_under_the_same_rules_only(dataset_ws, monkeypatch):  # noqa: F811
    """Evaluate's health line is stored under a hash of the flags' rules: counts stored under other rules (an
    earlier *misplaced* null, say) are computed again, never read back as these."""
    ws = load_workspace(dataset_ws[1])
    calls = []
    real = arrival.atom_health

    def counted(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(arrival, "atom_health", counted)
    split = page_settings.atoms_split(ws)
    first = arrival.health_numbers(ws, "S-SLiCS", int(ws.default_d0), split)  # computed, or stored at build
    n = len(calls)
    assert n <= 1
    assert arrival.health_numbers(ws, "S-SLiCS", int(ws.default_d0), split) == first
    assert len(calls) == n  # the same rules: read back
    monkeypatch.setattr(arrival, "HEALTH_RULES", {**arrival.HEALTH_RULES, "misplaced": "another rule"})
    arrival.health_numbers(ws, "S-SLiCS", int(ws.default_d0), split)
    assert len(calls) == n + 1  # other rules: computed again
