"""`embed_dataset`'s image pipeline: parallel decoding, batch sizes, draft decoding, resuming.

Real encoder classes run on tiny randomly initialised models (no weights are
downloaded); the fake encoders below count calls and batch shapes.
"""
import io
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from fixtures_models import register_tiny_open_clip
from PIL import Image

from slics_core.embed import default_workers, embed_dataset
from slics_core.encoders import DINOv2Encoder, OpenCLIPEncoder, TiTokEncoder
from slics_core.images import ImageLoadError, load_image
from slics_core.store import EmbeddingStore

ROOT = Path(__file__).resolve().parents[1]
BROKEN = (4, 8, 9, 10, 11)  # 8..11 is a whole batch of 4 with no readable image


def _smooth(rng, w, h):
    """A photo-like image: smooth colour fields plus a little noise."""
    small = rng.integers(0, 256, (6, 8, 3), dtype=np.uint8)
    base = np.asarray(Image.fromarray(small).resize((w, h), Image.BICUBIC), dtype=np.float64)
    return Image.fromarray(np.clip(base + rng.normal(0, 6, base.shape), 0, 255).astype(np.uint8))


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """19 images: JPEGs of several sizes, a PNG, a grey JPEG, unreadable files at BROKEN."""
    d = tmp_path_factory.mktemp("imgs")
    rng = np.random.default_rng(0)
    paths = []
    for i in range(19):
        p = d / f"im{i:02d}.jpg"
        if i in BROKEN:
            p.write_bytes(b"not an image" if i % 2 else b"")
        elif i == 5:
            _smooth(rng, 90, 70).save(d / "im05.png")
            p = d / "im05.png"
        elif i == 6:
            _smooth(rng, 120, 100).convert("L").save(p, quality=90)
        else:
            _smooth(rng, 160 + 8 * i, 120).save(p, quality=90)
        paths.append(str(p))
    return paths


@pytest.fixture(scope="module")
def tiny_clip(tmp_path_factory):
    name = register_tiny_open_clip(tmp_path_factory.mktemp("oc"))
    return OpenCLIPEncoder.random(name, seed=0, device="cpu")


def _ids(paths):
    return [f"id{i}" for i in range(len(paths))]


class CountingTensorEncoder:
    """Tensor-level fake: records the shape of every batch given to ``encode_tensors``."""

    id = "test:tensor-colour"
    dim = 6
    has_text = False
    draft_size = None

    def __init__(self, log=None):
        self.shapes = []
        self.log = log

    def image_transform(self):
        return _Resize8(self.log)

    def encode_tensors(self, x):
        self.shapes.append(tuple(x.shape))
        return torch.cat([x.mean((2, 3)), x.std((2, 3))], 1).numpy() + 0.01


class _Resize8:
    def __init__(self, log=None):
        self.log = log

    def __call__(self, im):
        if self.log is not None:
            with open(self.log, "a") as fh:
                fh.write(f"{os.getpid()}\n")
        return torch.from_numpy(np.asarray(im.convert("RGB").resize((8, 8)), np.float32) / 255).permute(2, 0, 1)


class CountingImageEncoder:
    """``encode_images``-only fake (like a user's module:factory encoder)."""

    id = "test:image-colour"
    dim = 6
    has_text = False

    def __init__(self):
        self.calls = []

    def encode_images(self, images, batch_size=32):
        self.calls.append((len(images), batch_size))
        x = torch.stack([_Resize8()(im) for im in images])
        return torch.cat([x.mean((2, 3)), x.std((2, 3))], 1).numpy() + 0.01


