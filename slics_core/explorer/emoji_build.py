"""The emoji world's workspace service: open it from its cache, or build it (the app's cold start).

* :func:`open_emoji_workspace` - the emoji world as a workspace, opened from its cache or built here.
* :func:`start_emoji_workspace` - the app's start: a cached workspace at once, else a build *process*
  (``python -m slics_core.explorer.emoji_build``) that publishes a preview, then the whole world, on a
  :class:`BuildProgress` handle shared by every reader.
* The build process and the server speak typed messages, one JSON object a line on the process's
  stdout: :class:`Stage`, :class:`Published`, :class:`Failed` (each with its ``kind``), written by
  :func:`encode_message` and read back, validated, by :func:`parse_message`.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import site
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import slics_core
from slics_core._validation import type_phrase
from slics_core.emoji.preview_table import preview_encoder
from slics_core.emoji.world import (
    CONDITION_ENCODER,
    DATASET_NAME,
    ENCODER,
    PREVIEW_SCENES,
    WORLD_DEFAULTS,
    EmojiWorldConfig,
    config_from_env,
    default_cache_dir,
    models_fingerprint,
    preview_config,
    render_emoji_preview,
    render_emoji_world,
    render_jobs,
    vocabulary_fingerprint,
    world_encoder,
)
from slics_core.emoji.world import ENCODER as EMOJI_ENCODER
from slics_core.errors import user_message
from slics_core.explorer.build import build_workspace, report_progress
from slics_core.explorer.workspace import EMOJI, Workspace
from slics_core.explorer.workspace_files import is_workspace, load_workspace, save_workspace
from slics_core.methods import DEFAULT_METHOD
from slics_core.tasks import start_workers

__all__ = ["open_emoji_workspace", "start_emoji_workspace", "BuildProgress", "PROVISIONAL_D0", "Stage",
           "Published", "Failed", "encode_message", "parse_message", "main", "duration_words", "progress_words",
           "step_fraction"]


def _emoji_folder(cache_dir, cfg) -> Path:
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return root / f"workspace-{cfg.key()}-{models_fingerprint()}-{vocabulary_fingerprint()}"


def _make_cache_root(folder: Path) -> None:
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OSError(exc.errno, f"cannot create the emoji cache folder {folder.parent} ({exc.strerror}); set "
                                 "SLICS_EMOJI_CACHE to a writable folder") from None


def _open_emoji_cache(folder: Path, progress):
    """The cached emoji workspace, or None (absent, or damaged: then it is rebuilt, never fatal)."""
    if (folder / "workspace.json").is_file():
        try:
            return load_workspace(folder)
        except ValueError as exc:
            report_progress(progress, f"cache unusable ({exc}); rebuilding", 0, 1)
    return None


#: What a build's worker processes import when they start (before the first scene): the scenes, the fits and
#: the pages' steps (so that the memory a worker has after its first task, loky's reference for a leak, is
#: already the library's).
_WORKER_MODULES = ("slics_core.emoji.scenes", "slics_core.explorer.build")


def _build_emoji(cfg, folder, encoder, progress, prefix=None, n_jobs=1, say=None, backend="loky",
                 address=None) -> Workspace:
    """The whole world's workspace: captions read the label names (the words its text tower knows); the
    SpLiCE baselines decompose over general words, as in the paper; the label names alone are the vocabulary
    of the oracle row only (``docs/emoji_world.md``). ``n_jobs`` worker processes render the scenes and fit
    the models (None: every core, as memory allows; the same world and models for every ``n_jobs``); with
    ``backend="ray"`` the fits are Ray tasks (on ``address``, else a local Ray) and the scenes still render
    here. ``encoder`` (``emoji-small``) None: it is loaded while the workers render the scenes."""
    m = 0 if prefix is None else len(prefix)
    jobs = 1 if n_jobs == 1 else render_jobs(n_jobs, cfg.n_total - m, say)
    modules = _WORKER_MODULES if backend == "loky" else _WORKER_MODULES[:1]  # on Ray, the workers only render
    data, split = render_emoji_world(cfg, progress, encoder=encoder, prefix=prefix, n_jobs=jobs,
                                     workers=start_workers(jobs, modules))
    if encoder is None:  # the one the render loaded (while the workers rendered, with jobs)
        encoder = world_encoder(EMOJI_ENCODER)
    return build_workspace(data, folder, split=split, d0_values=cfg.d0_values, n_iter=cfg.n_iter, seed=0,
                           vocabulary=WORLD_DEFAULTS.vocabulary(), splice_vocabulary=WORLD_DEFAULTS.splice_vocabulary(),
                           oracle_vocabulary=WORLD_DEFAULTS.oracle_vocabulary(), encoder=encoder, name=DATASET_NAME,
                           kind=EMOJI,
                           generator="emoji", progress=progress, n_jobs=n_jobs, backend=backend, address=address,
                           say=say)


def open_emoji_workspace(cache_dir=None, config: EmojiWorldConfig | None = None, progress=None,
                         rebuild: bool = False, n_jobs=1, say=None, backend="loky", address=None) -> Workspace:
    """The emoji world as a workspace: opened from its cache, or rendered, embedded and built.

    Parameters
    ----------
    cache_dir : path, optional
        Default ``$SLICS_EMOJI_CACHE`` or ``~/.cache/slics/emoji``; the workspace is the folder
        ``workspace-<config key>-<weights fingerprint>-<vocabularies fingerprint>`` there. A damaged one is
        rebuilt.
    config : slics_core.emoji.world.EmojiWorldConfig, optional
        Default: :func:`slics_core.emoji.world.config_from_env` (``$SLICS_EMOJI_SCALE``).
    progress : callable ``progress(stage, done, total)``, optional
    rebuild : bool
        Ignore the cache.
    n_jobs : int or None
        Worker processes of a build (scene rendering and fits; None or -1: every core, as memory allows);
        the workspace does not depend on it.
    say : callable ``say(line)``, optional
        Gets one line per parallel stage saying how many workers it uses, and why.
    backend : {"loky", "ray"}
        Where a build's fits run (:func:`slics_core.explorer.build.build_workspace`); the same workspace.
    address : str, optional
        The Ray cluster of ``backend="ray"`` (None: a Ray already started here, else a local one).
    """
    cfg = config or config_from_env()
    folder = _emoji_folder(cache_dir, cfg)
    ws = None if rebuild else _open_emoji_cache(folder, progress)
    if ws is not None:
        return ws
    _make_cache_root(folder)
    return _build_emoji(cfg, folder, None, progress, n_jobs=n_jobs, say=say, backend=backend, address=address)


#: d0 of the preview's S-SLiCS model, before d0 is chosen on validation (the full world's choice, README).
PROVISIONAL_D0 = 5

#: Relative cost of the steps of a staged emoji build (CPU seconds measured on the default world, 2 cores),
#: used to turn per-step progress into one overall fraction.
_STEPS = (("preview load", 2.0), ("preview render", 3.5), ("preview embed", 4.0), ("preview fit", 1.0), ("load", 4.0),
          ("render", 21.0),
          (f"embed with {ENCODER}", 24.0), (f"embed with {CONDITION_ENCODER}", 40.0), ("embed the vocabulary", 2.0),
          ("fit", 90.0), ("choose d0", 10.0), ("save", 2.0), ("prepare the pages", 40.0))


class BuildProgress:
    """Progress and result of a workspace build running in a background thread, shared by every reader.

    The builder calls it as ``progress(stage, done, total)``; readers call :meth:`snapshot`
    (thread-safe). :attr:`workspace` is the newest usable workspace (the preview, then the whole
    one); :attr:`generation` counts publications, so a reader knows when to reload.

    Attributes
    ----------
    workspace : Workspace or None
    generation : int
    finished : bool
        The whole workspace is built (or the build failed: see :attr:`error`).
    error : str or None
        One-line message of a failed build.
    """

    def __init__(self, steps=_STEPS):
        self._lock = threading.Lock()
        self._steps = [(str(k), float(w)) for k, w in steps]
        self._total_weight = sum(w for _, w in self._steps) or 1.0
        self._step = 0
        self._frac = 0.0
        self.stage, self.done, self.total = "starting", 0, 1
        self.started = time.monotonic()
        self.stage_started = self.step_started = self.started
        self.workspace = None
        self.generation = 0
        self.finished = False
        self.error = None
        self.process = None
        self._phase = ""

    def phase(self, name: str) -> None:
        """Prefix the next stages with ``name`` (``"preview"``; ``""`` for the whole world)."""
        with self._lock:
            self._phase = name

    def __call__(self, stage, done=0, total=1):
        with self._lock:
            key = f"{self._phase} {stage}".strip()
            for i in range(self._step, len(self._steps)):  # steps only move forward
                if key.startswith(self._steps[i][0]):
                    if i != self._step:
                        self.step_started = time.monotonic()
                    self._step = i
                    break
            if stage != self.stage:
                self.stage_started = time.monotonic()
            self.stage, self.done, self.total = str(stage), int(done), int(total)
            before = sum(w for _, w in self._steps[:self._step])
            within = self._steps[self._step][1] * (min(1.0, max(0.0, done / total)) if total else 0.0)
            self._frac = max(self._frac, min(0.999, (before + within) / self._total_weight))

    def publish(self, ws, *, final=False) -> None:
        with self._lock:
            self.workspace = ws
            self.generation += 1
            if final:
                self.finished, self._frac = True, 1.0

    def fail(self, error) -> None:
        """Record a failed build (``error``: a one-line message or an exception)."""
        with self._lock:
            self.error = error if isinstance(error, str) else user_error(error)
            self.finished = True

    def percent(self) -> float:
        with self._lock:
            return 100.0 * self._frac

    def snapshot(self) -> dict:
        """``stage``, ``done``, ``total``, ``percent`` (of the whole build), ``elapsed`` (s), ``stage_elapsed`` (s),
        ``generation``, ``finished``, ``error``, ``preview`` (the published workspace is a preview), and the
        step the build is in: ``part`` (``"preview"`` or ``"world"``), ``step`` (1-based) of ``n_steps`` of that
        part, ``step_elapsed`` (s)."""
        with self._lock:
            now = time.monotonic()
            name = self._steps[self._step][0] if self._steps else ""
            part = "preview" if name.startswith("preview ") else "world"
            steps = [k for k, _ in self._steps if k.startswith("preview ") == (part == "preview")]
            return {"stage": self.stage, "done": self.done, "total": self.total, "percent": 100.0 * self._frac,
                    "elapsed": now - self.started, "stage_elapsed": now - self.stage_started,
                    "generation": self.generation, "finished": self.finished, "error": self.error,
                    "preview": self.workspace is not None and self.workspace.building is not None,
                    "part": part, "step": steps.index(name) + 1 if name in steps else 1, "n_steps": len(steps),
                    "step_elapsed": now - self.step_started}


def duration_words(seconds: float) -> str:
    """``12 s``, ``3 min``, ``1.5 h``: a time as a presenter reads it (the page's and ``slics emoji-build``'s)."""
    if seconds < 90:
        return f"{max(0, round(seconds))} s"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"


def progress_words(snap: dict) -> str:
    """What a build's :meth:`BuildProgress.snapshot` says to a presenter, in one line: the part (the preview or
    the whole world), the step of it and what that step is doing, its own progress (counts, percentage, time
    left at its rate so far; a step without counts its seconds so far), then the whole build's percentage.

    e.g. ``"Whole world, step 6 of 9: fit: model 5 of 22, S-SLiCS d0=10 · 45 % of this step, about 1 min
    left · whole build 38 % after 2 min, about 3 min left"``.
    """
    stage = snap.get("stage") or "starting"
    stage = "start the build process" if stage == "starting" else stage
    done, total = int(snap.get("done", 0)), max(int(snap.get("total", 1)), 1)
    head = (f"{'Preview' if snap.get('part') == 'preview' else 'Whole world'}, step {snap.get('step', 1)} of "
            f"{snap.get('n_steps', 1)}: {stage}")
    if ": " not in stage and total > 1:
        head += f", {min(done, total)} of {total}"
    elapsed = float(snap.get("step_elapsed", snap.get("stage_elapsed", 0.0)))
    if total > 1 or done:
        frac = min(1.0, max(0.0, done / total))
        own = f"{100 * frac:.0f} % of this step"
        if 0 < frac < 1:
            own += f", about {duration_words(elapsed * (1 - frac) / frac)} left"
    else:
        own = f"{duration_words(elapsed)} in this step"
    percent, so_far = float(snap.get("percent", 0.0)), float(snap.get("elapsed", 0.0))
    whole = f"whole build {percent:.0f} % after {duration_words(so_far)}"
    if 5 <= percent < 100:  # the steps' weights are their measured CPU seconds: the rate so far extrapolates
        whole += f", about {duration_words(so_far * (100 - percent) / percent)} left"
    return f"{head} · {own} · {whole}"


def step_fraction(snap: dict) -> float:
    """The current step's own fraction done (0..1), for a progress bar that moves within the step."""
    return min(1.0, max(0.0, int(snap.get("done", 0)) / max(int(snap.get("total", 1)), 1)))


