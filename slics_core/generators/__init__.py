"""Turn embeddings (SLiCS components, atoms) into images with diffusers.

Two generators, both taking rows of a CLIP *image* embedding space (unit norm
or not; they are rescaled) and returning PIL images, one module per pipeline
family behind one loader:

* :mod:`~slics_core.generators.image_to_prompt` - :class:`ImageToPromptSD`,
  the paper's image-to-prompt route (sec. 3.8) for Stable Diffusion 1.x: a row
  mapped back through the pseudo-inverse of CLIP ViT-L/14's text projection
  becomes the prompt's token states (:func:`load_text_projection`).
* :mod:`~slics_core.generators.unclip` - :class:`UnCLIPGenerator`, Stable
  unCLIP conditioned on a CLIP image embedding directly.
* :mod:`~slics_core.generators.registry` - the generator names
  (:func:`parse_generator_spec`: ``sd-1.5``, ``unclip``, ``lcm`` or
  ``local:DIR``), the loader :func:`load_pipeline_generator`, the weights a
  spec needs (:func:`required_presets`) and the default sampling settings
  (:data:`CPU_DEFAULTS`, :data:`GPU_DEFAULTS`, :data:`LCM_DEFAULTS`).
* :mod:`~slics_core.generators.pipeline` - what both routes share: seeds that
  give the same image on a CPU and a GPU (:func:`seeded_noise`), input checks,
  the DPM-Solver++ sampler (:func:`fast_scheduler`).
* :mod:`~slics_core.generators.interpolation` - :func:`concept_atoms` and the
  atom interpolation of Fig. 3 (:func:`interpolate_atoms`), drawn with one
  seed for every ``a`` by the Generate page.

Alignment from the SLiCS space (e.g. ViT-B/32) into ViT-L/14 is done first
with :class:`slics_core.alignment.ProcrustesAlignment` (``alignment=``).
diffusers and torch are imported only when a pipeline is loaded or run.
"""
from slics_core.generators.image_to_prompt import ImageToPromptSD, load_text_projection
from slics_core.generators.interpolation import concept_atoms, interpolate_atoms
from slics_core.generators.pipeline import fast_scheduler, is_consistency_model, seeded_noise
from slics_core.generators.registry import (
                                            CPU_DEFAULTS,
                                            DEFAULT_CONDITIONING_ENCODER,
                                            GPU_DEFAULTS,
                                            LCM_DEFAULTS,
                                            GeneratorSpec,
                                            conditioning_text_projection,
                                            load_pipeline_generator,
                                            missing_presets,
                                            parse_generator_spec,
                                            required_presets,
)
from slics_core.generators.unclip import UnCLIPGenerator

__all__ = [
    "ImageToPromptSD",
    "UnCLIPGenerator",
    "GeneratorSpec",
    "CPU_DEFAULTS",
    "GPU_DEFAULTS",
    "LCM_DEFAULTS",
    "is_consistency_model",
    "DEFAULT_CONDITIONING_ENCODER",
    "parse_generator_spec",
    "required_presets",
    "missing_presets",
    "conditioning_text_projection",
    "fast_scheduler",
    "load_pipeline_generator",
    "load_text_projection",
    "seeded_noise",
    "interpolate_atoms",
    "concept_atoms",
]
