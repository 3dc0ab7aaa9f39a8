"""SLiCS: Sparse Linear Concept Subspaces.

Disentangle latent embeddings (CLIP, DINOv2, TiTok, ...) into per-concept
components that are sparse non-negative combinations of a group-structured
dictionary, as in *Disentangling Latent Embeddings with Sparse Linear Concept
Subspaces*.

The estimator is :class:`slics_core.SLiCS`; see :mod:`slics_core.slics`.
"""
__version__ = "0.1.0"

from slics_core.slics import SLiCS  # noqa: E402

__all__ = ["SLiCS", "__version__"]
