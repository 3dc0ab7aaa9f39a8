"""A workspace's folder: its format, saving, the one checked reader, generator header edits, listing.

A workspace is saved as a folder (``workspace.json``, ``arrays.npz``, ``models/``, optional
``images.npy`` and ``extra-*.npy``) with a marker file. What is saved where comes from the field
declarations of :class:`~slics_core.explorer.workspace.Workspace`.

Safety: a folder is replaced only if it is a workspace (it holds the marker ``.slics-workspace``),
atomically (written beside, then swapped). Every file is size-checked before it is read, arrays
against their zip entries. Encoder names read from a workspace are resolved with ``trusted=False``:
never ``module:factory``.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import warnings
import zipfile
from contextlib import contextmanager
from dataclasses import MISSING, fields
from pathlib import Path

import numpy as np

from slics_core._validation import type_phrase
from slics_core.errors import DamagedFileError, damaged_file_error, explain, file_system_error, user_message
from slics_core.explorer.workspace import PAGE_STORE, SPLITS, Workspace, check_workspace_name, workspaces_root
from slics_core.formats import atomic_write_json, load_npy, load_npz, read_json
from slics_core.labels import ARRAY_KINDS, Labels
from slics_core.methods import REGISTRY
from slics_core.preprocessing import PREPROCESSING

__all__ = [
    "FORMAT",
    "MARKER",
    "check_target",
    "is_workspace",
    "save_workspace",
    "load_workspace",
    "WorkspaceDamagedError",
    "WorkspaceExistsError",
    "list_workspaces",
    "workspace_path",
    "set_workspace_generator",
    "recorded_generator",
]

FORMAT = "slics-workspace-v2"
MARKER = ".slics-workspace"

# ---------------------------------------------------------------------- saving and opening
#: Files a workspace writes (relative to its folder); a rebuild replaces or removes only these.
_OWN_FILE = re.compile(r"^(workspace\.json|arrays\.npz|images\.npy|extra-[A-Za-z0-9_]+\.npy"
                       r"|models/[A-Za-z0-9][A-Za-z0-9._-]*\.npz)$")
_TMP_PREFIX = ".slics-new-"
_MAX_HEADER_BYTES = 1 << 30  # workspace.json holds ids, paths and captions: ~100 MB for a million items
_MAX_MARKER_BYTES = 1 << 20


class WorkspaceExistsError(ValueError):
    """The target folder holds a workspace built from another cache (pass ``overwrite=True``)."""


def is_workspace(folder: Path) -> bool:
    return (folder / MARKER).is_file()


def _marker(folder: Path) -> dict:
    """The marker of the workspace in ``folder`` (``{}`` when unreadable)."""
    try:
        info = read_json(folder / MARKER, max_bytes=_MAX_MARKER_BYTES)
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def check_target(out: Path, source=None, overwrite=False, warn=True) -> None:
    """Refuse a target that is a file, a folder that is not a workspace, or a workspace of another cache."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"{str(out)!r} exists and is a file, not a workspace folder; choose another --out")
    if out.is_dir() and any(p.name != MARKER for p in out.iterdir()) and not is_workspace(out):
        raise ValueError(f"{str(out)!r} exists and is not a SLiCS workspace (no {MARKER}); it is left untouched: "
                         "choose another name or --out")
    old = _marker(out).get("source") if out.is_dir() else None
    if source is not None and isinstance(old, str) and old != str(source):
        if not overwrite:
            raise WorkspaceExistsError(
                f"workspace folder {str(out)!r} was built from {old!r}, not {str(source)!r}; pass --overwrite to "
                "replace it (files you added there are kept), or choose another --name")
        if warn:
            warnings.warn(f"workspace folder {str(out)!r} was built from {old!r}; replacing it with a build of "
                          f"{str(source)!r} (files you added there are kept)", UserWarning, stacklevel=3)


