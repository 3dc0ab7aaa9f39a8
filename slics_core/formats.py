"""Checked reading and atomic writing of the files the library stores.

Every file the library writes goes through a temporary file in the same
folder and a rename (:func:`os.replace`), so a reader never sees a
half-written file; every file it reads is size-checked before its content is
loaded, so a damaged or hostile file is refused with one line naming it
(:mod:`slics_core.errors`) instead of allocating what it declares.

Writing
    :func:`atomic_write_bytes`, :func:`atomic_write_json`,
    :func:`atomic_save_npz`, :func:`atomic_save_npy`.
Reading
    :func:`read_json` (size-checked JSON), :func:`check_npy` /
    :func:`check_npz` (shapes and dtypes from the ``.npy`` headers, checked
    against the file's sizes without reading any array data),
    :func:`load_npy` / :func:`load_npz` (checked, then read; never pickles),
    :func:`load_user_array` (one array of a user's ``.npy`` / ``.npz``).
    Every ``.npy`` / ``.npz`` the library reads is read through these; a
    damaged one gives :func:`slics_core.errors.damaged_file_message`'s sentence.
The SLiCS model file
    :func:`save_model` / :func:`load_model` (one self-describing ``.npz``
    with a JSON header; what :meth:`slics_core.slics.SLiCS.save` and
    :meth:`~slics_core.slics.SLiCS.load` call).
The baseline model file
    :func:`save_baseline_model` / :func:`load_baseline_model` (an ``.npz``
    tagged with its model kind: the UF, SpLiCE and F-SpLiCE models of
    :mod:`slics_core.methods`, which have no dictionary to store).
"""
from __future__ import annotations

import io
import json
import math
import mmap
import os
import stat
import tempfile
import zipfile
import zlib

import numpy as np

from slics_core._validation import is_int
from slics_core.errors import damaged_file_error, reading, writing

__all__ = [
    "release_pages",
    "MAX_JSON_BYTES",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_save_npz",
    "atomic_save_npy",
    "read_json",
    "check_npy",
    "check_npz",
    "check_archive",
    "load_npy",
    "load_npz",
    "load_user_array",
    "MODEL_FORMAT_NAME",
    "MODEL_FORMAT_VERSION",
    "save_model",
    "load_model",
    "save_baseline_model",
    "load_baseline_model",
]

#: Largest JSON file :func:`read_json` reads by default. The largest JSON the library reads is a
#: COCO ``instances_train2017.json`` (about 450 MB); a file larger than this is not one of ours.
MAX_JSON_BYTES = 2 * 2**30
#: deflate never compresses by more than about 1032:1, so a member declaring more is damaged (a zip bomb).
_DEFLATE_MAX_RATIO = 1100
#: Dense floating-point data (embeddings) shrinks by a few percent under deflate; more than this is not such data.
_DENSE_MAX_RATIO = 50


# ------------------------------------------------------------------------------------------ writing
def atomic_write_bytes(path, data):
    """Write ``data`` to ``path`` through a temporary file and a rename.

    Raises
    ------
    slics_core.errors.FileSystemError
        (an :class:`OSError`) naming ``path`` when the disk is full, the
        file system read-only, permission is denied, etc. The temporary file
        is removed.
    """
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    with writing(path):
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".part")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise


def atomic_write_json(path, obj, *, indent=1, **dumps_kwargs):
    """Write ``obj`` as JSON to ``path`` atomically (see :func:`atomic_write_bytes`).

    ``indent`` and ``dumps_kwargs`` (e.g. ``default=``) are passed to :func:`json.dumps`.
    """
    atomic_write_bytes(path, json.dumps(obj, indent=indent, **dumps_kwargs).encode("utf-8"))


def atomic_save_npz(path, *, compressed=False, **arrays):
    """Save ``arrays`` as an ``.npz`` file at ``path`` atomically (see :func:`atomic_write_bytes`).

    ``compressed=True`` deflates the members (:func:`numpy.savez_compressed`).
    """
    buf = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(buf, **arrays)
    atomic_write_bytes(path, buf.getvalue())


