"""Generators on tiny random diffusers pipelines built from small configs (offline)."""
import numpy as np
import pytest
import torch
from fixtures_models import TEXT_WIDTH, fake_hub_file, tiny_sd_pipeline, tiny_unclip_pipeline

from slics_core.alignment import ProcrustesAlignment
from slics_core.generators import (
    ImageToPromptSD,
    UnCLIPGenerator,
    concept_atoms,
    fast_scheduler,
    interpolate_atoms,
    load_pipeline_generator,
    load_text_projection,
    parse_generator_spec,
    required_presets,
)
from slics_core.weights import MissingWeightsError

PROJ_DIM = 24  # joint (image/text) space of the tiny "CLIP"; stands in for 768


@pytest.fixture(scope="module")
def sd_pipe(tmp_path_factory):
    return tiny_sd_pipeline(tmp_path_factory.mktemp("sd"), seed=0)


@pytest.fixture(scope="module")
def projection():
    return np.random.default_rng(0).normal(size=(TEXT_WIDTH, PROJ_DIM)) / np.sqrt(TEXT_WIDTH)


@pytest.fixture(scope="module")
def sd(sd_pipe, projection):
    return ImageToPromptSD(sd_pipe, text_projection=projection, device="cpu")


@pytest.fixture(scope="module")
def unclip(tmp_path_factory):
    return UnCLIPGenerator(tiny_unclip_pipeline(tmp_path_factory.mktemp("unclip"), seed=0), device="cpu")


def _capture_unet(pipe, store):
    """Wrap the U-Net forward to record what the pipeline conditions it on."""
    original = pipe.unet.forward

    def spy(sample, timestep, encoder_hidden_states, *args, **kwargs):
        store.append((encoder_hidden_states.detach().clone(),
                      None if kwargs.get("class_labels") is None else kwargs["class_labels"].detach().clone()))
        return original(sample, timestep, encoder_hidden_states, *args, **kwargs)

    pipe.unet.forward = spy
    return original


def test_prompt_embeds_construction(sd, sd_pipe, projection):
    rng = np.random.default_rng(1)
    V = rng.normal(size=(3, PROJ_DIM))
    pe = sd.prompt_embeds(V)
    assert pe.shape == (3, 77, TEXT_WIDTH) and sd.embedding_dim == PROJ_DIM
    with torch.no_grad():  # independent: the pipeline's own encoding of the empty prompt
        empty = sd_pipe.encode_prompt("", "cpu", 1, False)[0][0].numpy()
    np.testing.assert_allclose(pe[:, 0], np.broadcast_to(empty[0], (3, TEXT_WIDTH)), atol=1e-5)
    assert sd.token_norm == pytest.approx(np.linalg.norm(empty[1:], axis=1).mean(), rel=1e-5)
    h = pe[:, 1]
    assert np.all(pe[:, 1:] == h[:, None, :])
    np.testing.assert_allclose(np.linalg.norm(h, axis=1), sd.token_norm, rtol=1e-5)
    # projecting the injected token state gives back the direction of v (h @ P ~ v)
    back = h @ projection
    cos = np.sum(back * V, axis=1) / np.linalg.norm(back, axis=1) / np.linalg.norm(V, axis=1)
    np.testing.assert_allclose(cos, 1.0, atol=1e-5)
    # norm of the input does not matter, direction does
    np.testing.assert_allclose(sd.prompt_embeds(7.5 * V), pe, atol=1e-5)
    with pytest.raises(ValueError, match="zero"):
        sd.prompt_embeds(np.zeros((1, PROJ_DIM)))
    with pytest.raises(ValueError, match="align"):
        sd.prompt_embeds(np.ones((1, PROJ_DIM + 1)))


def test_sd_generates_from_embeddings_the_unet_sees_them(sd, sd_pipe):
    rng = np.random.default_rng(2)
    V = rng.normal(size=(2, PROJ_DIM))
    seen = []
    original = _capture_unet(sd_pipe, seen)
    try:
        imgs = sd.generate(V, seed=3, steps=2, guidance=5.0, batch_size=2)
    finally:
        sd_pipe.unet.forward = original
    assert len(imgs) == 2 and imgs[0].size == (16, 16) and imgs[0].mode == "RGB"
    cond = seen[0][0]  # classifier-free guidance: [unconditional, conditional]
    assert cond.shape == (4, 77, TEXT_WIDTH)
    np.testing.assert_allclose(cond[2:].numpy(), sd.prompt_embeds(V), atol=1e-6)
    np.testing.assert_allclose(cond[:2].numpy(), np.broadcast_to(sd.empty_prompt_embeds, (2, 77, TEXT_WIDTH)),
                               atol=1e-5)