def _staged_build(cfg, folder: Path, n_preview: int, progress, publish, n_jobs=1) -> None:
    """The staged emoji build: ``publish("preview", ws)`` (when the world is large enough), then
    ``publish("final", ws)`` with the whole workspace, saved in ``folder``: its scenes rendered and its models
    fitted by ``n_jobs`` worker processes (None: every core, as memory allows; the build process's default), as
    ``slics emoji-build`` does.
    The small preview is built here, without workers (starting them would cost more than it saves)."""
    pc = preview_config(cfg, n_preview)
    progress.phase("preview" if pc is not None else "")

    def load_encoder():
        progress(f"load the {EMOJI_ENCODER} encoder", 0, 1)
        return world_encoder(EMOJI_ENCODER)

    # The preview's embeddings come from the shipped table when it has them (no torch import on the
    # way to the first page); anything it lacks is computed by the real encoder.
    fast = preview_encoder(load_encoder) if pc is not None else None
    encoder = fast if fast is not None else load_encoder()
    prefix = None
    if pc is not None:
        data, split, prefix = render_emoji_preview(cfg, progress, encoder=encoder, n_scenes=n_preview)
        ws = build_workspace(data, None, split=split, d0_values=[PROVISIONAL_D0], n_iter=cfg.n_iter, seed=0,
                             methods=[DEFAULT_METHOD, "UF"], vocabulary=WORLD_DEFAULTS.vocabulary(), encoder=encoder,
                             name=f"{DATASET_NAME} (preview)", kind=EMOJI, generator="emoji", progress=progress)
        ws.chosen_d0 = None
        publish("preview", ws)
        progress.phase("")
    if fast is not None:
        encoder = fast.real()
        if fast.hits:  # the whole world is embedded by the real encoder, like a direct build
            prefix = None
    publish("final", _build_emoji(cfg, folder, encoder, progress, prefix=prefix, n_jobs=n_jobs))


