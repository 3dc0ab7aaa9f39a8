"""The one place first views are computed (slics_core.explorer.arrival) and the one place per-process values are
kept (Workspace.remember): every stored first view equals what the page computes without the store (the planted
truth: the same function of the workspace, computed fresh), the build and the page ask the same functions, and no
module outside the Workspace class writes its kept values."""
import ast
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_cli_data import toy  # noqa: F401  (fixture)
from test_workspace import dataset_ws  # noqa: F401  (fixture)

from slics_core.explorer import arrival, page_settings, scoring
from slics_core.explorer.atom_tables import (
    atom_health,
    atom_heatmaps,
    concept_energy,
    default_sparsity,
    health_summary,
    item_codes,
)
from slics_core.explorer.maps import map_points, map_sample
from slics_core.explorer.workspace_files import load_workspace

ROOT = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------------- Workspace.remember
def test_remember_calls_the_factory_once_per_name_and_instance(dataset_ws):  # noqa: F811
    a, b = load_workspace(dataset_ws[1]), load_workspace(dataset_ws[1])
    calls = []

    def factory(tag):
        def make():
            calls.append(tag)
            return object()
        return make

    first = a.remember("x", factory("ax"))
    assert a.remember("x", factory("ax again")) is first  # kept: the second factory is never called
    assert calls == ["ax"]
    other = a.remember("y", factory("ay"))  # a distinct name: a distinct value
    assert other is not first and calls == ["ax", "ay"]
    on_b = b.remember("x", factory("bx"))  # per instance: another workspace object computes its own
    assert on_b is not first and calls == ["ax", "ay", "bx"]
    a.forget("x")
    assert a.remember("x", factory("ax2")) is not first and calls[-1] == "ax2"
    assert a.remember(("tuple", 1), lambda: 5) == 5  # any hashable name


def test_a_factory_that_raises_keeps_nothing(dataset_ws):  # noqa: F811
    ws = load_workspace(dataset_ws[1])

    def fails():
        raise FileNotFoundError("no vocabulary")

    with pytest.raises(FileNotFoundError):
        ws.remember("vocabulary", fails)
    assert ws.remember("vocabulary", lambda: "now") == "now"  # the next visit tries again


