"""The emoji world through the one workspace pipeline: build, cache, reload, damaged-cache rebuild, CLI."""
import json

import numpy as np
import pytest

from slics_core.data import eval_data
from slics_core.emoji.world import EmojiWorldConfig, config_from_env, render_emoji_world
from slics_core.evaluation import choose_d0, sweep_d0
from slics_core.explorer.emoji_build import open_emoji_workspace
from slics_core.explorer.generation import load_workspace_generator
from slics_core.methods import ORACLE_FSPLICE

CFG = dict(n_train=80, n_val=20, n_query=20, n_pool=40, d0_values=(2, 3), n_iter=2)


def test_config_validation_and_env(monkeypatch):
    with pytest.raises(ValueError):
        EmojiWorldConfig(n_train=0)
    with pytest.raises(ValueError):
        EmojiWorldConfig(d0_values=())
    assert EmojiWorldConfig(**CFG).key() != EmojiWorldConfig(**{**CFG, "n_pool": 41}).key()
    monkeypatch.setenv("SLICS_EMOJI_SCALE", "0.5")
    cfg = config_from_env()
    assert (cfg.n_train, cfg.n_val, cfg.n_query, cfg.n_pool) == (1500, 250, 500, 1500)
    monkeypatch.setenv("SLICS_EMOJI_SCALE", "big")
    with pytest.raises(ValueError, match="SLICS_EMOJI_SCALE"):
        config_from_env()
    monkeypatch.setenv("SLICS_EMOJI_SCALE", "0")
    with pytest.raises(ValueError, match=r"\(0, 10\]"):
        config_from_env()


def test_build_cache_reload_and_repair(tmp_path):
    stages = []
    cfg = EmojiWorldConfig(**CFG)
    ws = open_emoji_workspace(tmp_path, cfg, progress=lambda s, d, n: stages.append(s))
    n = 160
    assert ws.kind == "emoji" and ws.encoder == "emoji-small" and ws.generator == "emoji"
    assert ws.images.shape == (n, 64, 64, 3) and ws.Y.shape == (n, 12) and ws.Z.shape == (n, 71)
    assert {k: len(v) for k, v in ws.index.items()} == {"train": 80, "val": 20, "query": 20, "pool": 40}
    assert ws.extras["cond"].shape[0] == n and ws.extras["cond"].shape[1] != ws.X.shape[1]
    # every registered method is fitted (dictionary methods for every d0), nothing skipped
    assert set(ws.models) == {(m, d) for m in ("S-SVD", "S-SLiCS", "U-SLiCS") for d in (2, 3)} | {
        ("UF", None), ("F-SpLiCE", None), ("SpLiCE", None), (ORACLE_FSPLICE, None)}
    assert not ws.skipped
    assert any(s.startswith("render") for s in stages) and any(s.startswith("fit") for s in stages)
    # centring: mean of the training scenes' *unit* embeddings, then unit(unit(x) - mean) (sec. 4.1)
    tr = ws.index["train"]
    U = ws.raw / np.linalg.norm(ws.raw, axis=1, keepdims=True)
    np.testing.assert_allclose(ws.mean, U[tr].mean(0), atol=1e-6)
    C = U - U[tr].mean(0)
    np.testing.assert_allclose(ws.X, C / np.linalg.norm(C, axis=1, keepdims=True), atol=1e-5)
    # the render is the documented one: same scenes and embeddings as render_emoji_world
    data, split = render_emoji_world(cfg)
    np.testing.assert_array_equal(data.extras["images"], ws.images)
    np.testing.assert_array_equal(split.train, ws.index["train"])
    # d0 chosen on the validation split: the best sub-label mAP of an independent sweep that refits S-SLiCS
    ed, _ = eval_data(data, split)
    recs = sweep_d0(ed, split, (2, 3), modes=("partial",), n_iter=CFG["n_iter"])
    assert [r["d0"] for r in ws.d0_scores] == [2, 3]
    for mine, ref in zip(ws.d0_scores, recs):
        assert mine["sub"] == pytest.approx(ref["sub"], abs=1e-4)
        assert mine["general"] == pytest.approx(ref["general"], abs=1e-4)
    assert ws.chosen_d0 == choose_d0(recs)

    stages.clear()
    again = open_emoji_workspace(tmp_path, cfg, progress=lambda s, d, n: stages.append(s))
    assert not stages  # read from the cache, nothing rebuilt
    assert np.array_equal(again.images, ws.images) and np.allclose(again.X, ws.X)
    np.testing.assert_allclose(again.model("S-SLiCS", 2).atoms_, ws.model("S-SLiCS", 2).atoms_)
    assert again.chosen_d0 == ws.chosen_d0 and again.d0_scores == ws.d0_scores

    # damage the cache: truncated arrays file -> rebuilt, same content
    arr = ws.path / "arrays.npz"
    arr.write_bytes(arr.read_bytes()[:1000])
    stages.clear()
    repaired = open_emoji_workspace(tmp_path, cfg, progress=lambda s, d, n: stages.append(s))
    assert any("cache unusable" in s for s in stages)
    assert np.array_equal(repaired.images, ws.images)
    (ws.path / "workspace.json").write_text("{not json")
    assert len(open_emoji_workspace(tmp_path, cfg)) == n


