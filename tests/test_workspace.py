"""slics_core.explorer.workspace and .build: dataset workspaces (`slics workspace`) and the emoji workspace."""
import json

import numpy as np
import pytest
from PIL import Image
from test_cli_data import toy  # noqa: F401  (fixture)

from slics_core.cli import main
from slics_core.emoji.world import config_from_env
from slics_core.explorer.build import build_workspace_from_cache
from slics_core.explorer.emoji_build import open_emoji_workspace
from slics_core.explorer.encoding import embed_query, load_query_encoder, workspace_vocabulary
from slics_core.explorer.generation import load_workspace_generator
from slics_core.explorer.workspace_files import list_workspaces, load_workspace
from slics_core.slics import SLiCS


def _embed_toy(toy_dir, monkeypatch):
    """Embed the toy folder into ``toy_dir/cache`` ("clip" preprocessing: a workspace must centre with the
    training mean); return the cache."""
    cache = toy_dir / "cache"
    monkeypatch.setattr("sys.argv", ["slics"])
    assert main(["embed", "--dataset", "folder", "--images", str(toy_dir / "photos"), "--labels",
                 str(toy_dir / "labels.csv"), "--encoder", "toyenc:make", "--cache", str(cache), "--batch-size", "16",
                 "--no-progress"]) == 0
    return cache


@pytest.fixture
def dataset_ws(toy, tmp_path, monkeypatch):  # noqa: F811
    cache = _embed_toy(toy, monkeypatch)
    root = tmp_path / "workspaces"
    monkeypatch.setenv("SLICS_WORKSPACES", str(root))
    assert main(["workspace", "--cache", str(cache), "--name", "toys", "--d0", "1", "2", "--n-iter", "3",
                 "--quiet"]) == 0
    return toy, root / "toys"


def test_dataset_workspace_matches_independent_fit(dataset_ws, capsys):
    toy_dir, folder = dataset_ws
    ws = load_workspace(folder)
    assert ws.name == "toys" and ws.kind == "dataset" and len(ws) == 90  # broken.jpg was skipped
    rows = np.concatenate([ws.index[s] for s in ("train", "val", "query", "pool")])
    assert np.array_equal(np.sort(rows), np.arange(90))  # disjoint splits covering everything
    # preprocessing recomputed by hand: unit, minus the training mean of unit rows, unit
    from slics_core.store import EmbeddingStore

    E, ids, _ = EmbeddingStore(toy_dir / "cache").load()
    U = E / np.linalg.norm(E, axis=1, keepdims=True)
    C = U - U[ws.index["train"]].mean(0)
    np.testing.assert_allclose(ws.X, C / np.linalg.norm(C, axis=1, keepdims=True), atol=1e-6)
    np.testing.assert_allclose(ws.preprocess(E[:5]), ws.X[:5], atol=1e-6)
    # the stored models are exactly a fit on the training rows
    tr = ws.index["train"]
    ref = SLiCS(n_atoms=2, n_iter=3, random_state=0).fit(ws.X[tr].astype(np.float64), ws.Y[tr].astype(float))
    np.testing.assert_allclose(ws.model("S-SLiCS", 2).atoms_, ref.atoms_, atol=1e-5)
    assert ws.model("S-SVD", 1).n_iter_ == 0
    assert set(ws.models) == {(m, d) for m in ("S-SLiCS", "U-SLiCS", "S-SVD") for d in (1, 2)} | {("UF", None)}
    # the toy encoder is `module:factory` code: never resolved from the workspace file, so no vocabulary
    assert set(ws.skipped) == {"F-SpLiCE", "SpLiCE"} and ws.vocab_words is None
    # images come from their files
    i = ids.index("p007.jpg")
    photo = np.asarray(Image.open(toy_dir / "photos" / "p007.jpg").convert("RGB"))
    assert np.array_equal(np.asarray(ws.image(i)), photo)
    assert ws.labels_of(i)["concepts"] == [c for c, y in zip(["red", "green", "blue"], ws.Y[i]) if y]
    # the recorded name is code (module:factory): a workspace file may not make the server run it
    with pytest.raises(FileNotFoundError, match="module:factory"):
        load_query_encoder(ws)
    # a query embedded with the same encoder (given from Python) lands on the stored row
    import toyenc

    raw, x = embed_query(ws, toyenc.make(), Image.open(toy_dir / "photos" / "p007.jpg"))
    np.testing.assert_allclose(x, ws.X[i], atol=1e-5)
    assert list_workspaces()[0] == ("toys", folder)
    assert main(["workspace", "--info", str(folder)]) == 0
    assert json.loads(capsys.readouterr().out)["splits"]["train"] == len(tr)


