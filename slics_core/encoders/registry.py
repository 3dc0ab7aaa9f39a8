"""The encoder names: the one parser (:func:`parse_encoder_spec`) and the one factory (:func:`create_encoder`).

Every encoder the program loads is named by a spec string that :func:`parse_encoder_spec` reads and
:func:`create_encoder` turns into an encoder of one of the families (:mod:`~slics_core.encoders.openclip`,
:mod:`~slics_core.encoders.dinov2`, or a user's ``module:factory``); :func:`encoder_spec_of` reads the
name an embedding cache recorded.
"""
from __future__ import annotations

import importlib
import os
import re
from dataclasses import dataclass

from slics_core import weights as _weights
from slics_core.encoders.dinov2 import DINOv2Encoder
from slics_core.encoders.openclip import OpenCLIPEncoder, shipped_architectures, unknown_architecture_message

__all__ = ["EMOJI_ENCODERS", "EncoderSpec", "check_encoder_name", "create_encoder", "encoder_presets",
           "encoder_spec_of", "parse_encoder_spec", "unknown_encoder_message"]

#: Shipped encoders of the offline emoji world (open_clip ``local-dir`` checkpoints in ``assets/models``).
EMOJI_ENCODERS = ("emoji-small", "emoji-large")
_RANDOM = re.compile(r"^(?P<arch>[^/@:]+)/random(?:@(?P<size>\d+))?$")
_FACTORY = re.compile(r"^(?P<mod>[A-Za-z_][\w.]*):(?P<attr>[A-Za-z_]\w*)$")
_CHECKPOINT_SUFFIXES = (".pt", ".pth", ".bin", ".safetensors")


@dataclass(frozen=True)
class EncoderSpec:
    """A parsed encoder name (see :func:`parse_encoder_spec`).

    Attributes
    ----------
    kind : {"emoji", "preset", "random", "local", "checkpoint", "factory"}
    text : str
        Canonical spelling; :func:`create_encoder` of it gives the same encoder again.
    arch, tag, path, image_size, module, attr : parts used by the kind.
    """

    kind: str
    text: str
    arch: str | None = None
    tag: str | None = None
    path: str | None = None
    image_size: int | None = None
    module: str | None = None
    attr: str | None = None

    @property
    def is_code(self) -> bool:
        """Whether resolving it imports and calls arbitrary Python code (``module:factory``)."""
        return self.kind == "factory"


def parse_encoder_spec(spec) -> EncoderSpec:
    """Parse an encoder name; the only place where encoder names are read.

    Accepted forms
    --------------
    ``emoji-small`` / ``emoji-large``
        The offline emoji world's CLIP models, shipped in ``assets/models``.
    ``ARCH/TAG`` (``ViT-B-32/openai``, ``RN50/openai``, ``ViT-L-14/openai``, any open_clip
    ``ARCH/TAG``) and ``dinov2-base``
        Real weights (:mod:`slics_core.weights`; ``slics download NAME`` fetches them).
    ``ARCH/random`` or ``ARCH/random@SIZE``
        A real open_clip architecture with random weights (seed 0, so the same spec
        gives the same encoder), optionally at input size ``SIZE`` pixels: dry runs, tests.
    ``local:DIR``
        An open_clip ``local-dir`` folder (``open_clip_config.json`` + weights).
    ``ARCH/PATH`` with ``PATH`` a checkpoint file (``.pt``, ``.bin``, ``.safetensors``)
        open_clip architecture ``ARCH`` with the weights in ``PATH``.
    ``module:factory``
        ``factory()`` from an importable module returns the encoder (your own model).
        Only from the command line or Python (``trusted=True``), never from a data file.

    Raises
    ------
    ValueError
        Not one of these forms (the message lists them).
    """
    if isinstance(spec, EncoderSpec):
        return spec
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"encoder name must be a non-empty string, got {spec!r}")
    text = spec.strip()
    if text in EMOJI_ENCODERS:
        return EncoderSpec("emoji", text, arch=text)
    if text.startswith("local:"):
        path = os.path.abspath(os.path.expanduser(text[len("local:"):]))
        return EncoderSpec("local", f"local:{path}", path=path)
    m = _RANDOM.match(text)
    if m:
        size = int(m["size"]) if m["size"] else None
        if size is not None and not 16 <= size <= 1024:
            raise ValueError(f"encoder {text!r}: image size must be between 16 and 1024 pixels")
        return EncoderSpec("random", text, arch=m["arch"], image_size=size)
    m = _FACTORY.match(text)
    if m and "/" not in text:
        return EncoderSpec("factory", text, module=m["mod"], attr=m["attr"])
    if "/" in text:
        arch, tag = text.split("/", 1)
        if tag.lower().endswith(_CHECKPOINT_SUFFIXES) or os.sep in tag or tag.startswith("~"):
            path = os.path.abspath(os.path.expanduser(tag))
            return EncoderSpec("checkpoint", f"{arch}/{path}", arch=arch, path=path)
        if arch and tag:
            return EncoderSpec("preset", text, arch=arch, tag=tag)
    if text.lower() in {k.lower() for k in _weights.PRESETS}:
        return EncoderSpec("preset", _weights.get_preset(text).name)
    raise ValueError(unknown_encoder_message(text))


