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
:func:`damaged_file_message` / :func:`damaged_file_error`
    The one sentence for a damaged file, used by every reader:
    ``'<file>' is damaged or not the expected file (<problem>); <what to do>.``
:func:`refused_pickle_error`
    The refusal of a weights file that holds pickled Python objects (never
    loaded: they could run code), saying what to give instead.
:func:`reading` / :func:`writing`
    Context managers that convert the errors raised while reading or
    writing one file into the two classes above.
:func:`shown_value` / :func:`short_words`
    A value given by a user (an id, a label) quoted cut to its start and its length, not echoed whole.
:class:`Audiences` / :func:`explain` / :func:`audiences`
    Who is told what about one error, as data: what failed (words anyone may read: names, never
    a server folder or a shell command), what a visitor of the app can do there, and what whoever
    runs the app or the command runs to repair it. ``str(exc)`` stays the command line's one line;
    the app shows a visitor the first two and its operator the third (``app_pages._errors``).

The checked readers and atomic writers of the file formats themselves are in
:mod:`slics_core.formats`.
"""
from __future__ import annotations

import errno as _errno
import json
import os
import re
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass

__all__ = [
    "UserError",
    "FileSystemError",
    "DamagedFileError",
    "DAMAGED_FILE_ERRORS",
    "DEFAULT_DAMAGED_FIX",
    "user_message",
    "file_system_error",
    "damaged_file_message",
    "damaged_file_error",
    "refused_pickle_error",
    "reading",
    "writing",
    "Audiences",
    "explain",
    "audiences",
    "shown_value",
    "short_words",
]

#: Exceptions that mean "this file's content cannot be read back" (as raised by
#: :func:`numpy.load`, :mod:`zipfile` and :mod:`json`); ``ValueError`` and
#: ``OSError`` without an ``errno`` are treated the same way by :func:`reading`.
DAMAGED_FILE_ERRORS = (zipfile.BadZipFile, EOFError, json.JSONDecodeError, UnicodeDecodeError)

#: What to do about a damaged file the library wrote itself, when its reader says nothing more specific.
#: A reader of a user's own file (an input) passes its own ``fix``: a user's input is never to be deleted.
DEFAULT_DAMAGED_FIX = "delete it (or restore it) and run again"

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
    """A file that exists but whose content cannot be read back.

    Built by :func:`damaged_file_error`; ``problem`` and ``fix`` are the two parts of its
    message (a reader of a folder of files, such as a workspace, names the part at fault
    with ``problem`` instead of nesting one sentence in another).
    """

    def __init__(self, message, path=None, problem=None, fix=None, what=None):
        super().__init__(message, path=path)
        self.problem = problem if problem is not None else message
        self.fix = fix
        self.what = what


def _name(path):
    return repr(os.fspath(path)) if path is not None else "a file"


#: The most characters of a value given by a user (an id, a label, a name) that a message quotes.
SHOWN_VALUE_CHARS = 80


def shown_value(value, limit: int = SHOWN_VALUE_CHARS) -> str:
    """``repr(value)`` as a message quotes a value given by a user: past ``limit`` characters, its start
    and how long it is (``'aaaa…' (100000 characters)``), so a 10⁵-character id is not echoed whole."""
    text = value if isinstance(value, str) else str(value)
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit - 1]!r}… ({len(text)} characters)"


#: A run of characters without a space longer than this in a message is shown cut (:func:`short_words`).
LONG_WORD_CHARS = 300
_LONG_WORD = re.compile(rf"\S{{{LONG_WORD_CHARS + 1},}}")


def short_words(text: str) -> str:
    """``text`` with each run of more than :data:`LONG_WORD_CHARS` characters without a space (a quoted
    10⁵-character id or label) cut to its start and its length: messages stay one readable line, and
    what to do, written after the value, is still read. Applied by :func:`user_message` and :func:`explain`."""
    def cut(m):
        word = m.group(0)
        lead = word[0] if word[0] in "'\"" else ""
        trail = word[-1] if word[-1] in "'\"" and len(word) > 1 else ""
        inner = word[len(lead):len(word) - len(trail)]
        return f"{lead}{inner[:SHOWN_VALUE_CHARS]}…{trail} ({len(inner)} characters)"
    return _LONG_WORD.sub(cut, text)


@dataclass(frozen=True)
class Audiences:
    """Who is told what about one error.

    Parameters
    ----------
    failed : str
        What failed, in words anyone may read: things named by their names (a workspace's name, a
        file's last name), never a server folder, an option or a shell command.
    visitor_fix : str, default ""
        What a visitor of the app can do about it there ("" when nothing).
    operator_fix : str, default ""
        What whoever runs the app or the command does to repair it: a shell command in backticks, a
        file to delete ("" when nothing). The app shows it when its error details are on; the log always has it.
    """

    failed: str
    visitor_fix: str = ""
    operator_fix: str = ""


def explain(exc, failed, visitor_fix="", operator_fix=""):
    """``exc`` with its :class:`Audiences` attached (returned, so ``raise explain(ValueError(msg), ...)``)."""
    exc.audiences = Audiences(short_words(" ".join(str(failed).split())), short_words(visitor_fix),
                              short_words(operator_fix))
    return exc


def audiences(exc):
    """The :class:`Audiences` of ``exc``: those :func:`explain` attached, else derived for the errors of this
    module that know their file (:class:`FileSystemError`, :class:`DamagedFileError`: the file by its last
    name; the whole message, which names the folder and the fix, for the operator), else ``None`` (a
    message written for the command line only)."""
    told = getattr(exc, "audiences", None)
    if isinstance(told, Audiences):
        return told
    path = getattr(exc, "path", None)
    if isinstance(exc, DamagedFileError) and path is not None:
        what = f"{exc.what} " if exc.what else ""
        return Audiences(f"{what}{os.path.basename(path.rstrip('/' + os.sep))!r} is damaged or not the expected file",
                         "", str(exc))
    if isinstance(exc, FileSystemError) and path is not None:
        problem, _ = _os_parts(exc.errno, repr(os.path.basename(path.rstrip("/" + os.sep))), exc.strerror)
        return Audiences(problem, "", str(exc))
    return None


def _os_parts(code, where, strerror=None) -> tuple:
    """``(problem, fix)`` of an OS error with ``code`` about the file named ``where`` (``fix`` may be "")."""
    if code in _NO_SPACE:
        return (f"no space left on the disk holding {where} (disk full or quota reached)",
                "free some space or choose a location on another disk, then run again.")
    if code in _NO_PERMISSION:
        return (f"permission denied for {where}",
                "check its permissions (and its folder's) or choose another location.")
    parts = {_errno.EROFS: (f"{where} is on a read-only file system", "choose a writable location."),
             _errno.ENOTDIR: (f"{where}: part of this path is a file, not a folder", "choose a path made of folders."),
             _errno.EEXIST: (f"{where} already exists and is not a folder", "choose a folder path."),
             _errno.EISDIR: (f"{where} is a folder, but a file was expected", "give the path of a file."),
             _errno.ENOENT: (f"{where} does not exist", "check the path.")}
    return parts.get(code, (f"{where}: {strerror or os.strerror(code)}", ""))


def _os_error_message(exc, path):
    problem, fix = _os_parts(exc.errno, _name(path), exc.strerror)
    return f"{problem}; {fix}" if fix else f"{problem}."


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
        (:data:`DAMAGED_FILE_ERRORS`), :func:`damaged_file_message`; otherwise ``str(exc)`` (or the exception's
        class name when that is empty).
    """
    return short_words(_whole_message(exc, path))


def _whole_message(exc, path) -> str:
    if isinstance(exc, UserError):
        return str(exc)
    if path is None:
        path = getattr(exc, "path", None) or getattr(exc, "filename", None)
    if isinstance(exc, OSError) and exc.errno is not None:
        return _os_error_message(exc, path)
    if isinstance(exc, DAMAGED_FILE_ERRORS):
        return damaged_file_message(path, exc)
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _problem(problem) -> str:
    """The problem part of the sentence: a phrase as given; an exception as ``Type: first line``."""
    if isinstance(problem, DamagedFileError):
        return problem.problem
    if isinstance(problem, BaseException):
        detail = str(problem).strip().splitlines()
        return f"{type(problem).__name__}: {detail[0]}" if detail else type(problem).__name__
    return " ".join(str(problem).split())


def damaged_file_message(path, problem, fix=None, *, what=None) -> str:
    """The one sentence for a damaged file: ``'<file>' is damaged or not the expected file (<problem>); <fix>.``

    Parameters
    ----------
    path : path-like or None
        The file (or folder) concerned.
    problem : str or BaseException
        What is wrong, as a phrase (``"array 'W' holds text, not numbers"``), or the exception
        that reading it raised (shown as ``Type: first line``).
    fix : str, optional
        What to do (default :data:`DEFAULT_DAMAGED_FIX`, for files the library wrote itself).
    what : str, optional
        What the file is, put before its name (``"workspace"``, ``"UF model file"``).
    """
    who = f"{what} {_name(path)}" if what else _name(path)
    inner = _problem(problem).rstrip(". ")  # a problem written as a sentence loses its full stop inside the brackets
    return f"{who} is damaged or not the expected file ({inner}); {fix or DEFAULT_DAMAGED_FIX}."


def file_system_error(exc, path=None) -> FileSystemError:
    """The :class:`FileSystemError` for ``exc`` (an :class:`OSError`) about ``path``."""
    if isinstance(exc, FileSystemError):
        return exc
    path = path if path is not None else exc.filename
    return FileSystemError(user_message(exc, path), path=path, errno=exc.errno)


def damaged_file_error(path, problem, fix=None, *, what=None, cls=None) -> DamagedFileError:
    """The :class:`DamagedFileError` (or subclass ``cls``) with :func:`damaged_file_message`'s sentence.

    ``problem`` is a phrase or the exception reading the file raised.
    """
    return (cls or DamagedFileError)(damaged_file_message(path, problem, fix, what=what), path=path,
                                     problem=_problem(problem), fix=fix or DEFAULT_DAMAGED_FIX, what=what)


def refused_pickle_error(path) -> DamagedFileError:
    """The error for a weights file (``.pt``) that ``torch.load(weights_only=True)`` refused.

    Such a file holds pickled Python objects besides tensors, and loading them can run code from
    the file; the message says what to give instead, never to load it unchecked.
    """
    return DamagedFileError(
        f"{_name(path)} holds pickled Python objects besides tensors, which are never loaded (loading them "
        "could run code from the file); give the weights as a .safetensors file, or a .pt of plain tensors "
        "(torch.save(model.state_dict(), FILE)) from a source you trust.", path=path)


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