def _preview_folder(folder: Path) -> Path:
    return folder.with_name(folder.name + "-preview")


# ---------------------------------------------------------------------- the build process's messages
@dataclass(frozen=True)
class Stage:
    """Progress: ``stage`` of the build (``phase`` ``"preview"`` or ``""``), ``done`` of ``total``."""

    phase: str
    stage: str
    done: int
    total: int
    kind: str = "stage"


@dataclass(frozen=True)
class Published:
    """A workspace is saved in ``path``: the ``"preview"`` or the ``"final"`` one."""

    which: str
    path: str
    kind: str = "publish"


@dataclass(frozen=True)
class Failed:
    """The build failed: ``message`` is one line for the server to show."""

    message: str
    kind: str = "error"


_MESSAGES = {"stage": (Stage, {"phase": str, "stage": str, "done": int, "total": int}),
             "publish": (Published, {"which": str, "path": str}),
             "error": (Failed, {"message": str})}


def encode_message(msg) -> str:
    """One line of the protocol (JSON, no newline) for ``msg`` (a :class:`Stage`, :class:`Published` or
    :class:`Failed`)."""
    return json.dumps(asdict(msg))


def parse_message(line: str):
    """The message of one line of the build process's stdout, checked field by field; None for a line that
    is not one (a library printed something).

    Raises
    ------
    ValueError
        A line that claims a ``kind`` of the protocol but whose fields are missing or of the wrong type.
    """
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    if not isinstance(obj, dict) or obj.get("kind") not in _MESSAGES:
        return None
    cls, types = _MESSAGES[obj["kind"]]
    for name, t in types.items():
        if not isinstance(obj.get(name), t) or isinstance(obj.get(name), bool):
            raise ValueError(f"build message {obj['kind']!r}: field {name!r} must be {type_phrase(t)}")
    if cls is Published and obj["which"] not in ("preview", "final"):
        raise ValueError(f"build message 'publish': {obj['which']!r} is not 'preview' or 'final'")
    return cls(**{name: obj[name] for name in types})


