"""``slics emoji-build`` sizes, ``slics align --workspace`` defaults, generator names in help and messages, and
one progress bar per stage (issue 30: item 4 and the command-line fixes found by testing)."""
import io
from pathlib import Path

import numpy as np
import pytest

from slics_core.cli import build_parser, main
from slics_core.commands import workspaces as ws_command
from slics_core.commands.data import GENERIC_DEFAULTS, dataset_defaults
from slics_core.emoji.world import DATASET_NAME, ENCODER, PROMPT_TEMPLATE, config_from_env, emoji_vocabulary
from slics_core.generators.registry import _PRESET_GENERATORS

ROOT = Path(__file__).resolve().parent.parent


# -- emoji sizes -----------------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["emoji-build", "emoji-report"])
def test_emoji_sizes_follow_the_scale_unless_given(command, monkeypatch):
    monkeypatch.setenv("SLICS_EMOJI_SCALE", "0.1")
    scaled = config_from_env()
    assert (scaled.n_train, scaled.n_val, scaled.n_query, scaled.n_pool) == (300, 50, 100, 300)
    assert ws_command.emoji_config(build_parser().parse_args([command])) == scaled
    cfg = ws_command.emoji_config(build_parser().parse_args([command, "--n-train", "77", "--d0", "2", "3"]))
    assert cfg.n_train == 77 and cfg.d0_values == (2, 3)
    assert (cfg.n_val, cfg.n_query, cfg.n_pool, cfg.seed) == (50, 100, 300, scaled.seed)


def test_check_wheel_states_the_scale_once():
    script = (ROOT / ".ci" / "check_wheel.sh").read_text()
    build = next(line for line in script.splitlines() if "emoji-build" in line and "/bin/slics" in line)
    assert "SLICS_EMOJI_SCALE=" in script and "--n-" not in build, build


def test_dataset_defaults_have_one_home():
    world = dataset_defaults(DATASET_NAME)
    assert world.encoder == ENCODER and world.prompt_template == PROMPT_TEMPLATE
    assert world.vocabulary() == emoji_vocabulary()
    assert dataset_defaults("coco") is GENERIC_DEFAULTS and GENERIC_DEFAULTS.encoder is None
    Y = np.eye(3, dtype=bool)[np.arange(200) % 3]
    a, b = GENERIC_DEFAULTS.split(Y, 50, 10, 20, None), GENERIC_DEFAULTS.split(Y, 50, 10, 20, 0)
    np.testing.assert_array_equal(a.train, b.train)


