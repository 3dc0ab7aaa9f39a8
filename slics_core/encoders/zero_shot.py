"""Zero-shot concept text embeddings: the paper's prompt template and a template ensemble (sec. 3.5)."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from slics_core.encoders.base import check_texts
from slics_core.rows import unit_rows

__all__ = ["PAPER_TEMPLATE", "ENSEMBLE_TEMPLATES", "concept_text_embeddings"]

#: The prompt template of the paper (sec. 3.5).
PAPER_TEMPLATE = "This is a picture of {}."

#: A small ensemble of photo-style templates (used with ``templates="ensemble"``).
ENSEMBLE_TEMPLATES = (
    "This is a picture of {}.",
    "a photo of {}.",
    "a photo of the {}.",
    "a close-up photo of {}.",
    "a cropped photo of {}.",
    "a bright photo of {}.",
    "a dark photo of {}.",
    "a blurry photo of {}.",
    "a good photo of {}.",
    "an image containing {}.",
)


def concept_text_embeddings(encoder, concepts: Sequence[str], templates="paper",
                            batch_size: int = 256) -> np.ndarray:
    """Zero-shot text embeddings of concept words, one unit-norm row per concept.

    Each concept is put in every template; the template embeddings are
    L2-normalised, averaged, and the average is normalised again (the usual
    CLIP prompt ensemble; with one template this is just its unit-norm
    embedding).

    Parameters
    ----------
    encoder : Encoder with ``has_text``
    concepts : list of str
    templates : "paper", "ensemble", str or list of str
        ``"paper"`` is ``["This is a picture of {}."]``; ``"ensemble"`` is
        :data:`ENSEMBLE_TEMPLATES`; a string or list is used as given (each
        template must contain ``{}``).

    Returns
    -------
    W : ndarray of shape (len(concepts), encoder.dim), float32, unit-norm rows
    """
    if not getattr(encoder, "has_text", False):
        raise ValueError(f"{getattr(encoder, 'id', encoder)!r} has no text encoder; "
                         "zero-shot concept embeddings need a CLIP model")
    concepts = check_texts(concepts)
    if not concepts:
        raise ValueError("concepts is empty")
    if isinstance(templates, str):
        templates = {"paper": [PAPER_TEMPLATE], "ensemble": list(ENSEMBLE_TEMPLATES)}.get(templates, [templates])
    templates = check_texts(templates)
    if not templates:
        raise ValueError("templates is empty")
    for t in templates:
        if "{}" not in t:
            raise ValueError(f"template {t!r} has no '{{}}' placeholder for the concept word")
    prompts = [t.format(c) for c in concepts for t in templates]
    E = encoder.encode_texts(prompts, batch_size=batch_size).astype(np.float64)
    E = unit_rows(E, zero="keep")
    W = E.reshape(len(concepts), len(templates), -1).mean(axis=1)
    W = unit_rows(W, zero="keep")
    return W.astype(np.float32)