def test_sd_seeds_determinism_and_batching(sd):
    rng = np.random.default_rng(4)
    V = rng.normal(size=(3, PROJ_DIM))
    kw = dict(steps=2, guidance=3.0, output_type="np")
    a = np.stack(sd.generate(V, seed=10, batch_size=3, **kw))
    b = np.stack(sd.generate(V, seed=10, batch_size=1, **kw))
    np.testing.assert_allclose(a, b, atol=1e-5)  # image i depends on seed+i, not on the batch
    c = np.stack(sd.generate(V, seed=11, batch_size=3, **kw))
    assert np.abs(a - c).max() > 1e-3
    d = np.stack(sd.generate(V[::-1].copy(), seeds=[12, 11, 10], **kw))
    np.testing.assert_allclose(d[::-1], a, atol=1e-5)
    e = np.stack(sd.generate(rng.normal(size=(3, PROJ_DIM)), seed=10, **kw))
    assert np.abs(a - e).max() > 1e-4  # the embedding changes the image
    for bad in [dict(steps=0), dict(guidance=-1), dict(seed=1.5), dict(seeds=[1])]:
        with pytest.raises(ValueError):
            sd.generate(V, **{**kw, **bad})


def test_sd_loads_from_folder_and_hub_cache(sd, sd_pipe, projection, tmp_path):
    from safetensors.torch import save_file

    V = np.random.default_rng(5).normal(size=(1, PROJ_DIM))
    ref = np.stack(sd.generate(V, seed=0, steps=2, output_type="np"))
    folder = tmp_path / "sd"
    sd_pipe.save_pretrained(folder)
    proj_file = tmp_path / "clip.safetensors"
    save_file({"text_projection": torch.tensor(projection, dtype=torch.float32)}, str(proj_file))
    loaded = ImageToPromptSD.from_pretrained(folder, text_projection=proj_file, device="cpu")
    np.testing.assert_allclose(np.stack(loaded.generate(V, seed=0, steps=2, output_type="np")), ref, atol=1e-4)
    cache = tmp_path / "hub"
    with pytest.raises(MissingWeightsError, match="slics download org/tiny-sd"):
        ImageToPromptSD.from_pretrained("org/tiny-sd", text_projection=None, cache_dir=cache)
    fake_hub_file(cache, "org/tiny-sd", ".", content_path=folder)
    hub = ImageToPromptSD.from_pretrained("org/tiny-sd", text_projection=projection, cache_dir=cache, device="cpu")
    np.testing.assert_allclose(np.stack(hub.generate(V, seed=0, steps=2, output_type="np")), ref, atol=1e-4)


def test_load_text_projection_sources(tmp_path, projection):
    from safetensors.torch import save_file

    save_file({"visual.proj": torch.zeros(2, 2), "text_projection": torch.tensor(projection).float()},
              str(tmp_path / "a.safetensors"))
    np.testing.assert_allclose(load_text_projection(tmp_path / "a.safetensors"), projection, atol=1e-6)
    # transformers' CLIPTextModelWithProjection stores an nn.Linear (transposed)
    torch.save({"text_projection.weight": torch.tensor(projection.T).float()}, tmp_path / "b.bin")
    np.testing.assert_allclose(load_text_projection(tmp_path / "b.bin"), projection, atol=1e-6)
    save_file({"other": torch.zeros(2)}, str(tmp_path / "c.safetensors"))
    with pytest.raises(ValueError, match="no text_projection"):
        load_text_projection(tmp_path / "c.safetensors")
    with pytest.raises(MissingWeightsError, match="slics download ViT-L-14/openai"):
        load_text_projection("ViT-L-14/openai", cache_dir=tmp_path / "empty")


def test_alignment_is_applied_before_generation(sd):
    rng = np.random.default_rng(6)
    X = rng.normal(size=(50, 10))
    Q, _ = np.linalg.qr(rng.normal(size=(PROJ_DIM, 10)))
    align = ProcrustesAlignment().fit(X, X @ Q.T)  # 10 -> 24
    np.testing.assert_allclose(sd.prompt_embeds(X[:2], alignment=align), sd.prompt_embeds(X[:2] @ Q.T), atol=1e-5)


