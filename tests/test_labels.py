"""slics_core.labels: the one label bundle, its one check, and the containers that carry it."""
import shutil
from pathlib import Path

import numpy as np
import pytest

from slics_core.data import EvalData, LabelledEmbeddings, eval_data, load_cache
from slics_core.datasets import ImageDataset
from slics_core.labels import Labels
from slics_core.splits import Split

OLD_WORKSPACE = Path(__file__).resolve().parent / "data" / "workspace-0.2"


def _cache(folder, ids, E, labels):
    """An embedding cache of ``E`` (one batch) with label arrays ``labels`` (``labels.npz``)."""
    from slics_core.store import EmbeddingStore

    store = EmbeddingStore(folder)
    store.begin(ids, "none", E.shape[1], len(ids), dataset={"name": "toy"})
    store.write_batch(0, np.arange(len(ids)), E)
    store.finalize()
    store.save_labels(**labels)
    return folder


def _good():
    """4 items, concepts a, b, c; sub-labels a/x, a/y (of a) and c/z (of c); every sub-label's item has its concept."""
    Y = np.array([[1, 0, 0], [1, 1, 0], [0, 0, 1], [1, 0, 1]], dtype=bool)
    Z = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 1]], dtype=bool)
    return dict(Y=Y, concept_names=["a", "b", "c"], Z=Z, sub_names=["a/x", "a/y", "c/z"], sub_to_concept=[0, 0, 2])


def _with(**changes):
    kw = _good()
    kw.update(changes)
    return kw


# ---------------------------------------------------------------------- the one check
@pytest.mark.parametrize("changes, words", [
    ({"Y": np.zeros((4, 3, 1))}, ["Y", "2-D", "(4, 3, 1)"]),
    ({"Y": np.array([[1, 0, 0], [1, 1, 0], [0, 0, 2], [1, 0, 1]])}, ["Y", "0/1", "row 2", "column 2"]),
    ({"concept_names": ["a", "b"]}, ["2 concept names", "3 columns of Y"]),
    ({"concept_names": ["a", "b", "a"]}, ["'a'", "twice", "columns 0 and 2"]),
    ({"concept_names": ["a", 7, "c"]}, ["concept name 1", "7", "not a string"]),
    ({"concept_names": "abc"}, ["single string", "'abc'"]),
    ({"Z": np.ones((3, 3), bool)}, ["Z", "3 rows", "Y has 4"]),
    ({"Z": np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 5]])}, ["Z", "0/1", "row 3", "column 2"]),
    ({"sub_to_concept": None}, ["Z need sub_to_concept"]),
    ({"Z": None}, ["without sub-labels Z"]),
    ({"Z": None, "sub_to_concept": None}, ["without sub-labels Z"]),
    ({"sub_names": ["a/x", "a/y"]}, ["2 sub-label names", "3 columns of Z"]),
    ({"sub_names": ["a/x", "a/x", "c/z"]}, ["'a/x'", "twice", "columns 0 and 1"]),
    ({"sub_to_concept": [0, 0]}, ["2 entries", "3 sub-label columns"]),
    ({"sub_to_concept": [0, 3, 2]}, ["sub-label column 1", "concept 3", "outside 0..2"]),
    ({"sub_to_concept": [0, -1, 2]}, ["sub-label column 1", "concept -1"]),
    ({"sub_to_concept": [0, 0.5, 2]}, ["whole numbers"]),
    ({"sub_to_concept": ["a", "a", "c"]}, ["whole numbers"]),
    # a/y is set on item 1 and 3 (both have a); mapped to b, item 1 has b but item 3 lacks it
    ({"sub_to_concept": [0, 1, 2]}, ["item 3", "'a/y'", "'b'"]),
])
def test_each_broken_rule_is_one_line_naming_the_culprit(changes, words):
    with pytest.raises(ValueError) as info:
        Labels(**_with(**changes))
    msg = str(info.value)
    assert "\n" not in msg and all(w in msg for w in words), msg