def _write_files(ws: Workspace, tmp: Path) -> list:
    """Write the workspace's files into ``tmp``; their paths relative to it."""
    (tmp / "models").mkdir()
    arrays = {f.name: np.asarray(getattr(ws, f.name)) for f in _stored("array") if getattr(ws, f.name) is not None}
    arrays.update({k: getattr(ws.labels, k) for k in ARRAY_KINDS if getattr(ws.labels, k) is not None})
    arrays.update({f"index_{k}": np.asarray(v) for k, v in ws.index.items()})
    np.savez(tmp / "arrays.npz", **arrays)
    written = ["arrays.npz"]
    if ws.images is not None:
        np.save(tmp / "images.npy", np.asarray(ws.images, dtype=np.uint8), allow_pickle=False)
        written.append("images.npy")
    extra_names = []
    for k, v in ws.extras.items():
        if isinstance(v, np.ndarray) and v.dtype != object and re.fullmatch(r"[A-Za-z0-9_]+", k):
            np.save(tmp / f"extra-{k}.npy", v, allow_pickle=False)
            extra_names.append(k)
            written.append(f"extra-{k}.npy")
    names = {}
    for (method, d0), model in ws.models.items():
        fname = f"{method}_d0{d0}.npz" if d0 is not None else f"{method}.npz"
        model.save(tmp / "models" / fname)
        names[f"{method}|{'' if d0 is None else d0}"] = fname
        written.append(f"models/{fname}")
    head = {f.name: getattr(ws, f.name) for f in _stored("header") if f.name != "build_id"}
    head.update({k: list(getattr(ws.labels, k)) for k in _LABEL_NAMES})
    head.update({"format": FORMAT, "models": names, "n": len(ws), "extras": extra_names})
    ws.build_id = head["build_id"] = _build_digest(tmp, written, head)
    (tmp / "workspace.json").write_text(json.dumps(head))
    return written + ["workspace.json"]


def _build_digest(tmp: Path, written: list, head: dict) -> str:
    """``Workspace.build_id``: a digest of every file a save writes (names and bytes, the header without it), so
    two saves of the same content share their stored page views and any other content has its own."""
    digest = hashlib.sha256(json.dumps(head, sort_keys=True, default=str).encode())
    for rel in written:
        digest.update(rel.encode() + b"\0")
        with open(tmp / rel, "rb") as fh:
            for chunk in iter(lambda fh=fh: fh.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()[:32]


@contextmanager
def _naming(out: Path):
    """Like :func:`slics_core.errors.writing`, also for errors that name a file inside the hidden folder."""
    try:
        yield
    except OSError as exc:
        raise file_system_error(OSError(exc.errno, exc.strerror or str(exc)), out) from exc


def save_workspace(ws: Workspace, out, *, source=None, overwrite=False, _warn=True) -> Path:
    """Write ``ws`` to the folder ``out``, replacing only the files a workspace writes.

    The files are written into a hidden folder inside ``out``, then moved into place one by one
    (``workspace.json`` last); files of the previous build that this one does not write are removed;
    everything else in ``out`` (a teacher's ``notes.txt``) is kept, and the hidden folder is removed
    whatever happens.

    Parameters
    ----------
    source : str, optional
        The cache the workspace was built from, recorded in the marker: rebuilding a folder built
        from another cache is refused unless ``overwrite``.

    Raises
    ------
    ValueError
        ``out`` exists and is not a workspace (nothing is deleted); :class:`WorkspaceExistsError`
        for a workspace of another cache.
    slics_core.errors.FileSystemError
        Writing failed (disk full, read-only...): the message names ``out``; the previous build is kept.
    """
    out = Path(out)
    check_target(out, source, overwrite, warn=_warn)
    previous = _marker(out).get("files") if out.is_dir() else None
    with _naming(out):
        out.mkdir(parents=True, exist_ok=True)
        for stale in out.glob(_TMP_PREFIX + "*"):  # left by a killed build
            shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=_TMP_PREFIX, dir=out))
        try:
            written = _write_files(ws, tmp)
            (out / "models").mkdir(exist_ok=True)
            for rel in written:  # workspace.json comes last
                os.replace(tmp / rel, out / rel)
            old = [f for f in previous if isinstance(f, str) and _OWN_FILE.match(f)] if isinstance(previous, list) \
                else []
            for rel in set(old) - set(written):
                (out / rel).unlink(missing_ok=True)
            # what the pages stored from the previous build (PAGE_STORE) describes that build, not this one
            shutil.rmtree(out / PAGE_STORE, ignore_errors=True)
            marker = {"format": FORMAT, "name": ws.name, "files": written,
                      "note": "SLiCS Explorer workspace folder: `slics workspace` may replace the files listed here, "
                              "and only those"}
            if source is not None:
                marker["source"] = str(source)
            # the marker also carries the display name, so listing workspaces never parses the large header
            (tmp / MARKER).write_text(json.dumps(marker))
            os.replace(tmp / MARKER, out / MARKER)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    ws.path = out
    return out


