"""Independent tasks on several worker *processes* (joblib's loky backend) or on Ray: ``--jobs``.

This is process-level parallelism: each task is a whole unit of work that shares nothing with the others
but its read-only input (a fit of one method at one ``d0`` and seed, a chunk of emoji scenes). Threads
*inside* one fit are another module's job (:mod:`slics_core._parallel`, ``n_jobs``).

* :func:`jobs_ok` / :data:`JOBS_EXPECTED` - the rule for a ``--jobs`` value (checked by the command line
  before any heavy import: this module imports only the standard library, numpy, joblib and threadpoolctl
  at its top).
* :func:`available_memory` - bytes the system can still give (``MemAvailable`` of ``/proc/meminfo``).
* :func:`fit_bytes`, :func:`shared_bytes` - the memory one fit needs for itself, and its shared input.
* :func:`choose_jobs` - how many workers to start, and one line saying why (cores, tasks, memory).
* :func:`run_tasks` - ``[fn(shared, task) for task in tasks]`` on those workers, results in task order,
  ``progress(stage, done, total)`` as tasks finish; Ctrl-C or SIGTERM stops every worker.
* :func:`one_thread` - BLAS and OpenMP at one thread, as every task runs (here or on a worker).
* :func:`start_workers` - start the workers of a later :func:`run_tasks` now, in the background, importing
  what its tasks import, so that their start-up overlaps the caller's own serial work.

The results never depend on the number of workers: a task's result depends on ``shared`` and the task
alone (every task carries its own seed, and runs its BLAS at one thread wherever it runs), and they are
returned in task order. ``shared``'s NumPy arrays above 1 MB are written once to a temporary file (joblib's
``max_nbytes``: the file is named by the array's hash, so every task refers to the same one) and
memory-mapped read-only by every worker, never pickled per task (only the small rest of ``shared`` is);
on Ray ``shared`` is put once in the object store (``ray.put``) and every task reads that one copy.
"""
from __future__ import annotations

import copy
import gc
import importlib
import os
import signal
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from joblib import Parallel, delayed
from threadpoolctl import threadpool_limits

from slics_core.extras import require

__all__ = ["JOBS_EXPECTED", "BACKENDS", "WORKER_BYTES", "FIT_MEMORY_FACTOR", "jobs_ok", "cores", "available_memory",
           "fit_bytes", "shared_bytes", "choose_jobs", "one_thread", "run_tasks", "sigterm_interrupts", "start_workers",
           "StartedWorkers"]

#: What a ``--jobs`` value must be (the messages quote it).
JOBS_EXPECTED = "a positive int (that many worker processes), -1 (every core) or None (automatic)"
#: Where tasks run: ``loky`` (worker processes on this machine) or ``ray`` (a Ray cluster, or a local Ray).
BACKENDS = ("loky", "ray")
#: Resident memory of one idle worker process once it has imported the library and its compiled kernels
#: (measured: docs/performance.md, "Independent tasks in parallel"); counted once per worker.
WORKER_BYTES = 300 * 2**20
#: Automatic ``--jobs``: below this much working memory over all tasks (:func:`choose_jobs`'s ``task_bytes``
#: times the tasks), the work is too small to pay for starting workers (a second or two each: they import
#: the library and load its compiled kernels), and it runs here. Measured (docs/performance.md, "Measured
#: again on a quiet machine", "The emoji world's serial steps"): the emoji world's 22 fits (129 MiB by this
#: estimate) 1.8x faster on two workers, its whole build 1.44x (0.6.1), and beside one busy process per core
#: never slower; the test worlds (scale 0.2: 26 MiB of fits) stay in one process.
SMALL_WORK_BYTES = 100 * 2**20
#: Arrays of ``shared`` above this size are memory-mapped into the workers rather than pickled.
MMAP_BYTES = "1M"
#: Seconds an idle worker waits for more tasks before it exits (a build's stages reuse the workers).
IDLE_WORKER_SECONDS = 120