def test_a_sub_label_without_its_concept_is_found_wherever_it_is():
    """Planted: one item gets a sub-label whose concept it lacks; the message names that item and both names."""
    rng = np.random.default_rng(0)
    Y = rng.random((50, 4)) < 0.5
    s2c = np.array([0, 0, 1, 2, 3, 3])
    Z = (rng.random((50, 6)) < 0.5) & Y[:, s2c]
    Labels(Y, list("pqrs"), Z, [f"s{k}" for k in range(6)], s2c)  # consistent: accepted
    i = int(np.flatnonzero(~Y[:, 2])[3])  # an item without concept r (column 2), sub-label s3's concept
    Z[i, 3] = True
    with pytest.raises(ValueError, match=rf"item {i} has sub-label 's3' but not its concept 'r'"):
        Labels(Y, list("pqrs"), Z, [f"s{k}" for k in range(6)], s2c)


def test_a_good_bundle_is_frozen_and_owns_its_arrays():
    kw = _good()
    lab = Labels(**kw)
    assert lab.n == 4 and lab.n_concepts == 3 and lab.n_sub == 3 and len(lab) == 4
    assert lab.concept_names == ("a", "b", "c") and lab.sub_names == ("a/x", "a/y", "c/z")
    assert lab.sub_to_concept.dtype == np.int64 and lab.Y.dtype == bool and lab.Z.dtype == bool
    kw["Y"][0, 0] = False  # the caller's array changes; the bundle does not
    assert lab.Y[0, 0]
    with pytest.raises(ValueError):
        lab.Y[0, 0] = False  # read-only
    with pytest.raises(AttributeError):
        lab.Y = np.zeros((4, 3), bool)  # frozen
    assert Labels(**_good()) == lab and Labels(**_with(concept_names=["a", "b", "d"])) != lab
    # 0/1 integers are accepted as well as booleans; no concept columns is an unlabelled collection
    assert Labels(**_with(Y=_good()["Y"].astype(int), Z=_good()["Z"].astype(np.uint8))) == lab
    assert Labels(np.zeros((5, 0), bool), []).n_concepts == 0


def test_derived_bundles_match_a_hand_computation():
    lab = Labels(**_good())
    sub = lab.take([3, 0])
    assert np.array_equal(sub.Y, _good()["Y"][[3, 0]]) and np.array_equal(sub.Z, _good()["Z"][[3, 0]])
    assert lab.take(np.array([True, False, False, True])) == lab.take([0, 3])
    # dropping concept a removes its sub-labels a/x, a/y; c/z now points at c's new column 1
    kept = lab.keep_concepts([1, 2])
    assert kept.concept_names == ("b", "c") and kept.sub_names == ("c/z",)
    assert list(kept.sub_to_concept) == [1] and np.array_equal(kept.Z, _good()["Z"][:, [2]])
    assert lab.keep_concepts([0, 1]).sub_names == ("a/x", "a/y")
    assert lab.keep_concepts([1]).Z is None  # no sub-label left
    assert lab.names_of(3) == {"concepts": ["a", "c"], "sub_labels": ["a/x", "a/y", "c/z"]}
    assert Labels.from_arrays(lab.to_arrays()) == lab


# ---------------------------------------------------------------------- the containers carry one bundle
def test_containers_refuse_loose_or_misfit_labels():
    lab = Labels(**_good())
    with pytest.raises(ValueError, match="4 label rows for 5 embeddings"):
        LabelledEmbeddings(raw=np.ones((5, 2), np.float32), ids=list("abcde"), labels=lab)
    with pytest.raises(TypeError, match="Labels"):
        LabelledEmbeddings(raw=np.ones((4, 2), np.float32), ids=list("abcd"), labels=_good()["Y"])
    with pytest.raises(ValueError, match="4 label rows for 3 images"):
        ImageDataset(["a", "b", "c"], ["a", "b", "c"], lab)
    with pytest.raises(ValueError, match="4 label rows for 3 rows of X"):
        EvalData(X=np.ones((3, 2)), labels=lab)


