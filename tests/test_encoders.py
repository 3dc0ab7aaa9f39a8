"""Encoders on tiny random models of the real classes (no weights are downloaded)."""
import numpy as np
import pytest
import torch
from fixtures_models import fake_hub_file, register_tiny_open_clip
from PIL import Image

from slics_core import weights
from slics_core.encoders import (
    ENSEMBLE_TEMPLATES,
    PAPER_TEMPLATE,
    DINOv2Encoder,
    Encoder,
    OpenCLIPEncoder,
    TiTokEncoder,
    concept_text_embeddings,
    load_titok_codebook,
    load_titok_tokens,
)


def _images(n, seed=0, size=(40, 30)):
    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 256, size=(size[1], size[0], 3), dtype=np.uint8)) for _ in range(n)]


@pytest.fixture(scope="module")
def tiny_name(tmp_path_factory):
    return register_tiny_open_clip(tmp_path_factory.mktemp("oc"))


@pytest.fixture(scope="module")
def tiny_clip(tiny_name):
    return OpenCLIPEncoder.random(tiny_name, seed=0, device="cpu")


# ------------------------------------------------------------------ open_clip
def test_open_clip_encodes_like_the_model(tiny_clip):
    imgs = _images(5)
    X = tiny_clip.encode_images(imgs, batch_size=2)
    assert X.shape == (5, 16) and X.dtype == np.float32 and tiny_clip.dim == 16
    assert isinstance(tiny_clip, Encoder)
    with torch.no_grad():  # independent computation straight through open_clip
        ref = tiny_clip.model.encode_image(torch.stack([tiny_clip.preprocess(im) for im in imgs])).numpy()
    np.testing.assert_allclose(X, ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(tiny_clip.encode_images(imgs, batch_size=5), X, rtol=1e-5, atol=1e-6)
    T = tiny_clip.encode_texts(["a cat", "a dog", "a cat"])
    assert T.shape == (3, 16)
    with torch.no_grad():
        ref_t = tiny_clip.model.encode_text(tiny_clip.tokenizer(["a cat", "a dog", "a cat"])).numpy()
    np.testing.assert_allclose(T, ref_t, rtol=1e-5, atol=1e-5)
    assert not np.allclose(T[0], T[1]) and np.allclose(T[0], T[2])


def test_random_weights_follow_the_seed(tiny_name, tiny_clip):
    imgs = _images(2, seed=3)
    same = OpenCLIPEncoder.random(tiny_name, seed=0, device="cpu")
    other = OpenCLIPEncoder.random(tiny_name, seed=1, device="cpu")
    np.testing.assert_array_equal(same.encode_images(imgs), tiny_clip.encode_images(imgs))
    assert not np.allclose(other.encode_images(imgs), tiny_clip.encode_images(imgs))
    assert same.id == tiny_clip.id != other.id and "random" in same.id


def test_zero_shot_concept_embeddings(tiny_clip):
    W = concept_text_embeddings(tiny_clip, ["cat", "dog"])
    np.testing.assert_allclose(np.linalg.norm(W, axis=1), 1.0, atol=1e-6)
    ref = tiny_clip.encode_texts([PAPER_TEMPLATE.format("cat")])[0]
    np.testing.assert_allclose(W[0], ref / np.linalg.norm(ref), atol=1e-6)
    E = concept_text_embeddings(tiny_clip, ["cat", "dog"], templates="ensemble")
    raw = tiny_clip.encode_texts([t.format("dog") for t in ENSEMBLE_TEMPLATES]).astype(np.float64)
    mean = (raw / np.linalg.norm(raw, axis=1, keepdims=True)).mean(0)
    np.testing.assert_allclose(E[1], mean / np.linalg.norm(mean), atol=1e-5)
    custom = concept_text_embeddings(tiny_clip, ["dog"], templates=["a {} here.", "the {}."])
    assert custom.shape == (1, 16) and not np.allclose(custom[0], E[1])
    with pytest.raises(ValueError, match="placeholder"):
        concept_text_embeddings(tiny_clip, ["cat"], templates=["no slot"])
    with pytest.raises(ValueError, match="empty"):
        concept_text_embeddings(tiny_clip, [])


def test_bad_inputs_are_rejected_clearly(tiny_clip):
    with pytest.raises(ValueError, match="PIL"):
        tiny_clip.encode_images("photo.jpg")
    with pytest.raises(ValueError, match=r"images\[1\]"):
        tiny_clip.encode_images([_images(1)[0], np.zeros((4, 4, 3))])
    with pytest.raises(ValueError, match="batch_size"):
        tiny_clip.encode_images(_images(1), batch_size=0)
    with pytest.raises(ValueError, match=r"texts\[0\]"):
        tiny_clip.encode_texts([3])
    gray = Image.fromarray(np.full((20, 20), 128, np.uint8))  # converted to RGB, not rejected
    assert tiny_clip.encode_images([gray]).shape == (1, 16)
    assert tiny_clip.encode_images([]).shape == (0, 16)


def test_open_clip_from_checkpoint_file_and_hub_cache(tiny_name, tiny_clip, tmp_path):
    from safetensors.torch import save_file

    imgs = _images(2, seed=5)
    ckpt = tmp_path / "tiny.pt"
    torch.save(tiny_clip.model.state_dict(), ckpt)
    enc = OpenCLIPEncoder.from_pretrained(tiny_name, ckpt, device="cpu")
    np.testing.assert_allclose(enc.encode_images(imgs), tiny_clip.encode_images(imgs), atol=1e-6)
    assert str(ckpt.resolve()) in enc.id

    safe = tmp_path / "tiny.safetensors"
    save_file({k: v.contiguous() for k, v in tiny_clip.model.state_dict().items()}, str(safe))
    preset = weights.ModelPreset(name="tiny/test", kind="open_clip", repo_id="org/tiny-clip",
                                 description="tiny CLIP", arch=tiny_name, tag="test",
                                 files=weights.OPEN_CLIP_FILES, quick_gelu=True)
    cache = tmp_path / "hub"
    with pytest.raises(weights.MissingWeightsError, match="slics download tiny/test"):
        OpenCLIPEncoder.from_pretrained(preset, cache_dir=cache)
    fake_hub_file(cache, "org/tiny-clip", "open_clip_model.safetensors", content_path=safe)
    enc2 = OpenCLIPEncoder.from_pretrained(preset, cache_dir=cache, device="cpu")
    np.testing.assert_allclose(enc2.encode_texts(["a dog"]), tiny_clip.encode_texts(["a dog"]), atol=1e-6)
    np.testing.assert_allclose(enc2.text_projection, tiny_clip.model.text_projection.detach().numpy())
    with pytest.raises(FileNotFoundError):
        OpenCLIPEncoder.from_pretrained(tiny_name, tmp_path / "missing.pt")


class _Code:
    """Pickles as a call of ``print``: what torch.load(weights_only=True) refuses to run."""

    def __reduce__(self):
        return (print, ("this would have run",))


def _refused_pickle(message, path):
    assert f"{str(path)!r} holds pickled Python objects" in message and "\n" not in message, message
    assert "give the weights as a .safetensors file" in message and "source you trust" in message
    assert "weights_only" not in message and "add_safe_globals" not in message  # torch's advice is not passed on


def test_pt_with_pickled_code_is_refused_saying_what_to_give(tiny_name, tmp_path, capsys):
    from slics_core.errors import DamagedFileError
    from slics_core.preprocessing import load_mean

    evil = tmp_path / "evil.pt"
    torch.save({"state_dict": _Code()}, evil)
    with pytest.raises(DamagedFileError) as info:
        OpenCLIPEncoder.from_pretrained(tiny_name, evil, device="cpu")
    _refused_pickle(str(info.value), evil)
    assert info.value.__cause__ is None and info.value.__suppress_context__
    with pytest.raises(DamagedFileError) as info:
        load_mean(evil)
    _refused_pickle(str(info.value), evil)
    assert "this would have run" not in capsys.readouterr().out


@pytest.mark.slow
def test_full_size_random_rn50_and_vit_b32():
    imgs = _images(2, seed=9, size=(64, 48))
    for name, dim in [("RN50", 1024), ("ViT-B-32", 512)]:
        enc = OpenCLIPEncoder.random(name, seed=0, device="cpu")
        X = enc.encode_images(imgs)
        T = enc.encode_texts(["This is a picture of cat.", "This is a picture of dog."])
        assert enc.dim == dim and X.shape == (2, dim) and T.shape == (2, dim)
        assert np.all(np.isfinite(X)) and not np.allclose(X[0], X[1])
        assert enc.text_projection.shape[1] == dim
        del enc


# --------------------------------------------------------------------- DINOv2
def _tiny_dino_config():
    from transformers import Dinov2Config

    return Dinov2Config(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, mlp_ratio=2,
                        image_size=28, patch_size=14)


def test_dinov2_cls_embedding_and_loading(tmp_path):
    enc = DINOv2Encoder.random(_tiny_dino_config(), seed=0, device="cpu")
    imgs = _images(3, seed=11)
    X = enc.encode_images(imgs, batch_size=2)
    assert X.shape == (3, 32) and X.dtype == np.float32 and not enc.has_text
    with torch.no_grad():
        pix = enc.processor(images=imgs, return_tensors="pt")["pixel_values"]
        out = enc.model(pixel_values=pix)
    assert pix.shape[-2:] == (28, 28)
    # CLS token after the final layer norm (DINOv2's x_norm_clstoken) == HF pooler output
    np.testing.assert_allclose(X, out.pooler_output.numpy(), atol=1e-5)
    with torch.no_grad():  # the same by hand: patch embeddings -> blocks -> final layer norm -> token 0
        h = enc.model.encoder(enc.model.embeddings(pix))
        h = h.last_hidden_state if hasattr(h, "last_hidden_state") else h[0]
        cls = enc.model.layernorm(h)[:, 0].numpy()
    np.testing.assert_allclose(X, cls, atol=1e-5)
    with pytest.raises(NotImplementedError, match="image-only"):
        enc.encode_texts(["a cat"])

    # save in the layout of the hub repo, then load by preset name from a hub cache
    folder = tmp_path / "dino"
    enc.model.save_pretrained(folder)
    enc.processor.save_pretrained(folder)
    local = DINOv2Encoder.from_pretrained(folder, device="cpu")
    np.testing.assert_allclose(local.encode_images(imgs), X, atol=1e-6)
    cache = tmp_path / "hub"
    fake_hub_file(cache, "facebook/dinov2-base", ".", content_path=folder)
    hub = DINOv2Encoder.from_pretrained("dinov2-base", cache_dir=cache, device="cpu")
    np.testing.assert_allclose(hub.encode_images(imgs), X, atol=1e-6)
    assert hub.id == "dinov2:facebook/dinov2-base"


def test_dinov2_random_weights_follow_seed():
    a = DINOv2Encoder.random(_tiny_dino_config(), seed=0, device="cpu")
    b = DINOv2Encoder.random(_tiny_dino_config(), seed=1, device="cpu")
    imgs = _images(1)
    assert not np.allclose(a.encode_images(imgs), b.encode_images(imgs))
    np.testing.assert_array_equal(a.encode_images(imgs),
                                  DINOv2Encoder.random(_tiny_dino_config(), seed=0, device="cpu").encode_images(imgs))


# ---------------------------------------------------------------------- TiTok
def _per_token_available():
    try:
        from slics_core import preprocessing
    except ImportError:
        return False
    return hasattr(preprocessing, "normalize_tokens")


needs_token_norm = pytest.mark.skipif(not _per_token_available(),
                                      reason="slics_core.preprocessing.normalize_tokens not written yet")


@needs_token_norm
def test_titok_tokens_import_and_layouts(tmp_path):
    rng = np.random.default_rng(12)
    tokens = rng.normal(size=(5, 32, 12)) * rng.uniform(0.1, 5, size=(5, 32, 1))
    np.save(tmp_path / "tok.npy", tokens)
    X = load_titok_tokens(tmp_path / "tok.npy")
    assert X.shape == (5, 384) and X.dtype == np.float32
    blocks = X.reshape(5, 32, 12)
    np.testing.assert_allclose(np.linalg.norm(blocks, axis=2), 1.0, atol=1e-6)
    np.testing.assert_allclose(blocks, tokens / np.linalg.norm(tokens, axis=2, keepdims=True), atol=1e-6)
    # TiTok's own (n, 12, 1, 32) layout and flat (n, 384) give the same result
    np.save(tmp_path / "raw.npy", tokens.transpose(0, 2, 1)[:, :, None, :])
    np.testing.assert_allclose(load_titok_tokens(tmp_path / "raw.npy"), X)
    codebook = rng.normal(size=(64, 12))
    np.savez(tmp_path / "both.npz", tokens=tokens.reshape(5, 384), codebook=codebook)
    np.testing.assert_allclose(load_titok_tokens(tmp_path / "both.npz"), X)
    C = load_titok_codebook(tmp_path / "both.npz")
    np.testing.assert_allclose(C, codebook / np.linalg.norm(codebook, axis=1, keepdims=True), atol=1e-6)
    raw = load_titok_tokens(tmp_path / "tok.npy", normalize=False)
    np.testing.assert_allclose(raw, tokens.reshape(5, 384), rtol=1e-6)


def test_titok_bad_files(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_titok_tokens(tmp_path / "missing.npy")
    np.save(tmp_path / "wrong.npy", np.zeros((3, 16, 12)))
    with pytest.raises(ValueError, match=r"\(n, 32, 12\)"):
        load_titok_tokens(tmp_path / "wrong.npy", normalize=False)
    bad = np.ones((2, 32, 12))
    bad[1, 3, 4] = np.nan
    np.save(tmp_path / "nan.npy", bad)
    with pytest.raises(ValueError, match="NaN"):
        load_titok_tokens(tmp_path / "nan.npy", normalize=False)
    (tmp_path / "junk.npy").write_bytes(b"garbage")
    with pytest.raises(ValueError, match="damaged or not the expected file"):
        load_titok_tokens(tmp_path / "junk.npy")
    np.savez(tmp_path / "two.npz", a=np.ones((2, 384)), b=np.ones((2, 384)))
    with pytest.raises(ValueError, match="key="):
        load_titok_tokens(tmp_path / "two.npz", normalize=False)
    np.save(tmp_path / "cb.npy", np.ones((10, 8)))
    with pytest.raises(ValueError, match="codebook"):
        load_titok_codebook(tmp_path / "cb.npy", normalize=False)


class _FakeTiTok(torch.nn.Module):
    """Has TiTok's interface: encoder(pixel_values=, latent_tokens=) -> (B, 12, 1, 32)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.latent_tokens = torch.nn.Parameter(torch.randn(32, 12))
        self.proj = torch.nn.Linear(3, 12)

    def encoder(self, pixel_values, latent_tokens):
        pooled = self.proj(pixel_values.mean(dim=(2, 3)))  # (B, 12)
        z = pooled[:, None, :] + latent_tokens[None]  # (B, 32, 12)
        return z.permute(0, 2, 1)[:, :, None, :]


@needs_token_norm
def test_titok_adapter_computes_normalised_tokens():
    fake = _FakeTiTok()
    enc = TiTokEncoder(fake, image_size=16, device="cpu")
    imgs = _images(3, seed=13)
    assert enc.dim == 384 and enc.token_dim == 12
    raw = enc.encode_tokens(imgs, batch_size=2)
    pix = torch.stack([torch.from_numpy(np.asarray(im.resize((16, 16), resample=3), np.float32) / 255).permute(2, 0, 1)
                       for im in imgs])
    with torch.no_grad():
        ref = (fake.proj(pix.mean(dim=(2, 3)))[:, None, :] + fake.latent_tokens[None]).numpy()
    np.testing.assert_allclose(raw, ref, atol=1e-5)
    X = enc.encode_images(imgs)
    np.testing.assert_allclose(X.reshape(3, 32, 12), ref / np.linalg.norm(ref, axis=2, keepdims=True), atol=1e-5)
    with pytest.raises(NotImplementedError):
        enc.encode_texts(["x"])
    with pytest.raises(ValueError, match="latent_tokens"):
        TiTokEncoder(torch.nn.Linear(2, 2))


@pytest.mark.parametrize("name", ["no-such-encoder", "NoSuch/xyz"])
def test_unknown_encoder_message_lists_encoders_not_generators(name):
    """Both routes (a bare unknown name; an ARCH/TAG open_clip does not know) give the encoder message: the
    shipped emoji encoders are offered, generator presets are not."""
    from slics_core.encoders.registry import create_encoder, encoder_presets

    with pytest.raises(ValueError) as info:
        create_encoder(name)
    message = str(info.value)
    assert message.startswith(f"unknown encoder {name!r}")
    assert "emoji-small" in message and "emoji-large" in message and "ViT-B-32/openai" in message
    assert "sd-1.5" not in message and "unclip" not in message
    assert set(encoder_presets()) >= {"emoji-small", "emoji-large", "dinov2-base"}
