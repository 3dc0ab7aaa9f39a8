"""Emoji training pieces: caption variants, the multi-positive CLIP loss."""
import numpy as np
import pytest
import torch

from slics_core.emoji.catalog import CATEGORY_SUPER
from slics_core.emoji.models import precision_at_2
from slics_core.emoji.training.train_clip import caption_variants, multi_positive_clip_loss


def test_caption_variants_say_what_they_mention():
    rng = np.random.default_rng(0)
    objs = ["dog", "pizza", "dog"]
    caps, ments = caption_variants(objs, rng)
    assert len(caps) == len(ments) == 4
    for cap, m in zip(caps, ments):
        for item in m:
            assert item[2:] in cap  # every asserted item is named in the caption
    assert ments[0] == ments[1] == {"c:dog", "c:pizza"}
    assert ments[2] == {"s:animal", "s:food"} and caps[2].startswith("a picture of ")
    assert len(ments[3]) == 1 and next(iter(ments[3]))[2:] in {CATEGORY_SUPER["dog"], CATEGORY_SUPER["pizza"]}
    assert caps[3] == "a picture of " + next(iter(ments[3]))[2:]


def _ref_loss(img, txt, scale, pos):
    # independent numpy computation of the symmetric soft-target cross-entropy
    L = scale * img @ txt.T

    def ce(logits, P):
        logp = logits - logits.max(1, keepdims=True)
        logp = logp - np.log(np.exp(logp).sum(1, keepdims=True))
        T = P / P.sum(1, keepdims=True)
        return -(T * logp).sum(1).mean()

    return 0.5 * (ce(L, pos) + ce(L.T, pos.T))


def test_multi_positive_loss_matches_reference_and_clip_loss():
    from open_clip.loss import ClipLoss

    g = torch.Generator().manual_seed(0)
    img = torch.nn.functional.normalize(torch.randn(6, 5, generator=g), dim=1)
    txt = torch.nn.functional.normalize(torch.randn(6, 5, generator=g), dim=1)
    scale = torch.tensor(7.0)
    eye = torch.eye(6, dtype=torch.bool)
    # only the diagonal positive: open_clip's ClipLoss
    assert torch.allclose(multi_positive_clip_loss(img, txt, scale, eye), ClipLoss()(img, txt, scale), atol=1e-6)
    pos = eye.clone()
    pos[0, 3] = pos[2, 1] = pos[4, 1] = True
    ref = _ref_loss(img.double().numpy(), txt.double().numpy(), 7.0, pos.double().numpy())
    assert float(multi_positive_clip_loss(img, txt, scale, pos)) == pytest.approx(ref, rel=1e-5)


def test_precision_at_2_by_hand():
    scores = np.array([[0.9, 0.8, 0.1], [0.2, 0.9, 0.5], [0.1, 0.2, 0.3]])
    labels = np.array([[1, 0, 0], [1, 1, 0], [0, 1, 1]])
    # row 0: one concept, top-1 right (1/1); row 1: top-2 {1, 2} -> 1/2; row 2: top-2 {2, 1} -> 2/2
    p_k, p_2 = precision_at_2(scores, labels)
    assert p_k == pytest.approx(4 / 5)
    assert p_2 == pytest.approx((1 + 1 + 2) / 6)


def test_scene_phrases_assert_only_what_they_name_and_skip_excluded():
    from slics_core.emoji.phrases import scene_phrases

    rng = np.random.default_rng(0)
    lay = {"background": "plain", "colour": (0.1, 0.8, 0.1), "cells": [0, 1, 3]}
    caps, ments = scene_phrases(["cat", "pizza", "car"], lay, rng, n=200)
    assert len(caps) == len(ments) == 200
    for cap, m in zip(caps, ments):
        assert 1 <= len(m) <= 3 and all(item[2:] in cap for item in m)
        assert m <= {"c:cat", "c:pizza", "c:car"}
        assert "background" not in cap or "green" in cap or "on a plain background" in cap
    # cells 0 (top-left) and 1 (top-right): the drawn relation, never the opposite one
    assert any("a cat left of a pizza" in c for c in caps) and not any("a cat right of a pizza" in c for c in caps)
    assert any("a pizza above a car" in c for c in caps) and not any("a pizza below a car" in c for c in caps)
    assert not any(f"a cat {r} a car" in c for r in ("left of", "right of", "above", "below") for c in caps)  # diagonal
    ban = frozenset(c for c in caps if c.startswith("a cat "))
    caps2, _ = scene_phrases(["cat", "pizza", "car"], lay, np.random.default_rng(0), n=200, exclude=ban)
    assert not ban & set(caps2)


