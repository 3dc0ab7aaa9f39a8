"""Sentences the pages show that depend on the numbers shown beside them.

A page that says "look at the blocks on the diagonal" must show blocks; one that says "every page
works" must have what every page needs. These functions read the numbers (or the workspace) and say
what is true of them, so a workspace whose numbers differ from the paper's gets a different sentence.
No Streamlit here: the pages draw the strings.
"""
from __future__ import annotations

import math
import os
import re

import numpy as np

from slics_core.emoji.world import emoji_vocabulary
from slics_core.encoders import parse_encoder_spec
from slics_core.evaluation import SWEEP_K, SWEEP_METHOD, d0_rule_words
from slics_core.explorer import safe_text
from slics_core.explorer.safe_text import code
from slics_core.methods import contenders, dictionary_method_words, get_method

__all__ = ["EVALUATE_LOOK_AT_FIRST", "PAPER_ATOM_COSINE", "atom_sentences", "component_words", "d0_choice",
           "evaluate_look_at", "example_caption", "missing", "page_readiness", "text_tower_check"]

#: Fig. 6 of the paper (COCO, S-SLiCS): within-group and between-group cosine of the atoms (mean, std).
PAPER_ATOM_COSINE = {"within": (-0.056, 0.062), "between": (0.000, 0.134)}
#: Co-occurrence within / between of at least this ratio is "blocks on the diagonal"; cosines closer than
#: COSINE_SAME are "about as alike".
BLOCK_RATIO = 1.5
COSINE_SAME = 0.03

MISSING = "—"


def _is_emoji_encoder(name) -> bool:
    """Whether a workspace's (untrusted) encoder name is one of the emoji world's (the one name parser)."""
    try:
        return name is not None and parse_encoder_spec(name).kind == "emoji"
    except ValueError:
        return False


def missing(value, fmt: str = "{:.3f}") -> str:
    """``value`` formatted, or "—" when it is absent (None, NaN, pandas NA)."""
    try:
        if value is None or (isinstance(value, float) and math.isnan(value)) or value != value:
            return MISSING
    except (TypeError, ValueError):  # pandas NA refuses comparison
        return MISSING
    try:
        return fmt.format(value)
    except (TypeError, ValueError):
        return MISSING if str(value) in ("<NA>", "nan", "None") else str(value)


def _fin(*values) -> bool:
    return all(v is not None and math.isfinite(v) for v in values)