class WorkspaceDamagedError(DamagedFileError):
    """A workspace folder whose files cannot be read back or do not fit together."""


def _need(cond, what):
    if not cond:
        raise ValueError(what)


def _str_list(head, key, n=None, *, optional=True, items=(str,)):
    v = head.get(key)
    if v is None and optional:
        return None
    _need(isinstance(v, list) and all(isinstance(x, items) for x in v),
          f"field {key!r} must be a list of {' or '.join(type_phrase(t, plural=True) for t in items)}")
    if n is not None:
        _need(len(v) in n, f"field {key!r} has {len(v)} entries, expected {' or '.join(map(str, n))}")
    return v


def _check_head(head) -> dict:
    """The header's fields, type-checked (raises ValueError naming the field)."""
    _need(isinstance(head, dict), "workspace.json is not a JSON object")
    _need(head.get("format") == FORMAT, f"unknown format {head.get('format')!r} (rebuild it with `slics workspace`)")
    for key, types in (("name", str), ("n", int), ("models", dict)):
        _need(key in head, f"field {key!r} is missing")
        _need(isinstance(head[key], types) and not isinstance(head[key], bool),
              f"field {key!r} must be {type_phrase(types)}")
    n = head["n"]
    _need(n >= 1, "field 'n' must be positive")
    _need(head.get("kind", "dataset") in ("emoji", "dataset"), "field 'kind' must be 'emoji' or 'dataset'")
    _need(head.get("preprocessing", "clip") in PREPROCESSING,
          f"field 'preprocessing' must be one of {', '.join(PREPROCESSING)}")
    for key in ("encoder", "generator"):
        _need(head.get(key) is None or isinstance(head[key], str), f"field {key!r} must be a string")
    for key, low in (("chosen_d0", 1), ("n_tokens", 1)):
        v = head.get(key)
        _need(v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= low),
              f"field {key!r} must be a positive whole number")
    _need("concept_names" in head, "field 'concept_names' is missing")
    _str_list(head, "concept_names", optional=False)
    _str_list(head, "sub_names")
    _str_list(head, "ids", (0, n))
    _str_list(head, "paths", (n,), items=(str, type(None)))
    _str_list(head, "captions", (n,))
    _str_list(head, "vocab_words")
    _str_list(head, "extras")
    _need(all(re.fullmatch(r"[A-Za-z0-9_]+", k) for k in head.get("extras") or []), "field 'extras' names a bad file")
    _need(isinstance(head.get("d0_scores", []), list) and all(isinstance(r, dict) for r in head.get("d0_scores", [])),
          "field 'd0_scores' must be a list of objects")
    _check_pool_shards(head.get("pool_shards"))
    skipped = head.get("skipped", {})
    _need(skipped is None or isinstance(skipped, dict) and all(isinstance(v, str) for v in skipped.values()),
          "field 'skipped' must map methods to reasons")
    models = {}
    for key, fname in head["models"].items():
        method, _, d0 = key.partition("|")
        _need(_ == "|" and (d0 == "" or d0.isdigit()) and isinstance(fname, str) and _OWN_FILE.match(f"models/{fname}"),
              f"model entry {key!r}: {fname!r} is not a model of this workspace")
        models[(method, int(d0) if d0 else None)] = fname
    return models


