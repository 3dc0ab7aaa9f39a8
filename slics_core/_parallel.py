"""Per-sample work over several cores: ``n_jobs`` (scikit-learn's convention) and row blocks in a thread pool.

* :func:`n_jobs_ok` / :data:`N_JOBS_EXPECTED` - the rule for an ``n_jobs`` value (``None``, or an int other than 0).
* :func:`effective_n_jobs` - the number of threads ``n_jobs`` asks for (``None`` = 1, ``-1`` = every core the
  process may run on); :func:`threads_that_help` - how many a call uses: at most one per item (block of
  rows, concept) and at most the cores other programs leave idle (:func:`idle_cores`).
* :func:`row_blocks` - the fixed split of ``n`` rows into blocks of :data:`ROW_BLOCK` rows.
* :func:`map_row_blocks` - a function over those blocks, on up to ``n_jobs`` threads, results in block order.
* :func:`rowwise` - a row-independent function over all rows (one call on one thread, else by blocks).
* :func:`parallel_map` - ``[fn(x) for x in items]`` on up to ``n_jobs`` threads (e.g. one item per concept).
* :class:`ThreadChoice` - for a sequence of like steps (a fit's batches): one thread or ``n_jobs``, whichever
  the last steps measured faster.

The blocks depend only on the number of rows, never on ``n_jobs``, so a computation that is split by
blocks gives the same bits on one thread or many. The compiled kernels run on the blocks release the
GIL (numba ``nogil``), so the threads run on different cores. The calling thread takes items like the
pool's threads do, and idle pool threads sleep on a queue (they never spin), so a busy machine costs
at most the item a descheduled thread holds: ``n_jobs=2`` is never far behind one thread, and
"every core" (``-1``) means as many threads as there are items to share and idle cores to run them
(docs/performance.md, "n_jobs"). The module imports only the standard library and numpy, so the
command line can check ``--n-jobs`` before any heavy import.
"""
from __future__ import annotations

import os
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor

import numpy as np

#: Rows per block: small enough that a batch of 2 000 rows feeds 16 threads, large enough that a
#: block's work (about a millisecond of NNLS) dwarfs handing it to a thread.
ROW_BLOCK = 128
#: What an ``n_jobs`` value must be (the constraint tables quote it).
N_JOBS_EXPECTED = "a non-zero int (k threads; -1 every core, -2 all but one...) or None (null: one thread)"

_pools: dict[int, ThreadPoolExecutor] = {}
_pools_lock = threading.Lock()


def n_jobs_ok(x) -> bool:
    """Whether ``x`` is a valid ``n_jobs``: ``None`` or an int (not bool) other than 0."""
    return x is None or (isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_)) and x != 0)


