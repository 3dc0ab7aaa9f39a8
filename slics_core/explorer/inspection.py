"""An inspector's views of a dictionary: the atoms of one item (or query) and the activations of one atom.

Tables and numbers only (no Streamlit): Retrieve shows the query's atoms beside the query, Subspaces and Atoms
the atoms of a picked item, and Atoms the picked atom's activation statistics (an SAE dashboard's per-feature
view). The numbers come from :mod:`slics_core.analysis` (:func:`~slics_core.analysis.item_atoms`,
:func:`~slics_core.analysis.atom_activations`).

Choices (the issue and the paper are silent)
--------------------------------------------
* **Codes: no labels.** Every view decomposes items over *every* concept's atoms (the joint NNLS,
  ``mode="full"`` with every concept active: ``model.transform(X, None)``), the codes of the label profile.
  An uploaded or typed query has no labels, and only label-free codes let an atom fire on an item that lacks
  its concept, which is what "firing with and without its concept's label" measures.
* **Items of the frequencies and activations**: those of the label profile
  (:func:`slics_core.explorer.arrival.profile_split`: the pool; a sharded pool's shards carry no labels, so
  then the validation or training split). Their codes are computed once per dictionary and stored with the
  workspace (:func:`slics_core.explorer.arrival.activity_codes`, prepared at build time for the default
  dictionary).
* **"Fires on N % of items"**: the share of those items on which the atom fires
  (:func:`slics_core.analysis.firing`).
* **Share of energy**: ``c_a² ‖b_a‖² / Σ_b c_b² ‖b_b‖²`` (:func:`slics_core.analysis.energy_shares`).
* **Activation levels**: the items nearest the top (largest), median and 10 % quantile of the atom's non-zero
  coefficients (:data:`slics_core.analysis.ACTIVATION_LEVELS`).
"""
from __future__ import annotations

import numpy as np

from slics_core.analysis import ACTIVATION_LEVELS, atom_activations, firing, item_atoms

__all__ = ["ACTIVITY_CODES", "HISTOGRAM_BINS", "LEVEL_WORDS", "activation_sentence",
           "atom_activation_view", "atom_frequencies", "item_atom_table"]

#: How the codes of these views are made, in words (for captions and CSV settings).
ACTIVITY_CODES = "NNLS over every concept's atoms (no labels)"
#: Bins of the activation histogram.
HISTOGRAM_BINS = 30
#: Each activation level in words (:data:`slics_core.analysis.ACTIVATION_LEVELS`).
LEVEL_WORDS = {name: "the largest coefficients" if q == 1.0 else f"the {q:.0%} quantile of the non-zero coefficients"
               for name, q in ACTIVATION_LEVELS.items()}


def atom_frequencies(codes) -> np.ndarray:
    """Share of the items on which each atom fires ``(M,)`` (NaN without items)."""
    fire = firing(codes)
    return fire.mean(axis=0) if fire.shape[0] else np.full(fire.shape[1], np.nan)


def item_atom_table(model, x, atom_labels, frequency=None, atom_words=None, concepts=None):
    """:func:`slics_core.analysis.item_atoms` of one item on every concept (no labels; or, given ``concepts``, a
    sequence of concept indices, on those concepts' atoms alone, as Retrieve's galleries decompose), with the atoms'
    labels
    (``label``: "<concept> #<k>") first; given the atoms' firing frequencies, ``fires_on`` (share of the items of
    :func:`slics_core.explorer.arrival.activity_codes` on which the atom fires); given every atom's words (a list
    of words per atom, :func:`slics_core.explorer.arrival.atom_words`), ``words`` (joined by ", ")."""
    y = None
    if concepts is not None:
        y = np.zeros(int(model.n_concepts_))
        y[np.asarray(list(concepts), dtype=int)] = 1
    table = item_atoms(model, x, y, "full")
    table.insert(0, "label", [str(atom_labels[a]) for a in table.atom])
    if frequency is not None:
        f = np.asarray(frequency, dtype=np.float64)
        table["fires_on"] = f[table.atom.to_numpy(dtype=int)] if len(table) else np.zeros(0)
    if atom_words is not None:
        table["words"] = [", ".join(atom_words[a]) for a in table.atom]
    return table


def atom_activation_view(codes, atom, rows, Y, concept, *, k: int = 6, n_bins: int = HISTOGRAM_BINS) -> dict:
    """:func:`slics_core.analysis.atom_activations` of one atom over the items ``rows`` (workspace rows of the lines
    of ``codes``), with the firing frequency with and without its ``concept`` (from ``Y``), the examples as
    workspace rows, and the histogram of its non-zero coefficients.

    Returns
    -------
    view : dict
        :func:`~slics_core.analysis.atom_activations`' keys (``examples`` hold workspace rows), plus ``edges``
        (``n_bins + 1``) and ``counts`` (``n_bins``) of ``np.histogram`` of ``values`` (empty when it never fires),
        and, given ``Y``, ``counts_with`` / ``counts_without``: the same bins over the items with / without the
        concept (they add up to ``counts``).
    """
    rows = np.asarray(rows, dtype=np.int64)
    codes = np.asarray(codes, dtype=np.float64)
    if rows.shape != (codes.shape[0],):
        raise ValueError(f"rows must name one workspace row per line of codes ({codes.shape[0]}); "
                         f"got shape {rows.shape}.")
    has = None if Y is None else np.asarray(Y)[rows, int(concept)] > 0
    stats = atom_activations(codes, atom, has, k=k)
    stats["examples"] = {level: (rows[i], c) for level, (i, c) in stats["examples"].items()}
    if stats["fires"]:
        counts, edges = np.histogram(stats["values"], bins=int(n_bins))
    else:
        counts, edges = np.zeros(0, dtype=int), np.zeros(0)
    stats["counts"], stats["edges"] = counts, edges
    if has is not None and stats["fires"]:  # the same bins, split by the concept's label
        fired = firing(codes)[:, int(atom)]
        stats["counts_with"] = np.histogram(codes[fired & has, int(atom)], bins=edges)[0]
        stats["counts_without"] = np.histogram(codes[fired & ~has, int(atom)], bins=edges)[0]
    return stats


def _pct(fires, n) -> str:
    return f"{100 * fires / n:.1f} %" if n else "—"


def activation_sentence(view, concept_name: str, split: str) -> str:
    """One sentence of how often the atom fires (Markdown; ``concept_name`` must be escaped by the caller)."""
    n, fires = view["n_items"], view["fires"]
    if not fires:
        return f"Fires on none of the {n} {split} items."
    out = f"Fires on **{_pct(fires, n)}** of the {n} {split} items ({fires})"
    if "with_concept" in view:
        (fw, nw), (fo, no) = view["with_concept"], view["without_concept"]
        out += (f": **{_pct(fw, nw)}** of the {nw} with *{concept_name}*, **{_pct(fo, no)}** of the {no} "
                "without it")
        mw, mo = view["mean_with"], view["mean_without"]
        if np.isfinite(mw) and np.isfinite(mo):
            ratio = f" ({mw / mo:.1f}×)" if mo > 0 else ""
            out += (f"; mean coefficient **{mw:.3f}** with *{concept_name}* against **{mo:.3f}** without"
                    f"{ratio}")
    q = view["quantiles"]
    return out + ". Coefficient where it fires: " + ", ".join(
        f"{name} {q[name]:.3f}" for name in ACTIVATION_LEVELS if name in q) + "."
