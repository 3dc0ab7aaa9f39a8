"""Precomputed embeddings as a dataset: ``.npy`` / ``.parquet`` files or clip-retrieval shards.

:func:`load_precomputed` reads embeddings that were computed elsewhere, with
their ids and labels: a ``.npy`` array with a metadata table (``.parquet``,
``.csv`` or ``.txt``, one id per row), a ``.parquet`` table with an
``embedding`` column, or clip-retrieval's ``img_emb/`` + ``metadata/``
folders of numbered shards. ``slics embed --dataset precomputed`` turns them
into an embedding cache without re-embedding. Label files are read as for
image folders (:func:`slics_core.datasets.read_label_records`).
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from slics_core.datasets import (
    ImageDataset,
    label_arrays,
    match_label_rows,
    parse_sub_labels,
    read_csv_rows,
    read_label_records,
    split_list,
)
from slics_core.errors import DamagedFileError
from slics_core.formats import load_npy
from slics_core.shards import clip_retrieval_files, id_column, read_pandas

__all__ = ["load_precomputed"]

def _read_table(path):
    """A metadata table (parquet, CSV or a text file of ids) as a pandas DataFrame."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no metadata file at {str(path)!r}")
    low = path.name.lower()
    if low.endswith(".csv"):
        header, rows = read_csv_rows(path, "metadata file")
        return read_pandas().DataFrame([r for _, r in rows], columns=header, dtype=object)
    try:
        if low.endswith(".parquet"):
            return read_pandas().read_parquet(path)
        if low.endswith((".txt", ".lst")):
            return read_pandas().DataFrame({"id": [ln.strip() for ln in path.read_text(encoding="utf-8").splitlines()
                                        if ln.strip()]})
    except UnicodeDecodeError:
        raise ValueError(f"metadata file {str(path)!r} is not UTF-8 text; save it as UTF-8 and run again.") from None
    except (OSError, ValueError) as exc:
        raise ValueError(f"metadata file {str(path)!r} cannot be read: {exc}") from None
    raise ValueError(f"metadata file {str(path)!r}: use .parquet, .csv or .txt (one id per line)")


def _list_cell(v):
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return []
    if isinstance(v, (list, tuple, np.ndarray)):
        return [str(x).strip() for x in v if str(x).strip()]
    return split_list(v)


def _embedding_column(values, src):
    """``(n, d)`` float32 array of a parquet ``embedding`` column (one list of numbers per row); a row that is
    missing, not numbers or of another length is named in a one-line ``ValueError``."""
    if not len(values):
        return np.zeros((0, 0), np.float32)
    try:
        return np.stack([np.asarray(v, dtype=np.float32) for v in values])
    except (TypeError, ValueError):
        pass
    where = f"{str(src)!r}, column 'embedding'"
    d = None
    for i, v in enumerate(values):
        if v is None or (isinstance(v, float) and np.isnan(v)):
            raise ValueError(f"{where}, row {i} (counting from 0) is empty; every row needs a list of numbers.")
        if isinstance(v, (str, bytes)):
            raise ValueError(f"{where}, row {i} (counting from 0) is text ({str(v)[:30]!r}), not a list of numbers; "
                             "write the embeddings as lists of floats.")
        try:
            a = np.asarray(v, dtype=np.float32)
        except (TypeError, ValueError):
            raise ValueError(f"{where}, row {i} (counting from 0) is not a list of numbers "
                             f"({str(list(v))[:40]!r}).") from None
        if a.ndim != 1:
            raise ValueError(f"{where}, row {i} (counting from 0) has shape {a.shape}, not one list of numbers.")
        if d is None:
            d = a.size
        elif a.size != d:
            raise ValueError(f"{where}, row {i} (counting from 0) has {a.size} numbers where row 0 has {d}; "
                             "every embedding must have the same length.")
    raise ValueError(f"{where} cannot be read as one (n, d) array of numbers.")


