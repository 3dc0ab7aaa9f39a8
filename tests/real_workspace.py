"""A dataset workspace with a real (tiny, random) diffusion generator, built through the command line.

Shared by the AppTest tests (tests/test_generate_real.py) and the browser test
(tests/e2e/test_generate_real_e2e.py): a folder + CSV dataset embedded with the shipped
``emoji-small`` encoder, turned into workspace ``toys`` by ``slics workspace --generator
local:DIR --align-encoder local:DIR`` with a tiny random Stable Diffusion pipeline folder and a
tiny random open_clip folder as the conditioning encoder (both written here, offline).
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from fixtures_models import tiny_open_clip_dir, tiny_sd_pipeline, tiny_unclip_pipeline

COLOURS = {"red": (220, 30, 30), "green": (30, 200, 30), "blue": (30, 30, 220)}


def write_photos(root: Path, n: int = 60) -> tuple[Path, Path]:
    """``n`` small JPEGs of three colours (two colours on a third of them) and their labels CSV."""
    from PIL import Image

    rng = np.random.default_rng(0)
    photos = root / "photos"
    photos.mkdir(parents=True)
    rows = ["image,labels"]
    names = list(COLOURS)
    for i in range(n):
        labs = [names[i % 3]] + ([names[(i + 1) % 3]] if i % 3 == 0 else [])
        a = np.zeros((32, 32, 3))
        a[:, :16] = COLOURS[labs[0]]
        a[:, 16:] = COLOURS[labs[-1]]
        a = np.clip(a + rng.normal(0, 25, a.shape), 0, 255).astype(np.uint8)
        Image.fromarray(a).save(photos / f"p{i}.jpg")
        rows.append(f"p{i}.jpg,{'|'.join(labs)}")
    (root / "labels.csv").write_text("\n".join(rows) + "\n")
    return photos, root / "labels.csv"


def build_real_workspace(root) -> dict:
    """Models, dataset, cache and workspace ``toys`` under ``root``; returns their paths."""
    from slics_core.cli import main

    root = Path(root)
    paths = {"root": root, "sd": root / "sd", "unclip": root / "unclip", "clip": root / "clip",
             "workspaces": root / "workspaces", "cache": root / "cache"}
    tiny_sd_pipeline(root / "tok-sd", seed=0).save_pretrained(paths["sd"])
    tiny_unclip_pipeline(root / "tok-unclip", seed=0).save_pretrained(paths["unclip"])
    tiny_open_clip_dir(paths["clip"], seed=0)
    photos, labels = write_photos(root)
    assert main(["embed", "--dataset", "folder", "--images", str(photos), "--labels", str(labels),
                 "--encoder", "emoji-small", "--cache", str(paths["cache"]), "--no-progress", "--workers", "0"]) == 0
    old = os.environ.get("SLICS_WORKSPACES")
    os.environ["SLICS_WORKSPACES"] = str(paths["workspaces"])
    try:
        assert main(["workspace", "--cache", str(paths["cache"]), "--name", "toys", "--d0", "2", "3", "--n-iter",
                     "2", "--vocab", "none", "--quiet", "--generator", f"local:{paths['sd']}",
                     "--align-encoder", f"local:{paths['clip']}"]) == 0
    finally:
        if old is None:
            os.environ.pop("SLICS_WORKSPACES", None)
        else:
            os.environ["SLICS_WORKSPACES"] = old
    paths["folder"] = paths["workspaces"] / "toys"
    return paths