def test_each_container_built_from_another_carries_the_same_labels(tmp_path):
    """ImageDataset -> cache -> LabelledEmbeddings (equal) -> EvalData and Workspace (the same object) ->
    workspace as evaluation data (the same object) -> saved and opened again (equal)."""
    from slics_core.explorer.build import build_workspace
    from slics_core.explorer.scoring import eval_view
    from slics_core.explorer.workspace_files import load_workspace

    rng = np.random.default_rng(1)
    n = 40
    Y = np.eye(3, dtype=bool)[np.arange(n) % 3]
    Y[::4, 2] = True
    Z = np.zeros((n, 3), bool)
    Z[:, 0] = Y[:, 0] & (np.arange(n) % 2 == 0)
    Z[:, 1] = Y[:, 0] & ~Z[:, 0]
    Z[:, 2] = Y[:, 2]
    ds = ImageDataset([f"{i}.jpg" for i in range(n)], [f"{i}.jpg" for i in range(n)],
                      Labels(Y, ["a", "b", "c"], Z, ["a/x", "a/y", "c/z"], [0, 0, 2]))
    E = (Y @ rng.standard_normal((3, 6)) + 0.2 * rng.standard_normal((n, 6))).astype(np.float32)
    data = load_cache(_cache(tmp_path / "cache", ds.ids, E, ds.labels_dict()))
    assert data.labels == ds.labels and data.labels is not ds.labels
    idx = np.arange(n)
    split = Split(idx[:20], idx[20:26], idx[26:32], idx[32:], np.zeros(0, int))
    ed, _ = eval_data(data, split)
    assert ed.labels is data.labels
    ws = build_workspace(data, tmp_path / "ws", split=split, methods=["S-SVD"], d0_values=(1,), n_iter=0,
                         prepare=False)
    assert ws.labels is data.labels
    assert eval_view(ws)[0].labels is ws.labels
    again = load_workspace(tmp_path / "ws")
    assert again.labels == ws.labels
    # the forwarding fields read the one bundle
    assert again.concept_names == ["a", "b", "c"] and again.sub_names == ["a/x", "a/y", "c/z"]
    assert again.Y is again.labels.Y and again.Z is again.labels.Z


def test_drop_empty_concepts_and_subset_go_through_the_bundle():
    from slics_core.data import drop_empty_concepts

    lab = Labels(**_good())
    data = LabelledEmbeddings(raw=np.eye(4, 3, dtype=np.float32) + 0.1, ids=list("pqrs"), labels=lab,
                              concept_text=np.eye(3, dtype=np.float32))
    part = data.subset([0, 2])  # items 0 and 2: concept b is in neither
    assert part.labels == lab.take([0, 2])
    with pytest.warns(RuntimeWarning, match="b have no labelled item"):
        kept = drop_empty_concepts(part)
    assert kept.labels == lab.take([0, 2]).keep_concepts([0, 2])
    assert np.array_equal(kept.concept_text, np.eye(3, dtype=np.float32)[[0, 2]])


# ---------------------------------------------------------------------- workspaces on disk
def _old_planted():
    """The labels tests/data/workspace-0.2 was written with (recomputed by its rule; tests/data/workspace-0.2.md)."""
    n = 24
    i = np.arange(n)
    Z = np.stack([i % 4 == 0, i % 4 == 1, i % 3 == 0], axis=1)
    Y = np.stack([Z[:, 0] | Z[:, 1] | (i % 5 == 2), Z[:, 2], i % 2 == 1], axis=1)
    Y[~Y.any(1), 2] = True
    return Y, Z


