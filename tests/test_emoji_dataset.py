"""`slics embed/reproduce --dataset emoji` measure the app's emoji world: same scenes, labels, prompts, split."""
import numpy as np
import pytest

from slics_core.cli import main
from slics_core.data import load_cache
from slics_core.emoji.world import config_from_env, emoji_vocabulary, render_emoji_world


@pytest.fixture()
def tiny_world(monkeypatch):
    monkeypatch.setenv("SLICS_EMOJI_SCALE", "0.01")  # the smallest world: 60 / 20 / 20 / 60 scenes
    cfg = config_from_env()
    assert cfg.n_total == 160
    return cfg


def test_cli_emoji_dataset_is_the_app_world(tiny_world, tmp_path, capsys):
    cache = tmp_path / "cache"
    assert main(["embed", "--dataset", "emoji", "--cache", str(cache), "--no-progress"]) == 0
    cli = load_cache(cache)
    app, app_split = render_emoji_world(tiny_world)
    assert cli.ids == app.ids and cli.encoder == app.encoder == "emoji-small"
    assert cli.concept_names == app.concept_names and cli.sub_names == app.sub_names
    assert len(cli.sub_names) == 71 and cli.Z.any(axis=0).sum() == np.asarray(app.Z).any(axis=0).sum()
    np.testing.assert_array_equal(cli.Y, app.Y)
    np.testing.assert_array_equal(cli.Z, app.Z)
    np.testing.assert_array_equal(cli.sub_to_concept, app.sub_to_concept)
    np.testing.assert_allclose(cli.raw, app.raw, atol=1e-5)
    # the concept prompts: the world's template, embedded by the same text tower (the cache keeps unit rows)
    unit = app.concept_text / np.linalg.norm(app.concept_text, axis=1, keepdims=True)
    np.testing.assert_allclose(cli.concept_text, unit, atol=1e-5)

    # evaluate on the CLI's cache uses the app's split (sizes and seed of EmojiWorldConfig)
    out = tmp_path / "out"
    assert main(["evaluate", "--cache", str(cache), "--methods", "S-SVD", "--no-estimate", "--n-atoms", "3",
                 "--out-dir", str(out), "--vocab", "wordfreq", "--n-words", "50"]) == 0
    err = capsys.readouterr().err
    sizes = {k: len(getattr(app_split, k)) for k in ("train", "val", "query", "pool")}
    assert (f"'train': {sizes['train']}, 'val': {sizes['val']}, "
            f"'query': {sizes['query']}, 'pool': {sizes['pool']}") in err


def test_emoji_vocabulary_is_the_default_for_emoji_caches(tiny_world, tmp_path, capsys):
    cache = tmp_path / "cache"
    assert main(["embed", "--dataset", "emoji", "--cache", str(cache), "--no-progress"]) == 0
    model = tmp_path / "m.npz"
    assert main(["fit", "--cache", str(cache), "--out", str(model), "--n-atoms", "2", "--n-iter", "1"]) == 0
    capsys.readouterr()
    assert main(["captions", "--model", str(model), "--cache", str(cache), "--top", "3"]) == 0
    table = capsys.readouterr().out
    words = set(emoji_vocabulary())
    rows = [line for line in table.splitlines()[2:] if line.startswith("|")]
    assert len(rows) == 12
    for line in rows:
        assert set(line.split("|")[2].strip().split(", ")) <= words, line


def test_emoji_evaluate_shows_the_oracle_row_never_bold(tiny_world, tmp_path, capsys):
    """`slics evaluate` on an emoji cache: F-SpLiCE over general words, the names-only F-SpLiCE as the flagged
    oracle row, which the Markdown table never bolds (even where its number is the best)."""
    import json

    from slics_core.methods import ORACLE_FSPLICE

    cache = tmp_path / "cache"
    assert main(["embed", "--dataset", "emoji", "--cache", str(cache), "--no-progress"]) == 0
    out = tmp_path / "out"
    capsys.readouterr()
    assert main(["evaluate", "--cache", str(cache), "--methods", f"UF,F-SpLiCE,{ORACLE_FSPLICE}", "--no-estimate",
                 "--n-atoms", "3", "--out-dir", str(out)]) == 0
    md = capsys.readouterr().out
    rows = json.loads((out / "methods.json").read_text())
    assert [(r["method"], r["oracle"]) for r in rows] == [("UF", False), ("F-SpLiCE", False), (ORACLE_FSPLICE, True)]
    assert not any(r["skipped"] for r in rows)
    lines = [line.split(" | ")[1:] for line in md.splitlines() if line.startswith(("| Gen.", "| Sub."))]
    for cells, key in zip(lines, ("general_mean", "sub_mean")):
        best = max(rows[:2], key=lambda r: r[key])[key]
        assert [c.strip(" |").startswith("**") for c in cells] == [r[key] == best for r in rows[:2]] + [False]
    assert f"not ranked (never bold): {ORACLE_FSPLICE}" in md