def atomic_save_npy(path, array):
    """Save ``array`` as an ``.npy`` file at ``path`` atomically (no pickles)."""
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    atomic_write_bytes(path, buf.getvalue())


# ------------------------------------------------------------------------------------------ reading
def _damaged_file(path, problem, fix):
    return damaged_file_error(path, problem, fix)


#: File types in words, for a path that is not a regular file.
_FILE_TYPES = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISSOCK, "a socket"),
               (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def check_regular_file(path, fix=None) -> int:
    """The size of ``path`` when it is a regular file (a link to one counts); else DamagedFileError.

    Every reader here calls it before opening a file: opening a named pipe would wait for a writer forever,
    and a device has no size to check.
    """
    path = os.fspath(path)
    with reading(path, fix):
        st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        kind = next((words for test, words in _FILE_TYPES if test(st.st_mode)), "not a regular file")
        raise _damaged_file(path, f"it is {kind}, not a file", fix)
    return int(st.st_size)


#: numpy dtype kinds in words, for messages.
_KIND_WORDS = {"b": "booleans", "i": "integers", "u": "unsigned integers", "f": "floating-point numbers",
               "c": "complex numbers", "U": "text", "S": "bytes", "O": "Python objects", "M": "dates",
               "m": "time spans", "V": "raw records"}


def _kinds_in_words(kinds) -> str:
    """``"fiu"`` -> ``"numbers"``, ``"iu"`` -> ``"integers"``, ``"U"`` -> ``"text"``, ..."""
    left, parts = list(dict.fromkeys(kinds)), []
    for group, word in (("fiu", "numbers"), ("iu", "integers")):
        if set(group) <= set(left):
            parts.append(word)
            left = [k for k in left if k not in group + ("c" if word == "numbers" else "")]
    return " or ".join(parts + [_KIND_WORDS.get(k, f"kind {k!r}") for k in left])


def _dtype_problem(subject, dtype, kinds):
    """The phrase for ``subject`` (``"it"``, ``"array 'W'"``) of ``dtype``, or None if ``dtype`` is of ``kinds``."""
    if not dtype.hasobject and dtype.kind in kinds:
        return None
    got = "Python objects" if dtype.hasobject else _KIND_WORDS.get(dtype.kind, f"kind {dtype.kind!r}")
    return f"{subject} holds {got} (dtype {dtype}), not {_kinds_in_words(kinds)}"


def read_json(path, *, fix=None, max_bytes=MAX_JSON_BYTES):
    """The JSON value in ``path``, its size checked before it is read.

    Parameters
    ----------
    path : path-like
    fix : str, optional
        What to do, in the message (default: delete or restore the file).
    max_bytes : int
        Largest file accepted (default :data:`MAX_JSON_BYTES`).

    Raises
    ------
    DamagedFileError
        The file is larger than ``max_bytes``, not UTF-8 or not valid JSON.
    FileSystemError
        The file cannot be read (missing, permissions, ...).
    """
    path = os.fspath(path)
    check_regular_file(path, fix)
    with reading(path, fix), open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size > max_bytes:
            raise _damaged_file(path, f"{size} bytes, more than the {max_bytes} a JSON file here may have", fix)
        return json.loads(fh.read().decode("utf-8"))


def _npy_header(fh):
    """``(shape, dtype)`` of the ``.npy`` stream ``fh`` (positioned at its start); ValueError if it is not one."""
    version = np.lib.format.read_magic(fh)
    if version not in ((1, 0), (2, 0)):
        raise ValueError(f"unsupported .npy version {version}")
    read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
            else np.lib.format.read_array_header_2_0)
    shape, _, dtype = read(fh)
    return shape, dtype


