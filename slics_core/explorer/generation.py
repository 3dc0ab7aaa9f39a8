"""Workspace-level image generation: a component in the workspace's space -> the generator's image.

The paper's image-to-prompt route (sec. 3.8): orthogonal Procrustes from the
workspace's encoder space into the generator's conditioning space, then the
generator. :func:`load_workspace_generator` picks the generator a workspace
records; the pipelines themselves live in :mod:`slics_core.generators` (real
diffusion models) and :mod:`slics_core.emoji.generator` (the emoji world).
"""
from __future__ import annotations

import numpy as np
from PIL import Image

from slics_core._validation import check_embeddings
from slics_core.alignment import ProcrustesAlignment
from slics_core.emoji.generator import EmojiGenerator
from slics_core.explorer.workspace import Workspace

__all__ = ["WorkspaceGenerator", "load_workspace_generator"]


class WorkspaceGenerator:
    """Image generation from rows of the workspace's (preprocessed) embedding space.

    The paper's image-to-prompt route (sec. 3.8): a component in the SLiCS
    space -> orthogonal Procrustes (fitted on the training items' paired
    embeddings) -> the generator's conditioning space -> generator.

    Attributes
    ----------
    name : str
    alignment : slics_core.alignment.ProcrustesAlignment
    deterministic : bool
        True when ``seed`` and ``steps`` have no effect (a one-pass decoder).
    """

    def __init__(self, name, alignment, generate_fn, deterministic, info=None, describe_fn=None):
        self.name = name
        self.alignment = alignment
        self._generate = generate_fn
        self._describe = describe_fn
        self.deterministic = bool(deterministic)
        self.info = dict(info or {})

    def generate(self, V, *, seed: int = 0, steps: int | None = None) -> list:
        """PIL images, one per row of ``V`` (n, d) in the workspace space (zero rows are an error)."""
        V = np.atleast_2d(np.asarray(V, dtype=np.float64))
        V = check_embeddings(V, name="embeddings to generate from", allow_zero_rows=True)
        if np.any(np.linalg.norm(V, axis=1) <= 1e-12):
            raise ValueError("a zero component has no direction to draw (the concept is absent from this query)")
        return self._generate(self.alignment.transform(V), int(seed), steps)

    def describe(self, V) -> list | None:
        """What the generator reads in each row of ``V`` (its decoded "prompt"), or None when it cannot say.

        One entry per row: a list of ``(label, probability)`` pairs, most likely first.
        """
        if self._describe is None:
            return None
        V = np.atleast_2d(np.asarray(V, dtype=np.float64))
        V = check_embeddings(V, name="embeddings to describe", allow_zero_rows=True)
        return self._describe(self.alignment.transform(V))


def load_workspace_generator(ws: Workspace) -> WorkspaceGenerator:
    """The generator of ``ws`` with its fitted alignment.

    Emoji world: the shipped emoji generator conditioned on the ``emoji-large`` embeddings
    (``extras["cond"]``); alignment: workspace space -> conditioning space, fitted on the
    training items.

    Raises
    ------
    FileNotFoundError
        No generator is available for this workspace here; the message says what is missing.
    """
    if ws.building is not None:
        raise FileNotFoundError(
            f"the generator needs the whole emoji world, which is being built in the background "
            f"({ws.building.percent():.0f} %); this page works when it is done")
    if ws.generator != "emoji" or "cond" not in ws.extras:
        raise FileNotFoundError(
            f"no generator for workspace {ws.name!r} on this machine: image-to-prompt generation needs "
            "Stable Diffusion and CLIP ViT-L/14 embeddings of the same images (`slics download sd-1.5`)")
    return _emoji_generator(ws)


def _emoji_generator(ws: Workspace) -> WorkspaceGenerator:
    """The emoji world's generator, aligned from the workspace space to its conditioning space.

    It reads each aligned row as the objects of a scene and draws them with the world's sprites
    (:mod:`slics_core.emoji.generator`), so it can say what it read: ``describe`` gives the top
    objects with their probabilities.
    """
    gen = EmojiGenerator.load()
    tr = ws.index["train"]
    align = ProcrustesAlignment(normalize=True).fit(ws.X[tr], gen.condition(ws.extras["cond"][tr]))

    def run(C, seed, steps):
        return [Image.fromarray(a) for a in gen.generate(C)]

    return WorkspaceGenerator("emoji generator", align, run, deterministic=True,
                              info={"alignment_train_cosine": float(align.train_cosine_)},
                              describe_fn=gen.describe)
