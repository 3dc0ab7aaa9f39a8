"""Embedding cache directory: resumable, atomic, self-describing.

Layout of a cache directory::

    meta.json          encoder id, dimension, preprocessing, batch size, item ids, state
    labels.npz         labels of the dataset (Y, concept names, optional sub-labels)
    batches/b00000.npz one file per finished batch (embeddings, positions, failures)
    embeddings.npy     all embeddings (written by finalize)
    ids.json           ids of the embedded items, aligned with embeddings.npy
    failed.json        items that could not be loaded, with the reason

Every file is written to a temporary name in the same folder and renamed
(:func:`os.replace`), so a reader never sees a half-written file. A run that
is interrupted keeps its finished batches; :func:`embed_dataset` with the
same cache directory, encoder and batch size computes only the missing ones.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

__all__ = ["EmbeddingStore", "embed_dataset", "atomic_write_bytes", "atomic_save_npz", "atomic_write_json"]

FORMAT = "slics-embedding-cache"
VERSION = 1


def atomic_write_bytes(path, data):
    """Write ``data`` to ``path`` through a temporary file and a rename."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
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


def atomic_write_json(path, obj):
    atomic_write_bytes(path, json.dumps(obj, indent=1).encode("utf-8"))


def atomic_save_npz(path, **arrays):
    import io

    buf = io.BytesIO()
    np.savez(buf, **arrays)
    atomic_write_bytes(path, buf.getvalue())


def atomic_save_npy(path, array):
    import io

    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    atomic_write_bytes(path, buf.getvalue())


def _ids_digest(ids):
    h = hashlib.sha256()
    for i in ids:
        h.update(str(i).encode("utf-8") + b"\0")
    return h.hexdigest()


