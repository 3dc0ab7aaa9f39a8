"""``slics embed --backend ray`` (:func:`slics_core.ray_embed.embed_dataset_ray`) on a local Ray.

One Ray for the module (about 5 s a start; ``ray.init(local_mode=True)`` is gone since Ray 2.54). The
encoder is the emoji world's shipped ``emoji-small`` on the CPU, built by each actor from its name.
The reference is the default backend's cache of the same images.
"""
import functools
import os
import sys

import numpy as np
import pytest
from PIL import Image

from slics_core.embed import embed_dataset
from slics_core.encoders import create_encoder
from slics_core.ray_embed import embed_dataset_ray
from slics_core.store import EmbeddingStore

try:
    import ray
except ImportError:  # CI installs the [ray] extra: there, a missing Ray fails the test
    if os.environ.get("CI"):
        raise
    pytest.skip('Ray is not installed (pip install "slics-explorer[ray]"); CI runs these tests',
                allow_module_level=True)

N = 200
BATCH = 16  # 13 batches, the last one of 8
BROKEN = (7, 100, 101)  # unreadable files: reported as failures by both backends, in the same order


@pytest.fixture(scope="module")
def ray_session(tmp_path_factory):
    # the test module's encoder wrappers travel to the actors by value (the workers cannot import tests/)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.init(num_cpus=2, include_dashboard=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """200 small photo-like images, JPEG and PNG, of several sizes; three unreadable files."""
    d = tmp_path_factory.mktemp("ray-imgs")
    rng = np.random.default_rng(0)
    paths = []
    for i in range(N):
        p = d / f"im{i:03d}.{'png' if i % 5 == 0 else 'jpg'}"
        if i in BROKEN:
            p.write_bytes(b"" if i % 2 else b"not an image")
        else:
            small = rng.integers(0, 256, (3, 4, 3), dtype=np.uint8)
            w, h = 64 + (i % 7) * 12, 60 + (i % 3) * 10
            base = np.asarray(Image.fromarray(small).resize((w, h), Image.BICUBIC), np.float64)
            im = Image.fromarray(np.clip(base + rng.normal(0, 8, base.shape), 0, 255).astype(np.uint8))
            im.save(p, quality=90) if p.suffix == ".jpg" else im.save(p)
        paths.append(str(p))
    return paths


@pytest.fixture(scope="module")
def encoder():
    return create_encoder("emoji-small", device="cpu")


@pytest.fixture(scope="module")
def local_cache(images, encoder, tmp_path_factory):
    store, _ = embed_dataset(images, _ids(), encoder, tmp_path_factory.mktemp("local") / "c", batch_size=BATCH,
                             workers=0, progress=False)
    return store


def _ids():
    return [f"img-{i}" for i in range(N)]


def _factory():
    return functools.partial(create_encoder, "emoji-small", device="cpu")


class Logged:
    """emoji-small that logs the size of every batch it embeds, and raises at call ``fail_at`` (counted per actor)."""

    def __init__(self, log, fail_at=None):
        self.enc = create_encoder("emoji-small", device="cpu")
        self.log, self.fail_at, self.calls = log, fail_at, 0

    def __getattr__(self, name):
        return getattr(self.__dict__["enc"], name)

    def encode_tensors(self, x):
        self.calls += 1
        if self.calls == self.fail_at:
            raise RuntimeError("killed")
        with open(self.log, "a") as fh:
            fh.write(f"{len(x)}\n")
        return self.enc.encode_tensors(x)


def test_ray_cache_equals_the_default_backends(ray_session, images, encoder, local_cache, tmp_path):
    store, stats = embed_dataset_ray(images, _ids(), encoder, tmp_path / "c", encoder_factory=_factory(),
                                     batch_size=BATCH, concurrency=1, progress=False)
    assert stats == {"computed": 13, "reused": 0, "failed": len(BROKEN)}
    E, ids, meta = EmbeddingStore(tmp_path / "c").load()  # an ordinary cache
    E0, ids0, meta0 = local_cache.load()
    assert ids == ids0 == [i for k, i in enumerate(_ids()) if k not in BROKEN]  # same ids, same order
    # both run emoji-small in float32 on the CPU: equal to rounding (the 1e-3 is for float16 on a GPU)
    np.testing.assert_allclose(E, E0, rtol=0, atol=1e-5)
    assert store.failed() == local_cache.failed() and [f["position"] for f in store.failed()] == list(BROKEN)
    for key in ("encoder_id", "dim", "batch_size", "ids_sha256", "decode", "n_embedded"):
        assert meta[key] == meta0[key], key
    # and the default backend resumes it as its own: nothing left to compute
    _, again = embed_dataset(images, _ids(), encoder, tmp_path / "c", batch_size=BATCH, progress=False)
    assert again == {"computed": 0, "reused": 13, "failed": len(BROKEN)}