def jobs_ok(x) -> bool:
    """Whether ``x`` is a valid ``--jobs``: None, -1, or a positive int (not a bool)."""
    if x is None:
        return True
    return isinstance(x, int) and not isinstance(x, bool) and (x >= 1 or x == -1)


def cores() -> int:
    """The cores this process may run on (its CPU affinity where the system reports it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def available_memory() -> int | None:
    """Bytes of memory the system can give without swapping: ``MemAvailable`` of ``/proc/meminfo`` (Linux),
    else free physical pages (``os.sysconf``); None when neither is known."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (OSError, ValueError, AttributeError):
        return None


#: A fit's own working memory, in bytes per byte of its training matrix as float64 (copies of the centred
#: matrix, codes and residuals; measured peak of one fit: docs/performance.md, "Independent tasks").
FIT_MEMORY_FACTOR = 4


def fit_bytes(X) -> int:
    """Estimated working memory of one fit on the training matrix ``X`` (:data:`FIT_MEMORY_FACTOR` times ``X``
    as float64); ``X`` itself is shared by every worker (memory-mapped) and counted by :func:`shared_bytes`."""
    n, d = X.shape
    return int(FIT_MEMORY_FACTOR * n * d * 8)


def shared_bytes(obj) -> int:
    """Bytes of the NumPy arrays among the attributes of ``obj`` (a dataclass of inputs), counted once."""
    return int(sum(a.nbytes for a in vars(obj).values() if isinstance(a, np.ndarray)))


def _mib(n) -> str:
    return f"{n / 2**20:,.0f} MiB" if n < 2**30 else f"{n / 2**30:,.1f} GiB"