def test_colour_names_and_relations():
    from slics_core.emoji.phrases import colour_name, relation

    assert [colour_name(c) for c in [(1, 1, 1), (0.5, 0.5, 0.5), (0.05, 0.05, 0.05), (0.9, 0.1, 0.1),
                                     (0.1, 0.8, 0.1), (0.1, 0.2, 0.9), (0.95, 0.9, 0.1), (0.6, 0.1, 0.8)]] == \
        ["white", "grey", "black", "red", "green", "blue", "yellow", "purple"]
    assert relation(0, 1) == "left of" and relation(3, 2) == "right of"
    assert relation(0, 2) == "above" and relation(3, 1) == "below"
    assert relation(0, 3) == "next to" and relation(None, 2) == "next to"


def test_benchmark_phrases_are_fixed_and_pair_different_concepts(ws):
    from slics_core.emoji.catalog import CATEGORY_SUPER
    from slics_core.emoji.phrases import BENCH_TEMPLATES, benchmark_phrases

    ph = benchmark_phrases()
    assert len(ph) == 50 and len({p for p, _, _ in ph}) == 50 and ph == benchmark_phrases()
    assert ph[0][0] == "a laptop next to a sandwich"  # the set docs/text_queries.md was measured on
    # the test world's sub-labels give the same phrases
    assert benchmark_phrases(ws.sub_names, ws.sub_to_concept) == ph
    for k, (p, a, b) in enumerate(ph):
        na, nb = ws.sub_names[a], ws.sub_names[b]
        assert p == BENCH_TEMPLATES[k % 3].format(a=na, b=nb) and CATEGORY_SUPER[na] != CATEGORY_SUPER[nb]


def test_caption_table_and_positives():
    from slics_core.emoji.training.train_clip import caption_table, positives

    def tok(texts):
        return torch.tensor([[len(t)] for t in texts])

    objects = [["cat", "pizza"], ["car"]]
    variants = [(["a cat", "a picture of animal", "a cat"], [{"c:cat"}, {"s:animal"}, {"c:cat"}]),
                (["a car", "a picture of vehicle", "a cat"], [{"c:car"}, {"s:vehicle"}, {"c:cat"}])]
    tokens, ids, items, mentions = caption_table(variants, objects, tok)
    assert len(tokens) == 4 and ids[0, 0] == ids[0, 2] == ids[1, 2]  # one row per distinct caption
    pos = positives(items, mentions[torch.arange(2), torch.tensor([1, 2])])
    # caption 0 "a picture of animal" is true of scene 0 only; caption 1 "a cat" also of scene 0 only
    assert pos.tolist() == [[True, True], [False, False]]
    with pytest.raises(ValueError):
        caption_table([(["a"], [set()]), (["a", "b"], [set(), set()])], objects, tok)


def test_text_only_training_keeps_the_image_tower(tmp_path):
    from slics_core.emoji.models import encode_images, load_emoji_clip
    from slics_core.emoji.scenes import make_scenes
    from slics_core.emoji.training.train_clip import main, text_parameters, visual_digest

    before, _, _ = load_emoji_clip("small")
    assert main(["--size", "small", "--text-only", "--init", "assets/models", "--out", str(tmp_path),
                 "--n-train", "64", "--steps", "2", "--batch-size", "32", "--eval-every", "2", "--lr", "1e-3"]) == 0
    after, _, _ = load_emoji_clip("small", tmp_path)
    sb, sa = before.state_dict(), after.state_dict()
    assert all(torch.equal(sb[k], sa[k]) for k in sb if k.startswith("visual.") or k == "logit_scale")
    assert visual_digest(before) == visual_digest(after)
    names = {n for n, _ in text_parameters(after)}
    assert "token_embedding.weight" in names and not any(n.startswith("visual.") for n in names)
    assert any(not torch.equal(sb[k], sa[k]) for k in names)  # the text tower did train
    imgs = make_scenes(3, seed=77).images
    assert np.array_equal(encode_images(before, imgs), encode_images(after, imgs))
    with pytest.raises(SystemExit):
        main(["--text-only"])  # needs --init


def test_the_runtime_imports_no_training_code():
    """Every module of slics_core outside emoji/training, imported together, leaves the training scripts unloaded."""
    import subprocess
    import sys

    code = """
import importlib, pkgutil, sys

def walk(name):  # pkgutil.walk_packages would import the training package to look inside it
    package = importlib.import_module(name)
    for info in pkgutil.iter_modules(package.__path__, name + "."):
        if info.name in ("slics_core.emoji.training", "slics_core.__main__"):
            continue
        walk(info.name) if info.ispkg else importlib.import_module(info.name)

walk("slics_core")
print(sorted(m for m in sys.modules if m.startswith("slics_core.emoji.training")))
print(sum(m.startswith("slics_core.") for m in sys.modules))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "[]"
    assert int(out[1]) > 40  # the walk did import the runtime (explorer, emoji world, commands)