def check_encoder_name(spec) -> EncoderSpec:
    """``spec`` parsed, after what can be checked without loading anything: its form (:func:`parse_encoder_spec`),
    its open_clip architecture (one open_clip ships: ``ARCH/TAG`` beyond the presets, ``ARCH/random``,
    ``ARCH/CHECKPOINT``), and the checkpoint file or ``local:`` folder it names.

    Raises
    ------
    ValueError
        What :func:`create_encoder` would say after importing torch and open_clip.
    FileNotFoundError
        The checkpoint file or the ``local:`` folder does not exist.
    """
    s = parse_encoder_spec(spec)
    if s.kind == "local" and not os.path.isdir(s.path):
        raise FileNotFoundError(f"encoder {s.text!r}: no folder at {s.path} (local:DIR names an open_clip "
                                "local-dir folder: open_clip_config.json and the weights)")
    if s.kind == "checkpoint" and not os.path.isfile(s.path):
        raise FileNotFoundError(f"encoder {s.text!r}: checkpoint file {s.path} does not exist")
    preset = _weights.find_preset(s.text) if s.kind == "preset" else None
    if s.arch and s.kind in ("preset", "random", "checkpoint") and preset is None:
        known = shipped_architectures()
        if known is not None and s.arch not in known:
            raise ValueError(f"encoder {s.text!r}: {unknown_architecture_message(s.arch, known)}")
    return s


def encoder_presets() -> list:
    """The names an encoder may be given by alone: the shipped emoji encoders, then the weights presets that
    are encoders (generator presets are not)."""
    return [*EMOJI_ENCODERS, *(name for name, p in _weights.PRESETS.items() if p.kind in ("open_clip", "transformers"))]


def unknown_encoder_message(text) -> str:
    """The one message for a name that is no encoder: the forms an encoder name takes, with the presets."""
    return (f"unknown encoder {text!r}: use a preset ({', '.join(encoder_presets())}), any open_clip ARCH/TAG, "
            "ARCH/random[@SIZE], local:DIR, ARCH/CHECKPOINT.pt or module:factory")


