"""Tiny, randomly initialised models of the real classes, built offline.

Nothing here downloads anything: configs are small, the CLIP tokenizer's
vocabulary and merges are written to a temporary folder, and weights come
from a seeded random initialisation.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

TEXT_WIDTH = 32  # hidden size of the tiny CLIP text encoder (stands in for 768)


def _byte_chars() -> list[str]:
    """The 256 printable characters byte-level BPE uses for the bytes 0..255."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) \
        + list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = [], 0
    for b in range(256):
        if b in keep:
            chars.append(chr(b))
        else:
            chars.append(chr(256 + extra))
            extra += 1
    return chars


def write_clip_tokenizer(folder) -> Path:
    """Write a small CLIP BPE vocabulary (bytes + a few merges) and return the folder."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    chars = _byte_chars()
    vocab_list = chars + [c + "</w>" for c in chars]
    merges = [("c", "a"), ("ca", "t</w>"), ("d", "o"), ("do", "g</w>"), ("t", "h"), ("i", "s</w>")]
    for a, b in merges:
        vocab_list.append(a + b)
    vocab_list += ["<|startoftext|>", "<|endoftext|>"]
    vocab = {tok: i for i, tok in enumerate(vocab_list)}
    (folder / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(f"{a} {b}" for a, b in merges) + "\n",
                                       encoding="utf-8")
    return folder


def clip_tokenizer(folder):
    from transformers import CLIPTokenizer

    write_clip_tokenizer(folder)
    tok = CLIPTokenizer.from_pretrained(str(folder), model_max_length=77)
    assert len(tok) > 500, "the tiny tokenizer did not load"
    return tok


def tiny_text_encoder(vocab_size: int, seed: int = 0, projection_dim: int | None = None):
    import torch
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

    cfg = CLIPTextConfig(vocab_size=vocab_size, hidden_size=TEXT_WIDTH, intermediate_size=37,
                         num_attention_heads=4, num_hidden_layers=2, max_position_embeddings=77,
                         projection_dim=projection_dim or TEXT_WIDTH, bos_token_id=vocab_size - 2,
                         eos_token_id=vocab_size - 1, pad_token_id=vocab_size - 1)
    torch.manual_seed(seed)
    return (CLIPTextModelWithProjection if projection_dim else CLIPTextModel)(cfg).eval()


def _tiny_unet(seed: int, **extra):
    import torch
    from diffusers import UNet2DConditionModel

    torch.manual_seed(seed)
    return UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4, layers_per_block=1,
        block_out_channels=(16, 32), norm_num_groups=8,
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=TEXT_WIDTH, attention_head_dim=4, **extra)


def _tiny_vae(seed: int):
    import torch
    from diffusers import AutoencoderKL

    torch.manual_seed(seed)
    return AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(16, 32),
                         down_block_types=("DownEncoderBlock2D", "DownEncoderBlock2D"),
                         up_block_types=("UpDecoderBlock2D", "UpDecoderBlock2D"), norm_num_groups=8,
                         sample_size=16)


def tiny_sd_pipeline(tmp, seed: int = 0):
    """A random Stable Diffusion 1.x pipeline (16x16 images, text width 32)."""
    from diffusers import DDIMScheduler, StableDiffusionPipeline

    tok = clip_tokenizer(Path(tmp) / "tok")
    pipe = StableDiffusionPipeline(
        vae=_tiny_vae(seed), text_encoder=tiny_text_encoder(len(tok), seed), tokenizer=tok,
        unet=_tiny_unet(seed), scheduler=DDIMScheduler(beta_schedule="scaled_linear", clip_sample=False,
                                                       set_alpha_to_one=False, steps_offset=1),
        safety_checker=None, feature_extractor=None, requires_safety_checker=False)
    return pipe


def tiny_lcm_pipeline(tmp, seed: int = 0):
    """A random latent-consistency pipeline: the SD 1.x architecture with a guidance-conditioned U-Net
    (``time_cond_proj_dim``) and an ``LCMScheduler``, saved by diffusers as a ``LatentConsistencyModelPipeline``."""
    from diffusers import LatentConsistencyModelPipeline, LCMScheduler

    tok = clip_tokenizer(Path(tmp) / "tok")
    return LatentConsistencyModelPipeline(
        vae=_tiny_vae(seed), text_encoder=tiny_text_encoder(len(tok), seed), tokenizer=tok,
        unet=_tiny_unet(seed, time_cond_proj_dim=16),
        scheduler=LCMScheduler(beta_schedule="scaled_linear", beta_start=0.00085, beta_end=0.012),
        safety_checker=None, feature_extractor=None, requires_safety_checker=False)


def tiny_unclip_pipeline(tmp, seed: int = 0, embed_dim: int = 16):
    """A random Stable unCLIP img2img pipeline taking ``embed_dim``-d image embeddings."""
    import torch
    from diffusers import DDIMScheduler, DDPMScheduler, StableUnCLIPImg2ImgPipeline
    from diffusers.pipelines.stable_diffusion.stable_unclip_image_normalizer import StableUnCLIPImageNormalizer
    from transformers import CLIPImageProcessor, CLIPVisionConfig, CLIPVisionModelWithProjection

    tok = clip_tokenizer(Path(tmp) / "tok")
    torch.manual_seed(seed)
    image_encoder = CLIPVisionModelWithProjection(CLIPVisionConfig(
        hidden_size=TEXT_WIDTH, projection_dim=embed_dim, num_hidden_layers=1, num_attention_heads=4,
        image_size=32, intermediate_size=37, patch_size=8)).eval()
    unet = _tiny_unet(seed, class_embed_type="projection", projection_class_embeddings_input_dim=2 * embed_dim)
    pipe = StableUnCLIPImg2ImgPipeline(
        feature_extractor=CLIPImageProcessor(crop_size=32, size=32),
        image_encoder=image_encoder,
        image_normalizer=StableUnCLIPImageNormalizer(embedding_dim=embed_dim),
        image_noising_scheduler=DDPMScheduler(beta_schedule="squaredcos_cap_v2"),
        tokenizer=tok, text_encoder=tiny_text_encoder(len(tok), seed), unet=unet,
        scheduler=DDIMScheduler(beta_schedule="scaled_linear", clip_sample=False, set_alpha_to_one=False,
                                steps_offset=1),
        vae=_tiny_vae(seed))
    return pipe


TINY_OPEN_CLIP = "slics-tiny-vit"


def register_tiny_open_clip(folder) -> str:
    """Register a tiny ViT CLIP config with open_clip and return its model name."""
    import open_clip

    if TINY_OPEN_CLIP in open_clip.list_models():
        return TINY_OPEN_CLIP
    cfg = {
        "embed_dim": 16,
        "quick_gelu": True,
        "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "patch_size": 16, "head_width": 16},
        "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1},
    }
    path = Path(folder) / f"{TINY_OPEN_CLIP}.json"
    path.write_text(json.dumps(cfg))
    open_clip.add_model_config(path)
    return TINY_OPEN_CLIP


def fake_hub_file(cache_dir, repo_id: str, filename: str, content_path=None, data: bytes = b"") -> Path:
    """Place a file in a Hugging Face hub cache laid out as the hub client does
    (``models--org--name/snapshots/<commit>/file`` + ``refs/main``)."""
    import shutil

    commit = "0123456789abcdef0123456789abcdef01234567"
    root = Path(cache_dir) / ("models--" + repo_id.replace("/", "--"))
    snap = root / "snapshots" / commit
    target = snap / filename
    target.parent.mkdir(parents=True, exist_ok=True)
    if content_path is not None:
        if Path(content_path).is_dir():
            shutil.copytree(content_path, target, dirs_exist_ok=True)
        else:
            shutil.copyfile(content_path, target)
    else:
        target.write_bytes(data)
    (root / "refs").mkdir(parents=True, exist_ok=True)
    (root / "refs" / "main").write_text(commit)
    return target


def tiny_open_clip_dir(folder, seed: int = 0, embed_dim: int = 16) -> Path:
    """A random open_clip ``local-dir`` folder (``local:DIR`` encoder): text width ``TEXT_WIDTH``, so its
    text projection fits :func:`tiny_sd_pipeline`'s text encoder; ``embed_dim``-d embeddings (the
    conditioning space of :func:`tiny_unclip_pipeline` with the same ``embed_dim``)."""
    import open_clip
    import torch
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model_cfg = {"embed_dim": embed_dim, "quick_gelu": True,
                 "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "patch_size": 16, "head_width": 16},
                 "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": TEXT_WIDTH, "heads": 2,
                              "layers": 1}}
    cfg = {"model_cfg": model_cfg,
           "preprocess_cfg": {"size": 32, "mode": "RGB", "mean": [0.48145466, 0.4578275, 0.40821073],
                              "std": [0.26862954, 0.26130258, 0.27577711], "interpolation": "bicubic",
                              "resize_mode": "shortest", "fill_color": 0}}
    (folder / "open_clip_config.json").write_text(json.dumps(cfg))
    torch.manual_seed(seed)
    model = open_clip.CLIP(**model_cfg)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(folder / "open_clip_model.safetensors"))
    return folder