class _LineProgress:
    """Progress of the build process, written as :class:`Stage` lines on stdout (read into :class:`BuildProgress`)."""

    def __init__(self):
        self._phase = ""
        self._parent = os.getppid()

    def phase(self, name):
        self._phase = name

    def __call__(self, stage, done=0, total=1):
        if os.getppid() != self._parent:  # the server is gone: stop building for nobody
            os._exit(3)
        _send(Stage(self._phase, str(stage), int(done), int(total)))


def _send(msg) -> None:
    print(encode_message(msg), flush=True)


def main(argv=None) -> int:
    """The build process started by :func:`start_emoji_workspace`: ``python -m slics_core.explorer.emoji_build``
    (not a public command: ``slics emoji-build`` is)."""
    ap = argparse.ArgumentParser(prog="python -m slics_core.explorer.emoji_build",
                                 description="Build the emoji workspace, reporting on stdout (the app's cold start).")
    ap.add_argument("--cache-dir", required=True, help="folder of the emoji workspaces")
    ap.add_argument("--config", required=True, help="EmojiWorldConfig as JSON")
    ap.add_argument("--preview", type=int, required=True, help="scenes of the preview")
    ap.add_argument("--nice", type=int, default=0, help="niceness added to this process")
    ap.add_argument("--jobs", type=int, default=None, help="worker processes (default: every core, as memory allows)")
    args = ap.parse_args(argv)
    if args.nice:
        try:
            os.nice(args.nice)
        except OSError:
            pass
    try:
        cfg = EmojiWorldConfig(**json.loads(args.config))
        folder = _emoji_folder(args.cache_dir, cfg)
        progress = _LineProgress()

        def publish(which, ws):
            if which == "preview":
                out = save_workspace(ws, _preview_folder(folder))
            else:
                out = ws.path
                if is_workspace(_preview_folder(folder)):
                    shutil.rmtree(_preview_folder(folder), ignore_errors=True)
            _send(Published(which, str(out)))

        _staged_build(cfg, folder, args.preview, progress, publish, n_jobs=args.jobs)
    except Exception as exc:  # one line for the server to show
        _send(Failed(user_error(exc)))
        return 1
    return 0


