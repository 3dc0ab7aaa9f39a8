"""Benchmark: drawing on a real workspace with full-size Stable Diffusion 1.5 / Stable unCLIP.

The real-workspace path of the Generate page (:mod:`slics_core.explorer.generation`): a component of
the workspace space (512-d, like ViT-B/32) -> the Procrustes alignment into the conditioning space
(768-d, CLIP ViT-L/14) -> :class:`~slics_core.generators.ImageToPromptSD` (the paper's route; also
``lcm``, the latent-consistency variant, on its own LCMScheduler) or
:class:`~slics_core.generators.UnCLIPGenerator`, sampling with DPM-Solver++
(:func:`~slics_core.generators.fast_scheduler`), as :func:`~slics_core.generators.load_pipeline_generator`
sets them up. The pipelines are built from the released models' configurations with *random*
weights (nothing is downloaded; the speed does not depend on the weights), so the numbers are
seconds, not picture quality.

Per pipeline and device (the CPU in float32 always, CUDA in float16 when present): seconds per
image (wall and this process's CPU seconds), wall and CPU seconds per denoising step (from the
per-step progress callback, first step of each image left out), and peak memory (CUDA: ``max_memory_allocated``; CPU:
the growth of the process's peak resident size while building and drawing).

    python -m benchmarks.bench_generate                                 # 512 x 512, 30 steps, SD 1.5 and unCLIP
    nice -n 10 python -m benchmarks.bench_generate --size 256 --steps 2 --pipelines sd   # a shared CPU
    python -m benchmarks.bench_generate --json out.json
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: kilobytes


def _sd_text_encoder(tok):
    from transformers import CLIPTextConfig, CLIPTextModel

    return CLIPTextModel(CLIPTextConfig(vocab_size=49408, hidden_size=768, intermediate_size=3072,
                                        num_attention_heads=12, num_hidden_layers=12, max_position_embeddings=77,
                                        hidden_act="quick_gelu", projection_dim=768)).eval()


def _vae(sample_size):
    from diffusers import AutoencoderKL

    return AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(128, 256, 512, 512),
                         down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4,
                         layers_per_block=2, norm_num_groups=32, sample_size=sample_size)


def build_sd15(tmp, lcm=False):
    """Stable Diffusion 1.5's architecture (860 M U-Net, ViT-L/14 text encoder, 84 M VAE), random weights;
    ``lcm``: LCM Dreamshaper v7's (the same with the U-Net's guidance-scale input and an LCMScheduler)."""
    import torch
    from diffusers import LCMScheduler, PNDMScheduler, StableDiffusionPipeline, UNet2DConditionModel

    from tests.fixtures_models import clip_tokenizer

    torch.manual_seed(0)
    unet = UNet2DConditionModel(sample_size=64, in_channels=4, out_channels=4, layers_per_block=2,
                                block_out_channels=(320, 640, 1280, 1280), cross_attention_dim=768,
                                attention_head_dim=8, time_cond_proj_dim=256 if lcm else None,
                                down_block_types=("CrossAttnDownBlock2D",) * 3 + ("DownBlock2D",),
                                up_block_types=("UpBlock2D",) + ("CrossAttnUpBlock2D",) * 3)
    tok = clip_tokenizer(Path(tmp) / "tok")
    kw = dict(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear")
    sched = LCMScheduler(**kw) if lcm else PNDMScheduler(**kw, skip_prk_steps=True, steps_offset=1,
                                                         set_alpha_to_one=False)
    return StableDiffusionPipeline(vae=_vae(512), text_encoder=_sd_text_encoder(tok), tokenizer=tok, unet=unet,
                                   scheduler=sched, safety_checker=None, feature_extractor=None,
                                   requires_safety_checker=False)


def build_unclip_small(tmp):
    """Stable unCLIP 2.1 small's architecture (SD 2.1 U-Net, OpenCLIP ViT-H text encoder, ViT-L/14 image
    embeddings of 768 dimensions), random weights."""
    import torch
    from diffusers import DDIMScheduler, DDPMScheduler, StableUnCLIPImg2ImgPipeline, UNet2DConditionModel
    from diffusers.pipelines.stable_diffusion.stable_unclip_image_normalizer import StableUnCLIPImageNormalizer
    from transformers import (
        CLIPImageProcessor,
        CLIPTextConfig,
        CLIPTextModel,
        CLIPVisionConfig,
        CLIPVisionModelWithProjection,
    )

    from tests.fixtures_models import clip_tokenizer

    torch.manual_seed(0)
    unet = UNet2DConditionModel(sample_size=96, in_channels=4, out_channels=4, layers_per_block=2,
                                block_out_channels=(320, 640, 1280, 1280), cross_attention_dim=1024,
                                attention_head_dim=(5, 10, 20, 20), use_linear_projection=True,
                                class_embed_type="projection", projection_class_embeddings_input_dim=1536,
                                down_block_types=("CrossAttnDownBlock2D",) * 3 + ("DownBlock2D",),
                                up_block_types=("UpBlock2D",) + ("CrossAttnUpBlock2D",) * 3)
    tok = clip_tokenizer(Path(tmp) / "tok")
    text = CLIPTextModel(CLIPTextConfig(vocab_size=49408, hidden_size=1024, intermediate_size=4096,
                                        num_attention_heads=16, num_hidden_layers=23, max_position_embeddings=77,
                                        hidden_act="gelu", projection_dim=1024)).eval()
    vision = CLIPVisionModelWithProjection(CLIPVisionConfig(hidden_size=1024, intermediate_size=4096,
                                                            num_attention_heads=16, num_hidden_layers=24,
                                                            image_size=224, patch_size=14, projection_dim=768,
                                                            hidden_act="quick_gelu")).eval()
    return StableUnCLIPImg2ImgPipeline(
        feature_extractor=CLIPImageProcessor(crop_size=224, size=224), image_encoder=vision,
        image_normalizer=StableUnCLIPImageNormalizer(embedding_dim=768),
        image_noising_scheduler=DDPMScheduler(beta_schedule="squaredcos_cap_v2"), tokenizer=tok, text_encoder=text,
        unet=unet, scheduler=DDIMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                                           clip_sample=False, set_alpha_to_one=False, steps_offset=1,
                                           prediction_type="v_prediction"),
        vae=_vae(768))


def run_one(name, device, args, tmp):
    import torch

    from slics_core.alignment import fit_alignment
    from slics_core.generators import ImageToPromptSD, UnCLIPGenerator, fast_scheduler, is_consistency_model

    half = device == "cuda"
    rss0 = _peak_rss_mb()
    t0 = time.perf_counter()
    pipe = build_unclip_small(tmp) if name == "unclip" else build_sd15(tmp, lcm=name == "lcm")
    rng = np.random.default_rng(0)
    if name != "unclip":
        gen = ImageToPromptSD(pipe, text_projection=rng.normal(size=(768, 768)) / np.sqrt(768), device=device,
                              half=half)
    else:
        gen = UnCLIPGenerator(pipe, device=device, half=half)
    if not is_consistency_model(gen.pipe):  # as load_pipeline_generator does
        gen.pipe.scheduler = fast_scheduler(gen.pipe)
    build_s = time.perf_counter() - t0
    # the workspace's alignment: 512-d workspace space -> 768-d conditioning space, fitted on pairs
    X = rng.normal(size=(400, 512))
    align = fit_alignment(X, X @ np.linalg.qr(rng.normal(size=(768, 512)))[0].T)
    V = rng.normal(size=(args.images, 512))
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        torch.cuda.synchronize()
    stamps = []
    kw = {"noise_level": 0} if name == "unclip" else {}
    c0, w0 = time.process_time(), time.perf_counter()
    imgs = gen.generate(align.transform(V), seed=0, steps=args.steps, height=args.size, width=args.size,
                        guidance=args.guidance, batch_size=1,
                        progress=lambda d, t: stamps.append((time.perf_counter(), time.process_time())),
                        **kw)
    if device == "cuda":
        torch.cuda.synchronize()
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    assert len(imgs) == args.images and imgs[0].size == (args.size, args.size)
    gaps = np.diff(np.asarray(stamps).reshape(-1, 2), axis=0)  # (wall, cpu) between consecutive steps
    within = [i for i in range(len(gaps)) if (i + 1) % args.steps != 0]  # within an image, not across two
    per_step, per_step_cpu = gaps[within, 0].tolist(), gaps[within, 1].tolist()
    row = {"pipeline": name, "device": device, "dtype": "float16" if half else "float32", "size": args.size,
           "steps": args.steps, "guidance": args.guidance, "images": args.images,
           "unet_params_M": round(sum(p.numel() for p in pipe.unet.parameters()) / 1e6, 1),
           "build_s": round(build_s, 1), "wall_s_per_image": round(wall / args.images, 2),
           "cpu_s_per_image": round(cpu / args.images, 2),
           "s_per_step_median": round(float(np.median(per_step)), 2) if per_step else None,
           "cpu_s_per_step_median": round(float(np.median(per_step_cpu)), 2) if per_step_cpu else None,
           "torch_threads": torch.get_num_threads()}
    if device == "cuda":
        row["peak_gpu_mem_MB"] = round(torch.cuda.max_memory_allocated() / 2**20)
    else:
        row["peak_rss_growth_MB"] = round(_peak_rss_mb() - rss0)
    del gen, pipe
    return row


def main(argv=None):
    import tempfile

    import torch

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pipelines", nargs="+", default=["sd-1.5", "unclip"], choices=["sd-1.5", "unclip", "lcm"],
                   help="lcm: LCM Dreamshaper v7's architecture (no guidance branch; use --steps 4 --guidance 8)")
    p.add_argument("--size", type=int, default=512)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--guidance", type=float, default=7.5)
    p.add_argument("--images", type=int, default=1)
    p.add_argument("--devices", nargs="+", default=None, help="default: cpu, and cuda when present")
    p.add_argument("--json", default=None, help="also write the rows to this file")
    args = p.parse_args(argv)
    devices = args.devices or (["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"])
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.pipelines:
            for device in devices:
                row = run_one(name, device, args, tmp)
                rows.append(row)
                print(json.dumps(row), flush=True)
    if len(devices) > 1:
        for name in args.pipelines:
            r = {row["device"]: row for row in rows if row["pipeline"] == name}
            print(f"{name}: CUDA fp16 is {r['cpu']['wall_s_per_image'] / r['cuda']['wall_s_per_image']:.0f}x "
                  "faster per image than the CPU (same run)")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
