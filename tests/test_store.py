"""Embedding cache: atomic batches, resumability, failures reported, metadata checks."""

import numpy as np
import pytest
from PIL import Image

from slics_core.store import EmbeddingStore, embed_dataset


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
    with pytest.raises(ValueError, match="encoder_id"):
        embed_dataset(folder, ids, other, tmp_path / "c", batch_size=5, progress=False)
    with pytest.raises(ValueError, match="ids"):
        embed_dataset(folder[:5], ids[:5], ColourEncoder(), tmp_path / "c", batch_size=5, progress=False)
    store, stats = embed_dataset(folder, ids, other, tmp_path / "c", batch_size=5, progress=False, overwrite=True)
    assert stats["computed"] == 3 and store.meta()["encoder_id"] == "test:other"
    (tmp_path / "c" / "meta.json").write_text("{broken")
    with pytest.raises(ValueError, match="damaged"):
        store.meta()
    with pytest.raises(FileNotFoundError):
        EmbeddingStore(tmp_path / "nothing").load()
