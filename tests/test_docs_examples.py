"""The label-file examples in README.md and docs/labels_csv.md are read as they say (issue 24, item 6)."""
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from slics_core.datasets import load_folder

ROOT = Path(__file__).resolve().parent.parent


def _csv_blocks(path):
    return re.findall(r"```csv\n(.*?)```", (ROOT / path).read_text(), flags=re.S)


@pytest.mark.parametrize("path,block", [("README.md", 0), ("docs/labels_csv.md", 0), ("docs/labels_csv.md", 1)])
def test_label_csv_example_loads(tmp_path, path, block):
    text = _csv_blocks(path)[block]
    (tmp_path / "labels.csv").write_text(text)
    lines = text.strip().splitlines()
    for line in lines[1:]:
        f = tmp_path / "imgs" / line.split(",")[0]
        f.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(f)
    ds = load_folder(tmp_path / "imgs", tmp_path / "labels.csv")
    assert len(ds) == len(lines) - 1
    first = dict(zip(ds.concept_names, ds.Y[0]))
    assert first["animal"] and not first["food"]
    assert ds.sub_names and "dog" in " ".join(ds.sub_names)
