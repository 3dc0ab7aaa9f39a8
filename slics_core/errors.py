"""Errors a user can fix, and the one-line messages that say how.

File-system failures (disk full, read-only file system, permissions, a file
where a folder was expected) and damaged files (a truncated ``.npz``, a
``.json`` cut in half) otherwise surface as tracebacks that name a temporary
file, or no file at all. This module is the one place that turns them into a
single line naming the file and what to do:

:func:`user_message`
    ``exception -> str`` for any exception (known OS errors and damaged-file
    errors get a specific message; others their own text).
:class:`UserError`
    Base of the errors raised with such a message; the ``slics`` command line
    prints them without a traceback (exit code 2).
:class:`FileSystemError`
    A :class:`UserError` that is also an :class:`OSError` (``errno`` kept).
:class:`DamagedFileError`
    A :class:`UserError` that is also a :class:`ValueError`.
:func:`reading` / :func:`writing`
    Context managers that convert the errors raised while reading or
    writing one file into the two classes above.
:func:`check_npy`
    The shape and dtype of a ``.npy`` file, checked against the file's size
    before its data is read.
:func:`check_npz`
    The members, shapes and dtypes of an ``.npz`` file, checked against the
    sizes in its zip directory *before* any array is read, so a damaged or
    hostile file is refused without allocating what it declares.
"""
from __future__ import annotations

import errno as _errno
import json
import os
import zipfile
from contextlib import contextmanager

import numpy as np

__all__ = [
    "UserError",
    "FileSystemError",
    "DamagedFileError",
    "DAMAGED_FILE_ERRORS",
    "user_message",
    "file_system_error",
    "damaged_file_error",
    "reading",
    "writing",
    "check_npy",
    "check_npz",
]

#: Exceptions that mean "this file's content cannot be read back" (as raised by
#: :func:`numpy.load`, :mod:`zipfile` and :mod:`json`); ``ValueError`` and
#: ``OSError`` without an ``errno`` are treated the same way by :func:`reading`.
DAMAGED_FILE_ERRORS = (zipfile.BadZipFile, EOFError, json.JSONDecodeError, UnicodeDecodeError)

_NO_SPACE = {_errno.ENOSPC, getattr(_errno, "EDQUOT", _errno.ENOSPC)}
_NO_PERMISSION = {_errno.EACCES, _errno.EPERM}


class UserError(Exception):
    """An error the user can fix; ``str(exc)`` is one line saying what and how.

    Parameters
    ----------
    message : str
    path : str, optional
        The file or folder concerned.
    """

    def __init__(self, message, path=None):
        super().__init__(message)
        self.path = None if path is None else os.fspath(path)

    def __str__(self):
        return str(self.args[0]) if self.args else ""


class FileSystemError(UserError, OSError):
    """An :class:`OSError` (disk full, read-only, permissions, ...) with a one-line message.

    ``errno`` is that of the original error, so ``except OSError`` and
    ``exc.errno == errno.ENOSPC`` keep working.
    """

    def __init__(self, message, path=None, errno=None):
        OSError.__init__(self, errno, message)
        self.path = None if path is None else os.fspath(path)

    def __str__(self):
        return str(self.strerror if self.strerror is not None else self.args[0])


class DamagedFileError(UserError, ValueError):
    """A file that exists but whose content cannot be read back."""


def _name(path):
    return repr(os.fspath(path)) if path is not None else "a file"


def _os_error_message(exc, path):
    code = exc.errno
    where = _name(path)
    if code in _NO_SPACE:
        return (f"no space left on the disk holding {where} (disk full or quota reached); "
                "free some space or choose a location on another disk, then run again.")
    if code == _errno.EROFS:
        return f"{where} is on a read-only file system; choose a writable location."
    if code in _NO_PERMISSION:
        return (f"permission denied for {where}; check its permissions (and its folder's) "
                "or choose another location.")
    if code == _errno.ENOTDIR:
        return f"{where}: part of this path is a file, not a folder; choose a path made of folders."
    if code == _errno.EEXIST:
        return f"{where} already exists and is not a folder; choose a folder path."
    if code == _errno.EISDIR:
        return f"{where} is a folder, but a file was expected; give the path of a file."
    if code == _errno.ENOENT:
        return f"{where} does not exist; check the path."
    reason = exc.strerror or os.strerror(code)
    return f"{where}: {reason}."


def user_message(exc, path=None) -> str:
    """One line telling the user what went wrong with which file and what to do.

    Parameters
    ----------
    exc : BaseException
    path : path-like, optional
        The file concerned; default: the exception's own (``exc.path`` or
        ``exc.filename``).

    Returns
    -------
    str
        For :class:`UserError`, its message; for an :class:`OSError` with an
        ``errno`` (ENOSPC, EROFS, EACCES/EPERM, ENOTDIR, EEXIST, EISDIR,
        ENOENT, others), a message naming the file; for damaged-file errors
        (:data:`DAMAGED_FILE_ERRORS`), a message naming the file and saying
        to delete or re-create it; otherwise ``str(exc)`` (or the exception's
        class name when that is empty).
    """
    if isinstance(exc, UserError):
        return str(exc)
    if path is None:
        path = getattr(exc, "path", None) or getattr(exc, "filename", None)
    if isinstance(exc, OSError) and exc.errno is not None:
        return _os_error_message(exc, path)
    if isinstance(exc, DAMAGED_FILE_ERRORS):
        return _damaged_message(path, exc)
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _damaged_message(path, exc, fix=None):
    detail = str(exc).strip().splitlines()
    detail = f"{type(exc).__name__}: {detail[0]}" if detail else type(exc).__name__
    fix = fix or "delete it (or restore it) and run again"
    return f"{_name(path)} is damaged or incomplete ({detail}); {fix}."