def _check_pool_shards(info) -> None:
    """The header's ``pool_shards`` record (None, or the folder and rows per shard of a sharded pool)."""
    if info is None:
        return
    _need(isinstance(info, dict), "field 'pool_shards' must be an object")
    _need(isinstance(info.get("folder"), str), "field 'pool_shards' must name its folder")
    counts = info.get("counts")
    _need(isinstance(counts, list) and counts and all(isinstance(c, int) and not isinstance(c, bool) and c > 0
                                                      for c in counts),
          "field 'pool_shards' must list positive row counts per shard")
    _need(info.get("n_rows") == sum(counts), "field 'pool_shards': n_rows is not the sum of its counts")
    _need(isinstance(info.get("remote_thumbnails", False), bool), "field 'pool_shards': remote_thumbnails must be "
                                                                  "true or false")
    hosts = info.get("remote_hosts", [])
    _need(isinstance(hosts, list) and all(isinstance(h, str) for h in hosts),
          "field 'pool_shards': remote_hosts must be a list of strings")


def _stored(where: str) -> list:
    """The fields of :class:`Workspace` saved in ``where`` (``"header"`` or ``"array"``), in declaration order."""
    return [f for f in fields(Workspace) if f.metadata.get("stored") == where]


def _optional(f) -> bool:
    return f.default is not MISSING or f.default_factory is not MISSING


def _default(f):
    return f.default_factory() if f.default_factory is not MISSING else f.default


#: The label bundle's names, saved in ``workspace.json`` (its arrays, :data:`ARRAY_KINDS`, in ``arrays.npz``).
_LABEL_NAMES = ("concept_names", "sub_names")
#: Arrays of ``arrays.npz``: dtype kinds; required ones; dense ones (from the fields' declaration).
_ARRAYS = {**{f.name: f.metadata["kinds"] for f in _stored("array")}, **ARRAY_KINDS,
           **{f"index_{k}": "iu" for k in SPLITS}}
_REQUIRED = {*(f.name for f in _stored("array") if not _optional(f)), "Y", *(f"index_{k}" for k in SPLITS)}
_DENSE = tuple(f.name for f in _stored("array") if f.metadata["dense"])


def _check_shapes(shapes, head) -> None:
    """Arrays against the items and the embedding width (the label bundle checks itself: :class:`Labels`)."""
    n, S = head["n"], len(head["concept_names"])
    d = shapes["X"][0][1] if len(shapes["X"][0]) == 2 else -1
    want = {"X": (n, d), "raw": (n, d), "mean": (d,), "concept_text": (S, d)}
    if head.get("vocab_words") is not None:
        want["vocab_text"] = (len(head["vocab_words"]), d)
    for k, shape in want.items():
        if k in shapes:
            _need(shapes[k][0] == shape, f"array {k!r} has shape {shapes[k][0]}, expected {shape}")
    _need(shapes["Y"][0][:1] == (n,), f"array 'Y' has shape {shapes['Y'][0]}, expected {n} rows")
    for k, (shape, _) in shapes.items():
        if k.startswith("index_"):
            _need(len(shape) == 1, f"array {k!r} must be one-dimensional")
        elif k == "pool_sample":
            _need(len(shape) == 2 and shape[1] == d, f"array 'pool_sample' has shape {shape}, expected (m, {d})")
            _need(shapes.get("pool_sample_rows", ((-1,),))[0] == shape[:1],
                  "array 'pool_sample_rows' must give one position per row of 'pool_sample'")
        elif k == "codebook":
            _need(len(shape) == 2, "array 'codebook' must be two-dimensional")


#: What to do about a damaged workspace.
_REBUILD = "rebuild it with `slics workspace` (or delete the folder)"


def _read_array(file, kinds, shape_ok, what):
    """One ``.npy`` file, its header, size and shape checked before it is read."""
    def check(shape, _dtype):
        _need(shape_ok(shape), f"{what} has shape {shape}")

    return load_npy(file, kinds, fix=_REBUILD, check=check)


