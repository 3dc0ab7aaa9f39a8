"""SLiCS: Sparse Linear Concept Subspaces.

Disentangle latent embeddings (CLIP, DINOv2, TiTok, ...) into per-concept
components that are sparse non-negative combinations of a group-structured
dictionary, as in *Disentangling Latent Embeddings with Sparse Linear Concept
Subspaces*.

The estimator is :class:`slics_core.SLiCS`; see :mod:`slics_core.slics`.

Importing this package (and therefore any of its modules, e.g.
:mod:`slics_core.weights` or :mod:`slics_core.cli`) loads nothing heavy:
``SLiCS`` is exported through a module ``__getattr__`` (PEP 562), so
scikit-learn and SciPy are imported on first use of ``slics_core.SLiCS``,
not when ``slics --version`` or ``slics models`` only need the package.
"""
__version__ = "0.6.1"

__all__ = ["SLiCS", "__version__"]


def __getattr__(name):
    if name == "SLiCS":
        from slics_core.slics import SLiCS

        return SLiCS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
