"""Removing or boosting one concept of a query (Retrieve's "without j" / "more of j", Generate's edited query).

Removal and boosting (SLiCS is additive, so both edits are exact): "without
concept ``j``" is ``x - v_j`` with ``v_j`` the *full* component from the joint
NNLS over the query's active concepts (``j`` always among them), so what is left
is the other concepts' components plus the residual; "more of ``j``" is
``x + lambda tilde v_j`` with the *partial* component and ``lambda`` in
:data:`BOOST_RANGE` (the boosted query's own partial component along ``j`` is
then exactly ``(1 + lambda) tilde v_j``: the cone's projection is positively
homogeneous and ``x - tilde v_j`` is orthogonal to ``tilde v_j``). An edited
gallery (:func:`edited_gallery`) is judged by whether its items *lack* ``j`` (removal) or *have* ``j``
(boosting), by the pool's general labels, beside the unfiltered gallery judged
the same way; :func:`edit_line`, :func:`parse_boost_param` (the ``?rm=`` / ``?boost=`` deep links).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from slics_core.explorer.queries import (
    Gallery,
    check_query,
    components_of_row,
    model_dim,
    n_concepts,
    parse_concept_param,
)
from slics_core.rows import ZERO_NORM

__all__ = ["EDITS", "BOOST_RANGE", "EDIT_CRITERION", "EditedQuery", "edit_query", "edited_gallery", "edit_line",
           "parse_boost_param", "edit_title"]


# ---------------------------------------------------------------------- removal and boosting
#: The two edits of a query along one concept: ``"remove"`` (``x - v_j``) and ``"boost"`` (``x + lambda tilde v_j``).
EDITS = ("remove", "boost")
#: The range of ``lambda`` in ``x + lambda tilde v_j``.
BOOST_RANGE = (0.0, 2.0)
#: What an edited gallery's items are checked for, per edit: the concept's absence after removal, its
#: presence after boosting (general labels).
EDIT_CRITERION = {"remove": "lacks", "boost": "has"}


def _check_edit(edit, strength):
    if edit not in EDITS:
        raise ValueError(f"edit must be one of {EDITS}, got {edit!r}")
    if edit == "boost":
        lam = float(strength)
        if not BOOST_RANGE[0] <= lam <= BOOST_RANGE[1]:
            raise ValueError(f"the boost lambda must be from {BOOST_RANGE[0]:g} to {BOOST_RANGE[1]:g}, "
                             f"got {strength!r}")
        return lam
    return 1.0


def edit_query(model, x, concept, edit, *, strength=1.0, active=None) -> tuple:
    """One query with concept ``concept`` removed or boosted (see the module docstring).

    Parameters
    ----------
    model : fitted model of a registered method
    x : array-like of shape (d,)
        The query, preprocessed like the model's training data.
    concept : int
    edit : {"remove", "boost"}
    strength : float, default=1.0
        ``lambda`` of the boost, in :data:`BOOST_RANGE` (ignored by ``"remove"``).
    active : sequence of int, optional
        The query's active concepts for the full component of ``"remove"``; ``concept`` is added.

    Returns
    -------
    edited : ndarray of shape (d,)
        ``x - v_j`` or ``x + lambda tilde v_j``.
    component : ndarray of shape (d,)
        ``v_j`` (remove) or ``tilde v_j`` (boost); zero when the query has nothing along the concept.
    """
    lam = _check_edit(edit, strength)
    x = check_query(x, model_dim(model))
    S = n_concepts(model)
    concept = int(concept)
    if not 0 <= concept < S:
        raise ValueError(f"concept {concept} out of range (0..{S - 1})")
    if edit == "remove":
        act = sorted({concept, *(int(a) for a in (active if active is not None else ()))})
        v = components_of_row(model, x, "full", active=act)[concept]
        return x - v, v
    v = components_of_row(model, x, "partial")[concept]
    return x + lam * v, v


@dataclass
class EditedQuery:
    """A query edited along one concept, and the pool ranked by it (:func:`edited_gallery`).

    Attributes
    ----------
    edit, concept, strength :
        As in :func:`edit_query` (``strength`` is 1.0 for a removal).
    x, component : ndarray of shape (d,)
        The edited embedding, and the component taken away (``v_j``) or added (``tilde v_j``, unscaled).
    gallery, unfiltered : Gallery
        Top-k pool items by the edited embedding (kind ``"edited"``) and by the query itself;
        ``relevant_general`` marks the items that meet :attr:`criterion` (lack / have the concept).
    """

    edit: str
    concept: int
    strength: float
    x: np.ndarray
    component: np.ndarray
    gallery: Gallery
    unfiltered: Gallery

    @property
    def criterion(self) -> str:
        """``"lacks"`` (removal) or ``"has"`` (boost)."""
        return EDIT_CRITERION[self.edit]


def edit_line(criterion: str, concept_name: str, k: int, precision: float) -> str:
    """The precision line of an edited (or unfiltered) gallery: ``"lacks animal: P@20 0.85"``."""
    value = "—" if precision is None or np.isnan(precision) else f"{precision:.2f}"
    return f"{criterion} {concept_name}: P@{int(k)} {value}"


def edited_gallery(model, x, pool, concept, k, *, edit, strength=1.0, active=None) -> EditedQuery:
    """The pool ranked by the query with one concept removed or boosted, beside the unfiltered ranking.

    Parameters
    ----------
    model, x, concept, edit, strength, active :
        As in :func:`edit_query`.
    pool : slics_core.explorer.pool.Pool
        The candidates (``ws.pool``, ``ws.quantized_pool``, or :func:`~slics_core.explorer.pool.memory_pool`).
        With labels, each item is marked for lacking (removal) or having (boost) the concept; a pool without
        labels gives marks None.
    k : int

    Returns
    -------
    EditedQuery
        When the query has no component along the concept the edited embedding is the query itself (its
        gallery says so); when nothing is left after a removal its gallery is empty, with a note. Each gallery
        carries its :class:`~slics_core.explorer.pool.Hits`.
    """
    lam, x, concept, criterion = _check_edit(edit, strength), check_query(x, model_dim(model)), int(concept), \
        EDIT_CRITERION.get(edit)
    edited, v = edit_query(model, x, concept, edit, strength=lam, active=active)
    left = np.linalg.norm(edited) > ZERO_NORM
    found = pool.search(np.stack([x, edited] if left else [x]), k)

    def marks(hits):
        has = None if hits.labels is None else hits.labels[:, concept]
        return has if has is None or criterion == "has" else ~has

    unfiltered = Gallery.of_hits("unfiltered", concept, found[0], marks(found[0]))
    note = "" if np.linalg.norm(v) > ZERO_NORM else \
        "the query has no component along the concept (it is zero), so the edited query is the query itself"
    if left:
        gallery = Gallery.of_hits("edited", concept, found[1], marks(found[1]), note=note)
    else:
        gallery = Gallery.of_hits("edited", concept, pool.empty(), marks(pool.empty()),
                                  note="nothing of the query is left without the concept (it is all that concept)")
    return EditedQuery(edit, concept, 1.0 if edit == "remove" else lam, edited, v, gallery, unfiltered)


def edit_title(edit: str, concept_name: str, strength: float = 1.0) -> str:
    """What an edited query is called under its picture: ``"without animal"``, ``"more of animal (λ=1.5)"``."""
    _check_edit(edit, strength)
    return f"without {concept_name}" if edit == "remove" else f"more of {concept_name} (λ={float(strength):g})"


def parse_boost_param(value, concept_names) -> tuple:
    """``(name, lambda)`` from a ``?boost=<concept>:<lambda>`` value (concept case-insensitive).

    Raises
    ------
    ValueError
        One line naming what is wrong: no ``:``, an unknown concept, or a lambda that is not a number in
        :data:`BOOST_RANGE`.
    """
    text = str(value).strip()
    name, sep, lam_text = text.rpartition(":")
    if not sep or not name.strip():
        raise ValueError(f"boost={text!r} is not <concept>:<lambda> (e.g. boost=animal:1.5)")
    found = parse_concept_param(name, concept_names)
    if len(found) != 1 or "," in name:
        raise ValueError(f"boost={text!r}: {name.strip()!r} is not a concept of this workspace")
    try:
        lam = float(lam_text)
    except ValueError:
        lam = float("nan")  # refused below
    if not BOOST_RANGE[0] <= lam <= BOOST_RANGE[1]:
        raise ValueError(f"boost={text!r}: lambda must be a number from {BOOST_RANGE[0]:g} to {BOOST_RANGE[1]:g}")
    return found[0], lam


# ---------------------------------------------------------------------- uploads
