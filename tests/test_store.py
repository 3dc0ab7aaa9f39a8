"""Embedding cache: atomic batches, resumability, failures reported, metadata checks."""

import numpy as np
import pytest
from PIL import Image

from slics_core.embed import embed_dataset
from slics_core.store import EmbeddingStore


class ColourEncoder:
    """Deterministic toy encoder: mean and std of each RGB channel."""

    id = "test:colour"
    dim = 6
    has_text = False

    def __init__(self, fail_after=None):
        self.calls = 0
        self.n_images = 0
        self.fail_after = fail_after

    def encode_images(self, images, batch_size=32):
        if self.fail_after is not None and self.calls >= self.fail_after:
            raise KeyboardInterrupt("simulated interruption")
        self.calls += 1
        self.n_images += len(images)
        out = []
        for im in images:
            a = np.asarray(im, dtype=np.float64) / 255.0
            out.append(np.concatenate([a.mean((0, 1)), a.std((0, 1))]) + 0.01)
        return np.array(out, dtype=np.float32)


@pytest.fixture
def folder(tmp_path):
    d = tmp_path / "imgs"
    d.mkdir()
    rng = np.random.default_rng(0)
    paths = []
    for i in range(11):
        p = d / f"im{i:02d}.jpg"
        if i == 4:
            p.write_bytes(b"broken")
        elif i == 7:
            Image.fromarray(rng.integers(0, 255, (6, 6, 3), dtype=np.uint8)).save(p, format="PNG")
        else:
            Image.fromarray(rng.integers(0, 255, (6, 6, 3), dtype=np.uint8)).save(p, format="PNG")
        paths.append(str(p))
    return paths


def test_embed_writes_cache_and_reports_broken(folder, tmp_path):
    ids = [f"id{i}" for i in range(len(folder))]
    store, stats = embed_dataset(folder, ids, ColourEncoder(), tmp_path / "c", batch_size=4, progress=False,
                                 preprocessing={"embedding": "unit"},
                                 labels={"Y": np.eye(11, 2, dtype=np.uint8)})
    E, got_ids, meta = store.load()
    assert stats == {"computed": 3, "reused": 0, "failed": 1}
    assert got_ids == [i for i in ids if i != "id4"]
    assert meta["encoder_id"] == "test:colour" and meta["preprocessing"] == {"embedding": "unit"}
    ref = ColourEncoder().encode_images([Image.open(folder[0]).convert("RGB")])
    np.testing.assert_allclose(E[0], ref[0], rtol=1e-6)
    assert [f["id"] for f in store.failed()] == ["id4"]
    lab = store.load_labels()
    assert lab["Y"].shape == (10, 2) and lab["Y"][0, 0] and not lab["Y"][3:, 0].any()


def test_interrupted_embed_resumes_without_recomputing(folder, tmp_path):
    ids = [str(i) for i in range(len(folder))]
    enc = ColourEncoder(fail_after=2)
    with pytest.raises(KeyboardInterrupt):
        embed_dataset(folder, ids, enc, tmp_path / "c", batch_size=3, progress=False)
    store = EmbeddingStore(tmp_path / "c")
    assert store.finished_batches() == {0, 1}
    with pytest.raises(ValueError, match="not complete"):
        store.load()
    # a stray temporary file from a killed writer is never read back
    (store.batch_dir / ".tmp-x.part").write_bytes(b"half")
    enc2 = ColourEncoder()
    _, stats = embed_dataset(folder, ids, enc2, tmp_path / "c", batch_size=3, progress=False)
    assert stats["computed"] == 2 and stats["reused"] == 2
    assert enc2.n_images == 5  # items 6..10 only (no broken one among them)
    E, got, _ = store.load()
    fresh, _ = embed_dataset(folder, ids, ColourEncoder(), tmp_path / "fresh", batch_size=3, progress=False)
    E2, got2, _ = fresh.load()
    np.testing.assert_array_equal(E, E2)
    assert got == got2


