"""The explorer's inspector views (slics_core.explorer.inspection) and their stored codes
(slics_core.explorer.arrival.activity_codes), against plain loops and the library's NNLS."""
import numpy as np
import pytest

from slics_core.analysis import FIRE_RTOL, item_atoms
from slics_core.captions import prepare_text_embeddings
from slics_core.explorer import arrival, page_settings
from slics_core.explorer.atom_tables import atom_labels, atom_top_words
from slics_core.explorer.encoding import workspace_vocabulary
from slics_core.explorer.inspection import (
    LEVEL_WORDS,
    activation_sentence,
    atom_activation_view,
    atom_frequencies,
    item_atom_table,
)


def _codes():
    rng = np.random.RandomState(2)
    codes = np.where(rng.rand(50, 4) < 0.5, rng.exponential(size=(50, 4)), 0.0)
    codes[0] = 0.0
    return codes


def test_atom_frequencies_count_the_items_where_each_atom_fires():
    codes = _codes()
    want = [np.mean([codes[i, a] > FIRE_RTOL * codes[i].max() for i in range(50)]) for a in range(4)]
    np.testing.assert_allclose(atom_frequencies(codes), want)
    assert np.isnan(atom_frequencies(np.zeros((0, 3)))).all()


def test_activation_view_maps_examples_to_workspace_rows_and_bins_the_values():
    codes = _codes()
    rows = np.arange(50) * 3 + 7  # workspace rows of the 50 items
    Y = np.zeros((rows.max() + 1, 2), dtype=bool)
    Y[rows[::2], 1] = True
    view = atom_activation_view(codes, 2, rows, Y, 1, k=3, n_bins=5)
    fired = [i for i in range(50) if codes[i, 2] > 0]
    assert view["counts"].sum() == len(fired) == view["fires"]
    counts, edges = np.histogram(codes[fired, 2], bins=5)
    np.testing.assert_array_equal(view["counts"], counts)
    np.testing.assert_allclose(view["edges"], edges)
    top_rows, top_c = view["examples"]["top"]
    best = sorted(fired, key=lambda i: -codes[i, 2])[:3]
    assert top_rows.tolist() == [int(rows[i]) for i in best]
    with_c = sum(1 for i in fired if i % 2 == 0)
    assert view["with_concept"] == (with_c, 25) and view["without_concept"] == (len(fired) - with_c, 25)
    for part, wanted in (("counts_with", lambda i: i % 2 == 0), ("counts_without", lambda i: i % 2 == 1)):
        np.testing.assert_array_equal(view[part], np.histogram([codes[i, 2] for i in fired if wanted(i)],
                                                               bins=edges)[0])
    np.testing.assert_array_equal(view["counts_with"] + view["counts_without"], view["counts"])
    mean_with = codes[::2, 2].mean()
    text = activation_sentence(view, "animal", "pool")
    assert f"mean coefficient **{mean_with:.3f}** with *animal*" in text
    assert f"{100 * len(fired) / 50:.1f} %" in text and f"{100 * with_c / 25:.1f} %" in text and "*animal*" in text
    with pytest.raises(ValueError, match="one workspace row per line"):
        atom_activation_view(codes, 2, rows[:-1], Y, 1)
    never = atom_activation_view(np.zeros((4, 2)), 0, np.arange(4), None, 0)
    assert never["fires"] == 0 and not len(never["counts"])
    assert activation_sentence(never, "x", "pool") == "Fires on none of the 4 pool items."
    assert set(LEVEL_WORDS) == set(view["examples"])


def test_item_atom_table_adds_labels_frequencies_and_words(ws):
    model = ws.model("S-SLiCS", ws.default_d0)
    x = ws.X[int(ws.index["query"][0])]
    labels = atom_labels(model.groups_, ws.concept_names)
    M = model.atoms_.shape[0]
    freq = np.linspace(0, 1, M)
    words = [[f"a{a}", f"b{a}"] for a in range(M)]
    table = item_atom_table(model, x, labels, freq, words)
    base = item_atoms(model, x)  # every concept, no labels
    assert table.atom.tolist() == base.atom.tolist() and len(table)
    assert table.label.tolist() == [labels[a] for a in base.atom]
    np.testing.assert_allclose(table.fires_on, freq[base.atom])
    assert table.words.tolist() == [f"a{a}, b{a}" for a in base.atom]
    assert "words" not in item_atom_table(model, x, labels).columns


def test_stored_atom_words_are_the_atoms_pages_top_words(ws):
    method, d0 = "S-SLiCS", ws.default_d0
    model = ws.model(method, d0)
    words, W = workspace_vocabulary(ws)
    Wp = prepare_text_embeddings(W)[0]
    got = arrival.atom_words(ws, method, d0)
    assert len(got) == model.atoms_.shape[0]
    for a in (0, 7, len(got) - 1):
        assert got[a] == atom_top_words(model.atoms_[a], Wp, words, k=arrival.ATOM_WORDS).word.tolist()


def test_activity_codes_are_the_label_free_codes_of_the_profile_items(ws):
    method, d0 = "S-SLiCS", ws.default_d0
    split = page_settings.profile_split(ws)
    codes = arrival.activity_codes(ws, method, d0)
    want = ws.model(method, d0).transform(ws.X[ws.index[split]], None)
    np.testing.assert_allclose(codes, want, atol=1e-9)