def _declared_bytes(shape, dtype) -> int:
    """Bytes a ``.npy`` header declares, in exact integers (numpy's int64 product wraps for forged shapes)."""
    return math.prod(int(n) for n in shape) * dtype.itemsize


def check_npy(path, kinds, *, fix=None):
    """Shape and dtype of the ``.npy`` file ``path``, checked without reading its data.

    The header's declared size must be exactly what the file holds, so a forged header
    asking for terabytes is refused before anything is allocated.

    Parameters
    ----------
    path : path-like
    kinds : str
        The numpy dtype kinds allowed, e.g. ``"f"`` or ``"iu"``.
    fix : str, optional

    Returns
    -------
    (tuple, numpy.dtype)

    Raises
    ------
    DamagedFileError, FileSystemError
    """
    path = os.fspath(path)
    check_regular_file(path, fix)
    with reading(path, fix), open(path, "rb") as fh:
        try:
            shape, dtype = _npy_header(fh)
        except ValueError as exc:
            raise _damaged_file(path, f"not a .npy array: {exc}", fix) from None
        offset = fh.tell()
        size = os.fstat(fh.fileno()).st_size
    wrong = _dtype_problem("it", dtype, kinds)
    if wrong:
        raise _damaged_file(path, wrong, fix)
    nbytes = _declared_bytes(shape, dtype)
    if size != offset + nbytes:
        raise _damaged_file(path, f"it declares {nbytes} bytes for shape {shape} but stores {size - offset}", fix)
    return shape, dtype


def check_archive(archive, members, *, dense=(), optional=None, stored=None, error):
    """Shapes and dtypes of the members of an open ``.npz`` archive, checked without reading any array data.

    The part of :func:`check_npz` that works on an open :class:`zipfile.ZipFile`
    (the model file reader uses it on the archive it then reads from).

    Parameters
    ----------
    archive : zipfile.ZipFile
    members, dense, optional
        As for :func:`check_npz`.
    stored : int, optional
        The archive file's size on disk (each member's compressed size must fit in it).
    error : callable(str) -> Exception
        Builds the exception raised for a problem (a phrase such as
        ``"array 'W' has dtype <U3, expected kind 'f'"``).

    Returns
    -------
    dict of str to (tuple, numpy.dtype)
    """
    optional = dict(optional or {})
    infos = {i.filename.removesuffix(".npy"): i for i in archive.infolist()}
    missing = sorted(set(members) - set(infos))
    unknown = sorted(set(infos) - set(members) - set(optional))
    if missing or unknown:
        detail = "; ".join(part for part in (f"missing {missing}" if missing else "",
                                             f"unexpected member(s) {unknown}" if unknown else "") if part)
        raise error(f"it holds {sorted(infos)}, expected {sorted(members)} ({detail})")
    out = {}
    for name, kinds in {**members, **optional}.items():
        if name not in infos:
            continue
        info = infos[name]
        if stored is not None and info.compress_size > stored:
            raise error(f"member {name!r} declares {info.compress_size} bytes in a file of {stored}")
        with archive.open(info) as fh:
            try:
                shape, dtype = _npy_header(fh)
            except ValueError as exc:
                raise error(f"member {name!r} is not a .npy array: {exc}") from None
            offset = fh.tell()
        wrong = _dtype_problem(f"array {name!r}", dtype, kinds)
        if wrong:
            raise error(wrong)
        nbytes = _declared_bytes(shape, dtype)
        if info.file_size != offset + nbytes:
            raise error(f"array {name!r} declares {nbytes} bytes for shape {shape} but stores "
                        f"{info.file_size - offset}")
        ratio = _DENSE_MAX_RATIO if name in dense else _DEFLATE_MAX_RATIO
        if info.compress_type != zipfile.ZIP_STORED and info.file_size > ratio * max(info.compress_size, 1):
            raise error(f"array {name!r} declares {info.file_size} bytes from only "
                        f"{info.compress_size} compressed bytes (more than {ratio}:1)")
        out[name] = (shape, dtype)
    return out