class _FakeTiTok(torch.nn.Module):
    """TiTok's interface: encoder(pixel_values=, latent_tokens=) -> (B, 12, 1, 32)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.latent_tokens = torch.nn.Parameter(torch.randn(32, 12))
        self.conv = torch.nn.Conv2d(3, 12, 3)

    def encoder(self, pixel_values, latent_tokens):
        pooled = self.conv(pixel_values).mean(dim=(2, 3))  # (B, 12)
        return (pooled[:, None, :] + latent_tokens[None]).permute(0, 2, 1)[:, :, None, :]


class NoBatchSizeEncoder(CountingImageEncoder):
    def encode_images(self, images):  # no batch_size parameter: must still be called
        return super().encode_images(images)


# ------------------------------------------------------------------ parallel == serial
@pytest.mark.parametrize("draft", [True, False])
def test_parallel_path_equals_serial_path(folder, tiny_clip, tmp_path, draft):
    ids = _ids(folder)
    runs = {}
    for w in (0, 2):
        store, stats = embed_dataset(folder, ids, tiny_clip, tmp_path / f"w{w}", batch_size=4, workers=w,
                                     draft=draft, progress=False)
        runs[w] = store.load() + (store.failed(), stats)
    (E0, ids0, meta0, f0, s0), (E2, ids2, meta2, f2, s2) = runs[0], runs[2]
    np.testing.assert_array_equal(E0, E2)
    assert ids0 == ids2 == [i for k, i in enumerate(ids) if k not in BROKEN]
    assert [f["position"] for f in f0] == [f["position"] for f in f2] == list(BROKEN)
    assert [f["reason"] for f in f0] == [f["reason"] for f in f2]
    assert s0 == s2 == {"computed": 5, "reused": 0, "failed": len(BROKEN)}
    assert meta0["decode"] == {"draft_size": 32 if draft else None} == meta2["decode"]
    # an independent computation: decode each file, run the encoder's own encode_images
    ok = [p for k, p in enumerate(folder) if k not in BROKEN]
    ref = tiny_clip.encode_images([load_image(p, draft=32 if draft else None) for p in ok], batch_size=1)
    np.testing.assert_allclose(E2, ref, rtol=1e-5, atol=1e-6)


def test_tensor_path_equals_the_encode_images_path(folder, tiny_clip, tmp_path):
    """Without draft decoding, an encoder seen only through encode_images gives the same cache."""

    class ImagesOnly:
        id, dim, has_text = tiny_clip.id, tiny_clip.dim, False

        def encode_images(self, images, batch_size=32):
            return tiny_clip.encode_images(images, batch_size=batch_size)

    ids = _ids(folder)
    a, _ = embed_dataset(folder, ids, tiny_clip, tmp_path / "a", batch_size=4, workers=2, draft=False,
                         progress=False)
    b, _ = embed_dataset(folder, ids, ImagesOnly(), tmp_path / "b", batch_size=4, workers=2, progress=False)
    np.testing.assert_array_equal(a.load()[0], b.load()[0])
    assert a.failed() == b.failed()


@pytest.mark.parametrize("kind", ["dinov2", "titok"])
def test_other_encoders_through_workers(folder, tmp_path, kind):
    from transformers import Dinov2Config

    if kind == "dinov2":
        enc = DINOv2Encoder.random(Dinov2Config(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                                mlp_ratio=2, image_size=28, patch_size=14), device="cpu")
        assert enc.draft_size == 28
    else:
        from slics_core import preprocessing

        if not hasattr(preprocessing, "normalize_tokens"):
            pytest.skip("slics_core.preprocessing.normalize_tokens not written yet")
        enc = TiTokEncoder(_FakeTiTok(), image_size=16, device="cpu")
        assert enc.draft_size == 16
    store, _ = embed_dataset(folder, _ids(folder), enc, tmp_path / kind, batch_size=3, workers=2, progress=False)
    E, _, meta = store.load()
    ok = [p for k, p in enumerate(folder) if k not in BROKEN]
    ref = enc.encode_images([load_image(p, draft=meta["decode"]["draft_size"]) for p in ok])
    np.testing.assert_allclose(E, ref, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------ batch size
@pytest.mark.parametrize("workers", [0, 2])
def test_batch_size_is_the_encoder_batch(folder, tmp_path, workers):
    enc = CountingTensorEncoder(log=tmp_path / "pids.txt")
    embed_dataset(folder, _ids(folder), enc, tmp_path / "t", batch_size=4, workers=workers, progress=False)
    # batches 0..4 = items 0-3, 4-7 (item 4 broken), 8-11 (all broken: no call), 12-15, 16-18
    assert enc.shapes == [(4, 3, 8, 8), (3, 3, 8, 8), (4, 3, 8, 8), (3, 3, 8, 8)]
    pids = set((tmp_path / "pids.txt").read_text().split())
    assert (pids == {str(os.getpid())}) == (workers == 0)  # preprocessing ran in the worker processes
    assert len(pids) <= max(workers, 1)

    img = CountingImageEncoder()
    embed_dataset(folder, _ids(folder), img, tmp_path / "i", batch_size=7, workers=workers, progress=False)
    # batches: 0-6 (item 4 broken), 7-13 (8..11 broken), 14-18
    assert img.calls == [(6, 7), (3, 7), (5, 7)]

    plain = NoBatchSizeEncoder()
    store, _ = embed_dataset(folder, _ids(folder), plain, tmp_path / "n", batch_size=7, progress=False)
    assert plain.calls == [(6, 32), (3, 32), (5, 32)] and store.load()[0].shape == (14, 6)


def test_open_clip_encode_images_honours_batch_size(tiny_clip, monkeypatch):
    seen = []
    forward = tiny_clip.model.encode_image
    monkeypatch.setattr(tiny_clip.model, "encode_image", lambda x: seen.append(x.shape[0]) or forward(x))
    rng = np.random.default_rng(1)
    images = [_smooth(rng, 50, 40) for _ in range(7)]
    tiny_clip.encode_images(images, batch_size=3)
    assert seen == [3, 3, 1]


def test_bad_worker_and_draft_arguments(folder, tmp_path):
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="workers"):
            embed_dataset(folder, _ids(folder), CountingTensorEncoder(), tmp_path / "x", workers=bad)
    with pytest.raises(ValueError, match="draft"):
        embed_dataset(folder, _ids(folder), CountingTensorEncoder(), tmp_path / "x", draft="yes")
    n = default_workers()
    assert isinstance(n, int) and 0 <= n <= 16 and n <= max(len(os.sched_getaffinity(0)) - 1, 0)


# ------------------------------------------------------------------ 15.4: a batch with no readable image
@pytest.mark.parametrize("encoder", [CountingTensorEncoder, CountingImageEncoder])
def test_a_batch_without_readable_images_completes(folder, tmp_path, encoder):
    ids = _ids(folder)
    store, stats = embed_dataset(folder, ids, encoder(), tmp_path / "c", batch_size=4, workers=1, progress=False)
    E, got, meta = store.load()
    assert meta["complete"] and E.shape == (19 - len(BROKEN), 6)
    assert [f["id"] for f in store.failed()] == [ids[k] for k in BROKEN]
    with np.load(store.batch_path(2)) as z:
        assert z["positions"].size == 0 and z["embeddings"].shape == (0, 6)
        assert list(z["failed_positions"]) == [8, 9, 10, 11]
    _, again = embed_dataset(folder, ids, encoder(), tmp_path / "c", batch_size=4, workers=1, progress=False)
    assert again == {"computed": 0, "reused": 5, "failed": len(BROKEN)}


def test_all_images_unreadable(tmp_path):
    paths = [str(tmp_path / f"missing{i}.jpg") for i in range(3)]
    store, stats = embed_dataset(paths, ["a", "b", "c"], CountingTensorEncoder(), tmp_path / "c", batch_size=2,
                                 progress=False)
    E, ids, meta = store.load()
    assert E.shape == (0, 6) and ids == [] and stats["failed"] == 3 and meta["n_embedded"] == 0


def test_write_batch_accepts_empty_embeddings(tmp_path):
    store = EmbeddingStore(tmp_path / "c")
    store.begin(["a", "b", "c"], "enc", 5, 2)
    store.write_batch(0, [], np.zeros((0, 5)), [0, 1], ["x", "y"])  # was: cannot reshape array of size 0
    store.write_batch(1, [2], np.ones((1, 5)))
    store.finalize()
    E, ids, _ = store.load()
    assert E.shape == (1, 5) and ids == ["c"] and [f["id"] for f in store.failed()] == ["a", "b"]
    with pytest.raises(ValueError, match="2 positions"):
        store.write_batch(1, [2, 3], np.ones((1, 5)))


# ------------------------------------------------------------------ draft decoding
def test_load_image_draft_decodes_jpegs_at_reduced_scale(tmp_path):
    rng = np.random.default_rng(3)
    im = _smooth(rng, 640, 480)
    im.save(tmp_path / "a.jpg", quality=92)
    im.save(tmp_path / "a.png")
    assert load_image(tmp_path / "a.jpg").size == (640, 480)
    assert load_image(tmp_path / "a.jpg", draft=224).size == (320, 240)  # both sides stay >= 224
    assert load_image(tmp_path / "a.jpg", draft=100).size == (160, 120)
    assert load_image(tmp_path / "a.jpg", draft=300).size == (640, 480)  # 1/2 would be below 300
    assert load_image(tmp_path / "a.png", draft=100).size == (640, 480)  # not a JPEG: full size
    full = np.asarray(load_image(tmp_path / "a.jpg").resize((320, 240), Image.BOX), np.float64)
    half = np.asarray(load_image(tmp_path / "a.jpg", draft=224), np.float64)
    assert np.abs(full - half).mean() < 2.0  # the same picture, at half scale


def test_draft_changes_embeddings_little(tmp_path, tiny_clip):
    """Draft decoding moves an embedding much less than a different image does."""
    rng = np.random.default_rng(4)
    paths = []
    for i in range(6):
        p = tmp_path / f"{i}.jpg"
        _smooth(rng, 256, 192).save(p, quality=90)  # 8x / 6x the tiny model's 32 pixels: decoded at 1/4
        paths.append(p)
    full = tiny_clip.encode_images([load_image(p) for p in paths])
    draft = tiny_clip.encode_images([load_image(p, draft=tiny_clip.draft_size) for p in paths])
    assert not np.array_equal(full, draft)
    moved = np.linalg.norm(full - draft, axis=1)
    apart = np.linalg.norm(full - np.roll(full, 1, axis=0), axis=1)  # distance to another image's embedding
    assert moved.max() < 0.05 * apart.min()  # measured: about 0.012 here


def test_cache_is_resumed_the_way_it_was_begun(folder, tiny_clip, tmp_path):
    ids = _ids(folder)
    cache = tmp_path / "c"
    embed_dataset(folder, ids, tiny_clip, cache, batch_size=4, draft=False, progress=False)
    with pytest.raises(ValueError, match="decode"):
        embed_dataset(folder, ids, tiny_clip, cache, batch_size=4, draft=True, progress=False)
    _, stats = embed_dataset(folder, ids, tiny_clip, cache, batch_size=4, progress=False)  # draft=None: as begun
    assert stats["reused"] == 5 and EmbeddingStore(cache).meta()["decode"] == {"draft_size": None}


# ------------------------------------------------------------------ SIGKILL and resume
KILLER = """
import os, signal, sys
sys.path[:0] = [{root!r}, {tests!r}]
from fixtures_models import register_tiny_open_clip
from slics_core.encoders import OpenCLIPEncoder
from slics_core.embed import embed_dataset
import json