def test_dataset_workspace_damage_and_errors(dataset_ws, tmp_path):
    _, folder = dataset_ws
    ws = load_workspace(folder)
    (folder / "arrays.npz").write_bytes((folder / "arrays.npz").read_bytes()[:100])
    with pytest.raises(ValueError, match="damaged"):
        load_workspace(folder)
    with pytest.raises(FileNotFoundError, match="slics workspace"):
        load_workspace(tmp_path / "nowhere")
    with pytest.raises(ValueError, match="no S-SLiCS model with d0=7"):
        ws.model("S-SLiCS", 7)
    with pytest.raises(ValueError, match="3 features"):
        ws.preprocess(np.ones((1, 3)))
    with pytest.raises(ValueError, match="NaN"):
        ws.preprocess(np.full((1, ws.X.shape[1]), np.nan))
    with pytest.raises(FileNotFoundError, match="Stable Diffusion"):
        load_workspace_generator(ws)
    ws.paths[0] = str(tmp_path / "gone.jpg")
    assert ws.thumbnail(0, 32).size == (32, 32)  # unreadable file: placeholder tile, no crash
    with pytest.raises(ValueError, match="labelled items"):
        build_workspace_from_cache(_tiny_cache(tmp_path), tmp_path / "w", vocabulary="none")


def _tiny_cache(tmp_path):
    from slics_core.embed import embed_dataset

    class Enc:
        id = "t"

        def encode_images(self, images, batch_size=32):
            return np.array([[1.0, float(k), 2.0] for k in range(len(images))])

    imgs = []
    for k in range(5):
        p = tmp_path / f"t{k}.png"
        Image.new("RGB", (4, 4), (k * 40, 0, 0)).save(p)
        imgs.append(str(p))
    embed_dataset(imgs, [f"t{k}" for k in range(5)], Enc(), tmp_path / "tc", batch_size=5, progress=False,
                  labels={"Y": np.eye(5, 2, dtype=np.uint8) + np.eye(5, 2, -2, dtype=np.uint8),
                          "concept_names": np.array(["a", "b"])})
    return tmp_path / "tc"


@pytest.fixture(scope="module")
def emoji_ws():
    return open_emoji_workspace()  # small: tests/conftest.py sets SLICS_EMOJI_SCALE


def test_emoji_workspace_queries_round_trip(emoji_ws):
    ws = emoji_ws
    cfg = config_from_env()
    assert {k: len(v) for k, v in ws.index.items()} == {"train": cfg.n_train, "val": cfg.n_val,
                                                        "query": cfg.n_query, "pool": cfg.n_pool}
    assert ws.concept_names[0] == "person" and ws.Z.shape[1] == 71
    np.testing.assert_allclose(ws.preprocess(ws.raw[:20]), ws.X[:20], atol=1e-5)
    q = int(ws.index["query"][3])
    raw, x = embed_query(ws, load_query_encoder(ws), ws.image(q))
    cos = float(raw @ ws.raw[q]) / (np.linalg.norm(raw) * np.linalg.norm(ws.raw[q]))
    assert cos > 0.999 and float(x @ ws.X[q]) > 0.999
    zs = ws.zero_shot(ws.raw[[q]])
    u = ws.raw[q] / np.linalg.norm(ws.raw[q])
    T = ws.concept_text / np.linalg.norm(ws.concept_text, axis=1, keepdims=True)
    np.testing.assert_allclose(zs[0], T @ u, atol=1e-6)