def test_cache_refuses_other_encoder_or_items_unless_overwrite(folder, tmp_path):
    ids = [str(i) for i in range(len(folder))]
    embed_dataset(folder, ids, ColourEncoder(), tmp_path / "c", batch_size=5, progress=False)
    other = ColourEncoder()
    other.id = "test:other"
    n = len(ids)
    with pytest.raises(ValueError, match=r"another run's embeddings \(encoder test:colour there, test:other in this"):
        embed_dataset(folder, ids, other, tmp_path / "c", batch_size=5, progress=False)
    # a newcomer is told which run the folder holds (its item count) and what to do, not a field name
    with pytest.raises(ValueError, match=rf"\(item list: {n} items of .* there, 5 items of .* in this run\); "
                                         r"use another directory or --overwrite"):
        embed_dataset(folder[:5], ids[:5], ColourEncoder(), tmp_path / "c", batch_size=5, progress=False)
    store, stats = embed_dataset(folder, ids, other, tmp_path / "c", batch_size=5, progress=False, overwrite=True)
    assert stats["computed"] == 3 and store.meta()["encoder_id"] == "test:other"
    (tmp_path / "c" / "meta.json").write_text("{broken")
    with pytest.raises(ValueError, match="damaged"):
        store.meta()
    with pytest.raises(FileNotFoundError):
        EmbeddingStore(tmp_path / "nothing").load()


# ------------------------------------------------------------------ 15.4 and 15.5
def test_batch_of_unreadable_images_is_recorded(tmp_path, folder):
    paths = folder[:4] + [str(tmp_path / f"gone{i}.jpg") for i in range(3)] + folder[5:7]
    ids = [str(i) for i in range(len(paths))]
    store, stats = embed_dataset(paths, ids, ColourEncoder(), tmp_path / "c", batch_size=3, progress=False)
    assert stats == {"computed": 3, "reused": 0, "failed": 3}
    E, got, _ = store.load()
    assert E.shape == (6, 6) and got == ["0", "1", "2", "3", "7", "8"]
    assert [f["position"] for f in store.failed()] == [4, 5, 6] and "no such file" in store.failed()[0]["reason"]
    assert embed_dataset(paths, ids, ColourEncoder(), tmp_path / "c", batch_size=3, progress=False)[1]["reused"] == 3


def _clean_and_damaged(folder, tmp_path, damage, batch=1):
    ids = [str(i) for i in range(len(folder))]
    clean, _ = embed_dataset(folder, ids, ColourEncoder(), tmp_path / "clean", batch_size=3, progress=False)
    store, _ = embed_dataset(folder, ids, ColourEncoder(), tmp_path / "c", batch_size=3, progress=False)
    damage(store.batch_path(batch), store)
    return ids, clean, store


def _truncate(path, store):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _wrong_positions(path, store):
    path.write_bytes(store.batch_path(0).read_bytes())  # a valid file, of another batch


def _nan(path, store):
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["embeddings"][0, 0] = np.nan
    np.savez(path, **arrays)


def _narrow(path, store):
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["embeddings"] = arrays["embeddings"][:, :4]
    np.savez(path, **arrays)


@pytest.mark.parametrize("damage, words", [(_truncate, "BadZipFile"), (_wrong_positions, "positions 3..5"),
                                           (_nan, "NaN"), (_narrow, "width 4")])
def test_damaged_batch_is_detected_and_recomputed(folder, tmp_path, damage, words):
    ids, clean, store = _clean_and_damaged(folder, tmp_path, damage)
    with pytest.warns(RuntimeWarning, match=rf"b00001\.npz' is damaged.*{words}"):
        assert store.finished_batches() == {0, 2, 3}
    with pytest.warns(RuntimeWarning, match="b00001"), pytest.raises(ValueError, match="1 damaged"):
        store.finalize()
    enc = ColourEncoder()
    with pytest.warns(RuntimeWarning, match="b00001"):
        _, stats = embed_dataset(folder, ids, enc, tmp_path / "c", batch_size=3, progress=False)
    assert stats["computed"] == 1 and stats["reused"] == 3 and enc.n_images == 2  # items 3, 5 (4 is broken)
    E, got, _ = store.load()
    E0, got0, _ = clean.load()
    np.testing.assert_array_equal(E, E0)
    assert got == got0 and store.failed() == clean.failed()


