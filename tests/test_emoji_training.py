"""Emoji training pieces: caption variants, the multi-positive CLIP loss, the diffusion generator."""
import numpy as np
import pytest
import torch

from slics_core.emoji.catalog import CATEGORY_SUPER
from slics_core.emoji.train_clip import caption_variants, multi_positive_clip_loss, precision_at_2


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


@pytest.fixture(scope="module")
def tiny_diffusion():
    from slics_core.emoji.diffusion import EmojiDiffusionGenerator, build_unet

    cfg = {"embed_dim": 8, "sample_size": 16, "block_out_channels": [8, 16], "norm_num_groups": 4}
    torch.manual_seed(0)
    return EmojiDiffusionGenerator(build_unet(cfg), np.full(8, 0.1, np.float32), cfg)


def test_diffusion_generator_seed_steps_and_io(tiny_diffusion, tmp_path):
    from slics_core.emoji.diffusion import EmojiDiffusionGenerator

    gen = tiny_diffusion
    E = np.random.default_rng(0).normal(size=(3, 8))
    a = gen.generate(E, seed=5, steps=2)
    assert a.shape == (3, 64, 64, 3) and a.dtype == np.uint8
    assert np.array_equal(a, gen.generate(E, seed=5, steps=2, batch_size=1))  # per-row noise, batch-independent
    assert not np.array_equal(a, gen.generate(E, seed=6, steps=2))
    assert not np.array_equal(a, gen.generate(E, seed=5, steps=3))
    assert not gen.deterministic
    c = gen.condition(np.ones((2, 8)))
    u = np.ones(8) / np.sqrt(8) - 0.1
    assert np.allclose(c, u / np.linalg.norm(u), atol=1e-6)
    with pytest.raises(ValueError):
        gen.generate(np.zeros((2, 9)))
    with pytest.raises(ValueError):
        gen.generate(np.full((1, 8), np.nan))
    with pytest.raises(ValueError):
        gen.generate(E, steps=0)
    gen.save(tmp_path)
    back = EmojiDiffusionGenerator.load(tmp_path)
    b = back.generate(E, seed=5, steps=2)
    assert np.abs(b.astype(int) - a.astype(int)).max() <= 8  # fp16 weights
    with pytest.raises(FileNotFoundError):
        EmojiDiffusionGenerator.load(tmp_path / "nothing")


def test_diffusion_generator_starts_from_the_float32_draw_of_each_seed(tiny_diffusion, monkeypatch):
    gen = tiny_diffusion
    seen = []
    original = type(gen.net).forward

    def spy(self, x, t, cond):
        seen.append(x.detach().clone())
        return original(self, x, t, cond)

    monkeypatch.setattr(type(gen.net), "forward", spy)
    gen.generate(np.random.default_rng(1).normal(size=(3, 8)), seed=40, steps=1, batch_size=2)
    # independent: one CPU generator per row seeded with seed + row, float32 standard normal
    ref = [torch.randn((1, 3, 16, 16), generator=torch.Generator("cpu").manual_seed(40 + i), dtype=torch.float32)
           for i in range(3)]
    first = [seen[0], seen[2]]  # first UNet pass of each batch (conditional; the unconditional pass follows)
    torch.testing.assert_close(first[0], torch.cat(ref[:2]), rtol=0, atol=0)
    torch.testing.assert_close(first[1], ref[2], rtol=0, atol=0)