def _read_workspace(path: Path) -> Workspace:
    head = _read_header(path)
    model_files = _check_head(head)
    n = head["n"]
    arr = load_npz(path / "arrays.npz", {k: v for k, v in _ARRAYS.items() if k in _REQUIRED},
                   optional={k: v for k, v in _ARRAYS.items() if k not in _REQUIRED}, dense=_DENSE, fix=_REBUILD,
                   check=lambda shapes: _check_shapes(shapes, head))
    d = arr["X"].shape[1]
    index = {}
    for k in SPLITS:
        idx = arr[f"index_{k}"].astype(np.int64)
        _need(idx.size == 0 or (idx.min() >= 0 and idx.max() < n), f"split {k!r} has item numbers outside 0..{n - 1}")
        index[k] = idx
    labels = Labels(arr["Y"], head["concept_names"], arr.get("Z"), head.get("sub_names") or (),
                    arr.get("sub_to_concept"))
    images = None
    if (path / "images.npy").is_file():
        images = _read_array(path / "images.npy", "u",
                             lambda s: len(s) == 4 and s[0] == n and s[3] == 3, f"images.npy (expected ({n}, H, W, 3))")
    extras = {k: _read_array(path / f"extra-{k}.npy", "fiub", lambda s: len(s) >= 1 and s[0] == n,
                             f"extra-{k}.npy (expected {n} rows)") for k in head.get("extras") or []}
    models = {}
    for (method, d0), fname in model_files.items():
        if method not in REGISTRY:
            continue  # a method no longer registered here
        model = _load_model(method, path / "models" / fname)
        got = (getattr(model, "n_features_in_", d), getattr(model, "n_concepts_", labels.n_concepts))
        _need(got == (d, labels.n_concepts), f"model {fname!r} is for {got[0]}-d embeddings and {got[1]} concepts, "
                                             f"the workspace has {d} and {labels.n_concepts}")
        models[(method, d0)] = model
    values = {}
    for f in _stored("header"):
        v = head.get(f.name)
        values[f.name] = _default(f) if v is None else type(v)(v) if isinstance(v, (list, dict)) else v
    for f in _stored("array"):
        values[f.name] = arr.get(f.name)
    ws = Workspace(**values, labels=labels, path=path, index=index, models=models, images=images, extras=extras)
    if ws.sharded:
        rows = ws.pool_sample_rows
        _need(rows is None or rows.size == 0 or (rows.min() >= 0 and rows.max() < ws.n_pool),
              f"array 'pool_sample_rows' has positions outside 0..{ws.n_pool - 1}")
        ws.shards()  # every shard's header checked against the counts recorded at build time
    return ws


def set_workspace_generator(ws: Workspace, generator: str | None) -> None:
    """Record ``generator`` (a generator spec, or None) in ``ws`` and in its saved header, nothing else.

    The header is rewritten beside and renamed into place; no model is refitted or rewritten.
    """
    if ws.path is None or not is_workspace(Path(ws.path)):
        raise ValueError(f"workspace {ws.name!r} is not saved in a folder; build it with `slics workspace`")
    head = _header(Path(ws.path))
    head["generator"] = generator
    atomic_write_json(Path(ws.path) / "workspace.json", head)
    ws.generator = generator


def recorded_generator(ws: Workspace) -> str | None:
    """The generator spec the saved header of ``ws`` records now (it may have been set by another
    process, `slics align --workspace`, after ``ws`` was opened); ``ws.generator`` when unsaved."""
    if ws.path is None or not (Path(ws.path) / "workspace.json").is_file():
        return ws.generator
    return _header(Path(ws.path)).get("generator")


def _read_header(folder: Path):
    """``workspace.json`` of ``folder`` parsed, its size checked first (DamagedFileError naming the problem)."""
    return read_json(folder / "workspace.json", fix=_REBUILD, max_bytes=_MAX_HEADER_BYTES)