def file_system_error(exc, path=None) -> FileSystemError:
    """The :class:`FileSystemError` for ``exc`` (an :class:`OSError`) about ``path``."""
    if isinstance(exc, FileSystemError):
        return exc
    path = path if path is not None else exc.filename
    return FileSystemError(user_message(exc, path), path=path, errno=exc.errno)


def damaged_file_error(path, exc, fix=None) -> DamagedFileError:
    """The :class:`DamagedFileError` for a file whose content raised ``exc`` when read."""
    return DamagedFileError(_damaged_message(path, exc, fix), path=path)


@contextmanager
def writing(path):
    """Convert :class:`OSError` raised inside the block into :class:`FileSystemError` about ``path``.

    Use it around the writing of one file (``path`` is the file the user
    knows, not the temporary file it is written through).
    """
    try:
        yield
    except FileSystemError:
        raise
    except OSError as exc:
        raise file_system_error(exc, path) from exc


@contextmanager
def reading(path, fix=None):
    """Convert errors raised while reading ``path`` into one-line errors.

    An :class:`OSError` with an ``errno`` becomes :class:`FileSystemError`;
    a damaged-file error (:data:`DAMAGED_FILE_ERRORS`, ``ValueError``,
    ``KeyError`` of a missing array, or an ``OSError`` without ``errno`` as
    :func:`numpy.load` raises for a file that is not an array) becomes
    :class:`DamagedFileError`. ``fix`` replaces the default advice ("delete
    it (or restore it) and run again").
    """
    try:
        yield
    except UserError:
        raise
    except OSError as exc:
        if exc.errno is not None:
            raise file_system_error(exc, path) from exc
        raise damaged_file_error(path, exc, fix) from exc
    except (*DAMAGED_FILE_ERRORS, ValueError, KeyError) as exc:
        raise damaged_file_error(path, exc, fix) from exc


#: deflate never compresses by more than about 1032:1, so a member declaring more is damaged (a zip bomb).
_DEFLATE_MAX_RATIO = 1100
#: Dense floating-point data (embeddings) shrinks by a few percent under deflate; more than this is not such data.
_DENSE_MAX_RATIO = 50


def _npy_header(fh):
    """``(shape, dtype)`` of the ``.npy`` stream ``fh`` (positioned at its start); ValueError if it is not one."""
    version = np.lib.format.read_magic(fh)
    if version not in ((1, 0), (2, 0)):
        raise ValueError(f"unsupported .npy version {version}")
    read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
            else np.lib.format.read_array_header_2_0)
    shape, _, dtype = read(fh)
    return shape, dtype


def _damaged_file(path, problem, fix):
    return DamagedFileError(f"{_name(path)} is damaged or not the expected file ({problem}); "
                            f"{fix or 'delete it (or restore it) and run again'}.", path=path)


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
    with reading(path, fix), open(path, "rb") as fh:
        try:
            shape, dtype = _npy_header(fh)
        except ValueError as exc:
            raise _damaged_file(path, f"not a .npy array: {exc}", fix) from None
        offset = fh.tell()
        size = os.fstat(fh.fileno()).st_size
    if dtype.hasobject or dtype.kind not in kinds:
        raise _damaged_file(path, f"dtype {dtype}, expected kind {kinds!r}", fix)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if size != offset + nbytes:
        raise _damaged_file(path, f"it declares {nbytes} bytes for shape {shape} but stores {size - offset}", fix)
    return shape, dtype


def check_npz(path, members, *, dense=(), fix=None):
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
        The arrays the file must hold (exactly these) and the numpy dtype
        kinds each may have, e.g. ``{"atoms": "f", "words": "U"}``.
    dense : sequence of str
        Members holding dense floating-point data (embeddings), which
        deflate cannot shrink by more than a few percent: refused beyond
        50:1, so a small file cannot expand into a large array of zeros.
    fix : str, optional
        What to do, in the message (default: delete or restore the file).

    Returns
    -------
    dict of str to (tuple, numpy.dtype)

    Raises
    ------
    DamagedFileError
        Naming the file and the member at fault.
    FileSystemError
        The file cannot be read (missing, permissions, ...).
    """
    path = os.fspath(path)

    def damaged(problem):
        return _damaged_file(path, problem, fix)

    out = {}
    with reading(path, fix), zipfile.ZipFile(path) as archive:
        infos = {i.filename.removesuffix(".npy"): i for i in archive.infolist()}
        if set(infos) != set(members):
            raise damaged(f"it holds {sorted(infos)}, expected {sorted(members)}")
        stored = os.path.getsize(path)
        for name, kinds in members.items():
            info = infos[name]
            if info.compress_size > stored:
                raise damaged(f"member {name!r} declares {info.compress_size} bytes in a file of {stored}")
            with archive.open(info) as fh:
                try:
                    shape, dtype = _npy_header(fh)
                except ValueError as exc:
                    raise damaged(f"member {name!r} is not a .npy array: {exc}") from None
                offset = fh.tell()
            if dtype.hasobject or dtype.kind not in kinds:
                raise damaged(f"array {name!r} has dtype {dtype}, expected kind {kinds!r}")
            nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            if info.file_size != offset + nbytes:
                raise damaged(f"array {name!r} declares {nbytes} bytes for shape {shape} but stores "
                              f"{info.file_size - offset}")
            ratio = _DENSE_MAX_RATIO if name in dense else _DEFLATE_MAX_RATIO
            if info.compress_type != zipfile.ZIP_STORED and info.file_size > ratio * max(info.compress_size, 1):
                raise damaged(f"array {name!r} declares {info.file_size} bytes from only "
                              f"{info.compress_size} compressed bytes (more than {ratio}:1)")
            out[name] = (shape, dtype)
    return out