def test_a_workspace_saved_before_labels_opens_unchanged_and_round_trips(tmp_path):
    """A folder written by 0.2 (before Labels) opens with the same labels, and saving it again writes the
    same label arrays and names."""
    import json

    from slics_core.explorer.workspace_files import load_workspace, save_workspace

    folder = tmp_path / "old"
    shutil.copytree(OLD_WORKSPACE, folder)
    ws = load_workspace(folder)
    Y, Z = _old_planted()
    assert np.array_equal(ws.Y, Y) and np.array_equal(ws.Z, Z) and list(ws.sub_to_concept) == [0, 0, 1]
    assert ws.concept_names == ["animal", "vehicle", "café"] and ws.sub_names == ["animal/dog", "animal/cat",
                                                                                   "vehicle/car"]
    assert ws.labels_of(0) == {"concepts": ["animal", "vehicle"], "sub_labels": ["animal/dog", "vehicle/car"]}
    ws.model("S-SVD", 1)  # its model is read too
    save_workspace(ws, tmp_path / "again")
    again = load_workspace(tmp_path / "again")
    assert again.labels == ws.labels
    with np.load(OLD_WORKSPACE / "arrays.npz") as a, np.load(tmp_path / "again" / "arrays.npz") as b:
        for k in ("Y", "Z", "sub_to_concept"):
            assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]), k
    old, new = (json.loads((f / "workspace.json").read_text()) for f in (OLD_WORKSPACE, tmp_path / "again"))
    assert {k: new[k] for k in ("concept_names", "sub_names")} == {k: old[k] for k in ("concept_names", "sub_names")}


@pytest.mark.parametrize("damage, words", [
    # item 3 gets sub-label animal/dog although it lacks animal
    (lambda arr, head: arr["Z"].__setitem__((3, 0), True), ["item 3", "'animal/dog'", "'animal'"]),
    (lambda arr, head: arr.__setitem__("sub_to_concept", np.array([0, 0, 3])), ["concept 3", "outside 0..2"]),
    (lambda arr, head: arr.pop("sub_to_concept"), ["sub_to_concept"]),
    (lambda arr, head: arr.pop("Z"), ["without sub-labels Z"]),
    (lambda arr, head: head.__setitem__("sub_names", ["animal/dog", "animal/dog", "vehicle/car"]),
     ["'animal/dog'", "twice"]),
    (lambda arr, head: head.__setitem__("concept_names", ["animal", "vehicle"]), ["2 concept names"]),
])
def test_a_saved_workspace_with_broken_labels_is_damaged_in_one_line(tmp_path, damage, words):
    import json

    from slics_core.explorer.workspace_files import load_workspace

    folder = tmp_path / "ws"
    shutil.copytree(OLD_WORKSPACE, folder)
    with np.load(folder / "arrays.npz") as z:
        arr = {k: z[k] for k in z.files}
    head = json.loads((folder / "workspace.json").read_text())
    damage(arr, head)
    np.savez(folder / "arrays.npz", **arr)
    (folder / "workspace.json").write_text(json.dumps(head))
    with pytest.raises(ValueError) as info:
        load_workspace(folder)
    msg = str(info.value)
    assert msg.startswith(f"workspace {str(folder)!r} is damaged or not the expected file (") and "\n" not in msg, msg
    assert ".)" not in msg, msg
    assert all(w in msg for w in words), msg


def test_a_cache_with_broken_labels_names_the_cache(tmp_path):
    _cache(tmp_path / "cache", ["a", "b"], np.eye(2, 3, dtype=np.float32),
           dict(Y=np.array([[1, 0], [0, 1]], np.uint8), concept_names=np.array(["p", "q"]),
                Z=np.array([[1], [1]], np.uint8), sub_names=np.array(["p/x"]), sub_to_concept=np.array([0])))
    with pytest.raises(ValueError, match=r"labels of cache .*cache.*: item 1 has sub-label 'p/x' but not its "
                                         r"concept 'p'"):
        load_cache(tmp_path / "cache")