def _damaged(folder: Path, problem) -> WorkspaceDamagedError:
    """The one-line error for the workspace in ``folder``: ``problem`` is a phrase or the exception raised.

    A damaged file inside the folder is named relative to it (one sentence, not one inside another).
    """
    if isinstance(problem, DamagedFileError) and problem.path is not None:
        inner = Path(problem.path)
        name = inner.relative_to(folder) if inner.is_relative_to(folder) else inner
        problem = f"{name}: {problem.problem}"
    elif isinstance(problem, (OSError, ValueError)):
        problem = user_message(problem)
    if not isinstance(problem, str):
        problem = f"{type(problem).__name__}: {problem}"
    return damaged_file_error(folder, " ".join(problem.split())[:400], _REBUILD, what="workspace",
                              cls=WorkspaceDamagedError)


def _header(folder: Path) -> dict:
    """The JSON header ``workspace.json`` of a workspace folder, as a dict (WorkspaceDamagedError naming it)."""
    try:
        head = _read_header(folder)
    except (OSError, ValueError) as exc:
        raise _damaged(folder, exc) from exc
    if not isinstance(head, dict):
        raise _damaged(folder, "workspace.json: its header is not a JSON object")
    return head


def _load_model(method, path):
    m = REGISTRY.get(method)
    if m is None:
        raise ValueError(f"model of unknown method {method!r}")
    return m.load(path)


def load_workspace(path) -> Workspace:
    """Open a workspace folder written by :func:`save_workspace`: the one checked reader.

    Every field of ``workspace.json`` is type-checked, every array's header and size checked
    against its zip entry before it is read (:func:`slics_core.formats.check_npz`), shapes checked
    against each other, split indices against the number of items, and each model's width and
    concepts against the workspace's.

    Raises
    ------
    FileNotFoundError
        No workspace there.
    WorkspaceDamagedError
        (a ``ValueError``) Anything else: one line, "workspace '<folder>' is damaged or not the expected
        file (<what>); <what to do>." (:func:`slics_core.errors.damaged_file_message`).
    """
    path = Path(path)
    head_file = path / "workspace.json"
    if not head_file.is_file():
        raise explain(FileNotFoundError(f"no workspace in {str(path)!r} (missing workspace.json; build one with "
                                        "`slics workspace`)"),
                      f"there is no workspace in folder {path.name!r}", operator_fix="build one with `slics workspace`")
    try:
        return _read_workspace(path)
    except (OSError, KeyError, ValueError, TypeError, AttributeError, IndexError, EOFError, RecursionError,
            zipfile.BadZipFile, UnicodeDecodeError) as exc:
        raise _damaged(path, exc) from exc


def list_workspaces(root=None) -> list:
    """``[(name, folder), ...]`` of the workspaces under ``root`` (default :func:`workspaces_root`).

    ``name`` is the display name (``"<folder> (damaged)"`` when its header cannot be read).
    """
    root = Path(root) if root is not None else workspaces_root()
    if not root.is_dir():
        return []
    out = []
    for p in sorted(root.iterdir()):
        if p.name.startswith(".") or not (p / "workspace.json").is_file():
            continue
        name = _marker(p).get("name")  # the small marker names the workspace; the large header is not read
        out.append((name, p) if isinstance(name, str) and name.strip() else (f"{p.name} (damaged)", p))
    return out


def workspace_path(name, root=None) -> Path:
    """The folder of the workspace called ``name`` (a folder name) under ``root``.

    Raises
    ------
    ValueError
        ``name`` is not a plain name (a path, ``..``).
    FileNotFoundError
        No workspace of that name there.
    """
    root = Path(root) if root is not None else workspaces_root()
    folder = root / check_workspace_name(str(name))
    if not (folder / "workspace.json").is_file():
        raise explain(FileNotFoundError(f"no workspace named {name!r} under {root}"),
                      f"there is no workspace named {name!r} here",
                      operator_fix=f"the app lists the workspaces under {str(root)!r} ($SLICS_WORKSPACES); build one "
                                   "there with `slics workspace --name NAME`")
    return folder
