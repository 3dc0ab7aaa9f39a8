"""Seeds that reproduce across devices (issue 13, item 4).

Every random tensor a pipeline starts from (the starting latents, unCLIP's
image-embedding noise) is drawn in float32 on a CPU generator and only then
cast: an fp16 (GPU) run gets the fp16 rounding of exactly the values an fp32
(CPU) run gets, and an fp32 CPU run reproduces diffusers' own ``generator=``
path bit for bit.
"""
from types import SimpleNamespace

import numpy as np
import torch
from fixtures_models import TEXT_WIDTH, tiny_sd_pipeline, tiny_unclip_pipeline

from slics_core.generators import ImageToPromptSD, UnCLIPGenerator, seeded_noise

PROJ_DIM = 24


def _reference_draw(seed, shapes):
    """Independent: one CPU generator per seed, torch.randn in float32, shapes in order."""
    g = torch.Generator("cpu").manual_seed(seed)
    return [torch.randn((1, *s), generator=g, dtype=torch.float32) for s in shapes]


def test_seeded_noise_is_the_float32_draw_whatever_the_dtype():
    seeds, shapes = [3, 11, 3], [(5,), (2, 3, 3)]
    f32, gens = seeded_noise(seeds, shapes)
    f16, _ = seeded_noise(seeds, shapes, dtype=torch.float16)
    assert [t.shape for t in f32] == [(3, 5), (3, 2, 3, 3)]
    assert f32[0].dtype == torch.float32 and f16[1].dtype == torch.float16
    for i, s in enumerate(seeds):
        ref = _reference_draw(s, shapes)
        for k in range(len(shapes)):
            torch.testing.assert_close(f32[k][i:i + 1], ref[k], rtol=0, atol=0)
            # the fp16 tensor is the fp16 rounding of the same float32 values
            torch.testing.assert_close(f16[k][i:i + 1], ref[k].half(), rtol=0, atol=0)
    # the fp32 draw does not depend on the dtype asked for
    again, _ = seeded_noise(seeds, shapes, dtype=torch.float16)
    torch.testing.assert_close(again[1], f16[1], rtol=0, atol=0)
    back, _ = seeded_noise(seeds, shapes, dtype=torch.float32)
    torch.testing.assert_close(back[1], f32[1], rtol=0, atol=0)
    assert not torch.equal(f32[0][0], f32[0][1])  # different seeds, different noise
    torch.testing.assert_close(f32[0][0], f32[0][2], rtol=0, atol=0)  # same seed, same noise
    # the returned generators continue after the draws
    nxt = torch.randn(4, generator=gens[1])
    g = torch.Generator("cpu").manual_seed(11)
    for s in shapes:
        torch.randn((1, *s), generator=g)
    torch.testing.assert_close(nxt, torch.randn(4, generator=g), rtol=0, atol=0)


def _euler(pipe):
    from diffusers import EulerDiscreteScheduler

    # init_noise_sigma != 1 (unlike DDIM), so a wrong scaling of given latents would show
    return EulerDiscreteScheduler.from_config(pipe.scheduler.config)


def _record_calls(monkeypatch, pipe, run: bool):
    """Spy on the pipeline's __call__ (and unCLIP's noise_image_embeddings) through its class."""
    calls, noises = [], []
    cls = type(pipe)
    original_call, original_noise = cls.__call__, getattr(cls, "noise_image_embeddings", None)

    def spy_call(self, *args, **kwargs):
        calls.append(kwargs)
        if run:
            return original_call(self, *args, **kwargs)
        if "image_embeds" in kwargs:  # what the real pipeline does with the embeddings first
            self.noise_image_embeddings(image_embeds=kwargs["image_embeds"], noise_level=kwargs["noise_level"],
                                        generator=kwargs["generator"])
        return SimpleNamespace(images=[None] * len(kwargs["generator"]))

    def spy_noise(self, image_embeds, noise_level, noise=None, generator=None):
        noises.append(None if noise is None else noise.detach().clone())
        if run:
            return original_noise(self, image_embeds, noise_level, noise=noise, generator=generator)
        return image_embeds

    monkeypatch.setattr(cls, "__call__", spy_call)
    if original_noise is not None:
        monkeypatch.setattr(cls, "noise_image_embeddings", spy_noise)
    return calls, noises


def test_sd_fp16_and_fp32_runs_get_the_same_latents(tmp_path, monkeypatch):
    proj = np.random.default_rng(0).normal(size=(TEXT_WIDTH, PROJ_DIM)) / np.sqrt(TEXT_WIDTH)
    V = np.random.default_rng(1).normal(size=(3, PROJ_DIM))
    g16 = ImageToPromptSD(tiny_sd_pipeline(tmp_path / "a"), text_projection=proj, device="cpu", half=True)
    g32 = ImageToPromptSD(tiny_sd_pipeline(tmp_path / "b"), text_projection=proj, device="cpu", half=False)
    c16, _ = _record_calls(monkeypatch, g16.pipe, run=False)
    g16.generate(V, seed=7, steps=1, batch_size=2)
    monkeypatch.undo()
    c32, _ = _record_calls(monkeypatch, g32.pipe, run=True)
    g32.generate(V, seed=7, steps=1, batch_size=2, output_type="np")
    lat16 = torch.cat([c["latents"] for c in c16])
    lat32 = torch.cat([c["latents"] for c in c32])
    assert lat16.dtype == torch.float16 and lat32.dtype == torch.float32 and lat32.shape == (3, 4, 8, 8)
    ref = torch.cat([_reference_draw(s, [(4, 8, 8)])[0] for s in (7, 8, 9)])
    torch.testing.assert_close(lat32, ref, rtol=0, atol=0)
    torch.testing.assert_close(lat16.float(), ref.half().float(), rtol=0, atol=0)
    assert (lat16.float() - lat32).abs().max() < 2e-3 * ref.abs().max()