def _cores():
    """The cores this process may run on (its CPU affinity where the system reports it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def effective_n_jobs(n_jobs) -> int:
    """Threads for ``n_jobs`` (scikit-learn's rule): ``None`` -> 1, ``k > 0`` -> ``k``, ``-1`` -> every core,
    ``-2`` -> all but one... (at least 1)."""
    if not n_jobs_ok(n_jobs):
        raise ValueError(f"n_jobs must be {N_JOBS_EXPECTED}; got {n_jobs!r}.")
    if n_jobs is None:
        return 1
    return int(n_jobs) if n_jobs > 0 else max(1, _cores() + 1 + int(n_jobs))


def _machine_load() -> float:
    """Threads running or waiting to run on the machine now, this one included: the count in
    ``/proc/loadavg`` (Linux), else the one-minute load average, else 1 (this thread alone)."""
    try:
        with open("/proc/loadavg", encoding="ascii") as f:
            return float(f.read(200).split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):  # no load average on this system
        return 1.0


def idle_cores() -> float:
    """Cores that other programs leave idle now (this thread's core counts as idle): ``cores - load + 1``.

    The count of runnable threads is read at the moment of the call, not the one-minute load
    average: a fit's own threads would otherwise raise the average and throttle the fit a minute
    later. Between two parallel steps the fit's helper threads sleep and are not counted.
    """
    return min(float(_cores()), _cores() - _machine_load() + 1.0)


def threads_that_help(n_jobs, items=None) -> int:
    """Threads for ``n_jobs`` now: :func:`effective_n_jobs`, at most one per item and at most the
    :func:`idle_cores` (at least 1). On a machine whose cores are taken by other programs, extra
    threads only wait for their turn and add hand-overs: measured slower (docs/performance.md, "n_jobs")."""
    threads = effective_n_jobs(n_jobs)
    if items is not None:
        threads = min(threads, items)
    if threads > 1:
        threads = max(1, min(threads, int(idle_cores())))
    return threads


def row_blocks(n: int) -> list[slice]:
    """Consecutive slices of :data:`ROW_BLOCK` rows covering ``range(n)`` (the last may be shorter)."""
    return [slice(i, min(i + ROW_BLOCK, n)) for i in range(0, n, ROW_BLOCK)]


def _pool(workers):
    with _pools_lock:
        pool = _pools.get(workers)
        if pool is None:
            pool = _pools[workers] = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="slics-rows")
        return pool


class _Shared:
    """One :func:`parallel_map` call's work: items claimed one at a time by whichever thread is free."""

    def __init__(self, fn, items):
        self.fn, self.items = fn, items
        self.results = [None] * len(items)
        self.next = self.claimed = self.finished = 0
        self.error = None
        self.cond = threading.Condition()

    def work(self):
        """Claim and run items until none is left (or one failed); safe to call from any thread."""
        while True:
            with self.cond:
                if self.error is not None or self.next >= len(self.items):
                    return
                i = self.next
                self.next += 1
                self.claimed += 1
            try:
                self.results[i] = self.fn(self.items[i])
            except BaseException as exc:  # handed to the caller, which raises it
                with self.cond:
                    self.error = self.error or exc
            finally:
                with self.cond:
                    self.finished += 1
                    self.cond.notify_all()

    def wait(self):
        """Wait until every claimed item is finished (items no helper claimed were run by the caller)."""
        try:
            with self.cond:
                while self.finished < self.claimed:
                    self.cond.wait()
        except BaseException as exc:  # Ctrl-C while waiting: the helpers claim nothing more
            with self.cond:
                self.error = self.error or exc
            raise
        if self.error is not None:
            raise self.error
        return self.results


def parallel_map(fn, items, n_jobs) -> list:
    """``[fn(x) for x in items]``, on up to :func:`threads_that_help` threads, results in order.

    The calling thread works too: it and ``threads - 1`` pool threads claim the items one at a
    time, so a thread that the system does not schedule (a busy machine) delays at most the item
    it holds, and the caller never waits for a pool thread to start (idle pool threads sleep,
    they never spin). ``fn`` must only read shared inputs and return its result; BLAS calls
    inside it should be limited to one thread by the caller (``threadpoolctl.threadpool_limits``).
    """
    items = list(items)
    threads = threads_that_help(n_jobs, len(items))
    if threads <= 1:
        return [fn(x) for x in items]
    shared = _Shared(fn, items)
    pool = _pool(threads - 1)
    for _ in range(threads - 1):
        pool.submit(shared.work)
    shared.work()
    return shared.wait()


def map_row_blocks(fn, n: int, n_jobs) -> list:
    """``[fn(block) for block in row_blocks(n)]``, on up to :func:`threads_that_help` threads."""
    return parallel_map(fn, row_blocks(n), n_jobs)


def rowwise(fn, n: int, n_jobs):
    """``fn(rows)`` for a function whose every output row depends on its input row alone.

    On one thread this is ``fn(slice(None))``; on several, ``fn`` runs on each of
    :func:`row_blocks` and the results (arrays, or tuples of arrays) are
    concatenated, which is the same result.
    """
    blocks = row_blocks(n)
    threads = threads_that_help(n_jobs, len(blocks))
    if threads <= 1:
        return fn(slice(None))
    parts = parallel_map(fn, blocks, threads)
    if isinstance(parts[0], tuple):
        return tuple(np.concatenate(p) for p in zip(*parts))
    return np.concatenate(parts)


class ThreadChoice:
    """One thread or ``effective_n_jobs(n_jobs)`` for each step of a sequence of like steps: as many as help.

    While fewer than two cores are idle (:func:`idle_cores`), one thread. Otherwise a fit's batch
    steps alternate between the two counts until each has :attr:`WARMUP` timings, then run with the
    count whose recent steps took less wall time per unit of work (the median of its last
    :attr:`WINDOW`; a tie goes to one thread), trying the other count every :attr:`PROBE_EVERY`-th
    step so that the choice follows the machine's load. The results never depend on the count, only
    the time does (docs/performance.md, "n_jobs").
    """

    WARMUP = 2
    WINDOW = 4
    PROBE_EVERY = 8

    def __init__(self, n_jobs):
        self.most = effective_n_jobs(n_jobs)
        self._seconds = {1: deque(maxlen=self.WINDOW), self.most: deque(maxlen=self.WINDOW)}
        self._steps = 0

    def threads(self) -> int:
        """The thread count for the next step (one while fewer than two cores are idle: :func:`idle_cores`)."""
        if self.most == 1 or idle_cores() < 2:
            return 1
        one, most = self._seconds[1], self._seconds[self.most]
        if min(len(one), len(most)) < self.WARMUP:
            return self.most if len(most) <= len(one) else 1
        self._steps += 1
        best, other = (self.most, 1) if np.median(most) < np.median(one) else (1, self.most)
        return other if self._steps % self.PROBE_EVERY == 0 else best

    def record(self, threads: int, seconds: float, units: float = 1.0) -> None:
        """A step run on ``threads`` threads took ``seconds`` for ``units`` of work (e.g. its rows)."""
        if threads in self._seconds and units > 0:
            self._seconds[threads].append(seconds / units)