def _child_env() -> dict:
    """The build process's environment: this one, with the folder this process imported ``slics_core`` from
    first on ``PYTHONPATH`` when that folder is not a site-packages folder (a source checkout or worktree run
    without installing it, or beside an editable install of another checkout), so that the child runs the
    same code as the server. An installed package is found by the child as it is."""
    root = Path(slics_core.__file__).resolve().parent.parent
    installed = {Path(p).resolve() for p in [*site.getsitepackages(), site.getusersitepackages()]}
    rest = os.environ.get("PYTHONPATH", "")
    if root in installed or rest.split(os.pathsep)[0] == str(root):
        return dict(os.environ)
    return {**os.environ, "PYTHONPATH": str(root) + (os.pathsep + rest if rest else "")}


def user_error(exc) -> str:
    """One line for a failed build: :func:`slics_core.errors.user_message` for OS errors and bad data (a full
    disk or a read-only cache names the file), others with their type."""
    return user_message(exc) if isinstance(exc, (OSError, ValueError)) else f"{type(exc).__name__}: {exc}"


def start_emoji_workspace(cache_dir=None, config: EmojiWorldConfig | None = None, *,
                          preview_scenes=None, nice: int = 10) -> BuildProgress:
    """Open the emoji workspace without waiting for a cold build: the app's start.

    A cached workspace is opened at once (the returned handle is finished). Otherwise a build
    *process* is started (a separate process, so that the server's own threads never wait for it;
    ``nice`` lowers its priority) and a reader thread publishes on the handle first a *preview* — the
    first :data:`slics_core.emoji.world.PREVIEW_SCENES` scenes of the same world (same row numbers and
    images) with S-SLiCS at the provisional ``d0`` :data:`PROVISIONAL_D0` and UF, ``building`` set —
    then the whole workspace, exactly as :func:`open_emoji_workspace` builds and caches it (the
    preview's scenes and embeddings are reused). Worlds smaller than twice the preview are built at
    once (no preview). The process stops when the server does.

    Parameters
    ----------
    cache_dir, config : as :func:`open_emoji_workspace`.
    preview_scenes : int, optional
        Size of the preview (a multiple of 256; default :data:`slics_core.emoji.world.PREVIEW_SCENES`).
    nice : int
        Niceness added to the build process, so that pages stay responsive while it runs.

    Raises
    ------
    OSError
        The cache folder cannot be created (one line, raised here).
    ValueError
        ``preview_scenes`` is not a positive multiple of 256.
    """
    cfg = config or config_from_env()
    folder = _emoji_folder(cache_dir, cfg)
    n_preview = PREVIEW_SCENES if preview_scenes is None else int(preview_scenes)
    pc = preview_config(cfg, n_preview)
    handle = BuildProgress(_STEPS if pc is not None else [s for s in _STEPS if not s[0].startswith("preview ")])
    ws = _open_emoji_cache(folder, handle)
    if ws is not None:
        handle.publish(ws, final=True)
        return handle
    _make_cache_root(folder)
    cfg_json = json.dumps({**asdict(cfg), "d0_values": list(cfg.d0_values)})
    proc = subprocess.Popen([sys.executable, "-m", "slics_core.explorer.emoji_build", "--cache-dir", str(folder.parent),
                             "--config", cfg_json, "--preview", str(n_preview), "--nice", str(int(nice))],
                            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, bufsize=1, cwd=os.getcwd(),
                            env=_child_env())

    def read():
        try:
            for line in proc.stdout:
                msg = parse_message(line)
                if isinstance(msg, Stage):
                    handle.phase(msg.phase)
                    handle(msg.stage, msg.done, msg.total)
                elif isinstance(msg, Published):
                    ws = load_workspace(msg.path)
                    final = msg.which == "final"
                    if not final:
                        ws.building = handle
                    handle.publish(ws, final=final)
                elif isinstance(msg, Failed):
                    handle.fail(msg.message)
            code = proc.wait()
            if not handle.finished:
                handle.fail(f"the build process stopped (exit code {code}) before the workspace was ready")
        except Exception as exc:  # never a silent death of the reader
            handle.fail(user_error(exc))

    threading.Thread(target=read, name="slics-emoji-build-reader", daemon=True).start()
    handle.process = proc
    return handle


if __name__ == "__main__":
    sys.exit(main())