def atom_sentences(summary: dict) -> dict:
    """What the Atoms page's two matrices show, from their own summary numbers.

    ``summary``: :func:`slics_core.explorer.atom_tables.atom_heatmaps`'s ``summary`` (``cooc_within_mean``,
    ``cooc_between_mean``, ``within_mean``, ``within_std``, ``between_mean``, ``between_std``).

    Returns ``look_at`` (the page's one sentence), ``cooccurrence`` and ``cosine`` (the captions under
    each matrix). The paper (Fig. 6) finds blocks in the co-occurrence matrix and none in the cosine
    matrix: atoms of one concept are used together, yet are *less* alike than atoms of different concepts
    (−0.056 ± 0.062 against 0.000 ± 0.134), because a concept's atoms spread out to cover its variety.
    """
    cw, cb = summary.get("cooc_within_mean"), summary.get("cooc_between_mean")
    wm, wsd = summary.get("within_mean"), summary.get("within_std")
    bm, bsd = summary.get("between_mean"), summary.get("between_std")
    pw, pb = PAPER_ATOM_COSINE["within"], PAPER_ATOM_COSINE["between"]
    paper = (f"the paper (COCO, Fig. 6): {pw[0]:+.3f} ± {pw[1]:.3f} within against {pb[0]:+.3f} ± "
             f"{pb[1]:.3f} between")

    if not _fin(cw, cb):
        blocks = None
        cooc = ("Co-occurrence within a concept is not defined here (one atom per concept, or no item uses two "
                "atoms of one concept).")
    elif cw >= BLOCK_RATIO * cb and cw > cb:
        blocks = True
        cooc = (f"Blocks on the diagonal: two atoms of one concept are active together {cw:.2f} of the time on "
                f"average, two atoms of different concepts {cb:.2f}"
                + (f" ({cw / cb:.1f}×)." if cb > 0 else "."))
    elif cw > cb:
        blocks = False
        cooc = (f"Weak blocks: atoms of one concept are active together only a little more often ({cw:.2f}) than "
                f"atoms of different concepts ({cb:.2f}).")
    else:
        blocks = False
        cooc = (f"No blocks here: atoms of one concept are not active together more often ({cw:.2f}) than atoms "
                f"of different concepts ({cb:.2f}), unlike the paper's Fig. 6.")

    if not _fin(wm, bm):
        alike = None
        cos = "Cosines within a concept are not defined here (one atom per concept)."
    else:
        nums = f"{wm:+.3f} ± {wsd:.3f} within a concept, {bm:+.3f} ± {bsd:.3f} between concepts"
        if wm < bm - COSINE_SAME:
            alike = "less"
            cos = (f"No blocks: atoms of one concept are less alike than atoms of different concepts ({nums}); a "
                   f"concept's atoms spread out to cover its variety, as in {paper}.")
        elif wm <= bm + COSINE_SAME:
            alike = "same"
            cos = (f"No blocks: atoms of one concept are about as alike as atoms of different concepts ({nums}); "
                   f"{paper}.")
        else:
            alike = "more"
            cos = (f"Atoms of one concept point more alike than atoms of different concepts here ({nums}), unlike "
                   f"{paper}.")

    if blocks:
        first = "the co-occurrence matrix's blocks on the diagonal: atoms of one concept are used together"
    elif blocks is None:
        first = "which atoms are used together (the co-occurrence matrix)"
    else:
        first = "the co-occurrence matrix: here atoms of one concept are hardly used together more than others"
    if alike == "less":
        second = "the cosine matrix has no blocks, because atoms of one concept point apart, not alike"
    elif alike == "same":
        second = "the cosine matrix has no blocks: atoms of one concept point no more alike than others"
    elif alike == "more":
        second = "in the cosine matrix, atoms of one concept also point alike (the paper found the opposite)"
    else:
        second = "the cosines of the atoms"
    return {"look_at": f"{first[0].upper()}{first[1:]}; {second}.", "cooccurrence": cooc, "cosine": cos}


def component_words(method: str, mode: str) -> str:
    """How a page names the component a gallery is ranked by, for ``method`` and component ``mode``.

    Dictionary methods have ṽⱼ (partial: nearest point of the cone) and vⱼ (full: joint NNLS); F-SpLiCE's
    component is its word group's part of the sparse decomposition, UF ranks by the whole embedding.
    """
    m = get_method(method)
    if m.dictionary:
        return f"{'ṽⱼ, partial' if mode == 'partial' else 'vⱼ, full'}, {method}"
    if method == "UF":
        return "the whole embedding, UF: no concept filter"
    return f"its word group's part of the sparse decomposition, {method}"


def example_caption(shown: list, all_concepts: list) -> str:
    """The caption of Home's one-picture row (Markdown): which of the query's concepts the row shows.

    The concept names come from the workspace's labels: each is written as plain text
    (:func:`slics_core.explorer.safe_text.text`)."""
    shown, all_concepts = list(shown), list(all_concepts)
    if len(shown) == len(all_concepts):
        return ("The query is about the sum of its concept components; each component finds images sharing "
                "that concept, the whole embedding finds images like the whole scene.")
    rest = [c for c in all_concepts if c not in shown]
    names = lambda cs: ", ".join(safe_text.text(c) for c in cs)  # noqa: E731
    return (f"The query has {len(all_concepts)} concepts; the row shows {len(shown)} of its components "
            f"({names(shown)}) and leaves out {names(rest)} (+ … in the sum). Each component finds images "
            "sharing that concept; the whole embedding finds images like the whole scene.")