def test_sd_fp32_image_is_diffusers_own_for_the_seed(tmp_path, monkeypatch):
    from diffusers import StableDiffusionPipeline

    base = tiny_sd_pipeline(tmp_path)
    pipe = StableDiffusionPipeline(**{**base.components, "scheduler": _euler(base)})
    proj = np.random.default_rng(0).normal(size=(TEXT_WIDTH, PROJ_DIM)) / np.sqrt(TEXT_WIDTH)
    gen = ImageToPromptSD(pipe, text_projection=proj, device="cpu")
    V = np.random.default_rng(2).normal(size=(2, PROJ_DIM))
    kw = dict(steps=3, guidance=4.0, output_type="np")
    calls, _ = _record_calls(monkeypatch, pipe, run=True)
    ours = np.stack(gen.generate(V, seeds=[5, 9], **kw))
    torch.testing.assert_close(calls[0]["latents"],
                               torch.cat([_reference_draw(s, [(4, 8, 8)])[0] for s in (5, 9)]), rtol=0, atol=0)
    monkeypatch.undo()
    with torch.inference_mode():  # diffusers drawing the latents itself from the same seeds, in float32
        own = pipe(prompt_embeds=torch.from_numpy(gen.prompt_embeds(V)), num_inference_steps=3, guidance_scale=4.0,
                   generator=[torch.Generator("cpu").manual_seed(s) for s in (5, 9)], output_type="np").images
    np.testing.assert_allclose(ours, own, rtol=0, atol=1e-6)
    again = np.stack(gen.generate(V, seeds=[5, 9], **kw))
    np.testing.assert_array_equal(again, ours)
    other = np.stack(gen.generate(V, seeds=[6, 9], **kw))
    assert np.abs(other[0] - ours[0]).max() > 1e-3 and np.abs(other[1] - ours[1]).max() < 1e-6


def test_unclip_fp16_and_fp32_runs_get_the_same_latents_and_embedding_noise(tmp_path, monkeypatch):
    g16 = UnCLIPGenerator(tiny_unclip_pipeline(tmp_path / "a"), device="cpu", half=True)
    g32 = UnCLIPGenerator(tiny_unclip_pipeline(tmp_path / "b"), device="cpu", half=False)
    d = g32.embedding_dim
    V = np.random.default_rng(3).normal(size=(2, d))
    kw = dict(seed=4, steps=1, noise_level=300, height=16, width=16)
    c16, n16 = _record_calls(monkeypatch, g16.pipe, run=False)
    g16.generate(V, **kw)
    monkeypatch.undo()
    c32, n32 = _record_calls(monkeypatch, g32.pipe, run=True)
    g32.generate(V, output_type="np", **kw)
    refs = [_reference_draw(s, [(d,), (4, 8, 8)]) for s in (4, 5)]
    ref_noise, ref_lat = torch.cat([r[0] for r in refs]), torch.cat([r[1] for r in refs])
    assert n16[0].dtype == torch.float16 and n32[0].dtype == torch.float32
    torch.testing.assert_close(n32[0], ref_noise, rtol=0, atol=0)
    torch.testing.assert_close(n16[0].float(), ref_noise.half().float(), rtol=0, atol=0)
    # DDIM: init_noise_sigma is 1, the latents are the draw itself
    torch.testing.assert_close(c32[0]["latents"], ref_lat, rtol=0, atol=0)
    torch.testing.assert_close(c16[0]["latents"].float(), ref_lat.half().float(), rtol=0, atol=0)


def test_unclip_fp32_image_is_diffusers_own_for_the_seed(tmp_path, monkeypatch):
    from diffusers import StableUnCLIPImg2ImgPipeline

    base = tiny_unclip_pipeline(tmp_path)
    pipe = StableUnCLIPImg2ImgPipeline(**{**base.components, "scheduler": _euler(base)})
    gen = UnCLIPGenerator(pipe, device="cpu")
    V = np.random.default_rng(4).normal(size=(2, gen.embedding_dim))
    kw = dict(steps=3, guidance=4.0, noise_level=400, height=16, width=16, output_type="np")
    calls, noises = _record_calls(monkeypatch, pipe, run=True)
    ours = np.stack(gen.generate(V, seeds=[2, 8], **kw))
    sigma = float(pipe.scheduler.init_noise_sigma)
    assert sigma > 1.5  # the scaling of given latents is exercised
    refs = [_reference_draw(s, [(gen.embedding_dim,), (4, 8, 8)]) for s in (2, 8)]
    torch.testing.assert_close(noises[0], torch.cat([r[0] for r in refs]), rtol=0, atol=0)
    torch.testing.assert_close(calls[0]["latents"], torch.cat([r[1] for r in refs]) * sigma, rtol=0, atol=0)
    monkeypatch.undo()
    with torch.inference_mode():  # diffusers drawing embedding noise and latents itself, in float32
        own = pipe(prompt=["", ""], image_embeds=torch.from_numpy(gen.image_embeds(V).astype(np.float32)),
                   noise_level=400, num_inference_steps=3, guidance_scale=4.0, height=16, width=16,
                   generator=[torch.Generator("cpu").manual_seed(s) for s in (2, 8)], output_type="np").images
    np.testing.assert_allclose(ours, own, rtol=0, atol=1e-6)
    assert "noise_image_embeddings" not in vars(pipe)  # the hook is removed after the call
    # the embedding noise matters at this level: another seed for image 0 only changes image 0
    other = np.stack(gen.generate(V, seeds=[3, 8], **kw))
    assert np.abs(other[0] - ours[0]).max() > 1e-3 and np.abs(other[1] - ours[1]).max() < 1e-6