enc = OpenCLIPEncoder.random(register_tiny_open_clip({tmp!r}), seed=0, device="cpu")
forward = enc.encode_tensors
calls = []

def encode_tensors(x):
    if len(calls) == 2:
        os.kill(os.getpid(), signal.SIGKILL)  # no clean-up of any kind
    calls.append(1)
    return forward(x)

enc.encode_tensors = encode_tensors
paths = json.loads(open({paths!r}).read())
embed_dataset(paths, [str(i) for i in range(len(paths))], enc, {cache!r}, batch_size=4, workers=2,
              progress=False)
"""


def test_sigkill_mid_embed_resumes_bit_identically(folder, tiny_clip, tmp_path):
    import json

    (tmp_path / "paths.json").write_text(json.dumps(folder))
    script = tmp_path / "killer.py"
    script.write_text(KILLER.format(root=str(ROOT), tests=str(ROOT / "tests"), tmp=str(tmp_path),
                                    paths=str(tmp_path / "paths.json"), cache=str(tmp_path / "c")))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    store = EmbeddingStore(tmp_path / "c")
    # killed in the third encoder call (batch 3: batch 2 has no readable image and needs none)
    assert store.finished_batches() == {0, 1, 2} and not store.meta()["complete"]
    ids = [str(i) for i in range(len(folder))]
    _, stats = embed_dataset(folder, ids, tiny_clip, tmp_path / "c", batch_size=4, workers=2, progress=False)
    assert stats == {"computed": 2, "reused": 3, "failed": len(BROKEN)}
    clean, _ = embed_dataset(folder, ids, tiny_clip, tmp_path / "clean", batch_size=4, workers=0, progress=False)
    E, got, _ = store.load()
    E2, got2, _ = clean.load()
    np.testing.assert_array_equal(E, E2)
    assert got == got2 and store.failed() == clean.failed()


class _BrokenTransform(_Resize8):
    """A transform with a bug (not an unreadable image): it raises in the worker on the second batch's images."""

    def __call__(self, im):
        if im.size[0] > 160 + 8 * 4:
            raise RuntimeError("a bug in the transform")
        return super().__call__(im)