def page_readiness(ws, operator: bool = True) -> list:
    """What each page can do on workspace ``ws``: rows ``{"page", "ready", "note"}``.

    Read from what the workspace records (fitted methods, d0 values, vocabulary, encoder, generator);
    nothing is loaded, so the list costs nothing to draw. ``operator``: the notes also say which ``slics``
    command adds what is missing (for whoever runs the app; the app passes whether its error details are on).
    """
    building = getattr(ws, "building", None) is not None
    dicts = list(ws.dictionary_methods())
    no_dict = (f"needs a dictionary ({dictionary_method_words()}"
               + (" among `slics workspace --methods`)" if operator else ")"))
    enc = getattr(ws, "encoder", None)
    vocab = bool(getattr(ws, "vocab_words", None)) and getattr(ws, "vocab_text", None) is not None
    rows = []

    def add(page, ready, note):
        rows.append({"page": page, "ready": bool(ready), "note": note})

    shipped = _is_emoji_encoder(enc)  # its weights are in the package's assets/models
    add("Retrieve", True, "query-set rows" + (f"; uploads and typed phrases through encoder {code(enc)} (loaded on "
                                              "first use; " + ("its weights ship with the package)" if shipped else
                                                               "needs its weights on this machine)") if enc else
                                              "; no uploads or typed phrases (no encoder recorded)"))
    add("Mix concepts", bool(dicts), "ready" if dicts else no_dict)
    add("Subspaces", bool(dicts), "ready" if dicts else no_dict)
    add("Atoms", bool(dicts), (("ready" if vocab else "ready; no top words (no caption vocabulary)")
                               if dicts else no_dict))
    add("Captions", bool(vocab and dicts),
        "ready" if vocab and dicts else
        ("needs a caption vocabulary: an encoder with a text tower when the workspace is built" if not vocab
         else no_dict))
    if building:
        add("Generate", False, "waits for the whole emoji world, being built in the background")
    elif getattr(ws, "generator", None):
        add("Generate", True, f"ready (generator: {code(ws.generator)})")
    else:
        name = os.path.basename(str(ws.path)) if getattr(ws, "path", None) else str(ws.name)
        name = name if re.fullmatch(r"[\w.-]+", name) else f"'{name}'"
        add("Generate", False, "needs Stable Diffusion and CLIP ViT-L/14 embeddings of the same images"
                               + (f" (`slics download sd-1.5 ViT-L-14/openai`, then `slics align --workspace {name} "
                                  "--generator sd-1.5`)" if operator else "") + "; the other pages do not")
    if building:
        add("Evaluate", False, "waits for every method at every d0, being built in the background")
    elif SWEEP_METHOD in ws.methods and ws.d0_values:
        add("Evaluate", True, "ready" + ("" if ws.Z is not None else " (no sub-labels: general-label scores only)"))
    else:
        add("Evaluate", False, f"needs {SWEEP_METHOD} fitted for at least one d0")
    for page in ("Learn: concept cones", "Planted cones", "Glossary"):
        add(page, True, "ready (needs no workspace)")
    return rows


def d0_choice(ws, k: int = SWEEP_K) -> str | None:
    """How the workspace's default d0 was chosen, truthfully: ``"d0 = 5, ..."``; None without a dictionary.

    On validation (:attr:`~slics_core.explorer.workspace.Workspace.d0_on_validation`: the build's sweep),
    the only fitted one, or the fallback rule (:func:`slics_core.evaluation.fallback_d0`) with its reason:
    no validation split, or not chosen yet (a workspace being built).
    """
    d0 = ws.default_d0
    if d0 is None:
        return None
    if ws.d0_on_validation:
        return f"d0 = {d0}, chosen on the validation split: {d0_rule_words(True, k, ws.Z is not None)}"
    if len(ws.d0_values) == 1:
        return f"d0 = {d0}, the only one fitted"
    why = ("there is no validation split to choose it on" if not len(ws.index.get("val", []))
           else "it is not chosen on validation yet")
    return f"d0 = {d0}, not chosen on validation ({why}): {d0_rule_words(False)}"


#: Evaluate's one sentence before its table is computed, and where the page stops without one (a workspace
#: being built, without fitted models or query items): what the page scores, read from no number.
EVALUATE_LOOK_AT_FIRST = ("how well each method's concept components retrieve items that share the concept "
                          "(mAP@k in the methods table, once it is computed), against UF, the whole query without "
                          "a concept filter.")


