"""Emoji generator training pieces: single-object renders and the decoder training loop."""
import numpy as np
import pytest
import torch
from scipy import ndimage

from slics_core.emoji.catalog import CATEGORIES, CATEGORY_SUPER, SUPERCATEGORIES
from slics_core.emoji.generator import GENERATOR_CONFIG, EmojiGenerator, build_decoder
from slics_core.emoji.scenes import load_sprites, make_scenes, make_single_object_scenes, render_single_object
from slics_core.emoji.train_generator import train_decoder


def test_single_object_render_places_one_centred_object():
    sprites = load_sprites()
    for i in range(40):
        img, cat, mask = render_single_object(3, i, return_mask=True)
        assert img.shape == (64, 64, 3) and img.dtype == np.uint8 and cat in CATEGORIES
        on = mask > 0.5
        # exactly one object: the footprint's area is that of one sprite of side 0.6-0.75 x 64
        # (a rotation keeps the area; a second object would double it)
        a = np.asarray(sprites[cat].getchannel("A"), float) / 255.0
        side_frac = np.sqrt(mask.sum() / a.mean()) / 64
        assert 0.57 <= side_frac <= 0.78, (i, cat, side_frac)
        ys, xs = np.nonzero(on)
        # centred: the footprint's bounding box is centred up to the shift (<= 0.03 * 64 px) and
        # 1 px of rounding (alpha below 0.5 at the edges ignored); an object of a scene's 2x2 grid
        # would be ~16 px off
        vis = np.nonzero(mask > 0)
        for ax_ in vis:
            assert abs((ax_.min() + ax_.max()) / 2 - 31.5) <= 0.03 * 64 + 1.0, (i, cat, ax_.min(), ax_.max())
        # scale: the sprite (48 px source, trimmed to its content) spans a large part of the frame
        assert max(ys.max() - ys.min(), xs.max() - xs.min()) + 1 >= 0.4 * 64
        # plain light background outside the sprite (footprint grown by 2 px for bilinear edges)
        bg = img[~ndimage.binary_dilation(mask > 0.01, iterations=2)].astype(float)
        assert bg.min() >= 0.7 * 255 - 10 and bg.std(0).max() < 12
        # the object itself is visible: the sprite pixels differ from the background colour
        assert np.abs(img[on].astype(float).mean(0) - bg.mean(0)).max() > 10


def test_single_object_renders_reproducible_and_labelled():
    a = make_single_object_scenes(30, seed=5)
    b = make_single_object_scenes(10, seed=5, start=20)
    assert np.array_equal(a.images[20:], b.images) and a.objects[20:] == b.objects
    assert (a.general.sum(1) == 1).all() and (a.sub.sum(1) == 1).all()
    for i, (c,) in enumerate(a.objects):
        assert SUPERCATEGORIES[a.general[i].argmax()] == CATEGORY_SUPER[c]
        assert c in a.captions[i]
    # supercategories are drawn uniformly: all 12 appear in 300 renders
    assert (make_single_object_scenes(300, seed=1).general.sum(0) > 0).all()
    img, cat = render_single_object(5, 0, category="dog")
    assert cat == "dog"
    with pytest.raises(ValueError):
        render_single_object(5, 0, category="unicorn")
    with pytest.raises(ValueError):
        render_single_object(5, 0, scale=(0.8, 0.5))
    with pytest.raises(ValueError):
        make_single_object_scenes(-1)
    # the scene stream is untouched by the new renders
    assert np.array_equal(make_scenes(3, seed=5).images, make_scenes(3, seed=5).images)


def test_train_decoder_reduces_pixel_loss_and_is_deterministic():
    torch.manual_seed(0)
    cfg = dict(GENERATOR_CONFIG, embed_dim=8, block_out_channels=[16, 16], norm_num_groups=8, image_size=32,
               latent_channels=16)
    sc = make_single_object_scenes(16, seed=11)
    imgs = torch.from_numpy(sc.images[:, ::2, ::2].copy()).permute(0, 3, 1, 2).float() / 127.5 - 1
    g = torch.Generator().manual_seed(0)
    cond = torch.nn.functional.normalize(torch.randn(16, 8, generator=g), dim=1)

    def run():
        torch.manual_seed(0)
        dec = build_decoder(cfg)
        with torch.no_grad():
            before = float(torch.mean((dec(cond) - imgs) ** 2))
        hist = train_decoder(dec, cond, imgs, 60, batch_size=8, lr=3e-3, cond_noise=0.01, seed=0, log_every=20)
        with torch.no_grad():
            after = float(torch.mean((dec(cond) - imgs) ** 2))
        return before, after, hist, dec

    before, after, hist, dec = run()
    assert [h["step"] for h in hist] == [20, 40, 60]
    assert after < 0.6 * before, (before, after)
    # it learnt the conditioning -> image map, not only the mean image
    mean_img_mse = float(torch.mean((imgs.mean(0, keepdim=True) - imgs) ** 2))
    assert after < mean_img_mse, (after, mean_img_mse)
    _, after2, hist2, _ = run()
    assert after2 == after and hist2 == hist
    gen = EmojiGenerator(dec, np.zeros(8, np.float32), cfg)
    out = gen.generate(cond.numpy())
    assert out.shape == (16, 32, 32, 3) and out.dtype == np.uint8
    with pytest.raises(ValueError):
        train_decoder(dec, cond, imgs[:5], 2)
    with pytest.raises(ValueError):
        train_decoder(dec, cond, imgs, 2, consistency=0.5)