class EmbeddingStore:
    """An embedding cache directory (see module docstring).

    Parameters
    ----------
    path : path-like
    """

    def __init__(self, path):
        self.path = Path(path)

    # -- metadata ---------------------------------------------------------------------------
    @property
    def meta_path(self):
        return self.path / "meta.json"

    def exists(self):
        return self.meta_path.is_file()

    def meta(self):
        if not self.exists():
            raise FileNotFoundError(f"no embedding cache at {str(self.path)!r} (run 'slics embed' first)")
        try:
            meta = json.loads(self.meta_path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ValueError(f"{str(self.meta_path)!r} is damaged: {exc}") from None
        if meta.get("format") != FORMAT:
            raise ValueError(f"{str(self.path)!r} is not a SLiCS embedding cache.")
        return meta

    def begin(self, ids, encoder_id, dim, batch_size, preprocessing=None, dataset=None, overwrite=False):
        """Create the cache or check that an existing one belongs to the same run."""
        ids = [str(i) for i in ids]
        digest = _ids_digest(ids)
        if self.exists() and not overwrite:
            meta = self.meta()
            mismatch = [k for k, v in (("encoder_id", encoder_id), ("batch_size", batch_size),
                                        ("ids_sha256", digest)) if meta.get(k) != v]
            if mismatch:
                raise ValueError(
                    f"cache {str(self.path)!r} was made with a different {', '.join(mismatch)}; "
                    "use another directory or --overwrite.")
            return meta
        if overwrite and self.path.exists():
            for p in list(self.batch_dir.glob("*.npz")) if self.batch_dir.is_dir() else []:
                p.unlink()
            for name in ("embeddings.npy", "ids.json", "failed.json"):
                if (self.path / name).exists():
                    (self.path / name).unlink()
        self.batch_dir.mkdir(parents=True, exist_ok=True)
        meta = {"format": FORMAT, "version": VERSION, "encoder_id": str(encoder_id), "dim": int(dim),
                "batch_size": int(batch_size), "n_items": len(ids), "ids_sha256": digest,
                "preprocessing": preprocessing or {}, "dataset": dataset or {}, "complete": False}
        atomic_write_json(self.path / "items.json", ids)
        atomic_write_json(self.meta_path, meta)
        return meta

    # -- batches ----------------------------------------------------------------------------
    @property
    def batch_dir(self):
        return self.path / "batches"

    def batch_path(self, b):
        return self.batch_dir / f"b{b:05d}.npz"

    def finished_batches(self):
        if not self.batch_dir.is_dir():
            return set()
        done = set()
        for p in self.batch_dir.glob("b*.npz"):
            try:
                done.add(int(p.stem[1:]))
            except ValueError:
                continue
        return done

    def write_batch(self, b, positions, embeddings, failed_positions=(), failed_reasons=()):
        atomic_save_npz(self.batch_path(b), positions=np.asarray(positions, dtype=np.int64),
                        embeddings=np.asarray(embeddings, dtype=np.float32).reshape(len(positions), -1),
                        failed_positions=np.asarray(failed_positions, dtype=np.int64),
                        failed_reasons=np.array(list(failed_reasons), dtype=str))

    def finalize(self):
        """Merge the batch files into ``embeddings.npy`` / ``ids.json`` / ``failed.json``."""
        meta = self.meta()
        ids = json.loads((self.path / "items.json").read_text(encoding="utf-8"))
        n_batches = -(-meta["n_items"] // meta["batch_size"])
        missing = sorted(set(range(n_batches)) - self.finished_batches())
        if missing:
            raise ValueError(f"cache {str(self.path)!r} is incomplete: {len(missing)} batch(es) missing; rerun embed.")
        pos, emb, failed = [], [], []
        for b in range(n_batches):
            with np.load(self.batch_path(b), allow_pickle=False) as z:
                pos.append(z["positions"])
                emb.append(z["embeddings"])
                failed += [{"id": ids[int(p)], "position": int(p), "reason": str(r)}
                           for p, r in zip(z["failed_positions"], z["failed_reasons"])]
        pos = np.concatenate(pos)
        E = np.concatenate(emb).reshape(pos.size, -1) if pos.size else np.zeros((0, meta["dim"]), np.float32)
        atomic_save_npy(self.path / "embeddings.npy", E)
        atomic_write_json(self.path / "ids.json", [ids[int(p)] for p in pos])
        atomic_write_json(self.path / "positions.json", [int(p) for p in pos])
        atomic_write_json(self.path / "failed.json", failed)
        meta["complete"] = True
        meta["n_embedded"] = int(pos.size)
        meta["n_failed"] = len(failed)
        atomic_write_json(self.meta_path, meta)
        return meta

    # -- reading ----------------------------------------------------------------------------
    def load(self):
        """Return ``(embeddings, ids, meta)`` of a finished cache."""
        meta = self.meta()
        if not meta.get("complete"):
            raise ValueError(f"cache {str(self.path)!r} is not complete (interrupted?); rerun 'slics embed' to resume.")
        E = np.load(self.path / "embeddings.npy", allow_pickle=False)
        ids = json.loads((self.path / "ids.json").read_text(encoding="utf-8"))
        if E.shape[0] != len(ids):
            raise ValueError(f"cache {str(self.path)!r} is damaged: {E.shape[0]} embeddings for {len(ids)} ids.")
        return E, ids, meta

    def positions(self):
        return np.asarray(json.loads((self.path / "positions.json").read_text(encoding="utf-8")), dtype=np.int64)

    def failed(self):
        p = self.path / "failed.json"
        return json.loads(p.read_text(encoding="utf-8")) if p.is_file() else []

    def save_labels(self, **arrays):
        atomic_save_npz(self.path / "labels.npz", **arrays)

    def load_labels(self):
        """Labels aligned with :meth:`load`'s embeddings (rows of failed items removed)."""
        p = self.path / "labels.npz"
        if not p.is_file():
            raise FileNotFoundError(f"cache {str(self.path)!r} has no labels (embedded without a label file?).")
        with np.load(p, allow_pickle=False) as z:
            lab = {k: z[k] for k in z.files}
        pos = self.positions()
        for k in ("Y", "Z"):
            if k in lab:
                lab[k] = lab[k][pos].astype(bool)
        return lab

    def save_array(self, name, array, **info):
        atomic_save_npz(self.path / f"{name}.npz", array=np.asarray(array), info=np.array(json.dumps(info)))

    def load_array(self, name):
        p = self.path / f"{name}.npz"
        if not p.is_file():
            return None, None
        with np.load(p, allow_pickle=False) as z:
            return z["array"], json.loads(str(z["info"]))


def embed_dataset(paths, ids, encoder, cache_dir, *, batch_size=64, preprocessing=None, dataset_info=None,
                  labels=None, overwrite=False, progress=True, image_loader=None):
    """Embed images into a cache directory, in batches, resumably.

    Parameters
    ----------
    paths, ids : sequences of the same length
    encoder : object with ``encode_images(list of PIL images) -> (n, d)``, ``dim`` and ``id``
    cache_dir : path-like
    batch_size : int
    preprocessing : dict, optional
        Recorded in ``meta.json`` (e.g. the embedding preprocessing to apply).
    labels : dict of arrays, optional
        Saved as ``labels.npz`` (rows aligned with ``paths``).
    progress : bool
        Show a progress bar (tqdm when available) on stderr.
    image_loader : callable(path) -> PIL image, optional
        Default :func:`slics_core.datasets.load_image`.

    Returns
    -------
    store : EmbeddingStore
    stats : dict
        ``computed`` and ``reused`` batches, ``failed`` items.
    """
    from slics_core.datasets import ImageLoadError, load_image

    if len(paths) != len(ids):
        raise ValueError(f"{len(paths)} paths for {len(ids)} ids.")
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int; got {batch_size!r}.")
    loader = image_loader or load_image
    store = EmbeddingStore(cache_dir)
    store.begin(ids, getattr(encoder, "id", type(encoder).__name__), getattr(encoder, "dim", -1), batch_size,
                preprocessing, dataset_info, overwrite=overwrite)
    if labels is not None:
        store.save_labels(**labels)
    n_batches = -(-len(paths) // batch_size)
    done = store.finished_batches()
    todo = [b for b in range(n_batches) if b not in done]
    bar = None
    if progress:
        try:
            from tqdm import tqdm

            bar = tqdm(total=n_batches, initial=n_batches - len(todo), desc="embed", unit="batch", file=sys.stderr)
        except ImportError:
            bar = None
    n_failed = 0
    for b in todo:
        lo, hi = b * batch_size, min(len(paths), (b + 1) * batch_size)
        images, pos, fpos, freason = [], [], [], []
        for p in range(lo, hi):
            try:
                images.append(loader(paths[p]))
                pos.append(p)
            except ImageLoadError as exc:
                fpos.append(p)
                freason.append(str(exc))
        if images:
            E = np.asarray(encoder.encode_images(images), dtype=np.float32)
            if E.shape[0] != len(images) or not np.isfinite(E).all():
                raise ValueError(f"encoder returned {E.shape} (finite={np.isfinite(E).all()}) for {len(images)} images.")
        else:
            E = np.zeros((0, max(int(getattr(encoder, "dim", 0)), 0)), dtype=np.float32)
        store.write_batch(b, pos, E, fpos, freason)
        n_failed += len(fpos)
        if bar is not None:
            bar.update(1)
        elif progress:
            print(f"embed: batch {b + 1}/{n_batches}", file=sys.stderr)
    if bar is not None:
        bar.close()
    meta = store.finalize()
    return store, {"computed": len(todo), "reused": n_batches - len(todo), "failed": meta["n_failed"]}
