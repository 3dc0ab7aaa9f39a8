"""Emoji training pieces: caption variants, the multi-positive CLIP loss."""
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