def test_damaged_merged_files_name_the_file_and_are_rebuilt(folder, tmp_path):
    from slics_core.errors import DamagedFileError

    ids = [str(i) for i in range(len(folder))]
    store, _ = embed_dataset(folder, ids, ColourEncoder(), tmp_path / "c", batch_size=3, progress=False,
                             labels={"Y": np.ones((11, 2), np.uint8)})
    E0 = store.load()[0]
    (tmp_path / "c" / "embeddings.npy").write_bytes(b"\x93NUMPY garbage")
    with pytest.raises(DamagedFileError, match=r"embeddings\.npy' is damaged.*run 'slics embed' again"):
        store.load()
    np.save(tmp_path / "c" / "embeddings.npy", np.ones((3, 6), np.float32))  # readable, but not one row per id
    with pytest.raises(DamagedFileError) as info:
        store.load()
    assert str(info.value) == (f"cache {str(tmp_path / 'c')!r} is damaged or not the expected file ((3, 6) embeddings "
                               "for 10 ids); run 'slics embed' again with the same arguments to rebuild it from the "
                               "batch files.")
    (tmp_path / "c" / "labels.npz").write_bytes(b"PK")
    with pytest.raises(DamagedFileError, match=r"labels\.npz' is damaged"):
        store.load_labels()
    enc = ColourEncoder()
    store, stats = embed_dataset(folder, ids, enc, tmp_path / "c", batch_size=3, progress=False,
                                 labels={"Y": np.ones((11, 2), np.uint8)})
    assert stats["computed"] == 0 and enc.calls == 0
    np.testing.assert_array_equal(store.load()[0], E0)
    assert store.load_labels()["Y"].shape == (10, 2)


def test_disk_full_keeps_finished_batches(folder, tmp_path, monkeypatch):
    import errno
    import os

    real, calls = os.replace, []

    def replace(src, dst):
        calls.append(dst)
        if str(dst).endswith("b00002.npz"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(src, dst)

    monkeypatch.setattr(os, "replace", replace)  # every atomic write renames through os.replace
    ids = [str(i) for i in range(len(folder))]
    with pytest.raises(OSError, match=r"no space left on the disk holding '.*b00002\.npz'.*kept") as info:
        embed_dataset(folder, ids, ColourEncoder(), tmp_path / "c", batch_size=3, progress=False)
    assert info.value.errno == errno.ENOSPC
    store = EmbeddingStore(tmp_path / "c")
    assert store.finished_batches() == {0, 1} and not list(store.batch_dir.glob(".tmp-*"))
    monkeypatch.undo()
    enc = ColourEncoder()
    _, stats = embed_dataset(folder, ids, enc, tmp_path / "c", batch_size=3, progress=False)
    assert stats == {"computed": 2, "reused": 2, "failed": 1}


def test_read_only_cache_and_cache_that_is_a_file(folder, tmp_path, monkeypatch):
    import errno
    from pathlib import Path

    from slics_core.errors import FileSystemError

    ids = [str(i) for i in range(len(folder))]
    (tmp_path / "f").write_text("x")
    with pytest.raises(FileSystemError, match="is a file, not a folder") as info:
        embed_dataset(folder, ids, ColourEncoder(), tmp_path / "f", progress=False)
    assert info.value.errno == errno.ENOTDIR
    with pytest.raises(FileSystemError, match="is a file, not a folder"):
        EmbeddingStore(tmp_path / "f").load()

    def mkdir(self, *a, **k):
        raise OSError(errno.EROFS, "Read-only file system", str(self))

    monkeypatch.setattr(Path, "mkdir", mkdir)
    with pytest.raises(FileSystemError, match=r"'.*ro' is on a read-only file system; choose a writable"):
        embed_dataset(folder, ids, ColourEncoder(), tmp_path / "ro", progress=False)
