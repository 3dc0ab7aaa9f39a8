"""Query and text encoding of a workspace: its query encoder, image and text queries, its caption vocabulary.

Text is centred by one rule, :func:`slics_core.captions.prepare_text_embeddings` (unit-normalise,
subtract the mean of the unit-normalised *vocabulary*, re-normalise; sec. 3.7): the vocabulary's
prepared embeddings, the concept prompts of the SpLiCE baselines and text queries all go through it
(:func:`text_mean` is that rule's centre for a workspace).
"""
from __future__ import annotations

import os

import numpy as np

from slics_core.captions import prepare_text_embeddings
from slics_core.encoders import create_encoder, parse_encoder_spec
from slics_core.errors import audiences, explain
from slics_core.explorer.workspace import Workspace

__all__ = ["load_query_encoder", "embed_query", "embed_text_query", "text_mean", "workspace_vocabulary",
           "prepared_vocabulary"]


def load_query_encoder(ws: Workspace):
    """The encoder that embeds new queries for ``ws`` (``encode_images(list of PIL) -> (n, d)``).

    The name comes from the workspace file, so it is resolved with ``trusted=False``:
    presets and local checkpoints only, never ``module:factory``.

    Raises
    ------
    FileNotFoundError
        No usable encoder here (the message says what is missing and how to get it).
    """
    if ws.encoder is None:
        fix = "rebuild it from a cache made with --encoder"
        raise explain(FileNotFoundError(f"workspace {ws.name!r} records no encoder (precomputed embeddings?); uploads "
                                        f"and text queries cannot be embedded: {fix}"),
                      f"workspace {ws.name!r} records no encoder (it was built from precomputed embeddings), so "
                      "uploads and text queries cannot be embedded", operator_fix=fix)
    try:
        return create_encoder(ws.encoder, trusted=False)
    except (OSError, ValueError, RuntimeError) as exc:
        inner = audiences(exc)
        raise explain(FileNotFoundError(f"encoder {ws.encoder!r} of workspace {ws.name!r} cannot be loaded here "
                                        f"({exc})"),
                      f"encoder {_encoder_name(ws.encoder)!r} of workspace {ws.name!r} cannot be loaded here"
                      + (f" ({inner.failed})" if inner is not None else ""),
                      operator_fix=inner.operator_fix if inner is not None else str(exc)) from exc


def _encoder_name(spec) -> str:
    """An encoder as a visitor may read its name: a checkpoint or folder by its last name, not its path."""
    try:
        parsed = parse_encoder_spec(spec)
    except ValueError:
        return "?"
    if not parsed.path:
        return parsed.text
    return f"{parsed.arch}/{os.path.basename(parsed.path)}" if parsed.kind == "checkpoint" and parsed.arch \
        else os.path.basename(parsed.path)


def embed_query(ws: Workspace, encoder, image) -> tuple:
    """``(raw, x)``: the encoder's embedding and the preprocessed embedding (both (d,)) of one PIL image."""
    e = np.asarray(encoder.encode_images([image]), dtype=np.float64)
    if e.ndim != 2 or e.shape[0] != 1:
        raise ValueError(f"encoder returned shape {e.shape} for one image")
    if e.shape[1] != ws.X.shape[1]:
        raise ValueError(f"encoder gives {e.shape[1]}-d embeddings but the workspace is {ws.X.shape[1]}-d")
    if not np.all(np.isfinite(e)) or not np.linalg.norm(e) > 0:
        raise ValueError("the encoder returned a zero or non-finite embedding for this image")
    return e[0].astype(np.float32), ws.preprocess(e[0])[0]


def embed_text_query(ws: Workspace, encoder, text: str) -> tuple:
    """``(raw, x)`` of a text query: the encoder's unit text embedding and its preprocessed form, both (d,).

    The paper is silent on text queries; the choice here follows its caption step (sec. 3.7) and
    SpLiCE: a text embedding is unit-normalised, centred on the *text* mean and re-normalised, while
    images are centred on the image mean. The text mean is that of the workspace's caption vocabulary
    (its raw text embeddings); a workspace without a vocabulary centres with the image mean instead.
    Centring each modality on its own mean removes most of CLIP's modality gap, so the prepared text
    lands among the images it describes and can be projected on the concept cones like an image.

    Raises
    ------
    ValueError
        Empty text, an encoder without a text tower, or an embedding of the wrong size.
    """
    text = " ".join(str(text).split())
    if not text:
        raise ValueError("the text query is empty: type a phrase, e.g. 'a dog on a beach'")
    if not getattr(encoder, "has_text", False):
        raise ValueError(f"the encoder of workspace {ws.name!r} has no text tower, so it cannot embed text")
    e = np.asarray(encoder.encode_texts([text]), dtype=np.float64)
    if e.ndim != 2 or e.shape[0] != 1 or e.shape[1] != ws.X.shape[1]:
        raise ValueError(f"the text encoder returned shape {e.shape}; the workspace is {ws.X.shape[1]}-d")
    n = np.linalg.norm(e[0])
    if not np.all(np.isfinite(e)) or not n > 0:
        raise ValueError("the encoder returned a zero or non-finite embedding for this text")
    raw = e[0] / n
    if ws.vocab_text is not None and len(ws.vocab_text) and ws.preprocessing == "clip":
        x = prepare_text_embeddings(raw[None], mean=text_mean(ws))[0][0]
    else:
        x = ws.preprocess(raw)[0]
    return raw.astype(np.float32), np.asarray(x, dtype=np.float32)


def text_mean(ws: Workspace) -> np.ndarray:
    """Mean of the unit-normalised vocabulary text embeddings (the centre of text queries): the centre
    :func:`slics_core.captions.prepare_text_embeddings` fits on the vocabulary."""
    return prepare_text_embeddings(np.asarray(ws.vocab_text, dtype=np.float64))[1]


def workspace_vocabulary(ws: Workspace) -> tuple:
    """``(words, W)``: the caption vocabulary and its raw unit text embeddings, embedded at build time.

    Raises
    ------
    FileNotFoundError
        The workspace has no vocabulary (its encoder has no text tower or was not available).
    """
    if ws.vocab_text is None or not ws.vocab_words:
        raise explain(FileNotFoundError(f"workspace {ws.name!r} has no word vocabulary (it needs an encoder with a "
                                        "text tower when it is built: `slics workspace --encoder ...`)"),
                      f"workspace {ws.name!r} has no word vocabulary (its encoder has no text tower, or none was "
                      "available when it was built)",
                      operator_fix="build it with an encoder that has a text tower: `slics workspace --encoder ...`")
    return list(ws.vocab_words), np.asarray(ws.vocab_text, dtype=np.float32)


def prepared_vocabulary(ws: Workspace) -> tuple:
    """``(words, Wp)``: the caption vocabulary and its text embeddings prepared by the text rule
    (:func:`slics_core.captions.prepare_text_embeddings`), what word captions are read with.

    Raises
    ------
    FileNotFoundError
        The workspace has no vocabulary (:func:`workspace_vocabulary`).
    """
    words, W = workspace_vocabulary(ws)
    return words, prepare_text_embeddings(W)[0]