def test_train_decoder_batch_groups():
    # with group weights, every batch holds the requested share of each group: a decoder trained
    # only on group-1 rows (weight 1.0) must fit them, not the group-0 targets
    cfg = dict(GENERATOR_CONFIG, embed_dim=4, block_out_channels=[8, 8], norm_num_groups=4, image_size=16,
               latent_channels=8)
    torch.manual_seed(0)
    dec = build_decoder(cfg)
    cond = torch.nn.functional.normalize(torch.randn(8, 4, generator=torch.Generator().manual_seed(1)), dim=1)
    imgs = torch.cat([torch.full((4, 3, 16, 16), -0.8), torch.full((4, 3, 16, 16), 0.8)])
    groups = np.r_[np.zeros(4, int), np.ones(4, int)]
    train_decoder(dec, cond, imgs, 40, batch_size=4, lr=5e-3, groups=groups, group_weights=[0.0, 1.0], seed=0)
    with torch.no_grad():
        y = dec(cond)
    assert float(y[4:].mean()) > 0.5
    # the dark group-0 targets were never drawn (with uniform sampling the mean output would be ~0)
    assert float(y.mean()) > 0.4


def test_train_decoder_consistency_through_a_tiny_encoder():
    from slics_core.emoji.models import create_emoji_clip

    tiny = {"embed_dim": 8,
            "vision_cfg": {"image_size": 64, "layers": [1, 1, 1, 1], "width": 8, "head_width": 8},
            "text_cfg": {"context_length": 8, "vocab_size": 64, "width": 8, "heads": 1, "layers": 1}}
    enc = create_emoji_clip("small", seed=0, model_cfg=tiny).eval()
    for p in enc.parameters():
        p.requires_grad_(False)
    cfg = dict(GENERATOR_CONFIG, embed_dim=8, block_out_channels=[8, 8, 8, 8, 8], norm_num_groups=4,
               latent_channels=8)
    imgs = torch.rand(8, 3, 64, 64, generator=torch.Generator().manual_seed(0)) * 2 - 1
    # random target directions: a random tiny encoder maps all images to nearly one direction
    raw = torch.nn.functional.normalize(torch.randn(8, 8, generator=torch.Generator().manual_seed(1)), dim=1)
    runs = {}
    for blur in (0.0, 1.0):
        torch.manual_seed(0)
        dec = build_decoder(cfg)
        before = [p.detach().clone() for p in dec.parameters()]
        hist = train_decoder(dec, raw, imgs, 3, batch_size=4, encoder=enc, target_raw=raw, consistency=1.0,
                             consistency_blur=blur, seed=0, log_every=1)
        assert all(0 < h["consistency"] <= 2 for h in hist)
        assert any(not torch.equal(a, b) for a, b in zip(before, dec.parameters()))
        runs[blur] = hist
    # the blur changes what the encoder sees, hence the consistency term
    assert [h["consistency"] for h in runs[0.0]] != [h["consistency"] for h in runs[1.0]]


def test_generate_snaps_conditioning_so_float_noise_gives_same_pixels():
    from slics_core.emoji.generator import CONDITION_GRID

    gen = EmojiGenerator.load()
    rng = np.random.default_rng(0)
    E = rng.normal(size=(20, gen.dim)).astype(np.float32)
    out = gen.generate(E)
    # independent computation: unit rows rounded to the grid, decoded, mapped to uint8
    U = E / np.linalg.norm(E, axis=1, keepdims=True)
    U = (np.round(U / CONDITION_GRID) * CONDITION_GRID).astype(np.float32)
    with torch.no_grad():
        y = gen.decoder(torch.from_numpy(U)).permute(0, 2, 3, 1).numpy()
    assert np.array_equal(out, ((y + 1) * 127.5).round().clip(0, 255).astype(np.uint8))
    # float-level perturbations (1e-7) change (almost) no picture; a grid boundary is rarely crossed
    same = [np.array_equal(out[i], o) for i, o in
            enumerate(gen.generate(E + rng.normal(scale=1e-7, size=E.shape).astype(np.float32)))]
    assert sum(same) >= 18, sum(same)


def test_unit_condition_rows_and_concept_hit_rate():
    from slics_core.emoji.generator import concept_hit_rate, unit_condition_rows
    from slics_core.emoji.models import encode_images, load_emoji_clip, zero_shot_scores
    from slics_core.emoji.scenes import make_scenes

    E = np.array([[3.0, 4.0], [0.0, 0.0]])
    np.testing.assert_allclose(unit_condition_rows(E, 2), [[0.6, 0.8], [0.0, 0.0]])
    np.testing.assert_allclose(unit_condition_rows(np.array([0.0, 2.0]), 2), [[0.0, 1.0]])
    with pytest.raises(ValueError, match=r"shape \(n, 3\)"):
        unit_condition_rows(E, 3)
    with pytest.raises(ValueError, match="NaN"):
        unit_condition_rows(np.array([[np.nan, 1.0]]), 2)
    enc, _, tok = load_emoji_clip("large")
    sc = make_scenes(40, seed=5)
    S = zero_shot_scores(enc, tok, encode_images(enc, sc.images))
    for top in (1, 2):  # independent: loop over scenes
        hits = [sc.general[i, np.argsort(-S[i])[:top]].max() for i in range(len(sc))]
        assert concept_hit_rate(enc, tok, sc.images, sc.general, top=top) == pytest.approx(np.mean(hits))