def check_npz(path, members, *, dense=(), optional=None, fix=None):
    """Shapes and dtypes of the arrays of an ``.npz`` file, checked without reading any array data.

    Every member's ``.npy`` header is read and its declared size compared
    with the uncompressed size in the zip directory, and that with the
    compressed size (at most 1100:1, the most deflate can do), so a file
    declaring arrays larger than it holds is refused before anything is
    allocated.

    Parameters
    ----------
    path : path-like
    members : dict of str to str
        The arrays the file must hold and the numpy dtype kinds each may
        have, e.g. ``{"atoms": "f", "words": "U"}``.
    dense : sequence of str
        Members holding dense floating-point data (embeddings), which
        deflate cannot shrink by more than a few percent: refused beyond
        50:1, so a small file cannot expand into a large array of zeros.
    optional : dict of str to str, optional
        Arrays the file may hold besides ``members`` (no others are accepted).
    fix : str, optional
        What to do, in the message (default: delete or restore the file).

    Returns
    -------
    dict of str to (tuple, numpy.dtype)
        For the members present.

    Raises
    ------
    DamagedFileError
        Naming the file and the member at fault.
    FileSystemError
        The file cannot be read (missing, permissions, ...).
    """
    path = os.fspath(path)
    check_regular_file(path, fix)
    with reading(path, fix), zipfile.ZipFile(path) as archive:
        return check_archive(archive, members, dense=dense, optional=optional, stored=os.path.getsize(path),
                             error=lambda problem: _damaged_file(path, problem, fix))


def release_pages(array) -> bool:
    """Drop the pages of a memory-mapped array (:func:`load_npy` with ``mmap_mode``) from this process's
    resident set; the kernel keeps them in its page cache, so reading them again is cheap. A pass over a pool
    larger than memory then holds the chunk it reads, not every page it has read (the peak RSS of
    ``benchmarks/bench_scale.py``). Returns whether pages were released (False: not a memory map)."""
    m = array
    while isinstance(m, np.ndarray):  # a view's base is the array it views; a map's base is its mmap.mmap
        m = m.base
    if not isinstance(m, mmap.mmap) or not hasattr(mmap, "MADV_DONTNEED"):
        return False
    try:
        m.madvise(mmap.MADV_DONTNEED)
    except (OSError, ValueError):  # a closed map, or a system without madvise
        return False
    return True


def load_npy(path, kinds, *, fix=None, mmap_mode=None, check=None):
    """The array in the ``.npy`` file ``path``, checked first (:func:`check_npy`); never unpickles.

    ``mmap_mode`` is passed to :func:`numpy.load` (``"r"`` maps the file instead of reading it).
    ``check``, if given, is called with :func:`check_npy`'s ``(shape, dtype)`` before the data is
    read (it raises to refuse a shape the caller cannot use).
    """
    header = check_npy(path, kinds, fix=fix)
    if check is not None:
        check(*header)
    with reading(path, fix):
        return np.load(path, allow_pickle=False, mmap_mode=mmap_mode)


def load_npz(path, members, *, dense=(), optional=None, fix=None, check=None):
    """The arrays of the ``.npz`` file ``path`` as a dict, checked first (:func:`check_npz`); never unpickles.

    ``check``, if given, is called with :func:`check_npz`'s ``{name: (shape, dtype)}`` before any
    array is read (it raises to refuse shapes the caller cannot use).
    """
    shapes = check_npz(path, members, dense=dense, optional=optional, fix=fix)
    if check is not None:
        check(shapes)
    with reading(path, fix), np.load(path, allow_pickle=False) as z:
        return {k.removesuffix(".npy"): z[k] for k in z.files}