def test_emoji_vocabulary_and_generator(emoji_ws):
    ws = emoji_ws
    words, W = workspace_vocabulary(ws)
    assert {"dog", "pizza", "animal", "food", "vehicle"} <= set(words)
    np.testing.assert_allclose(np.linalg.norm(W, axis=1), 1.0, atol=1e-5)
    words2, W2 = workspace_vocabulary(ws)  # embedded once, at build time
    assert words2 == words and np.array_equal(W2, W)
    gen = load_workspace_generator(ws)
    tr = ws.index["train"]
    # the alignment is an orthogonal map fitted on the training pairs
    A = gen.alignment.transform(ws.X[tr[:50]])
    np.testing.assert_allclose(np.linalg.norm(A, axis=1), 1.0, atol=1e-5)
    q = int(ws.index["query"][0])
    j = int(np.flatnonzero(ws.Y[q])[0])
    V = ws.model().project(ws.X[[q]], j)
    images = gen.generate(np.vstack([V, ws.X[[q]]]), seed=1)
    assert len(images) == 2 and images[0].size == (64, 64) and images[0].mode == "RGB"
    assert not np.array_equal(np.asarray(images[0]), np.asarray(images[1]))
    with pytest.raises(ValueError, match="zero component"):
        gen.generate(np.zeros((1, ws.X.shape[1])))


def test_every_page_runs_on_a_dataset_workspace(dataset_ws, monkeypatch):
    """Switch the app to a workspace built with `slics workspace` (toy encoder, no generator,
    no sub-labels) and open every page: each renders without an exception."""
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    _, folder = dataset_ws
    root = Path(__file__).resolve().parent.parent
    at = AppTest.from_file(str(root / "app.py"), default_timeout=300).run()
    sel = at.selectbox(key="ws_select")
    label = next(o for o in sel.options if o == folder.name or f"({folder.name})" in o)
    sel.select(label).run()
    assert not at.exception
    assert at.metric[0].value == "90"  # the Home page now describes the toy workspace
    for page in ("retrieve", "subspaces", "atoms", "captions", "generate", "evaluate", "learn", "cones"):
        at.switch_page(f"app_pages/{page}.py").run()
        assert not at.exception, (page, at.exception)
        if page == "generate":  # no generator for a dataset workspace here: a message, not a crash
            assert any("Stable Diffusion" in w.value for w in at.warning)
    at.switch_page("app_pages/home.py").run()
    assert at.metric[0].value == "90"


def test_dataset_workspace_chooses_d0_on_validation(dataset_ws):
    from slics_core.retrieval import ConceptRetriever

    _, folder = dataset_ws
    ws = load_workspace(folder)
    best, best_d0 = -1.0, None
    val, pool = ws.index["val"], ws.index["pool"]
    # independent AP@20 (no sub-labels here, so general labels decide), ties to the smaller d0
    for d0 in ws.d0_values:
        r = ConceptRetriever(ws.model("S-SLiCS", d0), ws.X[pool], backend="exact")
        res = r.search(ws.X[val], k=20)
        scores = []
        for qi, q in enumerate(val):
            for j in np.flatnonzero(ws.Y[q]):
                rel = ws.Y[pool[res.indices[qi, j]], j]
                hits = np.cumsum(rel)
                scores.append(float((hits / np.arange(1, len(rel) + 1) * rel).sum() / max(rel.sum(), 1)))
        m = float(np.mean(scores))
        if m > best + 1e-12:
            best, best_d0 = m, d0
    assert ws.chosen_d0 == best_d0 and ws.default_d0 == best_d0