def _opened_uses(path: Path) -> list:
    """Lines of ``path`` that touch an attribute named ``_opened`` (outside the Workspace class)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "Workspace":
            continue
        if isinstance(node, ast.Attribute) and node.attr == "_opened":
            lines.append(node.lineno)
    if path.name == "workspace.py":  # the class's own methods are allowed: drop lines inside it
        cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Workspace")
        lines = [n for n in lines if not cls.lineno <= n <= cls.end_lineno]
    return lines


def test_no_module_outside_the_workspace_class_touches_its_kept_values():
    files = sorted((ROOT / "app_pages").glob("*.py")) + sorted((ROOT / "slics_core").rglob("*.py")) + [ROOT / "app.py"]
    found = {str(p.relative_to(ROOT)): _opened_uses(p) for p in files}
    assert {p: n for p, n in found.items() if n} == {}
    # the check itself finds a write
    probe = ROOT / "tests" / "_views_probe_tmp.py"
    try:
        probe.write_text("def f(ws):\n    ws._opened['x'] = 1\n", encoding="utf-8")
        assert _opened_uses(probe) == [2]
    finally:
        probe.unlink()


# ---------------------------------------------------------------------- stored first views = fresh ones
@pytest.fixture
def built(dataset_ws):  # noqa: F811
    """The saved toy workspace as the build left it (its first views prepared by ``slics workspace``); the app's
    process-wide caches are emptied (each test's workspace is a new folder under the same name)."""
    import streamlit as st

    st.cache_resource.clear()
    st.cache_data.clear()
    folder = dataset_ws[1]
    assert any((folder / arrival.STORE).glob("health-table-*.npz"))  # the build stored the health table
    return folder


COMPUTATIONS = ("atom_health", "health_summary", "atom_heatmaps", "item_codes", "concept_energy", "atom_codes",
                "map_points", "tsne_fit")


def _no_computing(monkeypatch):
    """Make every computation behind the stored views raise (and Evaluate's ranking and scoring): what is then
    returned was read from the store. Undo with ``monkeypatch.undo()``."""
    def not_here(*a, **k):
        raise AssertionError("computed, not read from the store")

    for name in COMPUTATIONS:
        monkeypatch.setattr(arrival, name, not_here)
    monkeypatch.setattr(scoring, "run_job", not_here)
    monkeypatch.setattr(scoring, "rank_job", not_here)


def _fresh_and_stored(folder, view, monkeypatch):
    """``view(ws)`` on a workspace read back from the build's store (nothing computed: the computation raises),
    and on one whose store was removed (computed there, as a page would without the store), each on a newly
    loaded workspace."""
    real = arrival.atom_health

    def not_here(*a, **k):
        raise AssertionError("computed, not read from the store")

    monkeypatch.setattr(arrival, "atom_health", not_here)
    stored_value = view(load_workspace(folder))
    monkeypatch.setattr(arrival, "atom_health", real)
    shutil.rmtree(folder / arrival.STORE)
    return view(load_workspace(folder)), stored_value


def test_health_table_is_the_atoms_table_computed_fresh(built, monkeypatch):
    ws = load_workspace(built)
    method, d0 = "S-SLiCS", int(ws.default_d0)
    tr = ws.index["train"]
    truth = atom_health(ws.model(method, d0), ws.X[tr], ws.Y[tr], ws.concept_names)  # what Atoms computed
    fresh, stored_value = _fresh_and_stored(built, lambda w: arrival.health_table(w, method, d0), monkeypatch)
    for got in (fresh, stored_value):
        assert list(got.columns) == list(truth.columns)
        pd.testing.assert_frame_equal(got.drop(columns="flags"), truth.drop(columns="flags"))
        assert got["flags"].tolist() == truth["flags"].tolist()


def test_health_line_counts_the_atoms_table(built, monkeypatch):
    ws = load_workspace(built)
    split = page_settings.atoms_split(ws)
    for method in ws.dictionary_methods():
        d0 = int(ws.default_d0)
        tr, ev = ws.index["train"], ws.index[split]
        model = ws.model(method, d0)
        _no_computing(monkeypatch)
        got = arrival.health_numbers(ws, method, d0, split)  # read back from the build's store
        monkeypatch.undo()
        truth = health_summary(atom_health(model, ws.X[tr], ws.Y[tr]), model, ws.X[ev], ws.Y[ev])
        assert got["counts"] == truth["counts"] and got["n_atoms"] == truth["n_atoms"] == model.atoms_.shape[0]
        assert got["n_eval"] == len(ev)
        np.testing.assert_allclose([got["active_per_item"], got["mean_cos"]],
                                   [truth["active_per_item"], truth["mean_cos"]], rtol=1e-12)
        table = arrival.health_table(ws, method, d0)
        assert got["counts"] == {f: int(sum(f in fl for fl in table["flags"])) for f in got["counts"]}


def test_atoms_views_equal_a_fresh_computation(built, monkeypatch):
    ws = load_workspace(built)
    method, d0 = "S-SLiCS", int(ws.default_d0)
    model = ws.model(method, d0)
    split, pool = page_settings.atoms_split(ws), ws.index["pool"]
    nz = default_sparsity(model)
    rows = ws.index[page_settings.profile_split(ws)]
    _no_computing(monkeypatch)  # the build stored them: read back
    got = arrival.atom_matrices(ws, method, d0, nz, split)
    codes, energy = arrival.pool_codes(ws, method, d0), arrival.label_energy(ws, method, d0)
    monkeypatch.undo()
    truth = atom_heatmaps(model, ws.X[ws.index[split]], n_nonzero=nz)
    for key in ("cooccurrence", "cosine", "codes", "usage"):
        np.testing.assert_allclose(got[key], truth[key], equal_nan=True)
    assert got["summary"] == pytest.approx(truth["summary"], nan_ok=True)
    np.testing.assert_allclose(codes, item_codes(model, ws.X[pool], ws.Y[pool]))
    np.testing.assert_allclose(energy, concept_energy(model, ws.X[rows]))


def test_the_first_map_is_the_pages_map(built, monkeypatch):
    """Subspaces' first view and the build's layout are one function's points: the page's own recipe (its
    widgets at MAP_DEFAULTS) gives the same points, and the layout the build stored is the one looked up."""
    ws = load_workspace(built)
    method, d0, m = "S-SLiCS", int(ws.default_d0), page_settings.MAP_DEFAULTS
    rows = map_sample(ws.Y, ws.index[m["split"]], m["n_points"], random_state=m["seed"], concept_names=ws.concept_names)
    P_truth, table_truth = map_points(ws.model(method, d0), ws.X, ws.Y, rows, kinds=list(m["kinds"]),
                                      component=m["component"], Z=ws.Z, sub_to_concept=ws.sub_to_concept,
                                      concept_names=ws.concept_names, sub_names=ws.sub_names)
    P, table = arrival.map_points_view(ws, method, d0)
    np.testing.assert_array_equal(P, P_truth)
    pd.testing.assert_frame_equal(table, table_truth)
    monkeypatch.setattr(arrival, "tsne_fit", lambda *a, **k: pytest.fail("t-SNE run on a first visit"))
    known = arrival.known_map_layout(ws, P, m["seed"])
    assert known is not None  # stored at build: a first visit computes no t-SNE
    assert arrival.known_map_layout(ws, P, m["seed"])[0] is known[0]  # then kept on the workspace: no file read
    P2, _ = arrival.map_points_view(ws, method, d0, {"n_points": 10})  # other settings: not prepared
    assert len(P2) < len(P) and arrival.known_map_layout(ws, P2, 0) is None


def test_evaluate_scores_equal_a_fresh_run(built, monkeypatch):
    ws = load_workspace(built)
    job = scoring.table_jobs(ws, ws.default_d0, split="query")[0]
    k = page_settings.DEFAULT_K
    _no_computing(monkeypatch)
    got = arrival.job_scores(ws, job, k, "retrieved", intervals=True)  # stored at build
    monkeypatch.undo()
    truth = scoring.run_job(ws, job, k=k, normalization="retrieved", intervals=True,
                            rankings=scoring.rank_job(ws, job, depth=scoring.stored_depth(k),
                                                      index=ws.eval_pool.index))
    assert got.keys() == truth.keys()
    for key, v in truth.items():
        if isinstance(v, float):
            assert got[key] == pytest.approx(v, nan_ok=True), key
        else:
            assert got[key] == v, key


# ---------------------------------------------------------------------- a store without this release's views
def test_prepared_marks_a_finished_preparation_of_this_release(built, monkeypatch):
    ws = load_workspace(built)
    assert arrival.prepared(ws)  # slics workspace prepared it
    monkeypatch.setattr(arrival, "__version__", "99.0.0")  # another release: its steps may differ
    assert not arrival.prepared(ws)
    monkeypatch.undo()
    shutil.rmtree(built / arrival.STORE)
    assert not arrival.prepared(ws)
    arrival.prepare_pages(ws)
    assert arrival.prepared(ws)
    preview = load_workspace(built)
    preview.path = None
    assert arrival.prepared(preview)  # nothing to prepare without a folder


def test_the_app_prepares_a_store_it_finds_unprepared_in_the_background(built, monkeypatch):
    """A workspace built by an earlier release (its store emptied here): the app's first run starts
    prepare_pages in the background, and once it is done Atoms' and Evaluate's first views are stored."""
    from streamlit.testing.v1 import AppTest

    from slics_core.explorer.background import JOBS

    shutil.rmtree(built / arrival.STORE)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=240)
    at.query_params["ws"] = built.name
    at.run()
    assert not at.exception, at.exception
    JOBS.wait(timeout=240)
    ws = load_workspace(built)
    assert arrival.prepared(ws)
    _no_computing(monkeypatch)  # the views are read back, not computed
    assert len(arrival.health_table(ws, "S-SLiCS", int(ws.default_d0))) == ws.model("S-SLiCS").atoms_.shape[0]
    job = scoring.table_jobs(ws, ws.default_d0, split="query")[0]
    assert arrival.job_scores(ws, job, page_settings.DEFAULT_K, "retrieved", intervals=True)["method"] == job.method


