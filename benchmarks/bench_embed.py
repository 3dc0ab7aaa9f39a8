"""Benchmark: does `embed_dataset` keep the model busy?

Makes a folder of JPEGs (photo-like random content: a random 8x6 colour field
upsampled, plus noise; 640x480 by default, like COCO), builds ViT-B-32 with
random weights (``open_clip.create_model('ViT-B-32', pretrained=None)``; the
speed does not depend on the weights) and measures, in one run:

* model only: the encoder's forward pass on batches already decoded and
  preprocessed in memory (the ceiling);
* end to end, ``embed_dataset`` into a fresh cache:

  - serial: an encoder seen only through ``encode_images(list of PIL)``, so
    every image is decoded and preprocessed one at a time in the main
    process before the model runs (the path every embed took before);
  - parallel, full decode: DataLoader workers decode and preprocess while
    the model runs;
  - parallel + draft, float32 transfer: the same, JPEGs decoded at reduced scale
    (never below the model's 224 pixels), the workers hand over the fully
    preprocessed float32 tensors (the route before uint8 transfer);
  - parallel + draft, uint8 transfer (the default): the workers hand over
    uint8 pixels, scaled and normalised on the model's device;
  - parallel, jpeg transfer: the workers only read the files and hand over
    their bytes; the model's device decodes a batch
    (``torchvision.io.decode_jpeg``), resizes, crops and normalises it
    (full-size decoding: no draft);

* for each: bytes per image crossing the process boundary (worker to main
  process; 0 when decoding in the main process; the mean file size on the
  jpeg route), images/s, wall and CPU
  seconds (this process and its worker processes), and the ratio model-only wall time / end-to-end wall time
  (the share of the model's own speed that the whole pipeline reaches).
  ``--repeat R`` runs R rounds of the five and prints medians and each
  round's ratios (on a shared machine, compare runs of the same round);
* how much draft decoding and the jpeg route move the embeddings (cosine
  to the full-decode uint8 embedding, and the displacement relative to the
  distance between two different images' embeddings).

    python -m benchmarks.bench_embed                 # 300 images, batch 64
    python -m benchmarks.bench_embed --n-images 64   # smoke run
    python -m benchmarks.bench_embed --repeat 3      # a busy machine: medians of 3 rounds
    python -m benchmarks.bench_embed --device cuda --n-images 10000 --batch-size 256
    python -m benchmarks.bench_embed --n-images 32 --batch-size 16 --tiny   # seconds: a tiny model, a check

On a GPU the model is run in float16 and batches are pinned and copied
without blocking. Give a GPU at least 10 000 images: with 2 000 the run
mostly measures the workers' start-up (docs/performance.md).
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

from slics_core.embed import default_workers, embed_dataset, image_route
from slics_core.encoders import OpenCLIPEncoder
from slics_core.images import load_image


def make_jpegs(folder, n, width, height, seed=0):
    rng = np.random.default_rng(seed)
    paths = []
    for i in range(n):
        field = rng.integers(0, 256, (6, 8, 3), dtype=np.uint8)
        base = np.asarray(Image.fromarray(field).resize((width, height), Image.BICUBIC), dtype=np.int16)
        img = np.clip(base + rng.integers(-12, 13, base.shape), 0, 255).astype(np.uint8)
        p = Path(folder) / f"img{i:05d}.jpg"
        Image.fromarray(img).save(p, quality=90)
        paths.append(str(p))
    return paths


class Clock:
    """Wall time and CPU time of this process plus its (finished) child processes."""

    def __enter__(self):
        self.wall0 = time.perf_counter()
        self.cpu0 = self._cpu()
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.wall0
        self.cpu = self._cpu() - self.cpu0

    @staticmethod
    def _cpu():
        me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


class ImagesOnly:
    """The encoder seen only through ``encode_images`` (no tensor-level API): the serial path."""

    def __init__(self, enc):
        self.enc, self.id, self.dim, self.has_text = enc, enc.id, enc.dim, False

    def encode_images(self, images, batch_size=32):
        return self.enc.encode_images(images, batch_size=batch_size)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n-images", type=int, default=300)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--workers", type=int, default=None, help=f"default: {default_workers()} on this machine")
    ap.add_argument("--size", default="640x480", help="JPEG size WxH (640x480)")
    ap.add_argument("--device", default=None, help="cpu / cuda (default: cuda when available)")
    ap.add_argument("--repeat", type=int, default=1, help="rounds of the five measurements (medians are printed)")
    ap.add_argument("--tiny", action="store_true",
                    help="a tiny ViT at 32 pixels instead of ViT-B-32 (checks the script in seconds; no speed to read)")
    args = ap.parse_args()
    import torch

    width, height = map(int, args.size.lower().split("x"))
    workers = default_workers() if args.workers is None else args.workers
    if args.tiny:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
        from fixtures_models import register_tiny_open_clip

        model = register_tiny_open_clip(tempfile.mkdtemp(prefix="bench-embed-tiny-"))
    else:
        model = "ViT-B-32"
    enc = OpenCLIPEncoder.random(model, seed=0, device=args.device)
    print(f"{model} (random weights) on {enc.device} ({enc.dtype}), torch threads {torch.get_num_threads()}, "
          f"CPUs {len(os.sched_getaffinity(0))}, workers {workers}, batch {args.batch_size}, "
          f"{args.n_images} JPEGs {width}x{height}")
    with tempfile.TemporaryDirectory() as tmp:
        paths = make_jpegs(tmp, args.n_images, width, height)
        ids = [Path(p).name for p in paths]
        bs = args.batch_size

        # model only: preprocessed tensors in memory (not timed), then the forward passes
        transform = enc.image_transform()
        batches = [torch.stack([transform(load_image(p)) for p in paths[i:i + bs]]) for i in range(0, len(paths), bs)]
        if enc.device.type == "cuda":
            batches = [b.pin_memory() for b in batches]
        enc.encode_tensors(batches[0][: min(8, bs)])  # warm-up

        def model_only():
            if enc.device.type == "cuda":
                torch.cuda.synchronize()
            with Clock() as c:
                for b in batches:
                    enc.encode_tensors(b)  # returns NumPy: synchronised
            return c, None

        def boundary_bytes(transfer):
            x = image_route(enc, transfer)[0](load_image(paths[0], draft=enc.draft_size))
            return x.numel() * x.element_size()

        def run(name, encoder, **kw):
            def go():
                cache = Path(tmp) / f"cache-{next(counter)}"
                with Clock() as c:
                    store, _ = embed_dataset(paths, ids, encoder, cache, batch_size=bs, progress=False, **kw)
                return c, store.load()[0]
            return name, go

        counter = iter(range(10**6))
        runs = [("model only (tensors in memory)", model_only),
                run("serial (decode in main process)", ImagesOnly(enc)),
                run(f"parallel, {workers} workers, full decode, uint8", enc, workers=workers, draft=False),
                run(f"parallel, {workers} workers, draft, float32", enc, workers=workers, draft=True,
                    transfer="float32"),
                run(f"parallel, {workers} workers, draft, uint8", enc, workers=workers, draft=True, transfer="uint8"),
                run(f"parallel, {workers} workers, jpeg bytes, device decode", enc, workers=workers,
                    transfer="jpeg")]
        file_bytes = round(float(np.mean([os.path.getsize(p) for p in paths])))  # what the jpeg route hands over
        crossing = [0, 0, boundary_bytes("uint8"), boundary_bytes("float32"), boundary_bytes("uint8"), file_bytes]
        clocks = {name: [] for name, _ in runs}
        ratios = {name: [] for name, _ in runs}
        for _ in range(args.repeat):  # rounds: each ratio compares runs of the same round
            out = {}
            for name, go in runs:
                c, out[name] = go()
                clocks[name].append(c)
            for name, _ in runs:
                ratios[name].append(clocks[runs[0][0]][-1].wall / clocks[name][-1].wall)
        full, draft, device = out[runs[2][0]], out[runs[4][0]], out[runs[5][0]]
        np.testing.assert_allclose(out[runs[3][0]], draft, rtol=1e-3, atol=1e-3)  # the two transfers agree

    n = args.n_images
    print(f"\n{'(median of ' + str(args.repeat) + ' rounds)':52s} {'bytes/img':>10s} {'images/s':>9s} {'wall s':>8s} "
          f"{'CPU s':>8s} {'/ model-only':>13s}  per round")
    for (name, _), nbytes in zip(runs, crossing):
        wall = float(np.median([c.wall for c in clocks[name]]))
        cpu = float(np.median([c.cpu for c in clocks[name]]))
        per = " ".join(f"{x:.3f}" for x in ratios[name])
        print(f"{name:52s} {nbytes:10d} {n / wall:9.1f} {wall:8.2f} {cpu:8.2f} {np.median(ratios[name]):13.3f}  {per}")
    apart = np.linalg.norm(full - np.roll(full, 1, axis=0), axis=1)
    print()
    for what, E in (("draft", draft), ("jpeg route (device decode)", device)):
        cos = np.sum(full * E, 1) / np.linalg.norm(full, axis=1) / np.linalg.norm(E, axis=1)
        moved = np.linalg.norm(full - E, axis=1)
        print(f"{what} vs full decode embeddings: cosine min {cos.min():.6f} median {np.median(cos):.6f}; "
              f"displacement / distance to another image: median {np.median(moved / apart):.4f}, "
              f"max {np.max(moved / apart):.4f}")


if __name__ == "__main__":
    main()
