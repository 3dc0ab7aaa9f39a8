"""`slics embed / fit / evaluate / captions / reproduce` end to end on a tiny folder."""
import json

import numpy as np
import pytest
from PIL import Image

from slics_core import SLiCS
from slics_core.cli import main

ENCODER_MODULE = '''
import numpy as np

class ToyEncoder:
    """Mean/std colour features; texts map colour words to colour directions."""
    id = "toy:colour"
    dim = 6
    has_text = True
    n_images = 0

    def encode_images(self, images, batch_size=32):
        ToyEncoder.n_images += len(images)
        out = []
        for im in images:
            a = np.asarray(im, dtype=np.float64) / 255.0
            out.append(np.concatenate([a.mean((0, 1)), a.std((0, 1))]) + 0.05)
        return np.array(out, dtype=np.float32)

    def encode_texts(self, texts, batch_size=256):
        out = []
        for t in texts:
            v = np.full(6, 0.05)
            for k, w in enumerate(("red", "green", "blue")):
                if w in t:
                    v[k] += 1.0
            h = sum(map(ord, t))
            v[3 + h % 3] += 0.2 + (h % 7) / 10
            out.append(v)
        return np.array(out, dtype=np.float32)

def make():
    return ToyEncoder()
'''


@pytest.fixture
def toy(tmp_path, monkeypatch):
    (tmp_path / "toyenc.py").write_text(ENCODER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    d = tmp_path / "photos"
    d.mkdir()
    rng = np.random.default_rng(0)
    rows = ["image,red,green,blue"]
    for i in range(90):
        y = rng.random(3) < 0.5
        if not y.any():
            y[rng.integers(3)] = True
        col = 40 + 170 * y + rng.integers(0, 30, 3)
        img = np.clip(col + rng.normal(0, 20, (8, 8, 3)), 0, 255).astype(np.uint8)
        Image.fromarray(img).save(d / f"p{i:03d}.jpg", quality=95)
        rows.append(f"p{i:03d}.jpg," + ",".join(str(int(v)) for v in y))
    (d / "broken.jpg").write_bytes(b"nope")
    rows.append("broken.jpg,1,0,0")
    (tmp_path / "labels.csv").write_text("\n".join(rows) + "\n")
    (tmp_path / "vocab.txt").write_text("\n".join(["zzz", "reddish red", "green", "blue", "grass", "sky", "fire",
                                                   "sea", "leaf", "rose", "stone", "paper"]) + "\n")
    return tmp_path


def _embed(tmp, cache):
    return main(["embed", "--dataset", "folder", "--images", str(tmp / "photos"), "--labels",
                 str(tmp / "labels.csv"), "--encoder", "toyenc:make", "--cache", str(cache), "--batch-size", "16",
                 "--preprocessing", "unit", "--no-progress"])


def test_embed_fit_evaluate_captions(toy, capsys):
    cache = toy / "cache"
    assert _embed(toy, cache) == 0
    out = capsys.readouterr()
    assert "embedded 90 of 91" in out.out and "broken.jpg" in out.err
    assert _embed(toy, cache) == 0  # resume: everything reused
    assert "0 batches computed, 6 reused" in capsys.readouterr().out
    model = toy / "m.npz"
    assert main(["fit", "--cache", str(cache), "--out", str(model), "--n-atoms", "1", "--n-iter", "2"]) == 0
    assert model.exists()
    threaded = toy / "m2.npz"  # --n-jobs: the same model from two threads
    assert main(["fit", "--cache", str(cache), "--out", str(threaded), "--n-atoms", "1", "--n-iter", "2",
                 "--n-jobs", "2"]) == 0
    np.testing.assert_array_equal(SLiCS.load(threaded).atoms_, SLiCS.load(model).atoms_)
    res = toy / "res"
    assert main(["evaluate", "--cache", str(cache), "--n-train", "30", "--n-val", "10", "--n-query", "20",
                 "--n-atoms", "1", "--methods", "S-SVD,S-SLiCS,UF", "--k", "5", "--out-dir", str(res)]) == 0
    md = capsys.readouterr().out
    assert "| Type | S-SVD | S-SLiCS | UF |" in md
    rows = json.loads((res / "methods.json").read_text())
    assert [r["method"] for r in rows] == ["S-SVD", "S-SLiCS", "UF"]
    assert all(0 <= r["general_mean"] <= 1 for r in rows)
    assert (res / "methods.csv").read_text().startswith("method,general_mean")
    assert main(["captions", "--model", str(model), "--cache", str(cache), "--encoder", "toyenc:make",
                 "--vocab", str(toy / "vocab.txt"), "--top", "2", "--out", str(toy / "caps.json")]) == 0
    caps = json.loads((toy / "caps.json").read_text())
    assert list(caps) == ["red", "green", "blue"]
    words = {"zzz", "reddish red", "green", "blue", "grass", "sky", "fire", "sea", "leaf", "rose", "stone", "paper"}
    assert all(len(v) == 2 and set(v) <= words for v in caps.values())
    # the toy text encoder puts colour words on the colour axes: each subspace's best word is its colour
    assert caps["green"][0] == "green" and caps["blue"][0] == "blue" and caps["red"][0] == "reddish red"
    # the one vocabulary grammar (captions.get_words): "none" is no vocabulary, which captions cannot do without
    capsys.readouterr()
    assert main(["captions", "--model", str(model), "--cache", str(cache), "--encoder", "toyenc:make",
                 "--vocab", "none"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "captions need a vocabulary" in err


def test_errors_are_one_line(toy, capsys):
    assert main(["fit", "--cache", str(toy / "nothing"), "--out", str(toy / "m.npz")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "slics embed" in err and "Traceback" not in err
    assert main(["embed", "--dataset", "coco", "--encoder", "toyenc:make", "--cache", str(toy / "c")]) == 2
    assert "--annotations" in capsys.readouterr().err
    for cmd in ("embed", "fit", "evaluate", "captions", "reproduce"):
        with pytest.raises(SystemExit) as e:
            main([cmd, "--help"])
        assert e.value.code == 0


def test_unknown_option_is_reported_by_the_sub_command(capsys):
    """argparse's sub-parser names the command ("slics fit: error"), with that command's usage."""
    with pytest.raises(SystemExit) as e:
        main(["fit", "--cache", "c", "--out", "m.npz", "--bogus", "1"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "slics fit: error: unrecognized arguments: --bogus 1" in err, err
    assert "usage: slics fit " in err
    with pytest.raises(SystemExit):
        main(["--bogus"])  # before any command: the top-level parser's
    assert "slics: error: unrecognized arguments: --bogus" in capsys.readouterr().err


def test_reproduce_one_command(toy, capsys):
    out = toy / "run"
    assert main(["reproduce", "--dataset", "folder", "--images", str(toy / "photos"), "--labels",
                 str(toy / "labels.csv"), "--encoder", "toyenc:make", "--out-dir", str(out), "--no-progress",
                 "--preprocessing", "unit", "--n-train", "30", "--n-val", "10", "--n-query", "20", "--sweep", "1", "2",
                 "--n-iter", "2", "--k", "5", "--vocab", str(toy / "vocab.txt"),
                 "--methods", "S-SVD,S-SLiCS,UF,F-SpLiCE,SpLiCE"]) == 0
    sweep = json.loads((out / "d0_sweep.json").read_text())
    assert sweep["chosen_d0"] in (1, 2) and len(sweep["records"]) == 4
    rows = {r["method"]: r for r in json.loads((out / "methods.json").read_text())}
    assert rows["SpLiCE"]["skipped"] is None and rows["F-SpLiCE"]["skipped"] is None
    assert json.loads((out / "captions.json").read_text()).keys() == {"red", "green", "blue"}


def test_preprocessing_choices():
    from slics_core.preprocessing import make_preprocessor

    def preprocess(E, kind, n_tokens=32):
        return make_preprocessor(kind, n_tokens=n_tokens).fit(E).transform(E)

    rng = np.random.default_rng(0)
    E = rng.standard_normal((20, 6)) + 2
    U = E / np.linalg.norm(E, axis=1, keepdims=True)
    C = U - U.mean(0)
    np.testing.assert_allclose(preprocess(E, "clip"), C / np.linalg.norm(C, axis=1, keepdims=True))
    np.testing.assert_allclose(preprocess(E, "unit"), U)
    T = preprocess(E, "token", n_tokens=3).reshape(20, 3, 2)
    np.testing.assert_allclose(np.linalg.norm(T, axis=2), 1.0)
    np.testing.assert_allclose(preprocess(E, "none"), E)
    with pytest.raises(ValueError):
        preprocess(E, "zca")


def test_evaluate_stability_and_n_active(toy, capsys):
    """--stability N: one row per concept with a matched cos in [-1, 1] and the mAP spread, one row per atom and
    the pairs of dictionaries, written to the out-dir; N above the bound is refused before any run;
    --n-active: one U-SLiCS row per S~; both beside --methods, --seeds and --batch-size."""
    import csv

    cache = toy / "cache"
    assert _embed(toy, cache) == 0
    res = toy / "res"
    capsys.readouterr()
    assert main(["evaluate", "--cache", str(cache), "--n-train", "30", "--n-val", "10", "--n-query", "20",
                 "--n-atoms", "2", "--n-iter", "2", "--methods", "S-SLiCS,UF", "--seeds", "2", "--batch-size", "10",
                 "--k", "5", "--stability", "3", "--n-active", "1", "2", "--no-estimate", "--out-dir", str(res)]) == 0
    out = capsys.readouterr().out
    assert "| Type | S-SLiCS | UF | U-SLiCS (S̃=1) | U-SLiCS (S̃=2) |" in out
    assert "| Gen. Recall@100 (ceiling " in out and "| Concept | matched cos |" in out
    assert "bootstrap interval over queries" in out
    rows = {r["method"]: r for r in json.loads((res / "methods.json").read_text())}
    assert rows["U-SLiCS (S̃=1)"]["n_active"] == 1 and rows["U-SLiCS (S̃=2)"]["n_runs"] == 2  # mini-batch seeds
    assert 0 <= rows["S-SLiCS"]["recall100_general_mean"] <= 1
    assert rows["S-SLiCS"]["general_lo"] <= rows["S-SLiCS"]["general_mean"] <= rows["S-SLiCS"]["general_hi"]
    with open(res / "methods.csv", newline="") as f:
        assert {"general_lo", "general_hi", "recall20_general_ceiling"} <= set(next(csv.DictReader(f)))
    with open(res / "stability.csv", newline="") as f:
        stab = list(csv.DictReader(f))
    assert [r["concept"] for r in stab] == ["red", "green", "blue"]
    assert all(-1 <= float(r["matched_cos"]) <= 1 + 1e-12 for r in stab)
    summary = json.loads((res / "stability.json").read_text())["summary"]
    assert summary["seeds"] == [0, 1, 2] and summary["d0"] == 2 and summary["general_std"] >= 0
    with open(res / "stability_atoms.csv", newline="") as f:  # one row per atom of seed 0's fit
        per_atom = list(csv.DictReader(f))
    assert len(per_atom) == 6 and {"seed 1 atom", "seed 2 cos", "mean_cos", "min_cos"} <= set(per_atom[0])
    assert "| S-SLiCS vs S-SVD |" in out
    for bad, what in ((["--stability", "1"], "--stability must be at least 2"),
                      (["--stability", "1000000000"], "--stability 1000000000 is above the bound of 100 seeds"),
                      (["--n-active", "0"], "--n-active values must be at least 1"),
                      (["--n-active", "4"], "between 1 and the number of concepts (3)")):
        assert main(["evaluate", "--cache", str(cache), "--n-train", "30", "--n-val", "10", "--n-query", "20",
                     "--methods", "UF", "--no-estimate", *bad]) == 2
        err = capsys.readouterr().err  # refused before any run: the split line, then the error
        assert what in err.splitlines()[-1] and "Traceback" not in err and "runs" not in err, err