# -- generator names ----------------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["workspace", "align", "download"])
def test_generator_help_names_every_preset(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for name in [*_PRESET_GENERATORS, "local:DIR"]:
        assert name in text, (name, command)


# -- slics align --workspace -----------------------------------------------------------------------------
@pytest.fixture()
def workspace_with_generator(tmp_path, monkeypatch):
    """A saved workspace whose generator alignment records a conditioning encoder other than the default."""
    from slics_core.alignment import fit_alignment
    from slics_core.data import LabelledEmbeddings
    from slics_core.explorer.build import build_workspace
    from slics_core.explorer.generation import workspace_alignment_path
    from slics_core.explorer.workspace_files import set_workspace_generator
    from slics_core.labels import Labels

    monkeypatch.setenv("SLICS_WORKSPACES", str(tmp_path / "workspaces"))
    rng = np.random.default_rng(0)
    data = LabelledEmbeddings(raw=rng.standard_normal((60, 6)).astype(np.float32), ids=[str(i) for i in range(60)],
                              labels=Labels(np.eye(2, dtype=bool)[np.arange(60) % 2], ["a", "b"]))
    ws = build_workspace(data, tmp_path / "workspaces" / "demo", methods=["UF"], d0_values=(1,), n_iter=1)
    X = rng.standard_normal((40, 6))
    fit_alignment(X, X[:, :4], target_id="ViT-B-32/random@16").save(workspace_alignment_path(ws))
    set_workspace_generator(ws, "lcm")
    return ws


def _capture_attach(monkeypatch):
    seen = {}

    class Align:
        n_features_in_, n_features_out_, target_id = 6, 4, "x"
        held_out_cosine_ = train_cosine_ = 1.0
        n_pairs_ = None

    def attach(ws, generator, conditioning_encoder=None, **kwargs):
        seen.update(generator=generator.text, encoder=conditioning_encoder)
        align = Align()
        align.target_id = conditioning_encoder
        return align

    monkeypatch.setattr(ws_command, "attach_generator", attach)
    monkeypatch.setattr(ws_command, "missing_presets", lambda names: [])
    return seen


def test_align_workspace_keeps_the_recorded_conditioning_encoder(workspace_with_generator, monkeypatch):
    seen = _capture_attach(monkeypatch)
    assert main(["align", "--workspace", "demo", "--quiet"]) == 0
    assert seen == {"generator": "lcm", "encoder": "ViT-B-32/random@16"}
    # with --generator too, the recorded space is kept; --align-encoder wins
    assert main(["align", "--workspace", "demo", "--generator", "unclip", "--quiet"]) == 0
    assert seen == {"generator": "unclip", "encoder": "ViT-B-32/random@16"}
    assert main(["align", "--workspace", "demo", "--align-encoder", "ViT-B-32/random@32", "--quiet"]) == 0
    assert seen["encoder"] == "ViT-B-32/random@32"


def test_align_workspace_without_generator_names_every_preset(workspace_with_generator, capsys):
    from slics_core.explorer.workspace_files import set_workspace_generator

    set_workspace_generator(workspace_with_generator, None)
    assert main(["align", "--workspace", "demo"]) == 2
    err = capsys.readouterr().err
    assert "has no generator yet" in err and all(name in err for name in _PRESET_GENERATORS), err


def test_moved_pipeline_folder_says_how_to_repair(workspace_with_generator, tmp_path, capsys):
    from slics_core.explorer.workspace_files import set_workspace_generator

    set_workspace_generator(workspace_with_generator, f"local:{tmp_path / 'moved-away'}")
    assert main(["align", "--workspace", "demo"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "moved-away" in err, err
    assert "`slics align --workspace demo --generator local:NEW_DIR`" in err, err


# -- progress ----------------------------------------------------------------------------------------------
def test_one_progress_line_per_stage():
    """The builder's reports (planted: two counters under one fit label, sub-stages of the pages) give one line
    per stage on a non-terminal when each stage is shorter than StageProgress.EVERY, saying what it counts."""
    calls = [("render scenes", d, 160) for d in (0, 64, 128, 160)]
    calls += [("embed with emoji-small", d, 160) for d in (64, 128, 160)]
    calls += [("fit: model 1 of 2, S-SLiCS d0=3", 0, 2)] + [("fit: model 1 of 2, S-SLiCS d0=3", d, 20)
                                                            for d in range(1, 11)]
    calls += [("fit: model 2 of 2, S-SLiCS d0=5", 1, 2)] + [("fit: model 2 of 2, S-SLiCS d0=5", d, 20)
                                                            for d in range(11, 21)]
    calls += [(f"prepare the pages: {n}", i, 3) for i, n in enumerate(("atoms", "maps", "texts"))]
    calls += [("prepare the pages", 3, 3), ("save the workspace", 0, 1), ("save the workspace", 1, 1)]
    out = io.StringIO()
    progress = ws_command.StageProgress("emoji", file=out)
    for call in calls:
        progress(*call)
    progress.close()
    assert out.getvalue().splitlines() == [
        "[emoji] render scenes: 0/160", "[emoji] embed with emoji-small: 64/160",
        "[emoji] fit: model 1 of 2, S-SLiCS d0=3", "[emoji] prepare the pages: atoms", "[emoji] save the workspace"]
    quiet = io.StringIO()
    progress = ws_command.StageProgress("emoji", quiet=True, file=quiet)
    progress("render scenes", 1, 2)
    assert quiet.getvalue() == ""


def test_long_stages_print_counts_and_time_left(monkeypatch):
    """A stage longer than StageProgress.EVERY prints, every EVERY seconds, its counts (or its detail), its
    percentage and the time left at its rate so far (a planted clock: 10 of 40 scenes in 20 s leave
    60 s)."""
    clock = iter(range(0, 1000, 20))  # every report is 20 s after the one before
    monkeypatch.setattr(ws_command.time, "perf_counter", lambda: float(next(clock)))
    out = io.StringIO()
    progress = ws_command.StageProgress("emoji", file=out, timings=True)
    for done in (0, 10, 20, 40):
        progress("render scenes", done, 40)
    for done in (0, 1):
        progress(f"fit: model {done + 1} of 2, S-SLiCS d0=3", done, 2)
    progress.close()
    assert out.getvalue().splitlines() == [
        "[emoji] render scenes: 0/40",
        "[emoji] render scenes: 10/40, 25 %, about 60 s left",
        "[emoji] render scenes: 20/40, 50 %, about 40 s left",
        "[emoji] render scenes: 40/40, 100 %",
        "[emoji] render scenes: 80.0 s",
        "[emoji] fit: model 1 of 2, S-SLiCS d0=3",
        "[emoji] fit: model 2 of 2, S-SLiCS d0=3, 50 %, about 20 s left",
        "[emoji] fit: 40.0 s"]
    assert ws_command.duration_words(30) == "30 s" and ws_command.duration_words(600) == "10 min"
    assert ws_command.duration_words(4 * 3600) == "4.0 h"


def test_emoji_build_prints_counts_of_every_stage(tmp_path, capsys, monkeypatch):
    """`slics emoji-build` on a tiny world (issue 40: it printed only stage names and a bare "[emoji] fit"): the
    scenes rendered and embedded are counted, the fits are counted model by model, each stage ends with its
    seconds."""
    from slics_core.cli import main

    monkeypatch.setattr(ws_command.StageProgress, "EVERY", 0.0)  # a line on every report
    args = ["--cache-dir", str(tmp_path), "--n-train", "40", "--n-val", "10", "--n-query", "10", "--n-pool", "20",
            "--d0", "2", "3", "--jobs", "1"]
    assert main(["emoji-build", *args]) == 0
    lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("[emoji] ")]
    assert any(x.startswith("[emoji] render scenes: ") and "/80" in x for x in lines), lines
    assert any(x.startswith("[emoji] embed with emoji-small: ") and "/80" in x for x in lines), lines
    fits = [x for x in lines if x.startswith("[emoji] fit: model ")]
    n_models = int(fits[0].split(" of ")[1].split(",")[0])
    assert fits[0].startswith("[emoji] fit: model 1 of ") and n_models > 5
    assert any(x.startswith(f"[emoji] fit: model {n_models} of {n_models}, ") for x in fits), fits
    assert "[emoji] fit" not in lines  # no bare stage name
    assert any(x.startswith("[emoji] fit: ") and x.endswith(" s") for x in lines)
