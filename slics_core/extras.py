"""Optional dependencies: which extra of ``slics-explorer`` brings each, and one-line errors when absent.

The bare install (numpy, SciPy, scikit-learn, numba, Pillow) is the library: fit, transform,
project, retrieval, evaluation, captions from given text embeddings. The rest comes with extras
(``pip install "slics-explorer[EXTRA]"``; ``[all]`` is every one):

========== ======================================================================================
extra      brings
========== ======================================================================================
app        streamlit, plotly, pandas: the explorer (``slics app``) and the data commands' tables
models     torch, open_clip, transformers, huggingface_hub, safetensors, tqdm, wordfreq: encoders,
           the emoji world's models, weight downloads, word vocabularies
gen        diffusers (and ``models``): image generation
faiss      faiss-cpu: the FAISS search back-ends
ray        ray[data] (and ``models``): ``slics embed --backend ray``
tsne       openTSNE: FFT-accelerated t-SNE for maps of thousands of items (benchmarks/bench_tsne.py)
========== ======================================================================================

Heavy libraries are imported lazily where they are used, through :func:`require` (or caught by
the command line, :func:`missing_extra_message`), so a missing one is reported as one line naming
the extra to install.
"""
from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["EXTRAS", "MissingExtraError", "extra_for", "missing_extra_message", "require"]

#: Top-level import name -> the extra that installs it.
EXTRAS = {
    "streamlit": "app",
    "plotly": "app",
    "pandas": "app",
    "torch": "models",
    "torchvision": "models",
    "open_clip": "models",
    "transformers": "models",
    "huggingface_hub": "models",
    "safetensors": "models",
    "tqdm": "models",
    "wordfreq": "models",
    "diffusers": "gen",
    "faiss": "faiss",
    "ray": "ray",
    "openTSNE": "tsne",
}


class MissingExtraError(ModuleNotFoundError):
    """An optional library is not installed; the message names the extra that installs it."""


def extra_for(module_name: str | None) -> str | None:
    """The extra that installs ``module_name`` (a dotted name is read by its top-level package), or None."""
    if not module_name:
        return None
    return EXTRAS.get(module_name.split(".")[0])


def missing_extra_message(module_name: str, feature: str | None = None) -> str:
    """One line: what needs ``module_name``, and the ``pip install`` command of its extra."""
    top = module_name.split(".")[0]
    extra = extra_for(top) or "all"
    what = f"{feature} needs {top}" if feature else f"{top} is needed here"
    return f'{what}, which is not installed: pip install "slics-explorer[{extra}]"'


def require(module_name: str, feature: str | None = None) -> ModuleType:
    """Import ``module_name``; if it, or an optional library it needs, is missing, raise :class:`MissingExtraError`.

    A missing module that no extra installs re-raises the original error unchanged.
    """
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or module_name  # e.g. torch, when open_clip is there but torch is not
        if extra_for(missing) is None:
            raise
        raise MissingExtraError(missing_extra_message(missing, feature), name=missing) from None
