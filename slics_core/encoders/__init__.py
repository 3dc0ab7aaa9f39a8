"""Image (and text) encoders that produce the embeddings SLiCS works on.

One small protocol, :class:`Encoder`:

``encode_images(images, batch_size=32) -> (n, d) float32``
    ``images`` is a list of PIL images (anything else is rejected with a
    clear message).
``encode_texts(texts, batch_size=256) -> (n, d) float32``
    Only for models with a text tower (CLIP); image-only models raise
    :class:`NotImplementedError`. ``has_text`` tells which.
``dim``
    Embedding dimension.
``id``
    String naming model *and* weights (e.g. ``"open_clip:ViT-B-32/openai"``),
    suitable as a cache key. Randomly initialised models get ids that say so
    (``"open_clip:RN50/random-seed0"``) so they never collide with real ones.

Modules, one job each:

* :mod:`~slics_core.encoders.registry` - the encoder names: the one parser
  :func:`parse_encoder_spec` and the one factory :func:`create_encoder`
  (presets, ``ARCH/random``, ``local:DIR``, checkpoints, the emoji world's
  encoders, ``module:factory``), and :func:`encoder_spec_of`.
* :mod:`~slics_core.encoders.openclip` - :class:`OpenCLIPEncoder`: open_clip
  models by name and pretrained tag, a local checkpoint file or a
  ``local-dir`` folder (presets ``RN50/openai``, ``ViT-B-32/openai``,
  ``ViT-L-14/openai``).
* :mod:`~slics_core.encoders.dinov2` - :class:`DINOv2Encoder`: DINOv2 through
  transformers (``facebook/dinov2-base``), CLS-token embedding (final layer
  norm applied, as in DINOv2's ``x_norm_clstoken``).
* :mod:`~slics_core.encoders.titok` - :func:`load_titok_tokens` /
  :func:`load_titok_codebook` import pre-quantisation tokens ``(n, 32, 12)``
  and the codebook from ``.npy`` / ``.npz`` files; :class:`TiTokEncoder`
  computes the tokens with a TiTok model object the user's environment can
  import (1d-tokenizer).
* :mod:`~slics_core.encoders.zero_shot` - :func:`concept_text_embeddings`:
  zero-shot concept text embeddings with the paper's template
  ``"This is a picture of {}."`` or an ensemble of templates.
* :mod:`~slics_core.encoders.base` - the protocol and the input checks and
  conversions every family shares.

Embeddings are returned raw (not normalised): the paper uses raw CLIP
embeddings for zero-shot labels and normalised / centred ones elsewhere;
:mod:`slics_core.preprocessing` does that step. All models run under
``torch.inference_mode()``, on the device and in the dtype of
:func:`slics_core.torch_device.device_dtype` (the GPU in half precision when
CUDA is available, the CPU in float32 otherwise); outputs are always float32
NumPy arrays. torch, open_clip and transformers are imported only when a
model is built.
"""
from slics_core.encoders.base import Encoder
from slics_core.encoders.dinov2 import DINOv2Encoder
from slics_core.encoders.openclip import OpenCLIPEncoder
from slics_core.encoders.registry import (
                                          EMOJI_ENCODERS,
                                          EncoderSpec,
                                          check_encoder_name,
                                          create_encoder,
                                          encoder_spec_of,
                                          parse_encoder_spec,
)
from slics_core.encoders.titok import TiTokEncoder, load_titok_codebook, load_titok_tokens
from slics_core.encoders.zero_shot import ENSEMBLE_TEMPLATES, PAPER_TEMPLATE, concept_text_embeddings

__all__ = [
    "Encoder",
    "OpenCLIPEncoder",
    "DINOv2Encoder",
    "TiTokEncoder",
    "PAPER_TEMPLATE",
    "ENSEMBLE_TEMPLATES",
    "concept_text_embeddings",
    "load_titok_tokens",
    "load_titok_codebook",
    "EMOJI_ENCODERS",
    "EncoderSpec",
    "parse_encoder_spec",
    "check_encoder_name",
    "create_encoder",
    "encoder_spec_of",
]