class _BuggyEncoder(CountingTensorEncoder):
    def image_transform(self):
        return _BrokenTransform()


def test_an_error_in_a_worker_stops_the_workers_at_once(folder, tmp_path):
    """A worker's error reaches the caller, and no DataLoader worker outlives it (no garbage collection needed:
    the loader's frames in the traceback do not keep the iterator alive)."""
    import gc
    import multiprocessing

    gc.disable()
    try:
        with pytest.raises(RuntimeError, match="a bug in the transform"):
            embed_dataset(folder, _ids(folder), _BuggyEncoder(), tmp_path / "c", batch_size=4, workers=2,
                          progress=False)
        assert multiprocessing.active_children() == []
    finally:
        gc.enable()


def test_interruption_stops_workers_and_keeps_finished_batches(folder, tmp_path):
    class Interrupted(CountingTensorEncoder):
        def encode_tensors(self, x):
            if len(self.shapes) == 1:
                raise KeyboardInterrupt
            return super().encode_tensors(x)

    import gc
    import multiprocessing

    gc.disable()  # the workers stop at once, not when a collection finds the iterator
    try:
        with pytest.raises(KeyboardInterrupt):
            embed_dataset(folder, _ids(folder), Interrupted(), tmp_path / "c", batch_size=4, workers=2,
                          progress=False)
    finally:
        gc.enable()

    assert multiprocessing.active_children() == []  # the DataLoader workers were shut down
    assert EmbeddingStore(tmp_path / "c").finished_batches() == {0}
    enc = CountingTensorEncoder()
    _, stats = embed_dataset(folder, _ids(folder), enc, tmp_path / "c", batch_size=4, workers=2, progress=False)
    assert stats["computed"] == 4 and stats["reused"] == 1 and len(enc.shapes) == 3


