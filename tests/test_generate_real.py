"""Real workspaces: `slics workspace --generator`, `slics align --workspace`, the Generate and Mix pages.

A tiny random Stable Diffusion (and unCLIP) pipeline folder and a tiny random open_clip conditioning
encoder stand in for SD 1.5 and CLIP ViT-L/14 (tests/real_workspace.py); nothing is downloaded.
"""
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from real_workspace import build_real_workspace
from streamlit.testing.v1 import AppTest
from test_hostile_markdown import shown

from slics_core import weights
from slics_core.alignment import ProcrustesAlignment
from slics_core.cli import main
from slics_core.encoders import create_encoder
from slics_core.explorer.generation import ALIGNMENT_FILE, load_workspace_generator
from slics_core.explorer.workspace_files import load_workspace
from slics_core.images import load_image

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    return build_real_workspace(tmp_path_factory.mktemp("real"))


@pytest.fixture
def copy(real, tmp_path, monkeypatch):
    """A copy of workspace ``toys`` alone in a workspaces folder of its own (the test may change it)."""
    import streamlit as st

    st.cache_resource.clear()  # the app keeps opened workspaces and generators per process
    root = tmp_path / "workspaces"
    shutil.copytree(real["folder"], root / "toys")
    monkeypatch.setenv("SLICS_WORKSPACES", str(root))
    return root / "toys"


def _procrustes(X, Y):
    """Independent fit: rows unit-normalised, W = U V^T of the SVD of X^T Y."""
    X = X / np.linalg.norm(X, axis=1, keepdims=True)
    Y = Y / np.linalg.norm(Y, axis=1, keepdims=True)
    U, _, Vt = np.linalg.svd(X.T @ Y, full_matrices=False)
    return U @ Vt


def _split(n, seed=0):
    perm = np.random.default_rng(seed).permutation(n)
    n_test = int(round(0.2 * n))
    return perm[n_test:], perm[:n_test]


def _mean_cos(A, B):
    return float(np.mean(np.sum(A * B, 1) / np.linalg.norm(A, axis=1) / np.linalg.norm(B, axis=1)))


def test_workspace_generator_is_the_procrustes_of_its_own_training_images(real):
    ws = load_workspace(real["folder"])
    assert ws.generator == f"local:{real['sd']}"
    align = ProcrustesAlignment.load(real["folder"] / ALIGNMENT_FILE)
    assert align.source_id == "emoji-small" and align.target_id == f"local:{real['clip']}"
    # independent: embed the training images with the conditioning encoder, fit, score the held-out fifth
    tr = np.asarray(ws.index["train"])
    enc = create_encoder(f"local:{real['clip']}")
    Y = np.asarray(enc.encode_images([load_image(ws.paths[r]) for r in tr]), np.float64)
    X = np.asarray(ws.X[tr], np.float64)
    fit, test = _split(len(tr))
    W = _procrustes(X[fit], Y[fit])
    np.testing.assert_allclose(align.W_, W, atol=2e-4)
    assert align.held_out_cosine_ == pytest.approx(_mean_cos(X[test] @ W, Y[test]), abs=1e-4)
    assert align.train_cosine_ == pytest.approx(_mean_cos(X[fit] @ W, Y[fit]), abs=1e-4)


def test_workspace_info_reports_the_generator_and_its_alignment(real, capsys):
    assert main(["workspace", "--info", str(real["folder"])]) == 0
    info = json.loads(capsys.readouterr().out)
    align = ProcrustesAlignment.load(real["folder"] / ALIGNMENT_FILE)
    assert info["generator"] == f"local:{real['sd']}"
    assert info["generator_alignment"] == {"conditioning_encoder": f"local:{real['clip']}",
                                           "held_out_cosine": align.held_out_cosine_,
                                           "train_cosine": align.train_cosine_}


def test_workspace_generator_draws_with_per_step_progress_and_reproducible_seeds(real):
    ws = load_workspace(real["folder"])
    gen = load_workspace_generator(ws)
    assert not gen.deterministic and gen.defaults["size"] == 16  # the tiny pipeline's own size (< 256)
    assert gen.info["alignment_held_out_cosine"] == pytest.approx(
        ProcrustesAlignment.load(real["folder"] / ALIGNMENT_FILE).held_out_cosine_)
    assert type(gen.alignment).__name__ == "ProcrustesAlignment"
    calls = []
    V = ws.X[ws.index["query"][:2]]
    a = gen.generate(V, seed=3, steps=2, progress=lambda done, total: calls.append((done, total)))
    assert calls == [(1, 2), (2, 2), (1, 2), (2, 2)]  # each image, each denoising step
    b = gen.generate(V, seed=3, steps=2)
    c = gen.generate(V, seed=4, steps=2)
    assert a[0].size == (16, 16)
    assert np.array_equal(np.asarray(a[0]), np.asarray(b[0])) and np.array_equal(np.asarray(a[1]), np.asarray(b[1]))
    assert not np.array_equal(np.asarray(a[0]), np.asarray(c[0]))
    with pytest.raises(ValueError, match="zero component"):
        gen.generate(np.zeros((1, ws.X.shape[1])))


