"""Generator names: the one parser (:func:`parse_generator_spec`), the one loader (:func:`load_pipeline_generator`).

Which pipeline a workspace draws with is named by a *generator spec* (``sd-1.5``, ``unclip``, ``lcm``
or ``local:DIR``); :func:`load_pipeline_generator` loads it, with the text projection of the
conditioning encoder (:func:`conditioning_text_projection`) for the image-to-prompt route, and
:func:`required_presets` lists the downloadable weights a spec and its conditioning encoder need
(``slics download``). A CPU gets fewer steps and a smaller size by default (:data:`CPU_DEFAULTS`,
docs/generation.md).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from slics_core import weights as _weights
from slics_core.errors import explain
from slics_core.formats import read_json
from slics_core.generators.image_to_prompt import CONDITIONING_ENCODER, ImageToPromptSD, load_text_projection
from slics_core.generators.pipeline import fast_scheduler, is_consistency_model
from slics_core.generators.unclip import UnCLIPGenerator

__all__ = ["GeneratorSpec", "DEFAULT_CONDITIONING_ENCODER", "CPU_DEFAULTS", "GPU_DEFAULTS", "LCM_DEFAULTS",
           "parse_generator_spec", "required_presets", "missing_presets", "conditioning_text_projection",
           "load_pipeline_generator", "generator_names_text"]


#: The conditioning encoder of both preset generators: SD 1.x reads CLIP ViT-L/14 text states, the
#: ``sd-2.1-unclip-small`` U-Net CLIP ViT-L/14 image embeddings.
DEFAULT_CONDITIONING_ENCODER = CONDITIONING_ENCODER

#: Generator spec -> (weights preset, route).
_PRESET_GENERATORS = {"sd-1.5": ("sd-1.5", "sd"), "unclip": ("sd-2.1-unclip-small", "unclip"),
                      "lcm": ("lcm-dreamshaper-v7", "sd")}


def generator_names_text(*, local: bool = True) -> str:
    """The generator names :func:`parse_generator_spec` reads, for messages and help: ``sd-1.5, unclip, lcm
    or local:DIR`` (``local=False``: the presets only, ``sd-1.5, unclip or lcm``)."""
    names = [*_PRESET_GENERATORS, "local:DIR"] if local else list(_PRESET_GENERATORS)
    return f"{', '.join(names[:-1])} or {names[-1]}"


#: Default sampling settings on a CPU: 256 x 256 and few DPM-Solver++ steps (docs/generation.md).
CPU_DEFAULTS = {"size": 256, "steps": 12, "guidance": 7.5}
#: A latent-consistency (LCM-distilled) U-Net: few steps and no classifier-free guidance branch on any
#: device (its guidance scale is an input of the U-Net), so a step costs half a guided one.
LCM_DEFAULTS = {"steps": 4, "guidance": 8.0}
#: Default sampling settings on a GPU: the pipelines' native 512 x 512.
GPU_DEFAULTS = {"size": 512, "steps": 25, "guidance": 7.5}

_MAX_INDEX_BYTES = 1 << 20


@dataclass(frozen=True)
class GeneratorSpec:
    """A parsed generator name (:func:`parse_generator_spec`).

    Attributes
    ----------
    text : str
        Canonical spelling (``sd-1.5``, ``unclip``, ``local:/abs/dir``), what a workspace records.
    route : {"sd", "unclip"}
        Image-to-prompt through SD 1.x's text states, or Stable unCLIP's image embeddings.
    preset : str or None
        Weights preset of :mod:`slics_core.weights` (None for a local folder).
    path : str or None
        The diffusers pipeline folder of ``local:DIR``.
    """

    text: str
    route: str
    preset: str | None = None
    path: str | None = None


def _pipeline_class(folder: Path) -> str:
    index = folder / "model_index.json"
    if not index.is_file():
        raise FileNotFoundError(f"{folder} is not a diffusers pipeline folder (no model_index.json); save one "
                                "with pipe.save_pretrained(DIR)")
    if index.stat().st_size > _MAX_INDEX_BYTES:
        raise ValueError(f"{index} is larger than {_MAX_INDEX_BYTES} bytes: not a diffusers model index")
    try:
        name = read_json(index).get("_class_name")
    except (ValueError, AttributeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{index} is not a readable diffusers model index ({exc})") from None
    return str(name)


def parse_generator_spec(spec) -> GeneratorSpec:
    """Parse a generator name; the only place generator names are read.

    Accepted forms: ``sd-1.5`` (Stable Diffusion 1.5, image embedding as the prompt: the paper's
    route), ``unclip`` (Stable unCLIP 2.1 small, conditioned on ViT-L/14 image embeddings), ``lcm``
    (the latent-consistency distilled Dreamshaper v7, an SD 1.5 fine-tune, by the paper's route in 4
    steps) and ``local:DIR`` (a diffusers ``StableDiffusionPipeline``, ``LatentConsistencyModelPipeline``
    or ``StableUnCLIPImg2ImgPipeline`` folder; its ``model_index.json`` says which).

    Raises
    ------
    ValueError
        Another name, or a folder holding another pipeline.
    FileNotFoundError
        ``local:DIR`` without a pipeline there.
    """
    if isinstance(spec, GeneratorSpec):
        return spec
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"generator name must be a non-empty string, got {spec!r}")
    text = spec.strip()
    if text.lower() in _PRESET_GENERATORS:
        preset, route = _PRESET_GENERATORS[text.lower()]
        return GeneratorSpec(text.lower(), route, preset=preset)
    if text.startswith("local:"):
        path = Path(os.path.abspath(os.path.expanduser(text[len("local:"):])))
        cls = _pipeline_class(path)
        routes = {"StableDiffusionPipeline": "sd", "LatentConsistencyModelPipeline": "sd",
                  "StableUnCLIPImg2ImgPipeline": "unclip"}
        if cls not in routes:
            raise ValueError(f"generator folder {path} holds a {cls}; image-to-prompt needs a "
                             "StableDiffusionPipeline or a StableUnCLIPImg2ImgPipeline")
        return GeneratorSpec(f"local:{path}", routes[cls], path=str(path))
    raise ValueError(f"unknown generator {text!r}: use {generator_names_text()} (a diffusers pipeline folder)")


def required_presets(generator, conditioning_encoder=None) -> list[str]:
    """Names of the downloadable presets that drawing with ``generator`` needs (``slics download`` them).

    The generator's own weights (none for ``local:DIR``), and, for the conditioning encoder
    (default :data:`DEFAULT_CONDITIONING_ENCODER`), its weights when it is a preset: the
    image-to-prompt route reads its text projection, and the alignment embeds the workspace's
    training images with it. Never imports torch.
    """
    from slics_core.encoders import parse_encoder_spec

    spec = parse_generator_spec(generator)
    names = [spec.preset] if spec.preset else []
    enc = parse_encoder_spec(conditioning_encoder or DEFAULT_CONDITIONING_ENCODER)
    if enc.kind == "preset":
        names.append(_weights.get_preset(enc.text).name)
    return names


def missing_presets(names, cache_dir=None) -> list[str]:
    """The presets of ``names`` whose weights are not on disk (no network)."""
    return [n for n in names if not _weights.is_available(n, cache_dir)]


def conditioning_text_projection(encoder_spec=DEFAULT_CONDITIONING_ENCODER, *, cache_dir=None) -> np.ndarray:
    """The CLIP text projection ``P`` of a conditioning encoder (``text_embed = h_EOS @ P``).

    A preset or checkpoint: only the ``text_projection`` tensor is read from its weights file; a
    ``local:DIR`` open_clip folder: from its weights file; any other encoder spec: from the loaded
    encoder.
    """
    from slics_core.encoders import create_encoder, parse_encoder_spec

    enc = parse_encoder_spec(encoder_spec)
    if enc.kind == "preset":
        return load_text_projection(enc.text, cache_dir=cache_dir)
    if enc.kind == "checkpoint":
        return load_text_projection(enc.path)
    if enc.kind == "local":
        files = [Path(enc.path) / f for f in _weights.OPEN_CLIP_FILES if (Path(enc.path) / f).is_file()]
        if not files:
            raise FileNotFoundError(f"open_clip folder {enc.path} holds no weights file "
                                    f"({' or '.join(_weights.OPEN_CLIP_FILES)})")
        return load_text_projection(files[0])
    return load_text_projection(create_encoder(enc, trusted=False))


def load_pipeline_generator(generator, conditioning_encoder=None, *, cache_dir=None, device=None, half=None):
    """The :class:`ImageToPromptSD` or :class:`UnCLIPGenerator` of a generator spec, on DPM-Solver++.

    Parameters
    ----------
    generator : str or GeneratorSpec
    conditioning_encoder : str, optional
        Encoder spec of the conditioning space (default :data:`DEFAULT_CONDITIONING_ENCODER`); the
        SD route reads its text projection.

    Raises
    ------
    slics_core.weights.MissingWeightsError
        Weights not on disk: one line naming the ``slics download ...`` command for all that is missing.
    """
    spec = parse_generator_spec(generator)
    enc = conditioning_encoder or DEFAULT_CONDITIONING_ENCODER
    need = required_presets(spec, enc) if spec.route == "sd" else ([spec.preset] if spec.preset else [])
    missing = missing_presets(need, cache_dir)
    if missing:
        what = ", ".join(_weights.get_preset(n).description for n in missing)
        fix = f"fetch them with `slics download {' '.join(missing)}`"
        name = spec.preset or Path(spec.path).name  # a local pipeline by its folder's name in the visitor's part
        raise explain(_weights.MissingWeightsError(f"generator {spec.text!r} needs weights not on this machine "
                                                   f"({what}); {fix}"),
                      f"generator {name!r} needs weights not on this machine ({what})", operator_fix=fix)
    model = spec.path or spec.preset
    if spec.route == "sd":
        projection = conditioning_text_projection(enc, cache_dir=cache_dir)
        gen = ImageToPromptSD.from_pretrained(model, text_projection=projection, cache_dir=cache_dir, device=device,
                                              half=half)
    else:
        gen = UnCLIPGenerator.from_pretrained(model, cache_dir=cache_dir, device=device, half=half)
    if not is_consistency_model(gen.pipe):  # an LCM keeps its own LCMScheduler
        gen.pipe.scheduler = fast_scheduler(gen.pipe)
    gen.spec = spec
    return gen
