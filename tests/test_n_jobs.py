"""``n_jobs``: the per-sample steps (NNLS codes, OMP, projections) and the S-SVD start on several threads
give the same atoms and codes as one thread, bit for bit; the caller's thread shares the work, a failing
block raises in the caller, and the atom step never starts a thread (issue 39)."""
from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

import slics_core.nnls as nnls_module
from slics_core import SLiCS
from slics_core._kernels import PRODUCT_ROWS
from slics_core._parallel import ROW_BLOCK, effective_n_jobs
from slics_core.methods import FitInputs, fit_method
from slics_core.sparse_coding import nn_omp
from slics_core.synthetic import make_concept_cones


@pytest.fixture(autouse=True)
def idle_machine(monkeypatch):
    """Every core idle (the load average of the shared machine would otherwise decide how many threads run)."""
    import slics_core._parallel as parallel

    monkeypatch.setattr(parallel, "idle_cores", lambda: 64.0)


@pytest.fixture(scope="module")
def data():
    # several row blocks (ROW_BLOCK) per batch and several Lanczos blocks (PRODUCT_ROWS) per concept
    d = make_concept_cones(n_samples=700, n_features=24, n_concepts=3, n_atoms=3, noise=0.3, random_state=5)
    X = d.X / np.linalg.norm(d.X, axis=1, keepdims=True)
    assert X.shape[0] > 4 * ROW_BLOCK and d.Y.sum(axis=0).min() > 4 * PRODUCT_ROWS
    return X, d.Y


def _outputs(X, Y, n_jobs, **kw):
    model = SLiCS(n_atoms=3, n_iter=3, random_state=0, n_jobs=n_jobs, **kw).fit(X, Y)
    return [model.atoms_, model.history_, model.transform(X), model.transform(X, Y), model.project(X, 1),
            nn_omp(X, model.atoms_, n_nonzero_coefs=4, n_jobs=n_jobs)]


@pytest.mark.parametrize("kw", [{}, {"batch_size": 300}, {"batch_size": 300, "monotone": True}])
@pytest.mark.parametrize("n_jobs", [2, -1])
def test_more_threads_give_the_same_bits(data, n_jobs, kw):
    X, Y = data
    one = _outputs(X, Y, None, **kw)
    for a, b in zip(one, _outputs(X, Y, n_jobs, **kw)):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(one[0], _outputs(X, Y, 1, **kw)[0])


def test_the_rows_are_shared_by_threads(data, monkeypatch):
    """The NNLS rows really run on two threads with n_jobs=2 (the caller's one of them), on the caller's alone
    without."""
    X, Y = data
    seen = []
    real = nnls_module._bpp_allowed

    def spy(*args):
        seen.append(threading.get_ident())
        time.sleep(0.02)  # a slow block: the other worker takes the next one
        return real(*args)

    monkeypatch.setattr(nnls_module, "_bpp_allowed", spy)
    model = SLiCS(n_atoms=3, n_iter=1, n_jobs=2).fit(X, Y)
    assert len(set(seen)) == 2 and threading.get_ident() in seen
    seen.clear()
    model.set_params(n_jobs=None).transform(X)
    assert seen == [threading.get_ident()]


def test_no_compiled_kernel_starts_threads():
    """No numba kernel of the library is ``parallel=True``: the atom step (one chain of rank-1 updates, each
    product about 60 us) never wakes a thread pool whose workers spin or wait on a busy machine (issue 39)."""
    import importlib
    import pkgutil

    from numba.core.registry import CPUDispatcher

    import slics_core

    kernels = []
    for info in pkgutil.iter_modules([os.path.dirname(slics_core.__file__)]):
        if info.name in {"_kernels", "nnls", "atom_steps", "slics", "sparse_coding", "unsupervised", "baselines"}:
            module = importlib.import_module(f"slics_core.{info.name}")
            kernels += [f for f in vars(module).values() if isinstance(f, CPUDispatcher)]
    assert len(kernels) >= 8  # the kernels were found
    assert [k.__name__ for k in kernels if k.targetoptions.get("parallel")] == []


def test_parallel_map_keeps_order_and_raises_a_block_error():
    from slics_core._parallel import parallel_map

    caller = threading.get_ident()
    ran = []

    def slow_square(x):
        ran.append(threading.get_ident())
        time.sleep(0.005)
        return x * x

    assert parallel_map(slow_square, range(20), 3) == [x * x for x in range(20)]
    assert caller in ran and len(set(ran)) >= 2

    def fails_at_7(x):
        if x == 7:
            raise KeyError("block 7")
        return x

    for n_jobs in (1, 2, 4):
        with pytest.raises(KeyError, match="block 7"):
            parallel_map(fails_at_7, range(20), n_jobs)


def test_parallel_map_inside_parallel_map_finishes():
    """Nested calls (a fit inside a thread of another's pool) finish: the caller does any work left unclaimed."""
    from slics_core._parallel import parallel_map

    out = parallel_map(lambda i: sum(parallel_map(lambda j: i * j, range(5), 2)), range(6), 2)
    assert out == [i * 10 for i in range(6)]


def test_omp_blocks_do_not_depend_on_threads():
    rng = np.random.default_rng(0)
    B = rng.standard_normal((12, 10))
    X = np.abs(rng.standard_normal((3 * ROW_BLOCK + 7, 12))) @ B
    one = nn_omp(X, B, n_nonzero_coefs=5)
    np.testing.assert_array_equal(one, nn_omp(X, B, n_nonzero_coefs=5, n_jobs=2))
    # each block is the pursuit of its own rows (the rows do not interact)
    np.testing.assert_allclose(one[:ROW_BLOCK], nn_omp(X[:ROW_BLOCK], B, n_nonzero_coefs=5), rtol=0, atol=1e-12)


