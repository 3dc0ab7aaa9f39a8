"""``--jobs``: independent tasks on worker processes (slics_core.tasks) give the same results as one job.

The builds here are small (600 planted items, 32 dimensions) so that the worker processes' start dominates;
speed is measured in benchmarks/bench_build.py, never here.
"""
import operator
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from benchmarks.bench_build import differing_files, files
from benchmarks.bench_reproduce import write_dataset
from slics_core.cli import main
from slics_core.emoji.scenes import SCENE_CHUNK, make_scenes
from slics_core.tasks import SMALL_WORK_BYTES, WORKER_BYTES, choose_jobs, jobs_ok, run_tasks, start_workers

GiB = 2**30


# -- the rule for the number of jobs ------------------------------------------------------------------------
def test_choose_jobs_every_core_capped_by_planted_memory():
    task = GiB
    per_worker = WORKER_BYTES + task
    # 16 cores, 12 tasks, memory for exactly 5 workers after the shared 2 GiB (plus less than one more)
    available = 2 * GiB + 5 * per_worker + per_worker // 2
    n, why = choose_jobs(None, 12, task, shared_bytes=2 * GiB, available=available, n_cores=16)
    assert n == 5, why
    assert "16 cores" in why and "12 tasks" in why and "available" in why and why.count("\n") == 0
    assert choose_jobs(-1, 12, task, shared_bytes=2 * GiB, available=available, n_cores=16)[0] == 5
    # plenty of memory: every core, but never more workers than tasks
    assert choose_jobs(None, 12, task, available=1000 * GiB, n_cores=16)[0] == 12
    assert choose_jobs(None, 40, task, available=1000 * GiB, n_cores=16)[0] == 16
    # not even one worker's worth: still one (the tasks then run here, one after another)
    assert choose_jobs(None, 12, task, shared_bytes=8 * GiB, available=4 * GiB, n_cores=16)[0] == 1
    # a number given is taken as it is (at most one per task), with its estimated peak memory said
    n, why = choose_jobs(3, 12, task, available=1, n_cores=2)
    assert n == 3 and "as asked" in why and f"{(3 * per_worker) / GiB:.1f} GiB" in why
    assert choose_jobs(8, 2, task, available=1000 * GiB, n_cores=2)[0] == 2
    # automatic, but too little work to pay for starting workers: one job, and the line says so
    n, why = choose_jobs(None, 3, SMALL_WORK_BYTES // 4, available=1000 * GiB, n_cores=16)
    assert n == 1 and "small" in why
    assert choose_jobs(None, 4, SMALL_WORK_BYTES // 4, available=1000 * GiB, n_cores=16)[0] == 4
    assert choose_jobs(2, 4, 0, available=1000 * GiB, n_cores=16)[0] == 2


@pytest.mark.parametrize("bad", [0, -2, 1.5, True, "2"])
def test_bad_jobs_refused(bad):
    assert not jobs_ok(bad)
    with pytest.raises(ValueError, match="jobs must be"):
        choose_jobs(bad, 4, 0)


@pytest.mark.parametrize("argv", [["workspace", "--cache", "nowhere", "--jobs", "0"], ["emoji-build", "--jobs", "-2"],
                                  ["workspace", "--cache", "nowhere", "--address", "auto"]])
def test_bad_jobs_option_refused_before_any_work(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and ("--jobs must be" in err or "--address: only with --backend ray" in err), err


def test_stage_seconds_are_printed_when_each_stage_ends():
    import io
    import re

    from slics_core.commands.workspaces import StageProgress

    out = io.StringIO()
    progress = StageProgress("emoji", file=out, timings=True)
    for stage, done, total in [("render scenes", 0, 2), ("render scenes", 2, 2), ("fit: 3 models on 2 workers", 1, 3),
                               ("fit", 3, 3), ("prepare the pages: atoms", 0, 1)]:
        progress(stage, done, total)
    progress.say("fits: 2 jobs as asked")
    progress.close()
    lines = out.getvalue().splitlines()
    assert [re.sub(r"[0-9]+\.[0-9] s$", "N s", x) for x in lines] == [
        "[emoji] render scenes: 0/2", "[emoji] render scenes: N s", "[emoji] fit: 3 models on 2 workers",
        "[emoji] fit: N s", "[emoji] prepare the pages: atoms", "[emoji] fits: 2 jobs as asked",
        "[emoji] prepare the pages: N s"], lines


# -- the task runner ----------------------------------------------------------------------------------------
def test_run_tasks_in_task_order_from_a_memory_mapped_input():
    """Rows of a 4 MB shared matrix (memory-mapped, not pickled per task) come back in task order."""
    shared = np.arange(1024 * 1024, dtype=np.float32).reshape(512, 2048)
    tasks = [7, 3, 500, 0, 42, 3]
    calls, kept = [], {}
    out = run_tasks(operator.getitem, tasks, shared=shared, n_jobs=2, progress=lambda *a: calls.append(a),
                    stage="rows", on_result=kept.__setitem__)
    assert all(np.array_equal(o, shared[t]) for o, t in zip(out, tasks))
    assert sorted(kept) == list(range(6)) and all(np.array_equal(kept[i], shared[t]) for i, t in enumerate(tasks))
    assert calls[0] == ("rows", 0, 6) and calls[-1] == ("rows", 6, 6) and len(calls) == 7
    assert run_tasks(operator.getitem, tasks, shared=shared, n_jobs=1)[2].tolist() == shared[500].tolist()
    # on the workers the matrix is a memory map of one file, the same for every task (written once)
    names = run_tasks(getattr, ["filename"] * 4, shared=shared, n_jobs=2)
    assert len(set(names)) == 1 and names[0] and Path(names[0]).suffix == ".pkl", names


def _probe(modules, task):
    return os.getpid(), all(m in sys.modules for m in modules)


def test_started_workers_are_the_ones_the_tasks_run_on():
    """``start_workers(2, modules)``: two processes that have imported ``modules``; ``run_tasks`` with the same
    ``n_jobs`` then runs every task on them (no new worker is started)."""
    assert start_workers(1, ("colorsys",)) is None
    started = start_workers(2, ("colorsys", "wave"))
    pids = started.wait()
    assert started.done() and len(pids) == 2 and os.getpid() not in pids
    seen = run_tasks(_probe, range(6), shared=("colorsys", "wave"), n_jobs=2)
    assert {pid for pid, _ in seen} <= pids and all(imported for _, imported in seen), (seen, pids)


def _freeze_count(_shared, _task):
    import gc

    return os.getpid(), gc.get_freeze_count()


def test_started_workers_freeze_what_their_imports_made():
    """A started worker freezes its heap after its imports (its later collections, and its exit, skip those
    objects); a task run here is not affected (this process's collector is left as it was)."""
    import gc

    before = gc.get_freeze_count()
    started = start_workers(2, ("colorsys",))
    pids = started.wait()
    seen = run_tasks(_freeze_count, range(4), n_jobs=2)
    assert {pid for pid, _ in seen} <= pids and all(count > 1000 for _, count in seen), seen
    assert gc.get_freeze_count() == before


def test_the_slics_process_freezes_its_heap_only_at_its_end():
    """``slics`` (``cli.run``): the exit code of :func:`main`, and the heap frozen once it returned, so that the
    interpreter's last collections skip it; :func:`main` itself (what tests and callers use) freezes nothing."""
    code = ("import gc, sys; from slics_core import cli; sys.argv = ['slics', 'fit', '--no-such-option'];\n"
            "before = gc.get_freeze_count()\n"
            "try:\n    cli.main(sys.argv[1:])\n"
            "except SystemExit as e:\n    print('main', e.code, gc.get_freeze_count() == before)\n"
            "sys.argv = ['slics', 'models']; code = cli.run(); print('run', code, gc.get_freeze_count() > 1000)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.splitlines() if line.startswith(("main ", "run "))]
    assert lines == ["main 2 True", "run 0 True"], out.stdout
    bad = subprocess.run([sys.executable, "-m", "slics_core", "workspace", "--cache", "nowhere", "--jobs", "0"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--jobs" in bad.stderr, bad.stderr


def test_scenes_rendered_in_chunks_on_workers_are_the_same_world():
    n = 2 * SCENE_CHUNK + 17
    seen = []
    one = make_scenes(n, seed=11, start=5)
    two = make_scenes(n, seed=11, start=5, n_jobs=2, progress=lambda d, t: seen.append((d, t)))
    assert np.array_equal(one.images, two.images) and np.array_equal(one.general, two.general)
    assert np.array_equal(one.sub, two.sub) and one.captions == two.captions and one.objects == two.objects
    assert (two.seed, two.start, len(two)) == (11, 5, n) and seen[-1] == (n, n)


# -- a workspace built with 2 jobs is the one built with 1 ---------------------------------------------------
@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """A small precomputed embedding cache (planted concept cones, 4 concepts, sub-labels)."""
    root = tmp_path_factory.mktemp("jobs")
    emb, meta = write_dataset(root / "data", 600, 32, 4, 3, 0.5, seed=0)
    assert main(["embed", "--dataset", "precomputed", "--embeddings", str(emb), "--metadata", str(meta), "--cache",
                 str(root / "cache"), "--no-progress"]) == 0
    return root / "cache"



def test_workspace_with_two_jobs_equals_one_job(cache, tmp_path, capsys):
    for jobs in (1, 2):
        assert main(["workspace", "--cache", str(cache), "--out", str(tmp_path / f"ws{jobs}"), "--vocab", "none",
                     "--d0", "2", "3", "--n-iter", "3", "--jobs", str(jobs)]) == 0
        err = capsys.readouterr().err
        assert f"[workspace] fits: {jobs} job" in err and ("[workspace] pages: 2 jobs" in err) == (jobs == 2), err
    one, two = files(tmp_path / "ws1"), files(tmp_path / "ws2")
    assert sorted(one) == sorted(two) and len(one) > 5
    # the map's layout keeps the wall seconds it took beside it (Subspaces' title): every other byte is the same
    assert [name for name in one if name.startswith("pagecache/tsne-")] and differing_files(one, two) == []
    from slics_core.explorer.workspace_files import load_workspace

    a, b = load_workspace(tmp_path / "ws1"), load_workspace(tmp_path / "ws2")
    assert sorted(a.models) == sorted(b.models) and ("S-SLiCS", 3) in a.models
    for key, model in a.models.items():
        if hasattr(model, "atoms_"):
            assert np.array_equal(model.atoms_, b.models[key].atoms_), key


def test_reproduce_with_two_jobs_equals_one_job(cache, tmp_path, capsys):
    """The sweep's, the table's and the stability seeds' dictionaries fitted side by side give the same tables."""
    data = cache.parent / "data"
    for jobs in (1, 2):
        assert main(["reproduce", "--dataset", "precomputed", "--embeddings", str(data / "emb.npy"), "--metadata",
                     str(data / "meta.csv"), "--preprocessing", "unit", "--out-dir", str(tmp_path / f"r{jobs}"),
                     "--n-iter", "3", "--seeds", "2", "--batch-size", "100", "--sweep", "2", "4", "--methods",
                     "S-SVD,S-SLiCS,UF", "--stability", "2", "--no-progress", "--no-estimate",
                     "--jobs", str(jobs)]) == 0
        err = capsys.readouterr().err
        assert ("d0 sweep fits: 2 jobs as asked" in err and "table fits: 2 jobs as asked" in err) == (jobs == 2), err
    # every result file (the run folders keep each run's wall time beside it, which differ)
    names = sorted(p.name for p in (tmp_path / "r1").iterdir() if p.is_file())
    assert {"d0_sweep.json", "methods.json", "stability.json"} <= set(names), names
    for name in names:
        assert (tmp_path / "r1" / name).read_bytes() == (tmp_path / "r2" / name).read_bytes(), name


def test_evaluate_with_two_jobs_prints_the_table_of_one_job(cache, tmp_path, capsys, monkeypatch):
    """``slics evaluate --jobs 2`` without ``--out-dir``: the dictionaries are handed over in a temporary run
    folder, removed after; the printed table is the one of ``--jobs 1``."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    printed = {}
    for jobs in (1, 2):
        assert main(["evaluate", "--cache", str(cache), "--n-iter", "3", "--seeds", "2", "--batch-size", "100",
                     "--sweep", "2", "3", "--methods", "S-SVD,S-SLiCS", "--no-estimate", "--jobs", str(jobs)]) == 0
        out, err = capsys.readouterr()
        assert ("table fits: 2 jobs as asked" in err) == (jobs == 2) and "kept in" not in err, err
        printed[jobs] = out
    assert "S-SLiCS" in printed[1] and printed[1] == printed[2]
    assert list(tmp_path.iterdir()) == []


def test_workspace_on_a_local_ray_equals_the_local_build(cache, tmp_path):
    """``backend="ray"`` (the fits as Ray tasks, the inputs put once in the object store) writes the same files."""
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'slics-explorer[ray]')")
    from slics_core.explorer.build import build_workspace_from_cache

    settings = dict(vocabulary="none", d0_values=[2, 3], n_iter=3, prepare=False)
    build_workspace_from_cache(cache, tmp_path / "local", **settings)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        lines = []
        built = build_workspace_from_cache(cache, tmp_path / "ray", backend="ray", n_jobs=2, say=lines.append,
                                           **settings)
    finally:
        ray.shutdown()
    assert len(lines) == 1 and lines[0].startswith("fits: 2 jobs as asked"), lines
    assert all(a.flags.writeable for m in built.models.values() for a in vars(m).values()
               if isinstance(a, np.ndarray)), "arrays out of Ray's object store are read-only: copy them"
    one, two = files(tmp_path / "local"), files(tmp_path / "ray")
    assert sorted(one) == sorted(two) and [name for name in one if one[name] != two[name]] == []


def test_emoji_build_on_a_local_ray_equals_the_local_build(tmp_path, capsys, monkeypatch):
    """``slics emoji-build --backend ray``: the fits as Ray tasks (a local Ray), the same world file by file."""
    pytest.importorskip("ray", reason="ray is not installed (pip install 'slics-explorer[ray]')")
    from slics_core import tasks

    on_ray, run_ray = [], tasks._run_ray
    monkeypatch.setattr(tasks, "_run_ray", lambda fn, todo, *a: on_ray.append(len(todo)) or run_ray(fn, todo, *a))
    tiny = ["--n-train", "80", "--n-val", "20", "--n-query", "20", "--n-pool", "40", "--d0", "2", "3", "--quiet"]
    assert main(["emoji-build", "--cache-dir", str(tmp_path / "local"), "--jobs", "1"] + tiny) == 0
    assert on_ray == []
    assert main(["emoji-build", "--cache-dir", str(tmp_path / "ray"), "--jobs", "2", "--backend", "ray"] + tiny) == 0
    assert on_ray and sum(on_ray) >= 8, on_ray  # S-SVD, S-SLiCS, U-SLiCS at two d0, UF, SpLiCE…: on Ray
    capsys.readouterr()
    (one,), (two,) = (list((tmp_path / kind).glob("workspace-*")) for kind in ("local", "ray"))
    a, b = files(one), files(two)
    assert len(a) > 5 and differing_files(a, b) == []


def test_emoji_build_with_two_jobs_equals_one_job(tmp_path, capsys):
    """``slics emoji-build --jobs 2``: workers started first (importing the scenes and the fits), the scenes
    rendered on them in chunks while the encoders load here, the fits and pages on the same workers: the world
    built with ``--jobs 1``, file by file."""
    from joblib.externals.loky import get_reusable_executor

    tiny = ["--n-train", "200", "--n-val", "60", "--n-query", "60", "--n-pool", "240", "--d0", "2", "3"]
    get_reusable_executor().shutdown(wait=True)  # the build starts its own workers, as a new `slics` process does
    for jobs in (1, 2):
        assert main(["emoji-build", "--cache-dir", str(tmp_path / f"j{jobs}"), "--jobs", str(jobs)] + tiny) == 0
        err = capsys.readouterr().err
        assert ("[emoji] render: 2 jobs as asked" in err) == (jobs == 2), err
        assert ("load the emoji-small encoder" in err) == (jobs == 1), err  # on workers, it loads meanwhile
        assert "worker stopped" not in err, err  # loky restarts no worker (its leak check: docs/performance.md)
    (one,), (two,) = (list((tmp_path / f"j{jobs}").glob("workspace-*")) for jobs in (1, 2))
    a, b = files(one), files(two)
    assert len(a) > 5 and differing_files(a, b) == []


@pytest.mark.parametrize("argv", [["emoji-build", "--address", "auto"],
                                  ["workspace", "--cache", "c", "--address", "x"]])
def test_address_is_only_for_ray(argv, capsys):
    assert main(argv) == 2
    assert capsys.readouterr().err.strip().endswith("--address: only with --backend ray")


# -- Ctrl-C / SIGTERM stop every worker and leave the folder as it was ----------------------------------------
def _children(pid: int) -> set:
    """Process ids whose parent is ``pid`` (and theirs), read from /proc."""
    parents = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(d.name)] = int(fields[1])
    found, todo = set(), [pid]
    while todo:
        p = todo.pop()
        kids = {c for c, pp in parents.items() if pp == p}
        found |= kids
        todo += list(kids)
    return found


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads the process tree from /proc (Linux)")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_mid_fit_stops_every_worker_and_leaves_the_folder(cache, tmp_path, sig):
    out = tmp_path / "ws"
    base = [sys.executable, "-m", "slics_core", "workspace", "--cache", str(cache), "--out", str(out), "--vocab",
            "none", "--methods", "S-SLiCS", "--d0", "2", "3"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    assert subprocess.run(base + ["--n-iter", "1", "--jobs", "1", "--quiet"], env=env, capture_output=True,
                          timeout=300).returncode == 0
    before = files(out)
    # the same build again, with fits long enough to be stopped in the middle
    proc = subprocess.Popen(base + ["--n-iter", "100000", "--jobs", "2", "--overwrite"], env=env,
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        for line in proc.stderr:
            if "fits: 2 jobs" in line:
                break
        workers = set()
        deadline = time.monotonic() + 60
        while len(workers) < 2 and time.monotonic() < deadline:  # the workers are started and fitting
            workers = {p for p in _children(proc.pid) if _alive(p)}
            time.sleep(0.5)
        assert len(workers) >= 2, "the workers never started"
        time.sleep(2)
        proc.send_signal(sig)
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 130, code
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for p in workers if _alive(p)], "worker processes outlived the build"
    assert files(out) == before


def test_emoji_embeddings_do_not_depend_on_the_forward_batch():
    """The world's embeddings with torch's own threads are the same, bit for bit, for 256 images a forward pass
    (before 0.6.1) and ``MODEL_BATCH``, on scenes the batch size was not chosen on (seed 3, 300 scenes: the last
    batch is partial)."""
    from PIL import Image

    from slics_core.emoji.world import CONDITION_ENCODER, ENCODER, MODEL_BATCH, world_encoder

    pil = [Image.fromarray(a) for a in make_scenes(300, seed=3).images]
    for name in (ENCODER, CONDITION_ENCODER):
        enc = world_encoder(name)
        one, two = (enc.encode_images(pil, batch_size=b) for b in (256, MODEL_BATCH))
        assert np.array_equal(one, two), name


def test_world_encoder_is_built_once_and_is_the_cpu_float32_encoder():
    """``world_encoder``: one object per name in a process (the render and the build share it), embedding as an
    encoder built afresh on the CPU in float32 does."""
    from PIL import Image

    from slics_core.emoji.world import CONDITION_ENCODER, ENCODER, world_encoder
    from slics_core.encoders import create_encoder

    pil = [Image.fromarray(a) for a in make_scenes(5, seed=4).images]
    for name in (ENCODER, CONDITION_ENCODER):
        shared = world_encoder(name)
        assert world_encoder(name) is shared
        fresh = create_encoder(name, device="cpu", half=False)
        assert np.array_equal(shared.encode_images(pil), fresh.encode_images(pil)), name
    assert world_encoder(ENCODER) is not world_encoder(CONDITION_ENCODER)