def test_evaluate_waits_for_the_background_preparation_instead_of_computing_beside_it(built, monkeypatch):
    """While the background preparation runs, Evaluate shows its progress and computes nothing (no score is
    stored by the page); once it is done, the page shows the methods table it prepared."""
    import threading

    from streamlit.testing.v1 import AppTest

    import app_pages._workspace as opened
    from slics_core.explorer.background import JOBS

    release, started = threading.Event(), []

    def held_prepare(ws, progress=None, **kwargs):
        started.append(1)
        release.wait(120)
        return arrival.prepare_pages(ws, progress, **kwargs)

    monkeypatch.setattr(opened, "prepare_pages", held_prepare)
    shutil.rmtree(built / arrival.STORE)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=240)
    at.query_params["ws"] = built.name
    try:
        at.run()
        at.switch_page("app_pages/evaluate.py").run()
        assert not at.exception, at.exception
        assert started and not len(at.dataframe)  # no methods table yet
        assert not list((built / arrival.STORE).glob("scores-*.npz"))  # and nothing computed by the page
    finally:
        release.set()
        JOBS.wait(timeout=240)
    at.switch_page("app_pages/evaluate.py").run()
    assert not at.exception, at.exception
    assert len(at.dataframe) and "Methods" in at.subheader[0].value