def evaluate_look_at(rows: list, chosen_d0, k: int, sub_labels: bool, on_validation: bool = True) -> str:
    """Evaluate's one sentence, from its methods table (``scoring.summary_rows``) and the chosen d0.

    Names the best method by general-label mAP@k and how it compares with UF (the unfiltered baseline:
    the whole query, no concept), since concept filtering is what the table is about. ``on_validation``:
    whether ``chosen_d0`` was chosen on the validation split (else it is the fallback rule's, said so). Oracle
    rows (:func:`slics_core.methods.contenders`) are never named best; the sentence says they are left out.
    """
    scored = [r for r in contenders(rows) if _fin(r.get("general"))]
    oracles = [r["method"] for r in rows if r not in contenders(rows)]
    if not scored:
        return "the table has no scores for these settings."
    best = max(scored, key=lambda r: r["general"])
    uf = next((r for r in scored if r["method"] == "UF"), None)
    s = f"the Gen. mAP@{k} column: {best['method']} ranks best ({best['general']:.3f})"
    if uf is not None and best["method"] != "UF":
        gap = best["general"] - uf["general"]
        s += (f", {gap:.3f} above UF, the whole query without a concept filter ({uf['general']:.3f})" if gap > 0
              else f", level with UF ({uf['general']:.3f})")
    elif uf is not None:
        s += ": here the whole query without a concept filter does best"
    if oracles:
        s += f" ({', '.join(oracles)}: oracle, shown but not ranked)"
    if on_validation:
        s += (f"; then the d0 curve below, whose best validation {'sub-label' if sub_labels else 'general-label'} "
              f"score picks d0 = {chosen_d0}.")
    else:
        s += (f"; then the d0 curve below, on the query set only: with no validation split, d0 = {chosen_d0} is "
              f"{d0_rule_words(False)}.")
    return s


def text_tower_check(ws, split: str = "val") -> dict | None:
    """Can the workspace's encoder read words? Its zero-shot top-1 accuracy on the workspace's own concept
    names, beside chance, and the sentence the Captions page shows with it.

    Accuracy: the fraction of labelled items of ``split`` (all items when the split is empty) whose
    best-matching concept name (cosine of the raw image embedding with the name's text embedding) is one of
    their labels; chance: the same for a concept drawn at random (mean labels per item / concepts).
    Returns None when the workspace has no concept text embeddings (no text tower).

    ``level``: ``"reads"`` (accuracy at least halfway from chance to 1), ``"noise"`` (within 0.1 of chance:
    its words are no better than random ones, e.g. an emoji encoder on real photos) or ``"weak"``.
    """
    rows = np.asarray(ws.index.get(split, []))
    if len(rows) == 0:
        rows = np.arange(len(ws))
    cos = ws.zero_shot(ws.raw[rows])
    if cos is None:
        return None
    Y = np.asarray(ws.Y[rows], bool)
    keep = Y.any(axis=1)
    if not keep.any():
        return None
    Y, cos = Y[keep], cos[keep]
    acc = float(Y[np.arange(len(Y)), np.argmax(cos, axis=1)].mean())
    chance = float(Y.mean())
    level = "reads" if acc >= (1 + chance) / 2 else ("noise" if acc <= chance + 0.1 else "weak")
    nums = (f"its zero-shot top-1 accuracy on this workspace's own {Y.shape[1]} concept names is {acc:.0%} "
            f"({len(Y)} labelled items; chance {chance:.0%})")
    enc = code(ws.encoder) if getattr(ws, "encoder", None) else "this workspace's encoder"
    emoji_words = _is_emoji_encoder(getattr(ws, "encoder", None)) and getattr(ws, "kind", "") != "emoji"
    if level == "reads" and emoji_words:  # it knows the names it was trained on, not a 10 000-word vocabulary
        text = (f"Text tower check: {enc} reads this workspace's concept names ({nums}), but its text tower was "
                f"trained on the emoji world's {len(emoji_vocabulary())} category and supercategory names only: "
                "other words of the vocabulary land almost "
                "at random, so most caption words below are noise. Use an encoder trained on real text (e.g. "
                "`ViT-B-32/openai`) for word captions.")
        level = "weak"
    elif level == "reads":
        text = f"Text tower check: {enc} reads these words: {nums}."
    elif level == "weak":
        text = (f"Text tower check: {enc} reads these words poorly: {nums}; treat the captions as hints, and "
                "prefer an encoder whose text tower knows this vocabulary.")
    else:
        text = (f"Text tower check: {enc} cannot read these words: {nums}, so the captions below are about as "
                "good as random words (an encoder trained on other images or other words, e.g. an emoji "
                "encoder on photos). Embed with an encoder whose text tower knows the vocabulary (e.g. "
                "`ViT-B-32/openai`).")
    return {"accuracy": acc, "chance": chance, "n": int(len(Y)), "level": level, "text": text}