def test_killed_ray_run_resumes_with_only_the_missing_batches(ray_session, images, encoder, local_cache, tmp_path):
    cache = tmp_path / "c"
    log = tmp_path / "calls.txt"
    # a run that dies at its 6th encoder call: the batches that reached this process are on disk
    with pytest.raises(Exception, match="killed"):
        embed_dataset_ray(images, _ids(), encoder, cache, encoder_factory=functools.partial(Logged, log, 6),
                          batch_size=BATCH, concurrency=1, progress=False)
    store = EmbeddingStore(cache)
    assert not store.meta()["complete"]
    first = store.finished_batches()
    assert len(first) <= 5
    # a run killed later: make sure some batches are missing and some are done, whatever Ray's timing was
    for b in (3, 9, 12):
        if store.batch_path(b).exists():
            store.batch_path(b).unlink()
    done = store.finished_batches()
    for b in (0, 1, 2):
        if b not in done:  # done by the default backend: a cache is the same whoever wrote a batch
            embed_dataset(images[:(b + 1) * BATCH], _ids()[:(b + 1) * BATCH], encoder, tmp_path / "part",
                          batch_size=BATCH, progress=False, overwrite=True)
            store.write_batch(b, *EmbeddingStore(tmp_path / "part").read_batch(b))
    done = store.finished_batches()
    assert {0, 1, 2} <= done and not {3, 9, 12} & done
    stamps = {b: store.batch_path(b).stat().st_mtime_ns for b in done}
    log.unlink(missing_ok=True)
    _, stats = embed_dataset_ray(images, _ids(), encoder, cache, encoder_factory=functools.partial(Logged, log),
                                 batch_size=BATCH, concurrency=1, progress=False)
    missing = sorted(set(range(13)) - done)
    assert stats == {"computed": len(missing), "reused": len(done), "failed": len(BROKEN)}
    assert {b: store.batch_path(b).stat().st_mtime_ns for b in done} == stamps  # finished batches untouched
    sizes = sorted(int(s) for s in log.read_text().split())  # one encoder call per missing batch, its images
    expected = [len([k for k in range(b * BATCH, min(N, (b + 1) * BATCH)) if k not in BROKEN]) for b in missing]
    assert sizes == sorted(expected)
    E, ids, _ = store.load()
    E0, ids0, _ = local_cache.load()
    assert ids == ids0
    np.testing.assert_allclose(E, E0, rtol=0, atol=1e-5)


def test_slics_embed_backend_ray(ray_session, images, local_cache, tmp_path, capsys):
    """The command line: the Ray already running in this process is used (no --address), actors build the
    encoder from its name; the cache equals the default backend's."""
    from slics_core.cli import main

    code = main(["embed", "--dataset", "folder", "--images", os.path.dirname(images[0]), "--encoder", "emoji-small",
                 "--cache", str(tmp_path / "c"), "--batch-size", str(BATCH), "--device", "cpu", "--no-progress",
                 "--backend", "ray", "--concurrency", "1"])
    assert code == 0
    assert "13 batches computed, 0 reused, 3 skipped" in capsys.readouterr().out
    E, ids, _ = EmbeddingStore(tmp_path / "c").load()
    E0, ids0, _ = local_cache.load()
    assert ids == [os.path.basename(images[int(i.split("-")[1])]) for i in ids0]
    np.testing.assert_allclose(E, E0, rtol=0, atol=1e-5)


def test_ray_refuses_bad_arguments(images, encoder, tmp_path):
    class ImagesOnly:
        id, dim, has_text = "test:images-only", 4, False

        def encode_images(self, images, batch_size=32):
            return np.ones((len(images), 4), np.float32)

    with pytest.raises(ValueError, match="tensor-level API"):
        embed_dataset_ray(images, _ids(), ImagesOnly(), tmp_path / "a")
    with pytest.raises(ValueError, match="concurrency"):
        embed_dataset_ray(images, _ids(), encoder, tmp_path / "b", concurrency=0)
    with pytest.raises(ValueError, match="num_gpus_per_actor"):
        embed_dataset_ray(images, _ids(), encoder, tmp_path / "c", num_gpus_per_actor=-1)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_more_cpu_actors_than_ray_has_cpus_for_is_refused(ray_session, images, capsys, tmp_path):
    """docs/scale.md's first example on a 2-CPU Ray: two CPU actors took both CPUs, the decoding waited for ever
    and nothing was written (issue 40). Now one line says what Ray sees and what to give."""
    from slics_core.cli import main

    code = main(["embed", "--dataset", "folder", "--images", os.path.dirname(images[0]), "--encoder", "emoji-small",
                 "--cache", str(tmp_path / "c"), "--batch-size", str(BATCH), "--device", "cpu", "--no-progress",
                 "--backend", "ray", "--concurrency", "2"])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2
    assert err == ("slics embed: error: 2 CPU encoder actors (1 CPU each) and the image decoding (1 CPU) need 3 CPUs, "
                   "but Ray sees 2: use --concurrency 1, or start Ray with more CPUs (nothing was embedded)")
    assert not list((tmp_path / "c").glob("batches/*.npz"))


@pytest.mark.parametrize("resources,concurrency,gpus,fits", [
    ({"CPU": 2.0}, 1, 0, True), ({"CPU": 2.0}, 2, 0, False), ({"CPU": 3.0}, 2, 0, True), ({"CPU": 1.0}, 1, 0, False),
    ({"CPU": 16.0, "GPU": 4.0}, 4, 1, True), ({"CPU": 16.0, "GPU": 4.0}, 5, 1, False),
    ({"CPU": 16.0, "GPU": 1.0}, 4, 0.25, True), ({"CPU": 16.0}, 1, 1, False),
])
def test_check_resources_counts_actors_and_decoding(resources, concurrency, gpus, fits):
    """CPU actors take one CPU each and the decoding one more; GPU actors their GPUs (the decoding its CPUs)."""
    from slics_core.ray_embed import check_resources

    warning = check_resources(resources, concurrency, gpus, local=False)  # a cluster may grow: a warning
    assert (warning is None) == fits
    assert fits or "the run waits until the cluster has them" in warning
    if fits:
        assert check_resources(resources, concurrency, gpus) is None
    else:
        with pytest.raises(ValueError, match=f"but Ray sees {resources.get('GPU' if gpus else 'CPU', 0):g}"):
            check_resources(resources, concurrency, gpus)