def test_emoji_fsplice_decomposes_over_general_words_grouped_by_the_papers_rule(tmp_path):
    """F-SpLiCE and SpLiCE decompose over wordfreq's frequent words (distractors, not only label names), each
    word in the group of the concept prompt closest in cosine after the paper's centring, recomputed here from
    the encoder; the label names alone are only the oracle's vocabulary; captions keep the label names."""
    from slics_core.emoji.world import PROMPT_TEMPLATE, emoji_vocabulary, splice_vocabulary
    from slics_core.encoders import create_encoder

    ws = open_emoji_workspace(tmp_path, EmojiWorldConfig(**CFG))
    names = emoji_vocabulary()
    fs, sp, oracle = (ws.model(m).splice for m in ("F-SpLiCE", "SpLiCE", ORACLE_FSPLICE))
    assert fs.words == sp.words == splice_vocabulary() and len(fs.words) >= 500
    assert len(set(fs.words) - set(names)) > 0.9 * len(fs.words)  # mostly words that are no label name
    assert oracle.words == names and ws.vocab_words == names
    enc = create_encoder("emoji-small", device="cpu", half=False)

    def unit(A):
        A = np.asarray(A, dtype=np.float64)
        return A / np.linalg.norm(A, axis=1, keepdims=True)

    for model, words in ((fs, fs.words), (oracle, names)):
        W = unit(enc.encode_texts(words))
        mean = W.mean(0)
        Wc = unit(W - mean)
        Pc = unit(unit(enc.encode_texts([PROMPT_TEMPLATE.format(c) for c in ws.concept_names])) - mean)
        np.testing.assert_allclose(model.dictionary, Wc, atol=1e-5)
        np.testing.assert_array_equal(model.groups, np.argmax(Wc @ Pc.T, axis=1))
    # a changed SpLiCE vocabulary changes the cache folder (a stale cache is never reused)
    import slics_core.emoji.world as world
    from slics_core.explorer import emoji_build

    before = emoji_build._emoji_folder(tmp_path, EmojiWorldConfig(**CFG))
    assert before == ws.path
    old = world.SPLICE_WORDS
    try:
        world.SPLICE_WORDS = old + 1
        assert emoji_build._emoji_folder(tmp_path, EmojiWorldConfig(**CFG)) != before
    finally:
        world.SPLICE_WORDS = old


