"""Work the app runs in a background thread, with progress every tab can read: one run, and a process-wide registry.

* :class:`BackgroundRun` - ``work(progress)`` in a daemon thread; ``progress(line, done, total)`` and the
  outcome (result, or one-line error) are kept under a lock for any number of readers.
* :class:`BackgroundJobs` - runs by key (e.g. ``(workspace id, settings)``): a key starts at most one run at a
  time, a failed run can be started again, and a few finished runs are kept.
* :data:`JOBS` - the process's registry: every session and tab of the app sees the same runs.

Pages show a run's :meth:`BackgroundRun.snapshot` in an ``st.fragment(run_every=...)`` and read the result from
the workspace's store (:mod:`slics_core.explorer.arrival`) once it is done.
"""
from __future__ import annotations

import threading
import time

from slics_core.explorer.emoji_build import user_error

__all__ = ["BackgroundRun", "BackgroundJobs", "JOBS", "KEEP_FINISHED"]

#: Finished runs a registry keeps (older ones are dropped when a new run starts).
KEEP_FINISHED = 8


class BackgroundRun:
    """``work(progress)`` in a daemon thread, read by any number of readers.

    Attributes (read with :meth:`snapshot`): ``stage``, ``done``, ``total``, ``finished``, ``error`` (one line),
    ``result``.
    """

    def __init__(self, work, total: int = 1, name: str = "slics-background"):
        self._lock = threading.Lock()
        self._work = work
        self.stage, self.done, self.total = "starting", 0, int(total)
        self.started = time.monotonic()
        self.finished, self.error, self.result = False, None, None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> BackgroundRun:
        self._thread.start()
        return self

    def progress(self, line, done, total) -> None:
        with self._lock:
            self.stage, self.done, self.total = str(line), int(done), int(total)

    def _run(self):
        try:
            result = self._work(self.progress)
        except Exception as exc:
            with self._lock:
                self.error, self.finished = user_error(exc), True
            return
        with self._lock:
            self.result, self.finished = result, True

    def join(self, timeout=None) -> None:
        self._thread.join(timeout)

    def snapshot(self) -> dict:
        """``stage``, ``done``, ``total``, ``elapsed`` (s), ``finished``, ``error``, ``result``."""
        with self._lock:
            return {"stage": self.stage, "done": self.done, "total": self.total, "finished": self.finished,
                    "elapsed": time.monotonic() - self.started, "error": self.error, "result": self.result}


class BackgroundJobs:
    """Runs by key, shared by every reader of this object."""

    def __init__(self, keep: int = KEEP_FINISHED):
        self._lock = threading.Lock()
        self._runs: dict = {}
        self.keep = int(keep)

    def get(self, key) -> BackgroundRun | None:
        with self._lock:
            return self._runs.get(key)

    def start(self, key, make_run) -> BackgroundRun:
        """The run of ``key``: the one running or finished, else (none, or the last one failed) ``make_run()``
        started now."""
        with self._lock:
            run = self._runs.get(key)
            if run is None or run.snapshot()["error"]:
                finished = [k for k, r in self._runs.items() if r.snapshot()["finished"]]
                for old in finished[:max(0, len(finished) - self.keep)]:
                    self._runs.pop(old)
                run = self._runs[key] = make_run().start()
            return run

    def wait(self, timeout=None) -> None:
        """Wait until every run started so far has finished (``timeout`` seconds each at most)."""
        with self._lock:
            runs = list(self._runs.values())
        for run in runs:
            run.join(timeout)


#: The process's runs (every session and tab of the app).
JOBS = BackgroundJobs()