@pytest.mark.parametrize("bad", [0, "x", 1.5, True])
def test_bad_n_jobs_is_refused_with_the_table_message(data, bad):
    X, Y = data
    with pytest.raises(ValueError, match=r"^n_jobs must be a non-zero int .*; got " + repr(bad).replace(".", r"\.")):
        SLiCS(n_jobs=bad).fit(X, Y)
    with pytest.raises(ValueError, match="n_jobs must be"):
        nn_omp(X, np.eye(24)[:5], n_jobs=bad)


def test_effective_n_jobs_follows_scikit_learn():
    import os

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert [effective_n_jobs(v) for v in (None, 1, 3, -1)] == [1, 1, 3, cores]
    assert effective_n_jobs(-cores - 5) == 1


def test_n_jobs_is_not_saved(data, tmp_path):
    X, Y = data
    path = SLiCS(n_atoms=2, n_iter=1, n_jobs=2).fit(X, Y).save(tmp_path / "m.npz")
    assert SLiCS.load(path).n_jobs is None


def test_fit_method_forwards_n_jobs(data):
    X, Y = data
    inputs = FitInputs(X=X, Y=Y, concept_names=["a", "b", "c"])
    for method in ("S-SVD", "S-SLiCS"):
        assert fit_method(method, inputs, 2, n_iter=1, n_jobs=2).n_jobs == 2
    assert fit_method("UF", inputs, 2, n_jobs=2) is not None  # methods without threads ignore it


def test_thread_choice_keeps_the_faster_count_and_follows_a_change():
    from slics_core._parallel import ThreadChoice

    choice = ThreadChoice(4)
    cost = {1: 1.0, 4: 0.5}  # seconds per row: four threads faster

    def run(n):
        seen = []
        for _ in range(n):
            t = choice.threads()
            seen.append(t)
            choice.record(t, cost[t] * 2000, 2000)
        return seen

    first = run(36)
    assert first[:4] == [4, 1, 4, 1]  # the warm-up alternates
    assert first[4:].count(1) == 32 // ThreadChoice.PROBE_EVERY  # then four threads, one thread only to probe
    cost[4] = 3.0  # the machine got busy: four threads now slower
    later = run(40)
    assert later[-16:].count(4) == 16 // ThreadChoice.PROBE_EVERY  # switched to one thread, probing the other
    assert ThreadChoice(1).threads() == 1 and ThreadChoice(None).threads() == 1


def test_a_fit_times_every_batch_step_for_its_thread_choice(data, monkeypatch):
    from slics_core._parallel import ThreadChoice

    X, Y = data
    calls = []
    real = ThreadChoice.record
    monkeypatch.setattr(ThreadChoice, "record", lambda self, *a: calls.append(a) or real(self, *a))
    SLiCS(n_atoms=3, n_iter=2, batch_size=300, random_state=0, n_jobs=2).fit(X, Y)
    assert len(calls) == 2 * 3 and [rows for _, _, rows in calls[:3]] == [300, 300, 100]
    assert {threads for threads, _, _ in calls[:2]} == {1, 2} and all(s > 0 for _, s, _ in calls)


def test_threads_that_help_stop_at_the_items_and_the_idle_cores(monkeypatch):
    import slics_core._parallel as parallel

    monkeypatch.undo()  # the real idle_cores, on a load set here
    cores = parallel._cores()
    assert 1 <= parallel._machine_load() < 10_000  # /proc/loadavg (or the load average) is read
    monkeypatch.setattr(parallel, "_machine_load", lambda: 1.0)  # this thread alone
    assert parallel.idle_cores() == cores
    assert parallel.threads_that_help(-1) == cores and parallel.threads_that_help(64, items=3) == min(3, cores)
    monkeypatch.setattr(parallel, "_machine_load", lambda: cores + 0.5)  # every other core taken
    assert parallel.idle_cores() == 0.5
    assert [parallel.threads_that_help(j) for j in (None, 1, 2, -1)] == [1, 1, 1, 1]
    assert parallel.ThreadChoice(4).threads() == 1
    with pytest.raises(ValueError, match="n_jobs must be"):
        parallel.threads_that_help(0)


def test_machine_load_falls_back_to_the_load_average(monkeypatch):
    import builtins

    import slics_core._parallel as parallel

    real_open = builtins.open

    def no_proc(path, *a, **k):
        if str(path) == "/proc/loadavg":
            raise FileNotFoundError(path)
        return real_open(path, *a, **k)

    monkeypatch.setattr(builtins, "open", no_proc)
    monkeypatch.setattr(parallel.os, "getloadavg", lambda: (3.25, 0.0, 0.0))
    assert parallel._machine_load() == 3.25
    monkeypatch.delattr(parallel.os, "getloadavg")
    assert parallel._machine_load() == 1.0


def test_a_busy_machine_runs_the_fit_on_the_callers_thread(data, monkeypatch):
    import slics_core._parallel as parallel

    X, Y = data
    seen = []
    real = nnls_module._bpp_allowed
    monkeypatch.setattr(nnls_module, "_bpp_allowed", lambda *a: seen.append(threading.get_ident()) or real(*a))
    monkeypatch.setattr(parallel, "idle_cores", lambda: 1.0)  # the other programs take all but this thread's core
    kw = dict(n_atoms=3, n_iter=2, batch_size=300, random_state=0)
    model = SLiCS(**kw, n_jobs=-1).fit(X, Y)
    assert len(seen) == 6 and set(seen) == {threading.get_ident()}  # one call per batch, all on this thread
    np.testing.assert_array_equal(model.atoms_, SLiCS(**kw).fit(X, Y).atoms_)
