"""The preview table: precomputed emoji-small embeddings that spare a cold start the torch import."""
import hashlib

import numpy as np
import pytest
from PIL import Image

from slics_core.data import vocabulary_embeddings
from slics_core.emoji import preview_table as pt
from slics_core.emoji.world import (
    EmojiWorldConfig,
    emoji_vocabulary,
    render_emoji_preview,
)
from slics_core.explorer import emoji_build as wsmod


class CountingEncoder:
    """A stand-in real encoder: images -> mean pixel per channel padded to 4, texts -> their length."""

    id, dim, has_text = "fake", 4, True

    def __init__(self):
        self.calls = []

    def encode_images(self, images, batch_size=32):
        self.calls.append(("images", len(images), batch_size))
        return np.stack([np.r_[np.asarray(im, float).mean(axis=(0, 1)), 1.0] for im in images]).astype(np.float32)

    def encode_texts(self, texts, batch_size=256):
        self.calls.append(("texts", len(texts), batch_size))
        return np.stack([[len(t), 0, 0, 1.0] for t in texts]).astype(np.float32)


def _images(n, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, size=(8, 8, 3), dtype=np.uint8) for _ in range(n)]


def test_keys_follow_content():
    a = _images(1)[0]
    b = a.copy()
    assert pt.image_key(a) == pt.image_key(b.copy())
    b[0, 0, 0] ^= 1
    assert pt.image_key(a) != pt.image_key(b)
    assert pt.image_key(a) != pt.image_key(a.reshape(8, 24))  # same bytes, other shape
    assert pt.text_key("dog") == pt.text_key("dog") != pt.text_key("dogs")
    assert pt.image_key(a).startswith("i:") and pt.text_key("x").startswith("t:")


def test_table_answers_hits_and_computes_misses():
    real = CountingEncoder()
    imgs = _images(5)
    known = {pt.image_key(im): np.full(4, i, np.float32) for i, im in enumerate(imgs[:3])}
    known[pt.text_key("cat")] = np.array([9, 9, 9, 9], np.float32)
    loads = []
    enc = pt.TableEncoder(dict(known), lambda: loads.append(1) or real)
    # a batch wholly in the table: the table's rows, no real encoder loaded
    np.testing.assert_array_equal(enc.encode_images(imgs[:3]), np.repeat(np.arange(3.0), 4).reshape(3, 4))
    np.testing.assert_array_equal(enc.encode_texts(["cat"]), [[9, 9, 9, 9]])
    assert loads == [] and enc.hits == 4 and enc.misses == 0 and enc.dim == 4
    # one unknown item: the whole batch is computed by the real encoder (loaded once), with the batch size
    out = enc.encode_images(imgs[1:5], batch_size=7)
    np.testing.assert_allclose(out, CountingEncoder().encode_images(imgs[1:5]))
    enc.encode_texts(["cat", "horse"])
    assert loads == [1] and enc.misses == 6 and real.calls == [("images", 4, 7), ("texts", 2, 256)]
    assert pt.image_key(imgs[4]) not in enc.table  # not recording


def test_recording_builds_a_table():
    real = CountingEncoder()
    rec = pt.TableEncoder({}, lambda: real, record=True)
    imgs = _images(3, seed=1)
    first = rec.encode_images(imgs)
    rec.encode_texts(["a", "bb"])
    assert set(rec.table) == {pt.image_key(i) for i in imgs} | {pt.text_key("a"), pt.text_key("bb")}
    again = pt.TableEncoder(rec.table, lambda: pytest.fail("the table should answer"))
    np.testing.assert_array_equal(again.encode_images(imgs), first)


def test_load_table_checks_weights_and_damage(tmp_path):
    keys = np.asarray([pt.text_key("a"), pt.text_key("b")])
    vecs = np.eye(2, 4, dtype=np.float32)
    good = tmp_path / "good.npz"
    np.savez(good, keys=keys, vectors=vecs, weights_digest=np.asarray(pt.weights_digest("small")))
    table = pt.load_table(good)
    assert set(table) == set(keys.tolist())
    np.testing.assert_array_equal(table[pt.text_key("b")], vecs[1])
    other = tmp_path / "other.npz"
    np.savez(other, keys=keys, vectors=vecs, weights_digest=np.asarray("0123456789abcdef"))
    assert pt.load_table(other) is None  # written for other weights
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip")
    assert pt.load_table(bad) is None and pt.load_table(tmp_path / "missing.npz") is None
    assert pt.preview_encoder(path=bad) is None
    short = tmp_path / "short.npz"
    np.savez(short, keys=keys[:1], vectors=vecs, weights_digest=np.asarray(pt.weights_digest("small")))
    assert pt.load_table(short) is None


def test_weights_digest_is_of_the_contents():
    from slics_core.emoji.models import WEIGHTS_NAME, model_dir

    w = model_dir("small") / WEIGHTS_NAME
    assert pt.weights_digest("small") == hashlib.sha256(w.read_bytes()).hexdigest()[:16]


def test_shipped_table_matches_the_encoder():
    """The shipped table answers everything the app's preview asks for, with what emoji-small computes here
    (fails when the encoder, the scenes or the vocabulary changed without rewriting the table)."""
    enc = pt.preview_encoder()
    assert enc is not None, "assets/emoji/preview_table.npz is missing or for other weights: " \
                            "run python -m slics_core.emoji.preview_table"
    data, _, _ = render_emoji_preview(EmojiWorldConfig(), encoder=enc)
    words = vocabulary_embeddings(enc, emoji_vocabulary())
    assert enc.misses == 0 and enc.hits == len(data.raw) + len(data.concept_text) + len(words)
    real = enc.real()
    np.testing.assert_allclose(data.raw, real.encode_images(
        [Image.fromarray(a) for a in data.extras["images"]], batch_size=256), atol=2e-5)
    np.testing.assert_allclose(words, vocabulary_embeddings(real, emoji_vocabulary()), atol=2e-5)


def test_staged_build_opens_the_preview_before_loading_the_encoder(tmp_path, monkeypatch):
    """With the shipped table the preview is published before emoji-small is loaded; the whole world is then
    embedded by the real encoder (its first rows re-rendered and re-embedded, not copied from the table)."""
    events = []
    real_load = wsmod.world_encoder

    def load(*a, **k):
        events.append("load encoder")
        return real_load(*a, **k)

    monkeypatch.setattr(wsmod, "world_encoder", load)
    published = {}

    def publish(kind, ws):
        events.append(kind)
        published[kind] = ws

    cfg = EmojiWorldConfig(n_train=260, n_val=60, n_query=80, n_pool=200, d0_values=(2,), n_iter=1)
    stages = []
    progress = type("P", (), {"phase": lambda self, n: None,
                              "__call__": lambda self, s, d=0, t=1: stages.append((s, t))})()
    wsmod._staged_build(cfg, tmp_path / "ws", 256, progress, publish)
    assert events == ["preview", "load encoder", "final"]
    renders = {t for s, t in stages if s == "render scenes"}
    assert renders == {256, cfg.n_total}  # the preview's scenes, then the whole world from scene 0 again
    pv, ws = published["preview"], published["final"]
    np.testing.assert_array_equal(pv.images, ws.images[:256])
    np.testing.assert_allclose(pv.raw, ws.raw[:256], atol=2e-5)
