"""What the embedding loader's JPEG check costs and finds (not a test): :func:`slics_core._jpeg.jpeg_damage`.

* cost: CPU milliseconds of the check beside ``load_image`` (draft decoding to 224, and at full size) for
  photo-like 640 x 480 JPEGs (baseline quality 75 and 90, progressive 90), the mean of ``--repeat`` calls after a
  warm-up (the compiled walk is loaded once per process);
* the null: valid JPEGs of every kind Pillow writes (sizes up to 700 x 500, RGB / grey / CMYK, chroma
  subsampling, progressive, optimised tables, restart markers), none may be called damaged;
* found: the same files damaged three ways (a run of ``len/20`` bytes zeroed at 40 %, 200 bytes changed at 40 %,
  the bytes from 40 % to 60 % cut out), counting only the ones Pillow still decodes without an error.

    python -m benchmarks.bench_jpeg_check
    python -m benchmarks.bench_jpeg_check --files 600 --seed 7
"""
import argparse
import io
import os
import tempfile
import time

import numpy as np
from PIL import Image

from slics_core._jpeg import jpeg_damage
from slics_core.images import load_image


def _photo(rng, w, h, mode="RGB", noise=12.0):
    small = rng.integers(0, 256, (max(1, h // 16), max(1, w // 16), 3), dtype=np.uint8)
    base = np.asarray(Image.fromarray(small).resize((w, h), Image.BICUBIC), np.float64)
    return Image.fromarray(np.clip(base + rng.normal(0, noise, base.shape), 0, 255).astype(np.uint8)).convert(mode)


def _cpu_ms(fn, arg, repeat, **kw):
    fn(arg, **kw)
    t = time.process_time()
    for _ in range(repeat):
        fn(arg, **kw)
    return 1e3 * (time.process_time() - t) / repeat


def cost(repeat):
    rng = np.random.default_rng(0)
    im = _photo(rng, 640, 480)
    with tempfile.TemporaryDirectory() as d:
        for kw in ({"quality": 75}, {"quality": 90}, {"quality": 90, "progressive": True}):
            path = os.path.join(d, "photo.jpg")
            im.save(path, "JPEG", **kw)
            data = open(path, "rb").read()
            check = _cpu_ms(jpeg_damage, data, repeat)
            draft = _cpu_ms(load_image, path, repeat, draft=224)
            full = _cpu_ms(load_image, path, repeat)
            print(f"640x480 {kw}: {len(data):,} bytes; check {check:.2f} ms CPU, load_image(draft=224) {draft:.2f} ms, "
                  f"load_image {full:.2f} ms")


def null_and_found(n, seed):
    rng = np.random.default_rng(seed)
    valid = flagged = 0
    found, decodable = {}, {}
    while valid < n:
        w, h = int(rng.integers(1, 700)), int(rng.integers(1, 500))
        mode = str(rng.choice(["RGB", "L", "CMYK"]))
        kw = {"quality": int(rng.integers(5, 100)), "progressive": bool(rng.random() < 0.3),
              "optimize": bool(rng.random() < 0.3)}
        if mode == "RGB" and rng.random() < 0.5:
            kw["subsampling"] = int(rng.choice([0, 1, 2]))
        if rng.random() < 0.3:
            kw["restart_marker_blocks"] = int(rng.integers(1, 50))
        buf = io.BytesIO()
        try:
            _photo(rng, w, h, mode, float(rng.choice([0.0, 5.0, 30.0]))).save(buf, "JPEG", **kw)
        except OSError:
            continue
        data = buf.getvalue()
        valid += 1
        flagged += jpeg_damage(data) is not None
        if len(data) < 3000:
            continue
        n_bytes, at = len(data), len(data) * 2 // 5
        for kind in ("zeroed", "changed", "cut out"):
            bad = bytearray(data)
            if kind == "zeroed":
                bad[at:at + n_bytes // 20] = bytes(n_bytes // 20)
            elif kind == "changed":
                for i in range(at, at + 200):
                    if bad[i] != 0xFF and bad[i - 1] != 0xFF and bad[i] ^ 0x5A != 0xFF:
                        bad[i] ^= 0x5A
            else:
                bad = bad[:at] + bad[n_bytes * 3 // 5:]
            try:
                Image.open(io.BytesIO(bytes(bad))).load()
            except (OSError, SyntaxError):
                continue  # Pillow refuses it: reported without the check
            decodable[kind] = decodable.get(kind, 0) + 1
            found[kind] = found.get(kind, 0) + (jpeg_damage(bytes(bad)) is not None)
    print(f"null: {flagged} of {valid} valid JPEGs called damaged")
    for kind in decodable:
        print(f"damaged ({kind}) and decoded by Pillow without an error: {decodable[kind]}; found {found[kind]} "
              f"({100 * found[kind] / decodable[kind]:.0f} %)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=50)
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}")
    cost(args.repeat)
    null_and_found(args.files, args.seed)
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