def load_user_array(path, kinds, *, what, key=None, preferred=None, fix=None):
    """One array of a user's ``.npy`` or ``.npz`` file (told apart by content), checked before it is read.

    Parameters
    ----------
    path : path-like
    kinds : str
        The numpy dtype kinds allowed (``"fiu"``: numbers).
    what : str
        What the array holds, in messages (``"TiTok tokens"``, ``"mean embedding"``).
    key : str, optional
        The array to read from an ``.npz``. Without it: the array named ``preferred`` if the file
        has one, else its only array.
    fix : str, optional
        What to do, in the message (default: give a ``.npy`` / ``.npz`` file of ``what``; a
        user's input is never to be deleted).

    Raises
    ------
    FileNotFoundError
        No file at ``path``.
    ValueError
        An ``.npz`` with several arrays and no ``key``, or without the array ``key``.
    DamagedFileError
        Not an array of ``kinds``, or damaged (one line naming the file and what to give).
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{what} file {path!r} does not exist")
    fix = fix or f"give a .npy or .npz file holding the {what} as {_kinds_in_words(kinds)}"
    if not zipfile.is_zipfile(path):
        return load_npy(path, kinds, fix=fix)
    check_regular_file(path, fix)
    with reading(path, fix), zipfile.ZipFile(path) as archive:
        keys = [n.removesuffix(".npy") for n in archive.namelist()]
    if key is None and preferred in keys:
        key = preferred
    if key is None:
        if len(keys) != 1:
            raise ValueError(f"{path!r} holds arrays {keys}; say which one holds the {what} (key=)")
        key = keys[0]
    if key not in keys:
        raise ValueError(f"{path!r} has no array {key!r} (it has {keys})")
    others = {k: "biufcUS" for k in keys if k != key}
    return load_npz(path, {key: kinds}, optional=others, fix=fix)[key]


# ------------------------------------------------------------------------------- the SLiCS model file
#: Format name and version written in a model file's header.
MODEL_FORMAT_NAME = "slics-model"
MODEL_FORMAT_VERSION = 1
#: Members of a saved model and the numpy dtype kinds they may have.
_MODEL_MEMBERS = {"header": "U", "atoms": "f", "groups": "iu", "history": "f"}
#: The header keys written by :func:`save_model`.
_HEADER_KEYS = ("format", "version", "params", "n_iter_", "n_concepts_", "n_features_in_", "concept_names_")
#: Largest header accepted (characters of JSON); concept names are the only variable part.
_MAX_HEADER_CHARS = 16_000_000


def save_model(model, path) -> str:
    """Write a fitted :class:`~slics_core.slics.SLiCS` to one self-describing ``.npz`` file, atomically.

    The file holds the atoms, groups and history arrays plus a JSON header
    with the format name and version, the hyper-parameters (those of the
    estimator's ``_param_constraints`` table that it saves) and the concept
    names. It never contains pickled objects.
    """
    params = {k: v for k, v in model.get_params().items() if k not in model._not_saved}
    params = {k: (v.item() if isinstance(v, np.generic) else v) for k, v in params.items()}
    if not isinstance(params["random_state"], (int, type(None))):
        params["random_state"] = None
    if not isinstance(params["n_atoms"], int):
        params["n_atoms"] = [int(m) for m in params["n_atoms"]]
    header = {
        "format": MODEL_FORMAT_NAME,
        "version": MODEL_FORMAT_VERSION,
        "params": params,
        "n_iter_": int(model.n_iter_),
        "n_concepts_": int(model.n_concepts_),
        "n_features_in_": int(model.n_features_in_),
        "concept_names_": list(model.concept_names_),
    }
    path = os.fspath(path)
    atomic_save_npz(path, compressed=True, header=np.array(json.dumps(header)), atoms=model.atoms_,
                    groups=model.groups_, history=model.history_)
    return path


def load_model(cls, path):
    """Load a model written by :func:`save_model` as an instance of ``cls``, checking every part first.

    The header (format, version, every hyper-parameter against
    ``cls._param_constraints``, sizes, concept names) is validated key by
    key, and the shapes and dtypes of the arrays are read from their ``.npy``
    headers inside the archive and checked against it *before* any array
    data is read (:func:`check_archive`), so a damaged or hostile file cannot
    make this allocate more than its header allows.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    ValueError
        One per problem, naming the file, the part at fault and what to do.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no SLiCS model file at {path!r}")
    return _ModelFile(path).load(cls)


class _ModelFile:
    """Strict reader of the ``.npz`` files written by :func:`save_model`."""

    def __init__(self, path):
        self.path = path

    def error(self, problem):
        return damaged_file_error(self.path, problem, "load a file written by SLiCS.save, or re-fit and save "
                                                      "the model again")

    def fail(self, problem):
        raise self.error(problem)

    def load(self, cls):
        check_regular_file(self.path, "load a file written by SLiCS.save, or re-fit and save the model again")
        try:
            with zipfile.ZipFile(self.path) as archive:
                return self._load(archive, cls)
        except zipfile.BadZipFile as exc:
            self.fail(f"it is not a readable SLiCS model file (damaged or another format: {exc})")
        except (OSError, EOFError, zlib.error) as exc:
            self.fail(f"reading it failed: {type(exc).__name__}: {exc}")

    def _load(self, archive, cls):
        names = {i.filename.removesuffix(".npy") for i in archive.infolist()}
        missing = [name for name in _MODEL_MEMBERS if name not in names]
        if missing:
            self.fail(f"it is not a SLiCS model file (missing array(s) {missing})")
        shapes = check_archive(archive, _MODEL_MEMBERS, dense=("atoms",), stored=os.path.getsize(self.path),
                               error=self.error)
        header = self._header(archive, shapes["header"], cls)
        S, d = header["n_concepts_"], header["n_features_in_"]
        n_atoms = header["params"]["n_atoms"]
        counts = [n_atoms] * S if is_int(n_atoms) else n_atoms
        if len(counts) != S:
            self.fail(f"header param 'n_atoms' has {len(counts)} entries for n_concepts_={S} concepts")
        expected = {"atoms": (sum(counts), d), "groups": (sum(counts),), "history": (header["n_iter_"],)}
        for name, shape in expected.items():
            if shapes[name][0] != shape:
                self.fail(f"array '{name}' has shape {shapes[name][0]} but the header implies {shape}")
        atoms = self._read(archive, "atoms").astype(np.float64)
        groups = self._read(archive, "groups").astype(np.int64)
        history = self._read(archive, "history").astype(np.float64)
        if not np.isfinite(atoms).all():
            self.fail("array 'atoms' contains NaN or infinite values")
        if not np.allclose(np.linalg.norm(atoms, axis=1), 1.0, atol=1e-6):
            self.fail("array 'atoms' has rows that are not unit vectors")
        if not np.array_equal(groups, np.repeat(np.arange(S), counts)):
            self.fail("array 'groups' does not assign n_atoms atoms to each concept in order")
        if not np.isfinite(history).all():
            self.fail("array 'history' contains NaN or infinite values")
        model = cls(**header["params"])
        model.atoms_ = atoms
        model.groups_ = groups
        model.history_ = history
        model.n_iter_ = header["n_iter_"]
        model.n_concepts_ = S
        model.n_features_in_ = d
        model.concept_names_ = list(header["concept_names_"])
        return model

    def _read(self, archive, name):
        with archive.open(name + ".npy") as fh:
            try:
                return np.lib.format.read_array(fh, allow_pickle=False)
            except ValueError as exc:
                self.fail(f"array '{name}' cannot be read ({exc})")

    def _header(self, archive, shape_dtype, cls):
        shape, dtype = shape_dtype
        if shape != () or dtype.itemsize // 4 > _MAX_HEADER_CHARS:
            self.fail(f"the header is not one JSON string of at most {_MAX_HEADER_CHARS} characters")
        try:
            header = json.loads(str(self._read(archive, "header")))
        except json.JSONDecodeError as exc:
            self.fail(f"the header is not valid JSON ({exc})")
        if not isinstance(header, dict):
            self.fail("the header is not a JSON object")
        if header.get("format") != MODEL_FORMAT_NAME:
            self.fail(f"it is not a SLiCS model file (header format {header.get('format')!r}, "
                      f"expected {MODEL_FORMAT_NAME!r})")
        if header.get("version") != MODEL_FORMAT_VERSION or not is_int(header.get("version")):
            self.fail(f"it has SLiCS format version {header.get('version')!r}; this library reads "
                      f"version {MODEL_FORMAT_VERSION}")
        for key in _HEADER_KEYS:
            if key not in header:
                self.fail(f"header key '{key}' is missing")
        for key in header:
            if key not in _HEADER_KEYS:
                self.fail(f"header key '{key}' is unknown")
        params = header["params"]
        if not isinstance(params, dict):
            self.fail("header key 'params' must be an object of hyper-parameters")
        saved = {k: v for k, v in cls._param_constraints.items() if k not in cls._not_saved}
        for key, (ok, expected) in saved.items():
            if key not in params:
                self.fail(f"header param '{key}' is missing")
            if not ok(params[key]):
                self.fail(f"header param '{key}' must be {expected}; got {params[key]!r}")
        for key in params:
            if key not in saved:
                self.fail(f"header param '{key}' is unknown to this version of SLiCS")
        for key, minimum in (("n_iter_", 0), ("n_concepts_", 1), ("n_features_in_", 1)):
            if not is_int(header[key]) or header[key] < minimum:
                self.fail(f"header key '{key}' must be an int >= {minimum}; got {header[key]!r}")
        names = header["concept_names_"]
        if not isinstance(names, list) or not all(isinstance(x, str) for x in names):
            self.fail("header key 'concept_names_' must be a list of strings")
        if len(names) != header["n_concepts_"]:
            self.fail(f"header key 'concept_names_' has {len(names)} names for n_concepts_="
                      f"{header['n_concepts_']} concepts")
        return header


# ---------------------------------------------------------------------------- the baseline model file
#: Members of every baseline model file besides its kind's own arrays.
_BASELINE_MEMBERS = {"kind": "U", "concept_names": "U"}


def save_baseline_model(path, kind, concept_names, **arrays) -> str:
    """Write a model without a dictionary (``kind``: ``"UF"``, ``"SpLiCE"``, ...) as one ``.npz``, atomically.

    The file holds ``kind``, the concept names and ``arrays``; never pickled objects.
    """
    path = os.fspath(path)
    atomic_save_npz(path, kind=np.array(kind), concept_names=np.array(list(concept_names), dtype=str), **arrays)
    return path


def load_baseline_model(path, kind, members, build, *, dense=()):
    """``build(arrays, concept_names)`` of a file written by :func:`save_baseline_model` for ``kind``.

    Parameters
    ----------
    path : path-like
    kind : str
        The model kind the file must hold.
    members : dict of str to str
        The kind's own arrays and their dtype kinds (as for :func:`check_npz`).
    build : callable(dict, list of str)
        Makes the model from the arrays and the concept names; a ``ValueError`` or ``KeyError``
        it raises means the arrays do not fit together (reported as a damaged file).
    dense : sequence of str
        Members holding dense embeddings (see :func:`check_npz`).

    Raises
    ------
    DamagedFileError
        One line naming the file, what is wrong and what to do (fit the model again).
    slics_core.errors.FileSystemError
        The file cannot be read (missing, permissions, ...).
    """
    fix = "fit it again"
    arrays = load_npz(path, {**_BASELINE_MEMBERS, **members}, dense=dense, fix=fix)
    try:
        if str(arrays["kind"]) != kind:
            raise ValueError(f"it holds a {str(arrays['kind'])!r} model, not {kind}")
        return build(arrays, [str(s) for s in arrays["concept_names"]])
    except (ValueError, KeyError, TypeError) as exc:
        raise damaged_file_error(path, str(exc) if isinstance(exc, ValueError) else exc, fix) from None
