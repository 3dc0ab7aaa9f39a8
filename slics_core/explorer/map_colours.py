"""The colour rules of the subspace maps: which colour group each point of a map is in, and its colour.

The points come from :func:`slics_core.explorer.maps.map_points` (a table with ``kind``, ``row``, ``concept``,
``labels``, ``sub_label``); the Subspaces page colours them with :func:`map_colours` and writes the mode in
its link with :func:`colour_param`.

Choices (the paper is silent on them)
-------------------------------------
* **Colour groups.** A component's concept is its own concept and its
  sub-label is the item's sub-label of that concept; an embedding with
  several concepts (or sub-labels) is put in the group ``"several"``; an item
  without one is ``"none"``; atoms have the sub-label ``"(atom)"``. The modes
  are named once, in :data:`COLOUR_MODES`; :func:`map_colours` gives groups
  and colours for every one of them. "first label" is FiftyOne's rule for a
  list field (its first value): an embedding takes its item's first concept
  in the workspace's concept order (an item with one shown concept keeps it: a
  map of some concepts colours by them). "has / lacks" splits the points on one
  concept: an item's points (embedding and components) have it when the item
  is labelled with it, an atom when it is one of that concept's atoms.
* **Colours.** A named group keeps the palette colour of its position in the workspace's order (a concept
  keeps its colour when others are filtered out), catch-all groups are grey (:data:`GREYS`); more than
  :data:`MAX_COLOURS` groups: the smallest are merged into ``"other"``.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = [
    "SEVERAL",
    "NONE",
    "ATOM_SUB",
    "OTHER",
    "OTHER_CONCEPTS",
    "MAX_COLOURS",
    "group_name",
    "colour_groups",
    "COLOUR_MODES",
    "PALETTE",
    "GREYS",
    "LACKS_GREY",
    "colour_param",
    "parse_colour_param",
    "has_concept",
    "map_colours",
]

#: Catch-all groups: an item with several shown concepts (or sub-labels), with none, a concept's atoms in a
#: sub-label colouring.
SEVERAL = "several"
NONE = "none"
ATOM_SUB = "(atom)"
OTHER = "other"
OTHER_CONCEPTS = "other concepts"
MAX_COLOURS = 15


def group_name(names):
    """The colour group of an item with the groups ``names`` (its concepts, or its sub-labels of one concept):
    the only one, else :data:`SEVERAL`, or :data:`NONE` for none."""
    if len(names) == 1:
        return names[0]
    return SEVERAL if names else NONE


def colour_groups(table, by="concept", *, concept=None, concept_names=None, Z=None, sub_to_concept=None,
                  sub_names=None, max_groups=MAX_COLOURS):
    """The colour group of every point of a map, and the groups in legend order.

    ``by="concept"``: a point's concept (an embedding with several shown concepts is
    ``"several"``, without one ``"none"``). ``by="sub-label"``: sub-labels of **one**
    ``concept`` only: its components take their item's sub-label in it, the embeddings of
    items with a sub-label in it take that sub-label (``"several"`` if more than one), its
    atoms are ``"(atom)"``, every other point is ``"other concepts"``. More than
    ``max_groups`` groups: the smallest are merged into ``"other"`` so that exactly
    ``max_groups`` remain (a palette has a few distinguishable colours, not 71).

    Parameters
    ----------
    table : DataFrame
        :func:`map_points`'s table.
    by : one of :data:`COLOUR_MODES`
    concept : str, optional
        The concept whose sub-labels colour the map (required with ``by="sub-label"``), or whose
        presence does (required with ``by="has concept"``: groups ``"has <c>"`` and ``"lacks <c>"``).
    concept_names : list of str, optional
        Legend order of the concepts (and their check); default: order of appearance.
    Z, sub_to_concept, sub_names
        Sub-labels as in :func:`map_points` (required with ``by="sub-label"``).
    max_groups : int
        At least 2.

    Returns
    -------
    groups : ndarray of str
        One per row of ``table``.
    order : list of str
        The groups present, named ones first (concept or sub-label order), then
        ``"several"``, ``"(atom)"``, ``"none"``, ``"other"``, ``"other concepts"``.
    """
    if isinstance(max_groups, bool) or not isinstance(max_groups, (int, np.integer)) or max_groups < 2:
        raise ValueError(f"max_groups must be an int >= 2; got {max_groups!r}.")
    if by == "concept":
        groups = table.concept.astype(str).to_numpy()
        named = list(concept_names) if concept_names is not None else list(dict.fromkeys(groups))
    elif by == "first label":
        groups = table.concept.astype(str).to_numpy().astype(object)
        for p, (k, c, labels) in enumerate(zip(table.kind, table.concept, table["labels"])):
            if k == "embedding" and c == SEVERAL:
                groups[p] = labels.split(", ")[0]
        groups = groups.astype(str)
        named = list(concept_names) if concept_names is not None else list(dict.fromkeys(groups))
    elif by == "has concept":
        if concept_names is None or concept not in list(concept_names):
            raise ValueError(f"pick one concept to colour by its presence; got {concept!r} "
                             f"(known: {None if concept_names is None else list(concept_names)}).")
        has = has_concept(table, concept)
        named = [f"has {concept}", f"lacks {concept}"]
        groups = np.where(has, named[0], named[1]).astype(str)
    elif by == "sub-label":
        if Z is None or sub_to_concept is None or sub_names is None:
            raise ValueError("colouring by sub-label needs the sub-labels (Z, sub_to_concept, sub_names).")
        if concept_names is None:
            raise ValueError("colouring by sub-label needs concept_names.")
        names = list(concept_names)
        if concept not in names:
            raise ValueError(f"pick one concept to colour by its sub-labels; got {concept!r} (known: {names}).")
        Z = np.asarray(Z, dtype=bool)
        sub_to_concept = np.asarray(sub_to_concept, dtype=int)
        j = names.index(concept)
        own = np.flatnonzero(sub_to_concept == j)
        named = [sub_names[k] for k in own]
        groups = np.full(len(table), OTHER_CONCEPTS, dtype=object)
        for p, (k, r, c, sub) in enumerate(zip(table.kind, table.row, table.concept, table.sub_label)):
            if k == "atom":
                groups[p] = ATOM_SUB if c == concept else OTHER_CONCEPTS
            elif k == "component":
                groups[p] = sub if c == concept else OTHER_CONCEPTS
            else:
                subs = [sub_names[q] for q in own[Z[r, own]]]
                groups[p] = group_name(subs) if subs else OTHER_CONCEPTS
        groups = groups.astype(str)
    else:
        raise ValueError(f"by must be one of {list(COLOUR_MODES)}; got {by!r}.")
    special = [SEVERAL, ATOM_SUB, NONE, OTHER, OTHER_CONCEPTS]
    present = set(groups.tolist())
    order = [g for g in named if g in present and g not in special]
    order += [g for g in dict.fromkeys(groups.tolist()) if g not in order and g not in special]
    order += [g for g in special if g in present]
    if len(order) > max_groups:
        counts = pd.Series(groups).value_counts()
        ranked = sorted(order, key=lambda g: (-counts[g], order.index(g)))
        keep = set(ranked[: max_groups - 1])
        groups = np.where(np.isin(groups, list(keep)), groups, OTHER)
        order = [g for g in order if g in keep and g != OTHER] + [OTHER]
    return groups, order


#: The map's colour modes (the page's "Colour by" radio lists them in this order), each with its rule in words.
COLOUR_MODES = {
    "concept": "the point's concept; an item with several shown concepts is “several”",
    "first label": "an item takes its first concept (FiftyOne's rule for a list field); components and atoms "
                   "their own concept",
    "has concept": "two colours: the points whose item has one chosen concept (and that concept's atoms), "
                   "and the rest",
    "sub-label": "the sub-labels of one chosen concept; the other concepts are grey",
}
#: 15 well-separated colours for the named groups (by position in the concept / sub-label order, so a
#: concept keeps its colour when others are filtered out); grey shades for the catch-all groups.
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf",
           "#bcbd22", "#393b79", "#e7ba52", "#637939", "#7b4173", "#3182bd", "#ad494a"]
GREYS = {SEVERAL: "#555555", ATOM_SUB: "#222222", NONE: "#aaaaaa", OTHER: "#888888", OTHER_CONCEPTS: "#cccccc"}
LACKS_GREY = "#cccccc"


def colour_param(mode, concept=None):
    """The URL's ``colour`` value of a colour mode: ``"first label"``, ``"has concept:animal"``,
    ``"sub-label:food"`` (the modes that need a concept carry it after a colon)."""
    if mode not in COLOUR_MODES:
        raise ValueError(f"unknown colour mode {mode!r}; known: {list(COLOUR_MODES)}")
    return f"{mode}:{concept}" if mode in ("has concept", "sub-label") else mode


def parse_colour_param(text, concept_names):
    """``(mode, concept)`` of a ``colour`` value (:func:`colour_param`); one line naming the culprit otherwise."""
    mode, _, concept = str(text).partition(":")
    mode, concept = mode.strip(), concept.strip() or None
    if mode not in COLOUR_MODES:
        raise ValueError(f"colour={text!r} is not a colour mode ({', '.join(COLOUR_MODES)})")
    if mode in ("has concept", "sub-label"):
        if concept not in list(concept_names):
            raise ValueError(f"colour={text!r} needs a concept of this workspace after the colon, "
                             f"e.g. {mode}:{list(concept_names)[0]}")
        return mode, concept
    return mode, None


def has_concept(table, concept):
    """Whether each point's item is labelled with ``concept`` (atoms: whether the atom is one of its atoms)."""
    out = np.zeros(len(table), dtype=bool)
    for p, (k, c, labels) in enumerate(zip(table.kind, table.concept, table["labels"])):
        out[p] = (c == concept) if k == "atom" else concept in labels.split(", ")
    return out