def choose_jobs(requested, n_tasks: int, task_bytes: int, *, shared_bytes: int = 0, available=None,
                n_cores=None) -> tuple[int, str]:
    """The number of worker processes for ``n_tasks`` tasks, and one line saying why.

    The estimated peak memory of ``k`` workers is ``shared_bytes + k * (WORKER_BYTES + task_bytes)``:
    the shared input once (memory-mapped, its pages shared by every worker), and per worker the library
    (:data:`WORKER_BYTES`) and one task's own working memory ``task_bytes`` (the caller's estimate).
    ``requested`` None or -1 means every core (``n_cores``, default :func:`cores`), capped so that this
    estimate stays under ``available`` (default :func:`available_memory`; unknown: not capped); a given
    positive number is taken as it is. Never more workers than tasks, never fewer than one. Automatic: one
    job when all the tasks together need less than :data:`SMALL_WORK_BYTES` (the work is too small to pay
    for starting workers).
    """
    if not jobs_ok(requested):
        raise ValueError(f"jobs must be {JOBS_EXPECTED}; got {requested!r}")
    n_cores = cores() if n_cores is None else int(n_cores)
    n_tasks = max(1, int(n_tasks))
    per_worker = WORKER_BYTES + max(0, int(task_bytes))
    if requested is not None and requested != -1:
        n = min(int(requested), n_tasks)
        peak = shared_bytes + n * per_worker
        return n, (f"{n} job{'s' * (n > 1)} as asked" + (f" ({n_tasks} tasks)" if n < requested else "")
                   + f"; estimated peak memory {_mib(peak)}")
    if n_tasks * max(0, int(task_bytes)) < SMALL_WORK_BYTES:
        return 1, (f"1 job: {n_tasks} small task{'s' * (n_tasks > 1)} ({_mib(n_tasks * max(0, int(task_bytes)))} of "
                   f"working memory in all; starting workers would cost more than it saves)")
    available = available_memory() if available is None else int(available)
    n = min(n_cores, n_tasks)
    why = [f"{n_cores} core{'s' * (n_cores > 1)}", f"{n_tasks} task{'s' * (n_tasks > 1)}"]
    if available is not None:
        fit = max(1, int((available - shared_bytes) // per_worker))
        if fit < n:
            n = fit
        why.append(f"{_mib(available)} available / ({_mib(per_worker)} per job + {_mib(shared_bytes)} shared)")
    peak = shared_bytes + n * per_worker
    return n, f"{n} job{'s' * (n > 1)}: min({', '.join(why)}); estimated peak memory {_mib(peak)}"


@contextmanager
def sigterm_interrupts():
    """While running, SIGTERM raises KeyboardInterrupt in the main thread (as Ctrl-C does), so that the
    workers are stopped and nothing is written; the previous handler is restored after. (Outside the main
    thread it does nothing: tasks sent from another thread are covered by the main thread's context.)"""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def one_thread():
    """Context in which BLAS and OpenMP use one thread: every task runs in it, here or on a worker, because
    a product's rounding (hence the order of near-tied rankings) depends on how many threads share it; so a
    task's result never depends on the number of jobs (a worker of k jobs would otherwise get cores // k)."""
    return threadpool_limits(limits=1)


def _call(fn, shared, index, task):
    with one_thread():
        return index, fn(shared, task)


def _report(progress, stage, done, total):
    if progress is not None:
        progress(stage, done, total)


def _loky(n_jobs: int) -> Parallel:
    """The one ``Parallel`` of the loky workers of ``n_jobs`` jobs (the same arguments every time, so that
    joblib reuses the running workers: :func:`start_workers`, :func:`run_tasks`)."""
    return Parallel(n_jobs=int(n_jobs), backend="loky", return_as="generator_unordered", max_nbytes=MMAP_BYTES,
                    mmap_mode="r", idle_worker_timeout=IDLE_WORKER_SECONDS)


#: Seconds an early-start task waits at most for the other workers to take theirs (:func:`_import`).
_MEET_SECONDS = 30.0


def _import(modules, meeting: str, n_jobs: int):
    """An early-start task: import ``modules``, freeze the heap, then wait until ``n_jobs`` workers have done
    so (each leaves its process id as a file in the folder ``meeting``), so that every worker takes exactly one
    of these tasks (a worker done at once would otherwise take the next one too), and its first task, after
    which loky measures the memory it later compares for a leak, is this one."""
    for name in modules:
        importlib.import_module(name)
    # what the imports made lives as long as the worker: its garbage collections (and the last ones, when it
    # exits and the building process waits for it) skip those objects from now on
    gc.freeze()
    folder = Path(meeting)
    (folder / str(os.getpid())).touch()
    deadline = time.monotonic() + _MEET_SECONDS
    while len(list(folder.iterdir())) < n_jobs and time.monotonic() < deadline:
        time.sleep(0.01)
    return os.getpid()


class StartedWorkers:
    """Workers being started by :func:`start_workers`: :meth:`wait` for them; :meth:`done` without waiting."""

    def __init__(self, n_jobs: int, modules: tuple):
        self.n_jobs, self.modules, self._pids = n_jobs, modules, set()
        self._thread = threading.Thread(target=self._start, name="slics-start-workers", daemon=True)
        self._thread.start()

    def _start(self):
        try:
            with tempfile.TemporaryDirectory(prefix="slics-workers-") as meeting:
                self._pids = set(_loky(self.n_jobs)(delayed(_import)(self.modules, meeting, self.n_jobs)
                                                    for _ in range(self.n_jobs)))
        except Exception:  # a failed early start only means the tasks start the workers (and say why)
            self._pids = set()

    def done(self) -> bool:
        return not self._thread.is_alive()

    def wait(self) -> set:
        """Wait until the workers have started; their process ids (empty if they could not be started)."""
        self._thread.join()
        return set(self._pids)


def start_workers(n_jobs: int, modules=()) -> StartedWorkers | None:
    """Start ``n_jobs`` loky workers now, each importing ``modules`` (names), in a background thread (None when
    ``n_jobs`` is 1: no worker). :meth:`StartedWorkers.wait` before :func:`run_tasks` with the same ``n_jobs``,
    which then runs its tasks on them. A worker's start (the interpreter, the library, its compiled kernels:
    about 2-3 CPU seconds) then overlaps what the caller does meanwhile; nothing else changes (the same
    workers would start at the first task). Workers left idle for :data:`IDLE_WORKER_SECONDS` exit."""
    if n_jobs is None or int(n_jobs) <= 1:
        return None
    return StartedWorkers(int(n_jobs), tuple(modules))


def run_tasks(fn, tasks, *, shared=None, n_jobs=1, progress=None, stage="tasks", backend="loky",
              address=None, on_result=None) -> list:
    """``[fn(shared, task) for task in tasks]``, on ``n_jobs`` worker processes, results in task order.

    Parameters
    ----------
    fn : callable ``fn(shared, task)``
        A module-level function (it is pickled by reference); it must only read ``shared``, and its result
        must depend on ``shared`` and ``task`` alone (seed it from the task, never from its order).
    tasks : sequence
        Small, picklable task descriptions.
    shared : object, optional
        The read-only input of every task (e.g. the training matrix): NumPy arrays in it above
        :data:`MMAP_BYTES` are memory-mapped by the workers (loky), or it is put once in Ray's object store.
    n_jobs : int
        Worker processes (:func:`choose_jobs`); 1 runs every task here, in order, with no worker.
    progress : callable ``progress(stage, done, total)``, optional
        Called before the first task and after every finished one (``done`` finished of ``total``).
    stage : str
        The stage named in ``progress``.
    on_result : callable ``on_result(index, result)``, optional
        Called here, in this process, as each task finishes (e.g. to keep its result on disk at once, so
        that an interrupted run keeps what was finished).
    backend : {"loky", "ray"}
        ``ray``: tasks run as Ray tasks on ``address`` (``ray.init(address=...)``; None: a Ray already
        initialised in this process, else a local one started for the run), ``n_jobs`` of them at a time.

    Raises
    ------
    KeyboardInterrupt
        Ctrl-C or SIGTERM while tasks run: every worker has been stopped (loky kills its processes; Ray's
        tasks are cancelled).
    """
    tasks = list(tasks)
    total = len(tasks)
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}; got {backend!r}")
    _report(progress, stage, 0, total)
    if backend == "ray":
        return _run_ray(fn, tasks, shared, n_jobs, progress, stage, address, on_result)
    if n_jobs <= 1 or total <= 1:
        out = []
        for i, task in enumerate(tasks):
            out.append(_call(fn, shared, i, task)[1])
            if on_result is not None:
                on_result(i, out[-1])
            _report(progress, stage, i + 1, total)
        return out
    results = [None] * total
    with sigterm_interrupts():
        parallel = _loky(min(int(n_jobs), total))
        done = 0
        for index, value in parallel(delayed(_call)(fn, shared, i, t) for i, t in enumerate(tasks)):
            results[index] = value
            if on_result is not None:
                on_result(index, value)
            done += 1
            _report(progress, stage, done, total)
    return results


def _run_ray(fn, tasks, shared, n_jobs, progress, stage, address, on_result):
    """:func:`run_tasks` on Ray: ``shared`` put once in the object store, at most ``n_jobs`` tasks in flight."""
    ray = require("ray")
    started = False
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False,
                 **({} if address else {"num_cpus": max(1, int(n_jobs))}))
        started = True
    remote = ray.remote(num_cpus=1, max_retries=0)(_call)
    total = len(tasks)
    results = [None] * total
    pending = []
    try:
        with sigterm_interrupts():
            ref = ray.put(shared)
            queue = list(enumerate(tasks))
            done = 0
            while queue or pending:
                while queue and len(pending) < max(1, int(n_jobs)):
                    i, t = queue.pop(0)
                    pending.append(remote.remote(fn, ref, i, t))
                ready, pending = ray.wait(pending, num_returns=1)
                # a copy: NumPy arrays come out of Ray's object store read-only (and keep it pinned); the
                # results are then plain objects of this process, as loky's are
                index, value = copy.deepcopy(ray.get(ready[0]))
                results[index] = value
                if on_result is not None:
                    on_result(index, value)
                done += 1
                _report(progress, stage, done, total)
    except BaseException:
        for p in pending:
            ray.cancel(p, force=True)
        raise
    finally:
        if started:
            ray.shutdown()
    return results