def create_encoder(spec, *, trusted: bool = True, device=None, half=None, cache_dir=None,
                   allow_download: bool = False):
    """The encoder named by ``spec`` (see :func:`parse_encoder_spec` for the forms).

    Parameters
    ----------
    spec : str or EncoderSpec
    trusted : bool, default True
        ``False`` for names read from data (embedding caches, workspace files, URLs):
        ``module:factory`` is then refused, so a data file can never make the program
        import and call code.
    device, half : see :class:`OpenCLIPEncoder`.
    cache_dir, allow_download : see :func:`slics_core.weights.resolve`.

    Returns
    -------
    encoder
        Has ``encode_images``, ``dim``, ``id`` and ``spec`` (the canonical name, which
        resolves back to the same encoder); CLIP models also ``encode_texts``.

    Raises
    ------
    ValueError
        Unknown form, or ``module:factory`` with ``trusted=False``.
    FileNotFoundError
        Weights, folder, file or module missing (the message says how to get them).
    """
    s = parse_encoder_spec(spec)
    if s.is_code:
        if not trusted:
            raise ValueError(f"encoder {s.text!r} names Python code (module:factory); such names are accepted "
                             "only on the command line or from Python, not from data files or links")
        try:
            module = importlib.import_module(s.module)
        except ImportError as exc:
            raise FileNotFoundError(f"encoder {s.text!r}: cannot import module {s.module!r} ({exc})") from None
        factory = getattr(module, s.attr, None)
        if factory is None:
            raise ValueError(f"encoder {s.text!r}: module {s.module!r} has no {s.attr!r}")
        enc = factory() if callable(factory) else factory
    elif s.kind == "emoji":
        folder = _weights.EMOJI_MODELS_DIR / s.text
        enc = OpenCLIPEncoder.from_local_dir(folder, device=device, half=half, name=s.text)
    elif s.kind == "local":
        enc = OpenCLIPEncoder.from_local_dir(s.path, device=device, half=half)
    elif s.kind == "random":
        kw = {"force_image_size": s.image_size} if s.image_size else {}
        enc = OpenCLIPEncoder.random(s.arch, seed=0, device=device, half=half, **kw)
    elif s.kind == "checkpoint":
        if not os.path.isfile(s.path):
            raise FileNotFoundError(f"encoder {s.text!r}: checkpoint file {s.path} does not exist")
        enc = OpenCLIPEncoder.from_pretrained(s.arch, s.path, cache_dir=cache_dir, device=device, half=half)
    else:
        try:
            preset = _weights.get_preset(s.text)
        except ValueError:
            raise ValueError(unknown_encoder_message(s.text)) from None
        if preset.kind == "open_clip":
            enc = OpenCLIPEncoder.from_pretrained(f"{preset.arch}/{preset.tag}", cache_dir=cache_dir,
                                                  allow_download=allow_download, device=device, half=half)
        elif preset.kind == "transformers":
            enc = DINOv2Encoder.from_pretrained(preset.name, cache_dir=cache_dir,
                                                allow_download=allow_download, device=device, half=half)
        else:
            raise ValueError(f"{preset.name!r} is a generator, not an encoder")
    if not hasattr(enc, "encode_images"):
        raise ValueError(f"encoder {s.text!r} has no encode_images method")
    try:
        enc.spec = s.text
    except AttributeError:  # a user object that refuses new attributes
        pass
    return enc


def encoder_spec_of(meta: dict) -> str | None:
    """The encoder name recorded in an embedding cache's ``meta.json`` (None when it names none).

    Caches written by ``slics embed`` record the name as given (``encoder_spec``); older
    ones only the encoder's ``id`` (``open_clip:ViT-B-32/openai``), read back here.
    """
    spec = (meta.get("dataset") or {}).get("encoder_spec") or meta.get("encoder_spec")
    if spec:
        return str(spec)
    ident = str(meta.get("encoder_id") or "")
    if ident.startswith("open_clip:"):
        rest = ident[len("open_clip:"):]
        if "/file:" not in rest and "/random-seed" not in rest:
            return rest
        if rest.split("/", 1)[0] in EMOJI_ENCODERS:
            return rest.split("/", 1)[0]
    if ident == "dinov2:facebook/dinov2-base":
        return "dinov2-base"
    return None