def test_unclip_image_embeds_and_noise_level(unclip):
    pipe = unclip.pipe
    d = unclip.embedding_dim
    mean, std = pipe.image_normalizer.mean.detach().numpy().ravel(), pipe.image_normalizer.std.detach().numpy().ravel()
    assert unclip.expected_norm == pytest.approx(np.sqrt(np.sum(mean ** 2 + std ** 2)))
    V = np.random.default_rng(7).normal(size=(2, d))
    E = unclip.image_embeds(V)
    np.testing.assert_allclose(np.linalg.norm(E, axis=1), unclip.expected_norm, rtol=1e-6)
    seen = []
    original = _capture_unet(pipe, seen)
    try:
        imgs = unclip.generate(V, seed=0, steps=2, guidance=4.0, noise_level=0, height=16, width=16)
        unclip.generate(V, seed=0, steps=2, guidance=4.0, noise_level=500, height=16, width=16)
    finally:
        pipe.unet.forward = original
    assert len(imgs) == 2 and imgs[0].size == (16, 16)
    labels0 = seen[0][1]  # [unconditional zeros, conditional]; each row = [noised embeds, noise-level embedding]
    assert labels0.shape == (4, 2 * d)
    assert torch.all(labels0[:2, :d] == 0)
    np.testing.assert_allclose(labels0[2:, :d].numpy(), E, atol=0.05)
    labels500 = seen[2][1]
    # a high noise level moves the conditioning embedding away from ours, and changes the level part
    assert np.abs(labels500[2:, :d].numpy() - E).max() > 0.2
    assert not torch.allclose(labels0[2:, d:], labels500[2:, d:])
    with pytest.raises(ValueError, match="noise_level"):
        unclip.generate(V, noise_level=5000)
    a = np.stack(unclip.generate(V[:1], seed=1, steps=2, height=16, width=16, output_type="np"))
    b = np.stack(unclip.generate(V[:1], seed=1, steps=2, height=16, width=16, output_type="np"))
    np.testing.assert_array_equal(a, b)


def test_interpolate_atoms_matches_formula():
    b1, b2 = np.array([1.0, 0.0, 2.0]), np.array([0.0, 3.0, -1.0])
    rows = interpolate_atoms(b1, b2, [0.25, 0.5, 1.0])
    np.testing.assert_allclose(rows, [[0.25, 2.25, -0.25], [0.5, 1.5, 0.5], [1.0, 0.0, 2.0]])
    with pytest.raises(ValueError):
        interpolate_atoms(b1, b2[:2])
    with pytest.raises(ValueError):
        interpolate_atoms(b1, b2, [])


def test_concept_atoms_are_the_groups_atoms():
    from slics_core import SLiCS
    from slics_core.synthetic import make_concept_cones

    data = make_concept_cones(n_samples=120, n_features=PROJ_DIM, n_concepts=3, n_atoms=2, random_state=0)
    model = SLiCS(n_atoms=2, n_iter=3, random_state=0).fit(data.X, data.Y)
    atoms = concept_atoms(model, 1)
    assert atoms.shape == (2, PROJ_DIM)
    np.testing.assert_array_equal(atoms, model.atoms_[model.groups_ == 1])
    with pytest.raises(ValueError, match="concept"):
        concept_atoms(model, 7)


def test_generator_specs_and_what_they_need(sd_pipe, tmp_path):
    assert parse_generator_spec("SD-1.5").text == "sd-1.5" and parse_generator_spec("sd-1.5").route == "sd"
    un = parse_generator_spec("unclip")
    assert un.route == "unclip" and un.preset == "sd-2.1-unclip-small"
    sd_pipe.save_pretrained(tmp_path / "sd")
    local = parse_generator_spec(f"local:{tmp_path / 'sd'}")
    assert local.route == "sd" and local.path == str(tmp_path / "sd") and local.preset is None
    assert required_presets("sd-1.5") == ["sd-1.5", "ViT-L-14/openai"]
    assert required_presets("unclip", "ViT-B-32/openai") == ["sd-2.1-unclip-small", "ViT-B-32/openai"]
    assert required_presets(local, "ViT-B-32/random") == []
    assert parse_generator_spec("lcm").route == "sd" and required_presets("lcm") == ["lcm-dreamshaper-v7",
                                                                                      "ViT-L-14/openai"]
    for bad, match in [("sd-9", "unknown generator"), (f"local:{tmp_path}", "model_index.json")]:
        with pytest.raises((ValueError, FileNotFoundError), match=match):
            parse_generator_spec(bad)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "model_index.json").write_text('{"_class_name": "KandinskyPipeline"}')
    with pytest.raises(ValueError, match="KandinskyPipeline"):
        parse_generator_spec(f"local:{tmp_path / 'other'}")


def test_loaded_pipelines_sample_with_dpm_solver_and_report_missing_weights(sd_pipe, projection, tmp_path):
    from diffusers import DPMSolverMultistepScheduler

    sched = fast_scheduler(sd_pipe)
    assert isinstance(sched, DPMSolverMultistepScheduler)
    assert sched.config.algorithm_type == "dpmsolver++" and sched.config.use_karras_sigmas
    np.testing.assert_allclose(sched.betas.numpy(), sd_pipe.scheduler.betas.numpy())  # the pipeline's own schedule
    with pytest.raises(MissingWeightsError) as err:
        load_pipeline_generator("sd-1.5", cache_dir=tmp_path / "empty")
    assert str(err.value).endswith("`slics download sd-1.5 ViT-L-14/openai`") and "\n" not in str(err.value)