def test_fit_progress_moves_batch_by_batch_within_each_fit(toy, tmp_path, monkeypatch):  # noqa: F811
    cache = _embed_toy(toy, monkeypatch)
    calls = []
    build_workspace_from_cache(cache, tmp_path / "ws", vocabulary="none", d0_values=[1, 2], n_iter=3,
                               methods=["S-SVD", "S-SLiCS"], progress=lambda *a: calls.append(a))
    fits = [c for c in calls if c[0].startswith("fit")]
    # jobs: S-SVD d0=1, S-SVD d0=2 (no epochs), S-SLiCS d0=1, S-SLiCS d0=2 (3 full-batch epochs each)
    for job, stage in [(2, "fit: model 3 of 4, S-SLiCS d0=1"), (3, "fit: model 4 of 4, S-SLiCS d0=2")]:
        mine = [c for c in fits if c[0] == stage]
        assert mine == [(stage, job, 4)] + [(stage, job * 3 + k, 12) for k in (1, 2, 3)]
    assert [c for c in fits if c[0] == "fit: model 1 of 4, S-SVD d0=1"] == [("fit: model 1 of 4, S-SVD d0=1", 0, 4)]
    fractions = [done / total for _, done, total in fits]
    assert fractions == sorted(fractions) and fits[-1] == ("fit", 4, 4)


def test_every_workspace_field_is_declared_with_where_it_is_saved(dataset_ws, tmp_path):
    """Workspace fields are declared once: header and array fields are saved and read back from that
    declaration; only the fields with files of their own (or none) are outside it."""
    from dataclasses import fields

    from slics_core.explorer.workspace import Workspace

    where = {f.name: f.metadata.get("stored") for f in fields(Workspace)}
    assert {n for n, w in where.items() if w is None} == {"path", "index", "models", "images", "extras", "building",
                                                          "_opened"}  # what a workspace opened (shards, pool index)
    from slics_core.explorer.workspace_files import save_workspace

    _, folder = dataset_ws
    ws = load_workspace(folder)
    ws.captions = [f"item {i}" for i in range(len(ws))]  # every optional header field set
    again = load_workspace(save_workspace(ws, tmp_path / "copy"))
    for name, w in where.items():
        if w == "header":
            assert getattr(again, name) == getattr(ws, name), name
        elif w == "array" and getattr(ws, name) is not None:
            np.testing.assert_array_equal(getattr(again, name), getattr(ws, name))
        elif w == "labels":
            assert again.labels == ws.labels and again.labels is not ws.labels
    head = json.loads((tmp_path / "copy" / "workspace.json").read_text())
    assert {n for n, w in where.items() if w == "header"} <= set(head) and head["captions"][1] == "item 1"


def test_text_queries_and_vocabulary_follow_the_one_text_rule(emoji_ws):
    """A text query and the prepared vocabulary are centred on the vocabulary's mean of unit rows and
    re-normalised (computed here by hand), not on the image mean."""
    from slics_core.explorer.encoding import embed_text_query, prepared_vocabulary, text_mean

    ws = emoji_ws
    W = np.asarray(ws.vocab_text, dtype=np.float64)
    U = W / np.linalg.norm(W, axis=1, keepdims=True)
    mu = U.mean(axis=0)
    np.testing.assert_allclose(text_mean(ws), mu, atol=1e-12)
    words, Wp = prepared_vocabulary(ws)
    want = (U - mu) / np.linalg.norm(U - mu, axis=1, keepdims=True)
    assert words == list(ws.vocab_words)
    np.testing.assert_allclose(Wp, want, atol=1e-6)
    raw, x = embed_text_query(ws, load_query_encoder(ws), "a dog")
    r = raw.astype(np.float64) / np.linalg.norm(raw)
    np.testing.assert_allclose(x, (r - mu) / np.linalg.norm(r - mu), atol=1e-5)
    assert not np.allclose(x, ws.preprocess(raw)[0], atol=1e-3)  # not the image centring