def test_unwritable_emoji_cache_is_one_message(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(OSError, match="SLICS_EMOJI_CACHE"):
        open_emoji_workspace(blocker / "sub", EmojiWorldConfig(**CFG))


def test_cli_build_and_report(tmp_path, capsys):
    from slics_core.cli import main

    args = ["--cache-dir", str(tmp_path), "--n-train", "80", "--n-val", "20", "--n-query", "20",
            "--n-pool", "40", "--d0", "2", "--quiet"]
    assert main(["emoji-build", *args]) == 0
    assert "emoji workspace ready" in capsys.readouterr().out
    assert main(["emoji-report", "--json", *args]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert 0 <= rep["zero_shot_precision_at_2"] <= 1
    assert rep["chosen_d0"] == 2 and rep["map_d0"] == 2
    assert rep["n_scenes"] == {"train": 80, "val": 20, "query": 20, "pool": 40}
    assert set(rep["map_at_20"]) == {"S-SVD", "S-SLiCS", "U-SLiCS", "UF", "F-SpLiCE", "SpLiCE", ORACLE_FSPLICE}
    assert rep["map_at_20"][ORACLE_FSPLICE]["oracle"] and "oracle" not in rep["map_at_20"]["F-SpLiCE"]
    others = {m: v for m, v in rep["map_at_20"].items() if m != ORACLE_FSPLICE}
    assert rep["map_best"]["general"] in {m for m, v in others.items()
                                          if v["general"] == max(o["general"] for o in others.values())}
    assert ("generation_concept_accuracy" in rep) or ("generation_error" in rep)
    assert main(["emoji-build", "--cache-dir", str(tmp_path), "--n-train", "0"]) == 2


class _FixedJudge:
    """A stand-in judge answering one class for every image (planted verdicts), with probability ``p``."""

    def __init__(self, name, p=1.0):
        from slics_core.emoji.judge import CLASSES

        self.k, self.p, self.n = CLASSES.index(name), float(p), len(CLASSES)

    def predict(self, images):
        return np.full(len(images), self.k)

    def predict_proba(self, images):
        out = np.full((len(images), self.n), (1 - self.p) / (self.n - 1))
        out[:, self.k] = self.p
        return out


def test_judged_generation_counts_and_contact_sheet(tmp_path):
    from slics_core.emoji.catalog import CATEGORY_SUPER
    from slics_core.emoji.judge import NO_OBJECT
    from slics_core.explorer.emoji_report import contact_sheet, judged_generation

    ws = open_emoji_workspace(tmp_path, EmojiWorldConfig(**CFG))
    rep = judged_generation(ws, judge=_FixedJudge("dog"), n_queries=20, n_single=142)["judged"]
    q = ws.index["query"][:20]
    model = ws.model("S-SLiCS", ws.default_d0)
    # independent count of the component images: (query, present concept) pairs with a non-zero component
    pairs = [(r, j) for r in q for j in np.flatnonzero(ws.Y[r])
             if np.linalg.norm(model.project(ws.X[r:r + 1], int(j))) > 1e-12]
    animal = ws.concept_names.index("animal")
    comp = rep["components"]
    assert comp["n"] == len(pairs) and comp["no_object"] == 0.0
    assert comp["right_concept"] == pytest.approx(np.mean([j == animal for _, j in pairs]), abs=1e-4)
    dog = ws.sub_names.index("dog")
    assert comp["right_category"] == pytest.approx(np.mean([j == animal and ws.Z[r, dog] for r, j in pairs]),
                                                   abs=1e-4)
    whole = rep["whole_scene"]
    assert whole["n"] == 20 and whole["right_concept"] == pytest.approx(np.mean(ws.Y[q, animal]), abs=1e-4)
    assert whole["clean"]["right_category"] == pytest.approx(np.mean(ws.Z[q, dog]), abs=1e-4)
    single = rep["single_object"]  # 142 renders, categories cycled: 2 dogs, 2 * 10 animals of 71 * 2
    n_animal = sum(CATEGORY_SUPER[c] == "animal" for c in CATEGORY_SUPER)
    assert single["n"] == 142 and single["right_category"] == pytest.approx(2 / 142, abs=1e-4)
    assert single["right_concept"] == pytest.approx(2 * n_animal / 142, abs=1e-4)
    strips = rep["atom_interpolation"]
    assert strips["strips_object_to_other_object"] == 0 and len(strips["alphas"]) == 5
    none = judged_generation(ws, judge=_FixedJudge(NO_OBJECT), n_queries=20, n_single=10)["judged"]
    assert none["components"]["no_object"] == 1.0 and none["components"]["right_concept"] == 0.0
    # the strict reading: a confident verdict stands, an unsure one (below the threshold) is "no object"
    assert comp["strict"] == {k: comp[k] for k in ("n", "right_concept", "right_category", "no_object")}
    unsure = judged_generation(ws, judge=_FixedJudge("dog", p=0.4), n_queries=20, n_single=10)["judged"]
    assert unsure["components"]["right_concept"] == comp["right_concept"]
    assert unsure["components"]["strict"]["no_object"] == 1.0 and unsure["single_object"]["strict"]["no_object"] == 1.0
    # the reader block: the generator's own most likely object, counted independently
    gen = load_workspace_generator(ws)
    tops = [gen.describe(model.project(ws.X[r:r + 1], int(j)))[0][0][0] for r, j in pairs]
    names = list(ws.concept_names)
    assert comp["reader"]["right_concept"] == pytest.approx(
        np.mean([CATEGORY_SUPER[t] == names[j] for t, (_, j) in zip(tops, pairs)]), abs=1e-4)
    assert comp["reader"]["right_category"] == pytest.approx(
        np.mean([ws.Z[r, ws.sub_names.index(t)] and CATEGORY_SUPER[t] == names[j] for t, (r, j) in zip(tops, pairs)]),
        abs=1e-4)
    sheet = contact_sheet(ws, n_queries=5, seed=1, judge=_FixedJudge("dog"), cell=64)
    rows = np.sort(np.random.default_rng(1).choice(ws.index["query"], size=5, replace=False))
    n_cols = 2 + max(int(ws.Y[r].sum()) for r in rows)
    assert sheet.size == (n_cols * 68 + 4, 5 * (64 + 30 + 4) + 4)
    # the first row's scene is pasted as is (nearest-neighbour, same size)
    np.testing.assert_array_equal(np.asarray(sheet)[4:68, 4:68], ws.images[rows[0]])


def test_staged_start_preview_then_the_same_world(tmp_path):
    """start_emoji_workspace: a preview (first scenes, provisional d0) is published first, then exactly the
    workspace open_emoji_workspace builds; progress moves forward and reaches 100 %."""
    import time

    from slics_core.emoji.world import preview_config
    from slics_core.explorer.emoji_build import PROVISIONAL_D0, start_emoji_workspace

    cfg = EmojiWorldConfig(n_train=260, n_val=60, n_query=80, n_pool=200, d0_values=(2, 3), n_iter=2)
    handle = start_emoji_workspace(tmp_path / "staged", cfg, preview_scenes=256)
    seen, previews = [], []
    deadline = time.monotonic() + 600
    while not handle.finished and time.monotonic() < deadline:
        snap = handle.snapshot()
        seen.append(snap["percent"])
        ws = handle.workspace
        if ws is not None and ws.building is not None and not previews:
            previews.append(ws)
        time.sleep(0.05)
    assert handle.finished and handle.error is None, handle.error
    assert seen == sorted(seen) and handle.percent() == 100.0 and len(set(seen)) > 3
    # the preview: the first 256 scenes, S-SLiCS at the provisional d0 and UF, generator "being built"
    assert previews, "no preview was published"
    pv = previews[0]
    pc = preview_config(cfg, 256)
    assert len(pv) == 256 and {k: len(v) for k, v in pv.index.items()} == {
        "train": pc.n_train, "val": pc.n_val, "query": pc.n_query, "pool": pc.n_pool}
    assert set(pv.models) == {("S-SLiCS", PROVISIONAL_D0), ("UF", None)} and pv.chosen_d0 is None
    assert pv.default_d0 == PROVISIONAL_D0 and pv.path != handle.workspace.path
    with pytest.raises(FileNotFoundError, match="being built"):
        load_workspace_generator(pv)
    # the whole workspace equals a build from scratch (same scenes, embeddings, models, chosen d0) and is cached
    ws = handle.workspace
    ref = open_emoji_workspace(tmp_path / "direct", cfg)
    assert ws.building is None and len(ws) == cfg.n_total
    np.testing.assert_array_equal(pv.images, ws.images[:256])
    # the preview's embeddings may come from the shipped table (assets/emoji/preview_table.npz), written on
    # another machine: equal up to float rounding; the whole world is embedded by the encoder here
    np.testing.assert_allclose(pv.raw, ws.raw[:256], atol=2e-5)
    for name in ("raw", "X", "images"):
        np.testing.assert_array_equal(getattr(ws, name), getattr(ref, name))
    np.testing.assert_array_equal(ws.extras["cond"], ref.extras["cond"])
    assert set(ws.models) == set(ref.models) and ws.chosen_d0 == ref.chosen_d0 and ws.d0_scores == ref.d0_scores
    for key, m in ref.models.items():
        if hasattr(m, "atoms_"):
            np.testing.assert_array_equal(ws.models[key].atoms_, m.atoms_)
    again = start_emoji_workspace(tmp_path / "staged", cfg, preview_scenes=256)
    assert again.finished and again.workspace.building is None and again.generation == 1  # from the cache


def test_staged_start_small_world_and_failures(tmp_path):
    import time

    from slics_core.explorer import emoji_build as wsmod

    cfg = EmojiWorldConfig(**CFG)  # 160 scenes: no preview, built at once in the background
    handle = wsmod.start_emoji_workspace(tmp_path / "small", cfg, preview_scenes=256)
    deadline = time.monotonic() + 300
    while not handle.finished and time.monotonic() < deadline:
        assert handle.workspace is None  # nothing half-built is published
        time.sleep(0.05)
    assert handle.error is None and len(handle.workspace) == 160 and handle.generation == 1
    with pytest.raises(ValueError, match="multiple of 256"):
        wsmod.start_emoji_workspace(tmp_path / "x", cfg, preview_scenes=100)

    # the build process dies: the handle says so in one line, nothing is published
    failed = wsmod.start_emoji_workspace(tmp_path / "killed", cfg, preview_scenes=256)
    failed.process.kill()
    deadline = time.monotonic() + 120
    while not failed.finished and time.monotonic() < deadline:
        time.sleep(0.05)
    assert failed.workspace is None and "build process stopped" in failed.error


def test_models_fingerprint_follows_the_weights_contents(tmp_path, monkeypatch):
    """The cache key changes with any byte of either encoder (a retrained text tower included), not with
    a copy's timestamps."""
    import os
    import shutil

    import slics_core.emoji.models as em
    from slics_core.emoji.world import models_fingerprint

    for name in ("small", "large"):
        shutil.copytree(em.model_dir(name), tmp_path / f"emoji-{name}")
    monkeypatch.setattr(em, "MODELS_DIR", tmp_path)
    first = models_fingerprint()
    w = tmp_path / "emoji-large" / em.WEIGHTS_NAME
    os.utime(w, ns=(1, 1))
    assert models_fingerprint() == first
    data = bytearray(w.read_bytes())
    data[-1] ^= 1
    w.write_bytes(bytes(data))
    os.utime(w, ns=(2, 2))
    assert models_fingerprint() != first


def test_build_messages_round_trip_and_are_checked():
    """The build process's protocol: every message reads back as written; other lines are not messages; a
    message with a wrong field is refused naming it."""
    from slics_core.explorer.emoji_build import Failed, Published, Stage, encode_message, parse_message

    for msg in (Stage("preview", "render scenes", 3, 10), Published("final", "/tmp/ws"), Failed("disk full")):
        line = encode_message(msg)
        assert "\n" not in line and parse_message(line + "\n") == msg
    assert parse_message("Loading weights...") is None and parse_message('{"stage": "x"}') is None
    with pytest.raises(ValueError, match="'done'"):
        parse_message('{"kind": "stage", "phase": "", "stage": "fit", "done": "3", "total": 10}')
    with pytest.raises(ValueError, match="'preview' or 'final'"):
        parse_message('{"kind": "publish", "which": "other", "path": "/x"}')