def map_colours(table, by="concept", *, concept=None, concept_names=None, Z=None, sub_to_concept=None,
                sub_names=None, max_groups=MAX_COLOURS):
    """Colour group and colour of every point, for any mode of :data:`COLOUR_MODES`.

    Groups as :func:`colour_groups`; a named group (a concept or one of ``concept``'s sub-labels) keeps
    the palette colour of its position in the workspace's order, catch-all groups are grey, and
    ``"lacks <c>"`` is light grey beside ``"has <c>"`` in ``c``'s colour.

    Returns
    -------
    groups : ndarray of str
    order : list of str
    colours : dict
        Group -> ``"#rrggbb"``, one per group of ``order``.
    """
    groups, order = colour_groups(table, by, concept=concept, concept_names=concept_names, Z=Z,
                                  sub_to_concept=sub_to_concept, sub_names=sub_names, max_groups=max_groups)
    if by == "sub-label":
        j = list(concept_names).index(concept)
        reference = [s for s, c in zip(sub_names, np.asarray(sub_to_concept, dtype=int)) if c == j]
    else:
        reference = list(concept_names) if concept_names is not None else list(order)
    colours = {}
    for i, g in enumerate(order):
        if g in GREYS:
            colours[g] = GREYS[g]
        elif by == "has concept":
            colours[g] = PALETTE[reference.index(concept) % len(PALETTE)] if g.startswith("has ") else LACKS_GREY
        else:
            colours[g] = PALETTE[(reference.index(g) if g in reference else i) % len(PALETTE)]
    return groups, order, colours
