"""The emoji judge: an independent classifier of generated pictures (issue 13, item 2)."""
import numpy as np
import pytest
import torch

from slics_core.emoji.catalog import CATEGORIES, CATEGORY_SUPER
from slics_core.emoji.judge import (
    CLASSES,
    NO_OBJECT,
    EmojiJudge,
    build_judge,
    judge_dir,
    judge_rates,
    judge_training_set,
    no_object_images,
    object_images,
)
from slics_core.emoji.training.train_classifier import heldout_metrics, train_judge


def test_judge_rates_planted():
    i = CLASSES.index
    pred = np.array([i("dog"), i("cat"), i(NO_OBJECT), i("pizza"), i("car")])
    cats = [{"dog"}, {"dog", "cow"}, {"dog"}, {"banana"}, {"bus", "person"}]
    concepts = [{"animal"}, {"animal"}, {"animal"}, {"food"}, {"vehicle", "person"}]
    r = judge_rates(pred, cats, concepts)
    # right concept: dog, cat (animal), pizza (food), car (vehicle) -> 4/5; category: dog only -> 1/5
    assert r == {"n": 5, "right_concept": 0.8, "right_category": 0.2, "no_object": 0.2}
    assert judge_rates(np.array([], int), [], [])["right_concept"] is None
    with pytest.raises(ValueError, match="same length"):
        judge_rates(pred[:2], cats, concepts)


def test_training_data_is_seeded_and_labelled():
    X, y = object_images(6, seed=3, categories=CATEGORIES)
    X2, y2 = object_images(3, seed=3, start=3, categories=CATEGORIES)
    np.testing.assert_array_equal(X[3:], X2)  # render i does not depend on the batch
    assert [CLASSES[k] for k in y] == list(CATEGORIES[:6])
    assert not np.array_equal(object_images(6, seed=4, categories=CATEGORIES)[0], X)
    N = no_object_images(8, seed=3)
    np.testing.assert_array_equal(N, no_object_images(8, seed=3))
    assert N.shape == (8, 64, 64, 3) and N.dtype == np.uint8
    # blurred renders and ellipse fields are smooth: far less high-frequency energy than clean renders
    def detail(a):
        a = a.astype(float)
        return np.abs(np.diff(a, axis=1)).mean() + np.abs(np.diff(a, axis=2)).mean()
    assert detail(N[[0, 4, 3, 7]]) < 0.5 * detail(X)
    Xs, ys = judge_training_set(142, 20, seed=0)
    assert np.bincount(ys, minlength=len(CLASSES)).tolist() == [2] * 71 + [20]


def test_judge_learns_and_round_trips(tmp_path):
    # a few hundred steps on a 4-class problem: it must separate them on renders it never saw
    cats = ["stop sign", "banana", "car", "cat"]
    X, y = object_images(160, seed=1, categories=cats)
    N = no_object_images(40, seed=1)
    X, y = np.concatenate([X, N]), np.concatenate([y, np.full(40, CLASSES.index(NO_OBJECT))])
    torch.manual_seed(0)
    net = build_judge({"channels": [8, 16, 16, 32]})
    hist = train_judge(net, X, y, epochs=12, batch_size=32, lr=5e-3, seed=0)
    assert hist[-1]["loss"] < hist[0]["loss"]
    judge = EmojiJudge(net, {"channels": [8, 16, 16, 32]})
    Xt, yt = object_images(40, seed=2, categories=cats)
    assert np.mean(judge.predict(Xt) == yt) >= 0.7
    judge.save(tmp_path)
    back = EmojiJudge.load(tmp_path)
    p, q = judge.predict_proba(Xt), back.predict_proba(Xt)
    assert np.abs(p - q).max() < 0.05  # fp16 weights
    with pytest.raises(FileNotFoundError, match="train_classifier"):
        EmojiJudge.load(tmp_path / "none")
    with pytest.raises(ValueError, match=r"\(n, H, W, 3\)"):
        judge.predict(np.zeros((2, 64, 64), np.uint8))


def test_shipped_judge_on_held_out_renders():
    if not (judge_dir() / "judge.safetensors").is_file():
        pytest.fail("the emoji judge is not shipped in assets/models/emoji-judge")
    judge = EmojiJudge.load()
    m = heldout_metrics(judge, seed=777, n_objects=142, n_no_object=40, n_scenes=40)
    assert m["objects_category_accuracy"] >= 0.8
    assert m["objects_concept_accuracy"] >= 0.85
    assert m["objects_judged_no_object"] <= 0.1
    assert m["no_object_recall"] >= 0.8
    # on a render the judge names the category; the concept follows from it
    X, y = object_images(1, seed=9, categories=["stop sign"])
    assert CATEGORY_SUPER[CLASSES[int(judge.predict(X)[0])]] == "outdoor"
