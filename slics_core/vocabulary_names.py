"""The names of the one vocabulary grammar (``--vocab``, ``vocabulary=``), apart from its reader.

:func:`slics_core.captions.get_words` reads a spec; this module holds only the names, so that the
command line's options (which must not load scikit-learn for ``--help``) show the same grammar.
"""
from __future__ import annotations

__all__ = ["DEFAULT_VOCABULARY", "NO_VOCABULARY", "LAION_DOWNLOAD", "VOCABULARY_SPECS"]

#: The offline default: frequent English words from ``wordfreq``.
DEFAULT_VOCABULARY = "wordfreq"
#: No vocabulary (no captions, no SpLiCE baselines).
NO_VOCABULARY = "none"
#: SpLiCE's LAION word list, downloaded on explicit request only.
LAION_DOWNLOAD = "laion-download"
#: The forms of a vocabulary spec, in words (``--vocab`` help, messages).
VOCABULARY_SPECS = (f"'{DEFAULT_VOCABULARY}' (frequent English words, offline; the default), '{NO_VOCABULARY}' "
                    f"(no vocabulary), '{LAION_DOWNLOAD}' (SpLiCE's LAION word list, downloaded) or a word-list file")