def load_precomputed(embeddings, *, metadata=None, labels=None, images=None):
    """Embeddings computed elsewhere, with their ids and labels.

    Parameters
    ----------
    embeddings : path
        One of: a folder in clip-retrieval's layout (``img_emb/img_emb_0.npy`` ... and
        ``metadata/metadata_0.parquet`` ..., matched by number; the id column is
        ``image_path``, else ``key``); a ``.npy`` file ``(n, d)`` (ids from ``metadata``); a
        ``.parquet`` file with an ``embedding`` column (one list per row) and an id column.
    metadata : path, optional
        Ids for a ``.npy`` file, in row order: ``.parquet`` / ``.csv`` with an id column
        (``image_path``, ``path``, ``image``, ``file``, ``id``, ``key``...) or ``.txt`` (one id
        per line). Label columns ``labels`` / ``sub_labels`` (lists, or ``a|b`` strings) are read too.
    labels : path, optional
        A CSV / JSON label file in :func:`load_folder`'s formats, matched one-to-one to the ids on
        whole path components (relative to ``images``, else the longest path suffix); a row that
        fits several ids, two rows naming one id, or no row naming any id are errors. Items it does
        not name get no labels; ``dataset.label_report`` says how many rows matched.
    images : path, optional
        Folder the ids are relative to, for thumbnails (ids that are existing files are used
        as they are).

    Returns
    -------
    E : ndarray of shape (n, d), float32
    dataset : ImageDataset
        ``paths`` are image files where they exist, else None.
    """
    src = Path(embeddings)
    if src.is_dir():
        pairs = clip_retrieval_files(src)
        parts, tables = [], []
        for ef, mf in pairs:
            e = load_npy(ef, "fiu", fix="export it again")
            t = read_pandas().read_parquet(mf)
            if len(e) != len(t):
                raise ValueError(f"{ef.name} has {len(e)} rows but {mf.name} has {len(t)}")
            parts.append(e)
            tables.append(t)
        E = np.concatenate(parts)
        meta = read_pandas().concat(tables, ignore_index=True)
    elif src.suffix.lower() == ".npy":
        if metadata is None:
            raise ValueError(f"{str(src)!r}: a .npy file needs --metadata naming the ids of its rows")
        try:
            E = load_npy(src, "fiu", fix="export it again")
        except DamagedFileError:
            raise
        except (OSError, ValueError) as exc:
            raise ValueError(f"{str(src)!r} cannot be read as a .npy array: {exc}") from None
        meta = _read_table(metadata)
        if len(meta) != len(E):
            raise ValueError(f"{str(src)!r} has {len(E)} rows but {metadata} names {len(meta)} ids")
    elif src.suffix.lower() == ".parquet":
        meta = _read_table(src)
        if "embedding" not in meta.columns:
            raise ValueError(f"{str(src)!r}: needs an 'embedding' column (one list of floats per row)")
        E = _embedding_column(meta["embedding"], src)
    elif not src.exists():
        raise FileNotFoundError(f"no embeddings at {str(src)!r}")
    else:
        raise ValueError(f"{str(src)!r}: use a clip-retrieval folder, a .npy file or a .parquet file")
    E = np.asarray(E, dtype=np.float32)
    if E.ndim != 2 or E.shape[0] == 0:
        raise ValueError(f"{str(src)!r}: expected a non-empty (n, d) array of embeddings, got shape {E.shape}")
    if not np.isfinite(E).all():
        raise ValueError(f"{str(src)!r}: embeddings contain NaN or infinite values")
    ids = [str(x) for x in meta[id_column(meta, str(metadata or src))]]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{str(metadata or src)!r}: ids are not unique")
    recs = [None] * len(ids)
    declared, report = [], None
    if labels is not None:
        records, declared = read_label_records(labels)
        row_of = match_label_rows(ids, records, labels, root=images)
        n_matched = sum(r is not None for r in row_of)
        if records and not n_matched:
            raise ValueError(f"none of the {len(records)} label rows of {os.fspath(labels)!r} names one of the "
                             f"{len(ids)} ids of {str(metadata or src)!r} (label {records[0]['image']!r}, id "
                             f"{ids[0]!r}); write label paths as the ids are written, or relative to --images.")
        recs = [None if r is None else records[r] for r in row_of]
        report = f"{n_matched} of {len(records)} label rows matched, {len(ids) - n_matched} ids unlabelled"
    elif "labels" in meta.columns:
        subs = meta["sub_labels"] if "sub_labels" in meta.columns else [None] * len(meta)
        recs = [{"labels": _list_cell(a), "subs": parse_sub_labels(_list_cell(b), {})}
                for a, b in zip(meta["labels"], subs)]
    bundle = label_arrays(recs, declared)
    root = Path(images) if images is not None else None
    paths = []
    for x in ids:
        cand = root / x if root is not None else Path(x)
        paths.append(str(cand) if cand.is_file() else None)
    name = src.stem if src.is_file() else src.name
    return E, ImageDataset(paths, ids, bundle, name=name, label_report=report)
