"""Emoji encoders and generator: the shipped weights load and work."""
import shutil

import numpy as np
import pytest
import torch

from slics_core.emoji.catalog import SUPERCATEGORIES
from slics_core.emoji.models import (
    EMOJI_CLIP_CONFIGS,
    encode_images,
    images_to_tensor,
    load_emoji_clip,
    model_dir,
    precision_at_2,
    zero_shot_scores,
)
from slics_core.emoji.scenes import make_scenes
from slics_core.errors import DamagedFileError


@pytest.fixture(scope="module")
def scenes():
    return make_scenes(120, seed=424242)  # not a training seed


def _chance_precision(Y):
    # expected precision of a random top-min(2, n) choice = mean fraction of present concepts
    return float(np.mean(Y.sum(1) / Y.shape[1]))


def test_preprocess_matches_open_clip_transform(scenes):
    _, preprocess, _ = load_emoji_clip("small")
    ours = images_to_tensor(scenes.images[:4])
    ref = torch.stack([preprocess(scenes.pil(i)) for i in range(4)])
    assert torch.allclose(ours, ref, atol=1e-5)
    with pytest.raises(ValueError):
        images_to_tensor(np.zeros((2, 64, 64), np.uint8))


@pytest.mark.parametrize("name", ["small", "large"])
def test_encoder_loads_and_zero_shot_beats_chance(name, scenes):
    model, _, tok = load_emoji_clip(name)
    dim = EMOJI_CLIP_CONFIGS[name]["embed_dim"]
    emb = encode_images(model, scenes.images)
    assert emb.shape == (len(scenes), dim) and np.allclose(np.linalg.norm(emb, axis=1), 1, atol=1e-4)
    assert tok(["a picture of food"]).shape == (1, EMOJI_CLIP_CONFIGS[name]["text_cfg"]["context_length"])
    p_k, p_2 = precision_at_2(zero_shot_scores(model, tok, emb), scenes.general.astype(int))
    chance = _chance_precision(scenes.general)
    assert p_k > chance + 0.25, (p_k, chance)
    # the weights matter: a randomly initialised model of the same config is near chance
    from slics_core.emoji.models import create_emoji_clip
    rand = create_emoji_clip(name, seed=1).eval()
    p_rand, _ = precision_at_2(zero_shot_scores(rand, tok, encode_images(rand, scenes.images)),
                               scenes.general.astype(int))
    assert p_k > p_rand + 0.15


def test_loads_through_project_encoder(scenes):
    from slics_core.encoders import create_encoder

    enc = create_encoder("emoji-small", device="cpu", half=False)
    model, _, tok = load_emoji_clip("small")
    a = enc.encode_images([scenes.pil(i) for i in range(5)])
    b = encode_images(model, scenes.images[:5], normalize=False)
    assert a.shape == (5, enc.dim) and np.allclose(a, b, atol=1e-4)
    t = enc.encode_texts(["a picture of " + w for w in SUPERCATEGORIES])
    assert t.shape == (12, enc.dim)


def test_missing_or_corrupt_weights(tmp_path):
    with pytest.raises(ValueError):
        load_emoji_clip("huge")
    with pytest.raises(FileNotFoundError):
        load_emoji_clip("small", root=tmp_path)
    dst = model_dir("small", tmp_path)
    shutil.copytree(model_dir("small"), dst)
    (dst / "open_clip_model.safetensors").write_bytes(b"garbage")
    with pytest.raises(DamagedFileError, match=r"safetensors' is damaged .*SafetensorError.*reinstall"):
        load_emoji_clip("small", root=tmp_path)  # one line naming the file and what to do


def test_generator_loads_and_reproduces_concepts(scenes):
    from slics_core.emoji.generator import EmojiGenerator

    gen = EmojiGenerator.load()
    large, _, tok = load_emoji_clip("large")
    raw = encode_images(large, scenes.images[:60])
    imgs = gen.generate(gen.condition(raw))
    assert imgs.shape == (60, 64, 64, 3) and imgs.dtype == np.uint8
    assert np.array_equal(imgs, gen.generate(gen.condition(raw)))  # deterministic
    top2 = np.argsort(-zero_shot_scores(large, tok, encode_images(large, imgs)), axis=1)[:, :2]
    hit = np.mean([scenes.general[i, top2[i]].max() for i in range(60)])
    chance = 1 - np.mean([(1 - k / 12) * (1 - k / 11) for k in scenes.general[:60].sum(1)])
    assert hit > chance + 0.1, (hit, chance)
    with pytest.raises(ValueError):
        gen.generate(np.zeros((2, gen.dim + 1)))
    bad = np.ones((1, gen.dim))
    bad[0, 0] = np.nan
    with pytest.raises(ValueError):
        gen.generate(bad)
    with pytest.raises(FileNotFoundError):
        EmojiGenerator.load("/nonexistent/dir")


def test_emoji_encoders_load_by_name_through_the_resolver():
    from PIL import Image

    from slics_core.emoji.models import encode_images as encode_arrays
    from slics_core.encoders import create_encoder

    img = Image.new("RGB", (64, 64), (200, 30, 30))
    enc = create_encoder("emoji-small")
    assert enc.spec == "emoji-small" and create_encoder(enc.spec).id == enc.id  # the spec resolves back
    model, _, _ = load_emoji_clip("small")
    direct = encode_arrays(model, np.asarray(img)[None], normalize=False)
    np.testing.assert_allclose(enc.encode_images([img]), direct, rtol=1e-4, atol=1e-4)
    assert create_encoder("emoji-large").dim != enc.dim


@pytest.mark.parametrize("name", ["small", "large"])
def test_image_tower_is_the_one_every_workspace_was_built_with(name):
    """Text-only retraining (issue 24) must leave image embeddings unchanged: embeddings of four renders
    recorded with the original encoders (tests/emoji_image_embeddings.npz) are reproduced, and a text-only
    run's recorded digest of the image tower matches the shipped weights."""
    import json
    from pathlib import Path

    from slics_core.emoji.training.train_clip import visual_digest

    model, _, _ = load_emoji_clip(name)
    ref = np.load(Path(__file__).parent / "emoji_image_embeddings.npz")[name]
    emb = encode_images(model, make_scenes(4, seed=424242).images, normalize=False)
    assert np.allclose(emb, ref, rtol=0, atol=1e-5), np.abs(emb - ref).max()
    training = json.loads((model_dir(name) / "open_clip_config.json").read_text()).get("training", {})
    if training.get("text_only"):
        assert training["visual_digest"] == visual_digest(model)