def test_image_transforms_pickle_without_the_model(tiny_clip, folder):
    """Worker processes started by 'spawn' (macOS, Windows) receive the transform pickled."""
    import pickle

    from transformers import Dinov2Config

    dino = DINOv2Encoder.random(Dinov2Config(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                             mlp_ratio=2, image_size=28, patch_size=14), device="cpu")
    titok = TiTokEncoder(_FakeTiTok(), image_size=16, device="cpu")
    image = load_image(folder[0])
    for enc in (tiny_clip, dino, titok):
        transform = enc.image_transform()
        blob = pickle.dumps(transform)
        assert b"_rebuild_parameter" not in blob and len(blob) < 50_000  # no model weights shipped
        x = pickle.loads(blob)(image)
        torch.testing.assert_close(x, transform(image), rtol=0, atol=0)
        np.testing.assert_allclose(enc.encode_tensors(x[None]), enc.encode_images([image]), rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------ uint8 across the process boundary
def test_uint8_route_gives_the_float32_routes_embeddings(folder, tiny_clip, tmp_path):
    """Workers hand over uint8 pixels (a quarter of the bytes); scaling and normalisation on the device give the
    float32 route's values: the same torch operations on the same numbers, so on the CPU in float32 the caches are
    equal to rounding (atol 1e-6; measured: identical)."""
    from slics_core.embed import image_route

    transform, _, transfer = image_route(tiny_clip)
    assert transfer == "uint8"
    x8 = transform(load_image(folder[0]))
    x32 = tiny_clip.image_transform()(load_image(folder[0]))
    assert x8.dtype == torch.uint8 and x8.shape == x32.shape and x8.element_size() * 4 == x32.element_size()
    runs = {}
    for t in ("uint8", "float32"):
        store, _ = embed_dataset(folder, _ids(folder), tiny_clip, tmp_path / t, batch_size=4, workers=2, transfer=t,
                                 progress=False)
        runs[t] = store.load()[:2]
    np.testing.assert_allclose(runs["uint8"][0], runs["float32"][0], rtol=0, atol=1e-6)
    assert runs["uint8"][1] == runs["float32"][1]
    with pytest.raises(ValueError, match="transfer"):
        embed_dataset(folder, _ids(folder), tiny_clip, tmp_path / "x", transfer="float16")
    with pytest.raises(ValueError, match="uint8"):
        embed_dataset(folder, _ids(folder), CountingImageEncoder(), tmp_path / "y", transfer="uint8")


# ------------------------------------------------------------------ the jpeg route: bytes across, decoded on the device
def _bogus_scan(jpeg_bytes):
    """A JPEG with an intact header and end marker whose scan header is broken: no decoder reads it."""
    data = bytearray(jpeg_bytes)
    sos = data.find(b"\xff\xda")
    data[sos + 2:sos + 4] = b"\x00\x01"
    return bytes(data)


@pytest.fixture(scope="module")
def jpeg_folder(tmp_path_factory):
    """Landscape and portrait JPEGs, a grey one, an EXIF-rotated one, a CMYK one, a PNG, damaged files."""
    d = tmp_path_factory.mktemp("jpegs")
    rng = np.random.default_rng(7)
    made = {}
    made["land0"] = _smooth(rng, 640, 480)
    made["port1"] = _smooth(rng, 480, 640)
    made["land2"] = _smooth(rng, 320, 200)
    for name, im in made.items():
        im.save(d / f"{name}.jpg", quality=90)
    _smooth(rng, 300, 240).convert("L").save(d / "grey3.jpg", quality=90)
    exif = Image.Exif()
    exif[0x0112] = 6  # stored sideways: load_image turns it upright
    _smooth(rng, 400, 240).save(d / "rot4.jpg", quality=90, exif=exif)
    _smooth(rng, 200, 260).convert("CMYK").save(d / "cmyk5.jpg", quality=90)
    _smooth(rng, 150, 100).save(d / "png6.png")
    (d / "scan7.jpg").write_bytes(_bogus_scan((d / "land0.jpg").read_bytes()))
    (d / "junk8.jpg").write_bytes(b"not an image")
    (d / "cut9.jpg").write_bytes((d / "port1.jpg").read_bytes()[:5000])
    _smooth(rng, 512, 384).save(d / "land10.jpg", quality=85)
    names = ["land0.jpg", "port1.jpg", "land2.jpg", "grey3.jpg", "rot4.jpg", "cmyk5.jpg", "png6.png", "scan7.jpg",
             "junk8.jpg", "cut9.jpg", "land10.jpg"]
    return [str(d / n) for n in names]


JPEG_BYTES = (0, 1, 2, 3, 10)  # handed over as file bytes; rot4, cmyk5, png6 fall back; 7, 8, 9 fail
JPEG_FAILED = (7, 8, 9)


def test_jpeg_route_workers_hand_over_file_bytes_or_fall_back(jpeg_folder, tiny_clip, tmp_path):
    from slics_core.embed import image_route

    reader, _, transfer = image_route(tiny_clip, "jpeg")
    assert transfer == "jpeg"
    uint8 = image_route(tiny_clip, "uint8")[0]
    for k, path in enumerate(jpeg_folder):
        if k in JPEG_FAILED[1:]:  # junk and cut files: load_image's own report
            with pytest.raises(ImageLoadError):
                reader.read(path, load_image)
            continue
        x = reader.read(path, load_image)
        if k in JPEG_BYTES or k == 7:  # scan7's header is intact: the device finds out
            assert x.dtype == torch.uint8 and x.ndim == 1
            assert x.numpy().tobytes() == Path(path).read_bytes()
        else:
            torch.testing.assert_close(x, uint8(load_image(path)), rtol=0, atol=0)
    # the limits: pixels from the header, bytes before reading a file whole (then load_image judges the file)
    land2 = jpeg_folder[2]  # 320 x 200 = 64 000 pixels, fewer than 64 000 bytes
    assert Path(land2).stat().st_size < 64_000
    assert type(reader)(uint8, max_pixels=64_000).read(land2, load_image).ndim == 1
    assert type(reader)(uint8, max_pixels=63_999).read(land2, load_image).ndim == 3
    small = tmp_path / "small-with-big-profile.jpeg"
    _smooth(np.random.default_rng(8), 16, 16).save(small, quality=90, icc_profile=b"\0" * 5000)  # 256 pixels
    assert type(reader)(uint8, max_pixels=256).read(small, load_image).ndim == 3  # 5 000+ bytes > 3 x 256
    assert type(reader)(uint8, max_pixels=2_000).read(small, load_image).ndim == 1


def test_jpeg_route_agrees_with_the_uint8_route(jpeg_folder, tiny_clip, tmp_path):
    """Decoding and resizing on the device (here the CPU) against PIL in the workers: the same decoder (libjpeg)
    and the same resize (bicubic, antialiased) in two implementations, pixels within 1 of 255. Measured cosine per
    row: min 0.9999993 (the tiny model at 32 pixels); the bound sits just below it. Fallback rows are the uint8
    route's own, equal to rounding."""
    from slics_core.embed import TRANSFERS, image_route

    assert "jpeg" in TRANSFERS
    ids = [Path(p).stem for p in jpeg_folder]
    runs = {}
    for t, w in (("uint8", 0), ("jpeg", 0), ("jpeg", 2)):
        store, stats = embed_dataset(jpeg_folder, ids, tiny_clip, tmp_path / f"{t}{w}", batch_size=3, workers=w,
                                     transfer=t, draft=False, progress=False)
        runs[t, w] = store.load() + (store.failed(), stats)
    E8, ids8, meta8, f8, s8 = runs["uint8", 0]
    Ej, idsj, metaj, fj, sj = runs["jpeg", 2]
    np.testing.assert_array_equal(runs["jpeg", 0][0], Ej)  # workers change the speed, never the embeddings
    assert ids8 == idsj == [ids[k] for k in range(len(ids)) if k not in JPEG_FAILED]
    assert f8 == fj and [f["position"] for f in fj] == list(JPEG_FAILED)
    assert s8 == sj == {"computed": 4, "reused": 0, "failed": 3}
    assert meta8["decode"] == {"draft_size": None} and metaj["decode"] == {"draft_size": None, "device_decode": True}
    cos = np.sum(E8 * Ej, 1) / np.linalg.norm(E8, axis=1) / np.linalg.norm(Ej, axis=1)
    assert cos.min() >= 0.9999990, cos
    kept = [k for k in range(len(ids)) if k not in JPEG_FAILED]
    fell_back = [kept.index(k) for k in (4, 5, 6)]
    np.testing.assert_allclose(Ej[fell_back], E8[fell_back], rtol=0, atol=1e-6)
    assert not np.allclose(Ej, E8, rtol=0, atol=1e-6)  # the device route did run on the JPEGs
    # an independent computation of one plain JPEG: torchvision decode + the encoder's torchvision steps
    from torchvision.io import ImageReadMode, decode_jpeg

    x = decode_jpeg(torch.frombuffer(bytearray(Path(jpeg_folder[1]).read_bytes()), dtype=torch.uint8),
                    mode=ImageReadMode.RGB)
    for step in image_route(tiny_clip, "uint8")[0].steps[:2]:  # Resize, CenterCrop
        x = step(x)
    np.testing.assert_allclose(Ej[1], tiny_clip.encode_tensors(x[None])[0], rtol=1e-5, atol=1e-6)


def test_pixel_chunks_and_jpeg_pixels():
    from slics_core.embed import jpeg_pixels, pixel_chunks

    assert pixel_chunks([5, 5, 5, 20, 1, 1], 10) == [[0, 1], [2], [3], [4, 5]]
    assert pixel_chunks([], 10) == []
    for sizes, budget in (([3, 9, 4, 4, 4, 12, 1], 12), ([1] * 7, 3)):
        chunks = pixel_chunks(sizes, budget)
        assert [i for c in chunks for i in c] == list(range(len(sizes)))  # every item once, in order
        assert all(sum(sizes[i] for i in c) <= budget or len(c) == 1 for c in chunks)
        assert all(sum(sizes[i] for i in a + b[:1]) > budget for a, b in zip(chunks, chunks[1:]))  # greedy: full
    buf = io.BytesIO()
    Image.new("RGB", (37, 23)).save(buf, "JPEG")
    assert jpeg_pixels(buf.getvalue()) == 37 * 23 == jpeg_pixels(torch.frombuffer(bytearray(buf.getvalue()),
                                                                                   dtype=torch.uint8))
    assert jpeg_pixels(b"not a jpeg") == 0


def test_jpeg_route_decodes_in_bounded_chunks_with_the_same_embeddings(jpeg_folder, tiny_clip, tmp_path,
                                                                        monkeypatch):
    """With a pixel budget below two images, no decode call holds more than one image beyond the budget, and
    the embeddings are those of decoding each batch whole (a decoded image does not depend on its neighbours)."""
    import torchvision.io

    from slics_core import embed

    ids = [Path(p).stem for p in jpeg_folder]
    whole, _ = embed_dataset(jpeg_folder, ids, tiny_clip, tmp_path / "whole", batch_size=6, workers=0,
                             transfer="jpeg", progress=False)
    calls = []
    decode = torchvision.io.decode_jpeg

    def counted(data, **kw):
        items = data if isinstance(data, list) else [data]
        calls.append((len(items), sum(int(x.shape[1]) * int(x.shape[2]) for x in [decode(t, **kw) for t in items])))
        return decode(data, **kw)

    monkeypatch.setattr(torchvision.io, "decode_jpeg", counted)
    budget = 320 * 200 + 1  # land2 (64 000 pixels) fits; every other JPEG here is larger and is decoded alone
    monkeypatch.setattr(embed, "DEVICE_DECODE_PIXELS", budget)
    chunked, _ = embed_dataset(jpeg_folder, ids, tiny_clip, tmp_path / "chunked", batch_size=6, workers=0,
                               transfer="jpeg", progress=False)
    assert all(count == 1 or pixels <= budget for count, pixels in calls), calls  # never two large images at once
    assert sum(count for count, _ in calls) >= len(JPEG_BYTES)  # every plain JPEG was decoded (scan7 fails)
    np.testing.assert_array_equal(whole.load()[0], chunked.load()[0])
    assert whole.failed() == chunked.failed()


def test_jpeg_route_resumes_on_its_own_route(jpeg_folder, tiny_clip, tmp_path):
    from slics_core.embed import default_transfer

    ids = [Path(p).stem for p in jpeg_folder]
    cache = tmp_path / "c"
    forward = tiny_clip.encode_tensors
    calls = []

    def interrupted(x):
        if len(calls) == 1:
            raise KeyboardInterrupt
        calls.append(1)
        return forward(x)

    tiny_clip.encode_tensors = interrupted
    try:
        with pytest.raises(KeyboardInterrupt):
            embed_dataset(jpeg_folder, ids, tiny_clip, cache, batch_size=3, workers=2, transfer="jpeg",
                          progress=False)
    finally:
        del tiny_clip.encode_tensors
    assert EmbeddingStore(cache).finished_batches() == {0}
    assert default_transfer(tiny_clip, EmbeddingStore(cache).meta()["decode"]) == "jpeg"
    assert default_transfer(tiny_clip, {"draft_size": 32}) is None and default_transfer(tiny_clip) is None
    with pytest.raises(ValueError, match="decode"):  # another route would mix pixels of two resizes
        embed_dataset(jpeg_folder, ids, tiny_clip, cache, batch_size=3, transfer="uint8", progress=False)
    store, stats = embed_dataset(jpeg_folder, ids, tiny_clip, cache, batch_size=3, workers=2, progress=False)
    assert stats == {"computed": 3, "reused": 1, "failed": 3}
    clean, _ = embed_dataset(jpeg_folder, ids, tiny_clip, tmp_path / "clean", batch_size=3, workers=0,
                             transfer="jpeg", progress=False)
    np.testing.assert_array_equal(store.load()[0], clean.load()[0])
    assert store.load()[1] == clean.load()[1] and store.failed() == clean.failed()


def test_jpeg_route_refusals(jpeg_folder, tiny_clip, tmp_path):
    from transformers import Dinov2Config

    ids = [Path(p).stem for p in jpeg_folder]
    with pytest.raises(ValueError, match="draft"):
        embed_dataset(jpeg_folder, ids, tiny_clip, tmp_path / "a", transfer="jpeg", draft=True)
    with pytest.raises(ValueError, match="image_loader"):
        embed_dataset(jpeg_folder, ids, tiny_clip, tmp_path / "b", transfer="jpeg", image_loader=load_image)
    with pytest.raises(ValueError, match="jpeg"):
        embed_dataset(jpeg_folder, ids, CountingImageEncoder(), tmp_path / "c", transfer="jpeg")
    dino = DINOv2Encoder.random(Dinov2Config(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                             mlp_ratio=2, image_size=28, patch_size=14), device="cpu")
    with pytest.raises(ValueError, match="uint8"):
        embed_dataset(jpeg_folder, ids, dino, tmp_path / "d", transfer="jpeg")


def test_cli_transfer_option(jpeg_folder, tmp_path, capsys):
    from slics_core.cli import main

    name = register_tiny_open_clip(tmp_path / "oc")
    base = ["embed", "--dataset", "folder", "--images", str(Path(jpeg_folder[0]).parent), "--encoder",
            f"{name}/random", "--device", "cpu", "--batch-size", "4", "--no-progress"]
    assert main(base + ["--cache", str(tmp_path / "j"), "--transfer", "jpeg"]) == 0
    assert EmbeddingStore(tmp_path / "j").meta()["decode"] == {"draft_size": None, "device_decode": True}
    assert "embedded 8 of 11" in capsys.readouterr().out
    assert main(base + ["--cache", str(tmp_path / "j")]) == 0  # auto: resumed on the jpeg route
    assert main(base + ["--cache", str(tmp_path / "u")]) == 0  # auto, new cache: uint8 with draft decoding
    assert EmbeddingStore(tmp_path / "u").meta()["decode"] == {"draft_size": 32}
    with pytest.raises(SystemExit):
        main(base + ["--cache", str(tmp_path / "x"), "--transfer", "png"])
    assert "invalid choice: 'png'" in capsys.readouterr().err


def test_ray_backend_refuses_the_jpeg_route(jpeg_folder, tiny_clip, tmp_path):
    pytest.importorskip("ray", reason="Ray is not installed (the [ray] extra)")
    from slics_core.ray_embed import embed_dataset_ray

    with pytest.raises(ValueError, match="local backend"):
        embed_dataset_ray(jpeg_folder, [str(i) for i in range(len(jpeg_folder))], tiny_clip, tmp_path / "r",
                          transfer="jpeg")
    assert not (tmp_path / "r").exists()  # refused before any cache or Ray start
