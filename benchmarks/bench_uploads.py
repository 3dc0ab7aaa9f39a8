"""Peak memory of one upload, per format, near the limits (not a test).

Each case is decoded by :func:`slics_core.explorer.uploads.load_upload` in a fresh Python process;
the peak is the growth of that process's maximum resident set size (``ru_maxrss``) over the call,
after the file's bytes are in memory and the modules imported. Wall and CPU seconds of the call
are printed beside it. ``--unlimited`` also decodes the audit's 110-megapixel PNG with the memory
budget off (what every upload cost before the budget).

    python -m benchmarks.bench_uploads [--unlimited]

Results are in docs/security.md.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: (file name, format, width, height, mode, save options)
CASES = [
    ("png_110mp.png", "PNG", 12_000, 9_200, "RGB", {"compress_level": 9}),  # the audit's ~460 KB bomb
    ("png_38mp.png", "PNG", 7_100, 5_300, "RGB", {"compress_level": 9}),  # each just under the budget
    ("png_12mp.png", "PNG", 4_000, 3_000, "RGB", {"compress_level": 6}),
    ("png16_33mp.png", "PNG", 6_600, 5_000, "I;16", {"compress_level": 9}),
    ("jpeg_99mp.jpg", "JPEG", 11_000, 9_000, "RGB", {"quality": 80}),
    ("gif_48mp.gif", "GIF", 8_000, 6_000, "P", {}),
    ("webp_24mp.webp", "WEBP", 5_600, 4_200, "RGB", {"quality": 50, "method": 0}),
    ("tiff_38mp.tif", "TIFF", 7_100, 5_300, "RGB", {"compression": "tiff_deflate"}),
    ("bmp_6mp.bmp", "BMP", 2_800, 2_200, "RGB", {}),  # BMP is uncompressed: the 20 MB byte limit binds first
]

_MAKE = r"""
import sys
from PIL import Image, ImageDraw
path, fmt, w, h = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
mode, opts = sys.argv[5], eval(sys.argv[6])
Image.MAX_IMAGE_PIXELS = None
base = "RGB" if mode in ("RGB", "P") else mode
im = Image.new(base, (w, h), (200, 40, 40) if base == "RGB" else 3000)
ImageDraw.Draw(im).rectangle([w // 2, 0, w - 1, h - 1], fill=(40, 40, 200) if base == "RGB" else 60000)
if mode == "P":
    im = im.convert("P", palette=Image.Palette.ADAPTIVE, colors=4)
im.save(path, format=fmt, **opts)
"""

_MEASURE = r"""
import json, resource, sys, time
from slics_core.explorer.uploads import UploadError, load_upload
path, unlimited = sys.argv[1], sys.argv[2] == "1"
data = open(path, "rb").read()
kw = {"max_decode_bytes": None} if unlimited else {}
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0, c0 = time.perf_counter(), time.process_time()
try:
    out = load_upload(data, path.rsplit("/", 1)[-1], **kw)
    result = f"decoded to {out.size[0]}x{out.size[1]}"
except UploadError as exc:
    result = "refused: " + str(exc)[:110]
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(json.dumps({"bytes": len(data), "peak_mib": peak / 1024, "wall_s": wall, "cpu_s": cpu, "result": result}))
"""


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--unlimited", action="store_true", help="also decode the 110 MP PNG with no memory budget")
    args = ap.parse_args(argv)
    env_path = str(ROOT)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, fmt, w, h, mode, opts in CASES:
            path = Path(tmp) / name
            subprocess.run([sys.executable, "-c", _MAKE, str(path), fmt, str(w), str(h), mode, repr(opts)], check=True)
            runs = [False] + ([True] if args.unlimited and name == "png_110mp.png" else [])
            for unlimited in runs:
                out = subprocess.run([sys.executable, "-c", _MEASURE, str(path), "1" if unlimited else "0"],
                                     check=True, capture_output=True, text=True, cwd=ROOT,
                                     env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"})
                r = json.loads(out.stdout.strip().splitlines()[-1])
                rows.append((name + (" (no budget)" if unlimited else ""), f"{w * h / 1e6:.0f} MP {mode}", r))
    print(f"{'file':28} {'pixels':14} {'file size':>10} {'peak MiB':>9} {'wall s':>7} {'CPU s':>6}  result")
    for name, px, r in rows:
        print(f"{name:28} {px:14} {r['bytes'] / 2**20:>8.2f}MB {r['peak_mib']:>9.0f} {r['wall_s']:>7.2f} "
              f"{r['cpu_s']:>6.2f}  {r['result']}")


if __name__ == "__main__":
    main()
