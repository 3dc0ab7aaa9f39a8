"""Emoji workspace: build, cache, reload, damaged-cache rebuild, CLI."""
import json

import numpy as np
import pytest

from slics_core.emoji.workspace import WorkspaceConfig, center_unit, load_or_build_workspace

pytest.importorskip("slics_core.slics")

CFG = dict(n_train=80, n_val=20, n_query=20, n_pool=40, d0_values=(2, 3), n_iter=2)


def test_center_unit_independent():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(10, 4))
    m = rng.normal(size=4) * 0.1
    out = center_unit(X, m)
    for i in range(10):
        u = X[i] / np.sqrt((X[i] ** 2).sum()) - m
        assert np.allclose(out[i], u / np.sqrt((u ** 2).sum()))


def test_choose_workspace_d0():
    from slics_core.emoji.workspace import choose_workspace_d0

    scores = [{"d0": 5, "general": 0.9, "sub": 0.4}, {"d0": 10, "general": 0.5, "sub": 0.6},
              {"d0": 15, "general": 0.7, "sub": 0.6}]
    assert choose_workspace_d0(scores) == 10  # best sub-label mAP, tie -> smaller d0
    assert choose_workspace_d0(scores[:1]) == 5


def test_config_validation():
    with pytest.raises(ValueError):
        WorkspaceConfig(n_train=0)
    with pytest.raises(ValueError):
        WorkspaceConfig(d0_values=())
    assert WorkspaceConfig(**CFG).key() != WorkspaceConfig(**{**CFG, "n_pool": 41}).key()


def test_build_cache_reload_and_repair(tmp_path):
    stages = []
    cfg = WorkspaceConfig(**CFG)
    ws = load_or_build_workspace(tmp_path, cfg, progress=lambda s, d, n: stages.append(s))
    n = sum(CFG[k] for k in ("n_train", "n_val", "n_query", "n_pool"))
    assert ws.images.shape == (n, 64, 64, 3) and ws.Y.shape == (n, 12) and ws.Z.shape == (n, 80)
    assert ws.X_small.shape == (n, 64) and ws.X_large.shape[0] == n
    assert np.allclose(np.linalg.norm(ws.X_small, axis=1), 1, atol=1e-5)
    assert set(ws.models) == {(m, d) for m in ("S-SVD", "S-SLiCS", "U-SLiCS") for d in (2, 3)}
    assert any(s.startswith("render") for s in stages) and any(s.startswith("fit") for s in stages)
    # centring: mean of the training scenes' *unit* embeddings, then unit(unit(x) - mean) (sec. 4.1)
    tr = ws.index["train"]
    for raw, mean, X in ((ws.raw_small, ws.mean_small, ws.X_small), (ws.raw_large, ws.mean_large, ws.X_large)):
        U = raw / np.linalg.norm(raw, axis=1, keepdims=True)
        assert np.allclose(mean, U[tr].mean(0), atol=1e-6)
        C = U - U[tr].mean(0)
        assert np.allclose(X, C / np.linalg.norm(C, axis=1, keepdims=True), atol=1e-5)
    # d0 chosen on the validation split: the best sub-label mAP of an independent sweep (refits S-SLiCS)
    from slics_core.emoji.workspace import _eval_data
    from slics_core.evaluation import choose_d0, sweep_d0

    data, split = _eval_data(ws)
    recs = sweep_d0(data, split, (2, 3), modes=("partial",), n_iter=CFG["n_iter"])
    assert [r["d0"] for r in ws.d0_scores] == [2, 3]
    for mine, ref in zip(ws.d0_scores, recs):
        assert mine["sub"] == pytest.approx(ref["sub"], abs=1e-4)
        assert mine["general"] == pytest.approx(ref["general"], abs=1e-4)
    assert ws.chosen_d0 == choose_d0(recs)

    stages.clear()
    again = load_or_build_workspace(tmp_path, cfg, progress=lambda s, d, n: stages.append(s))
    assert not stages  # read from the cache, nothing rebuilt
    assert np.array_equal(again.images, ws.images) and np.allclose(again.X_small, ws.X_small)
    m0, m1 = ws.models[("S-SLiCS", 2)], again.models[("S-SLiCS", 2)]
    assert np.allclose(m0.atoms_, m1.atoms_)
    assert again.chosen_d0 == ws.chosen_d0 and again.d0_scores == ws.d0_scores

    # damage the cache: truncated arrays file -> rebuilt, same content
    arr = ws.path / "arrays.npz"
    arr.write_bytes(arr.read_bytes()[:1000])
    stages.clear()
    repaired = load_or_build_workspace(tmp_path, cfg, progress=lambda s, d, n: stages.append(s))
    assert any("cache unusable" in s for s in stages)
    assert np.array_equal(repaired.images, ws.images)
    # garbage manifest also rebuilt
    (ws.path / "manifest.json").write_text("{not json")
    assert len(load_or_build_workspace(tmp_path, cfg).images) == n


def test_cli_build_and_report(tmp_path, capsys):
    from slics_core.cli import main

    args = ["--cache-dir", str(tmp_path), "--n-train", "80", "--n-val", "20", "--n-query", "20",
            "--n-pool", "40", "--d0", "2", "--quiet"]
    assert main(["emoji-build", *args]) == 0
    assert "emoji workspace ready" in capsys.readouterr().out
    assert main(["emoji-report", "--json", *args]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert 0 <= rep["zero_shot_precision_at_2"] <= 1
    assert rep["chosen_d0"] == 2 and rep["map_d0"] == 2 and len(rep["d0_validation"]) == 1
    assert rep["n_scenes"] == {"train": 80, "val": 20, "query": 20, "pool": 40}
    assert ("generation_concept_accuracy" in rep) or ("generation_error" in rep)
    assert main(["emoji-build", "--cache-dir", str(tmp_path), "--n-train", "0"]) == 2