def test_estimate_uses_the_measured_speed(real):
    ws = load_workspace(real["folder"])
    gen = load_workspace_generator(ws)
    from diffusers import UNet2DConditionModel

    timer = gen._estimate.__self__
    prior = gen.estimate_seconds(2, 10, 16)
    # before any measurement: proportional to U-Net parameters x latent pixels x (steps + 1),
    # 9 s per guided step for SD 1.5's 859.5 M parameters at 32 x 32 latents
    params = sum(p.numel() for p in UNet2DConditionModel.from_pretrained(real["sd"] / "unet").parameters())
    assert prior == pytest.approx(2 * 11 * 9.0 / (859.5e6 * 1024) * params * (16 / 2) ** 2)
    timer.record(6.0, n_images=2, steps=2, size=16, guidance=7.5)  # 1 s per image-step
    assert gen.estimate_seconds(3, 4, 16) == pytest.approx(3 * 5 * 1.0)
    assert gen.estimate_seconds(3, 4, 32) == pytest.approx(3 * 5 * 4.0)  # 4x the latent pixels


def test_align_workspace_replaces_the_generator_and_refits_nothing_else(real, copy, capsys):
    before = {p.relative_to(copy): p.read_bytes() for p in copy.rglob("*")
              if p.is_file() and "align-embeddings" not in p.parts and p.name not in (ALIGNMENT_FILE, "workspace.json")}
    head = json.loads((copy / "workspace.json").read_text())
    old_W = ProcrustesAlignment.load(copy / ALIGNMENT_FILE).W_
    assert main(["align", "--workspace", "toys", "--generator", f"local:{real['unclip']}", "--align-encoder",
                 f"local:{real['clip']}", "--align-n", "20", "--seed", "1", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "added to workspace 'toys'" in out and "held-out" in out
    after = {p.relative_to(copy): p.read_bytes() for p in copy.rglob("*")
             if p.is_file() and "align-embeddings" not in p.parts and p.name not in (ALIGNMENT_FILE, "workspace.json")}
    assert after == before  # models, arrays, marker: byte for byte
    new_head = json.loads((copy / "workspace.json").read_text())
    assert new_head.pop("generator") == f"local:{real['unclip']}"
    head.pop("generator")
    assert new_head == head
    ws = load_workspace(copy)
    align = ProcrustesAlignment.load(copy / ALIGNMENT_FILE)
    assert align.W_.shape == old_W.shape and not np.allclose(align.W_, old_W)  # 20 other images, another split
    gen = load_workspace_generator(ws)
    assert "image-embedding conditioning" in gen.name
    assert gen.generate(ws.X[:1], seed=0, steps=1)[0].size == (16, 16)
    # without --generator the recorded one is refitted
    assert main(["align", "--workspace", str(copy), "--align-encoder", f"local:{real['clip']}", "--quiet"]) == 0
    assert load_workspace(copy).generator == f"local:{real['unclip']}"


def test_an_open_workspace_sees_a_generator_added_later(real, copy, capsys):
    from slics_core.explorer.workspace_files import set_workspace_generator

    ws = load_workspace(copy)
    set_workspace_generator(ws, None)
    (copy / ALIGNMENT_FILE).unlink()
    ws = load_workspace(copy)  # as the app holds it
    with pytest.raises(FileNotFoundError, match="slics align --workspace toys --generator sd-1.5"):
        load_workspace_generator(ws)
    assert main(["align", "--workspace", "toys", "--generator", f"local:{real['unclip']}", "--align-encoder",
                 f"local:{real['clip']}", "--quiet"]) == 0  # another process, while the app runs
    assert "image-embedding conditioning" in load_workspace_generator(ws).name


def test_consistency_model_draws_in_few_unguided_steps(real, copy, tmp_path):
    from fixtures_models import tiny_lcm_pipeline

    tiny_lcm_pipeline(tmp_path / "tok").save_pretrained(tmp_path / "lcm")
    assert json.loads((tmp_path / "lcm" / "model_index.json").read_text())["_class_name"] == \
        "LatentConsistencyModelPipeline"
    assert main(["align", "--workspace", "toys", "--generator", f"local:{tmp_path / 'lcm'}", "--align-encoder",
                 f"local:{real['clip']}", "--quiet"]) == 0
    ws = load_workspace(copy)
    gen = load_workspace_generator(ws)
    assert gen.defaults["steps"] == 4 and gen.defaults["guidance"] == 8.0 and gen.info["sampler"] == "LCM"
    sd = gen.pipeline
    # the estimate counts one U-Net pass per step: 6.62 / 7.89 of a guided step (measured on SD 1.5 at 256 px)
    params = sum(p.numel() for p in sd.pipe.unet.parameters())
    assert gen.estimate_seconds(2, 4, 16) == pytest.approx(2 * 5 * 9.0 / (859.5e6 * 1024) * params * 8 ** 2
                                                           * 6.62 / 7.89)
    assert type(sd.pipe.scheduler).__name__ == "LCMScheduler"  # its own scheduler, not DPM-Solver++
    batches = []
    original = sd.pipe.unet.forward
    sd.pipe.unet.forward = lambda sample, *a, **k: (batches.append(sample.shape[0]), original(sample, *a, **k))[1]
    try:
        a = gen.generate(ws.X[:1], seed=2)
    finally:
        sd.pipe.unet.forward = original
    assert batches == [1, 1, 1, 1]  # 4 steps, one pass each: no classifier-free guidance branch
    assert np.array_equal(np.asarray(a[0]), np.asarray(gen.generate(ws.X[:1], seed=2)[0]))


def test_alignment_from_a_pairs_file_recovers_a_planted_map(real, copy, tmp_path):
    ws = load_workspace(copy)
    rng = np.random.default_rng(5)
    S = rng.normal(size=(300, ws.X.shape[1]))  # raw embeddings of the workspace's encoder
    P = ws.preprocess(S).astype(np.float64)
    # planted map into a wider space (64 -> 96) with orthonormal rows, so it keeps norms (as ViT-B/32 -> L/14)
    Q = np.linalg.qr(rng.normal(size=(96, ws.X.shape[1])))[0].T
    T = P @ Q + 0.005 * rng.normal(size=(300, 96))
    np.savez(tmp_path / "pairs.npz", source=S, target=T)
    assert main(["align", "--workspace", "toys", "--generator", f"local:{real['sd']}", "--align-encoder",
                 f"local:{real['clip']}", "--align-pairs", str(tmp_path / "pairs.npz"), "--quiet"]) == 0
    align = ProcrustesAlignment.load(copy / ALIGNMENT_FILE)
    fit, test = _split(300)
    np.testing.assert_allclose(align.W_, _procrustes(P[fit], T[fit]), atol=1e-8)
    assert np.linalg.norm(align.W_ - Q) / np.linalg.norm(Q) < 0.05  # the planted map, up to the noise
    assert align.held_out_cosine_ == pytest.approx(_mean_cos(P[test] @ align.W_, T[test]), abs=1e-9)
    assert align.held_out_cosine_ == pytest.approx(_mean_cos(P[test] @ Q, T[test]), abs=2e-3)
    # a pairs file of the wrong width is refused in one line naming it
    np.savez(tmp_path / "bad.npz", source=S[:, :5], target=T)
    assert main(["align", "--workspace", "toys", "--generator", f"local:{real['sd']}",
                 "--align-pairs", str(tmp_path / "bad.npz"), "--quiet"]) == 2


def _page(name, ws_choice):
    at = AppTest.from_file(str(ROOT / "app_pages" / f"{name}.py"), default_timeout=240)
    at.session_state["ws_choice"] = ws_choice
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_generate_and_mix_pages_draw_with_the_workspace_generator(real, copy):
    align = ProcrustesAlignment.load(copy / ALIGNMENT_FILE)
    at = _page("generate", "toys")
    captions = [c.value for c in at.caption]
    assert any(f"mean cosine {align.held_out_cosine_:.2f} on held-out" in c for c in captions), captions
    assert any("takes about" in c for c in captions), captions  # the estimate, before starting
    assert at.number_input(key="steps").value == 12 and not at.number_input(key="seed").disabled
    assert at.select_slider(key="gen_size").value == 16
    at.number_input(key="steps").set_value(2)
    at.button(key="generate").click().run()
    assert not at.exception and not at.error, [e.value for e in at.exception]
    drawn = {c for im in at.image for c in im.captions}
    concepts = [m for m in at.multiselect(key="concepts").value]
    assert concepts and {"query", *concepts} <= drawn

    at = _page("mix", "toys")
    assert any("takes about" in (b.help or "") for b in at.button if b.key == "mix_draw")
    at.number_input(key="steps").set_value(2)
    at.button(key="mix_draw").click().run()
    assert not at.exception and not at.error, [e.value for e in at.exception]
    drawn = {c for im in at.image for c in im.captions}
    c1, c2 = at.selectbox(key="mix_c1").value, at.selectbox(key="mix_c2").value
    assert {c1, c2, "mix"} <= drawn


def test_missing_weights_one_line_while_retrieve_still_works(real, copy, tmp_path, monkeypatch, caplog):
    import logging

    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    align = ProcrustesAlignment.load(copy / ALIGNMENT_FILE)
    align.target_id = "ViT-L-14/openai"
    align.save(copy / ALIGNMENT_FILE)
    head = json.loads((copy / "workspace.json").read_text())
    head["generator"] = "sd-1.5"
    (copy / "workspace.json").write_text(json.dumps(head))
    with pytest.raises(weights.MissingWeightsError) as err:
        load_workspace_generator(load_workspace(copy))
    assert "`slics download sd-1.5 ViT-L-14/openai`" in str(err.value) and "\n" not in str(err.value)
    from streamlit import config

    before = config.get_option("client.showErrorDetails")
    try:
        config.set_option("client.showErrorDetails", "none")  # the classroom recipe
        with caplog.at_level(logging.WARNING, logger="slics.app"):
            at = _page("generate", "toys")
        warnings = [shown(w.value) for w in at.warning]  # as the reader sees it (the page escapes the message)
        # a visitor reads what is missing; the command that fetches it is for whoever runs the server (its log)
        assert len(warnings) == 1 and "needs weights not on this machine (Stable Diffusion 1.5" in warnings[0] \
            and "slics" not in warnings[0] and "\n" not in warnings[0], warnings
        assert any("`slics download sd-1.5 ViT-L-14/openai`" in r.getMessage() for r in caplog.records)
        at = _page("retrieve", "toys")
        assert not at.error and at.image, [e.value for e in at.error]
        at = _page("mix", "toys")
        assert any("needs weights not on this machine" in shown(c.value) and "slics" not in c.value
                   for c in at.caption)
        assert at.image  # the mixed gallery still retrieves
        config.set_option("client.showErrorDetails", "full")  # a presenter's own laptop: they run the server
        warnings = [shown(w.value) for w in _page("generate", "toys").warning]
        assert len(warnings) == 1 and "`slics download sd-1.5 ViT-L-14/openai`" in warnings[0], warnings
    finally:
        config.set_option("client.showErrorDetails", before)


def test_download_fetches_exactly_what_the_generator_needs(real, copy, tmp_path, capsys):
    hub = tmp_path / "hub"
    assert main(["download", "--generator", "unclip", "--dry-run", "--cache-dir", str(hub)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in out] == ["sd-2.1-unclip-small", "ViT-L-14/openai"]
    assert all("would download" in line for line in out)
    assert main(["download", "--generator", "sd-1.5", "--align-encoder", "ViT-B-32/openai", "sd-1.5", "--dry-run",
                 "--cache-dir", str(hub)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in out] == ["sd-1.5", "ViT-B-32/openai"]  # each once
    assert "unet/*.safetensors" in out[0] and "safety_checker" not in out[0]
    assert main(["download", "--workspace", "toys", "--dry-run"]) == 0
    assert "nothing to download" in capsys.readouterr().out
    # only the loaded components are fetched: never the single-file checkpoints beside them
    patterns = weights.download_patterns("sd-1.5")
    import fnmatch

    fetched = [f for f in ("model_index.json", "v1-5-pruned.safetensors", "unet/diffusion_pytorch_model.safetensors",
                           "safety_checker/model.safetensors", "tokenizer/vocab.json")
               if any(fnmatch.fnmatch(f, p) for p in patterns)]
    assert fetched == ["model_index.json", "unet/diffusion_pytorch_model.safetensors", "tokenizer/vocab.json"]


def test_workspace_with_generator_checks_the_conditioning_encoder_first(real, tmp_path, monkeypatch, capsys):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    monkeypatch.setenv("SLICS_WORKSPACES", str(tmp_path / "ws"))
    assert main(["workspace", "--cache", str(real["cache"]), "--name", "x", "--generator", "sd-1.5", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "`slics download ViT-L-14/openai`" in err
    assert not (tmp_path / "ws").exists()  # refused before anything was fitted or written
    assert main(["workspace", "--cache", str(real["cache"]), "--generator", "local:/nowhere"]) == 2
    assert "/nowhere" in capsys.readouterr().err