def test_the_generic_workspace_model_does_not_import_the_emoji_world():
    import subprocess
    import sys

    code = ("import sys, slics_core.explorer.workspace, slics_core.explorer.workspace_files, "
            "slics_core.explorer.build, slics_core.explorer.encoding; "
            "print(sorted(m for m in sys.modules if m.startswith('slics_core.emoji')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# ---------------------------------------------------------------------- d0 without a validation split
NO_VAL_D0 = (4, 1, 3, 2)  # planted: the fallback is the middle fitted d0, 3 (the larger middle one of 1 2 3 4)


def _no_val_data(n=120, d=16, S=3, seed=0):
    from slics_core.data import LabelledEmbeddings
    from slics_core.labels import Labels

    rng = np.random.default_rng(seed)
    Y = rng.random((n, S)) < 0.4
    Y[np.arange(n), np.arange(n) % S] = True  # every item labelled
    return LabelledEmbeddings(raw=rng.standard_normal((n, d)).astype(np.float32), ids=[f"i{i}" for i in range(n)],
                              labels=Labels(Y, ["a", "b", "c"]), name="noval")


@pytest.fixture
def no_val_ws(tmp_path, monkeypatch):
    """A workspace built with no validation split (several d0), under $SLICS_WORKSPACES as ``noval``."""
    from slics_core.explorer.build import build_workspace

    root = tmp_path / "workspaces"
    monkeypatch.setenv("SLICS_WORKSPACES", str(root))
    ws = build_workspace(_no_val_data(), root / "noval", n_train=60, n_val=0, n_query=20, d0_values=NO_VAL_D0,
                         n_iter=2, methods=["S-SVD", "S-SLiCS", "UF"])
    return ws, root / "noval"


def test_without_a_validation_split_the_build_and_the_model_use_one_fallback_d0(no_val_ws):
    import dataclasses

    from slics_core.evaluation import fallback_d0
    from slics_core.explorer import arrival, page_settings, scoring

    built, folder = no_val_ws
    assert len(built.index["val"]) == 0 and built.d0_values == [1, 2, 3, 4]
    again = load_workspace(folder)
    bare = dataclasses.replace(built, chosen_d0=None, d0_scores=[])  # what Workspace alone falls back to
    assert built.default_d0 == again.default_d0 == bare.default_d0 == fallback_d0(NO_VAL_D0) == 3
    assert not built.d0_on_validation and built.chosen_d0 is None
    # a workspace that records a d0 without the validation curve it was chosen on (an older build's
    # fallback) is not taken as chosen on validation: the one rule applies
    assert dataclasses.replace(built, chosen_d0=1).default_d0 == 3
    # the pages' first views were prepared for that d0 (and the build did not stop on the missing split)
    job = scoring.Job("S-SLiCS", 3, "partial", "query")
    desc = {"method": job.method, "d0": job.d0, "mode": job.mode, "split": job.split,
            "depth": scoring.stored_depth(page_settings.DEFAULT_K)}
    assert (folder / arrival.STORE / arrival._name(built, "rank", desc)).is_file()
    assert fallback_d0([]) is None and fallback_d0([5]) == 5 and fallback_d0([20, 5, 10]) == 10


def test_a_validation_choice_is_kept_and_said(dataset_ws):
    from slics_core.explorer.narration import d0_choice

    _, folder = dataset_ws
    ws = load_workspace(folder)
    assert ws.d0_on_validation and ws.default_d0 == ws.chosen_d0
    assert d0_choice(ws).startswith(f"d0 = {ws.chosen_d0}, chosen on the validation split: the best validation "
                                    "general-label mAP@20 of S-SLiCS")  # no sub-labels in the toy workspace


def test_build_reads_the_one_vocabulary_grammar(tmp_path):
    from slics_core.explorer.build import build_workspace

    class TextTower:  # the smallest encoder with a text tower: a word's letters counted
        has_text, id = True, "letters"

        def encode_texts(self, words, batch_size=256):
            return np.array([[w.count(c) + 0.1 for c in "abcdefgh"] for w in words], dtype=np.float32)

    (tmp_path / "words.txt").write_text("zebra\ncabbage\nbadge\n")
    common = dict(n_train=60, n_val=10, n_query=20, d0_values=(1,), n_iter=1, methods=["UF"], encoder=TextTower())
    for spec, words in (("none", None), (["bag", "cab"], ["bag", "cab"]), (str(tmp_path / "words.txt"),
                                                                         ["badge", "cabbage", "zebra"])):
        ws = build_workspace(_no_val_data(), None, vocabulary=spec, **common)
        assert ws.vocab_words == words, spec
    with pytest.raises(ValueError, match="'none' .*or a list of words; got 5"):
        build_workspace(_no_val_data(), None, vocabulary=5, **common)
