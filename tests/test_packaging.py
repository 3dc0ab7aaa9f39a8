"""The package as users get it (issue 25): light core, assets as package data, `slics app`, extras.

The wheel itself is built and installed in fresh virtual environments by ``.ci/check_wheel.sh``
(run by ``.ci/run``); these tests check, inside the checkout, what that wheel is made of.
"""
import fnmatch
import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from slics_core import cli, extras, weights
from slics_core.commands import app as app_command

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
HEAVY = ("torch", "open_clip", "transformers", "diffusers", "faiss", "streamlit", "plotly", "pandas",
         "huggingface_hub", "wordfreq", "safetensors")


def _git_files(folder):
    out = subprocess.run(["git", "ls-files", folder], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [Path(p) for p in out.splitlines()]


# -- what goes into the wheel -------------------------------------------------------------------
def test_every_library_package_is_in_the_wheel():
    listed = set(PYPROJECT["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "slics_core").rglob("__init__.py")}
    assert found <= listed, f"add {sorted(found - listed)} to [tool.setuptools] packages in pyproject.toml"
    assert (ROOT / "slics_core" / "py.typed").is_file() and "py.typed" in PYPROJECT["tool"]["setuptools"][
        "package-data"]["slics_core"]


def test_every_asset_and_page_is_mapped_into_the_wheel():
    setup = PYPROJECT["tool"]["setuptools"]
    assert setup["package-dir"]["slics_core.assets"] == "assets"
    assert setup["package-dir"]["slics_explorer_app"] == "."
    assert setup["package-dir"]["slics_explorer_app.app_pages"] == "app_pages"
    patterns = setup["package-data"]["slics_core.assets"]
    assets = [p.relative_to("assets").as_posix() for p in _git_files("assets") if p.suffix != ".py"]
    assert len(assets) > 50
    missing = [a for a in assets if not any(fnmatch.fnmatch(a, pat.replace("**/", "")) or fnmatch.fnmatch(a, pat)
                                            for pat in patterns)]
    assert not missing, f"assets not matched by the package-data patterns {patterns}: {missing}"
    pages = {p.name for p in _git_files("app_pages") if p.suffix == ".py"}
    assert {"home.py", "_ui.py", "_state.py"} <= pages  # modules of slics_explorer_app.app_pages
    assert ".streamlit/config.toml" in setup["package-data"]["slics_explorer_app"]


def test_assets_are_found_through_package_resources():
    assert (weights.ASSETS_DIR / "emoji" / "preview_table.npz").is_file()
    assert (weights.EMOJI_MODELS_DIR / "emoji-small" / "open_clip_config.json").is_file()
    assert weights.ASSETS_DIR.resolve() == (ROOT / "assets").resolve()  # the checkout's, in a checkout


def test_extras_and_the_light_core():
    deps = " ".join(PYPROJECT["project"]["dependencies"])
    for heavy in ("torch", "open_clip", "streamlit", "transformers", "diffusers", "faiss", "plotly", "pandas"):
        assert heavy not in deps
    optional = PYPROJECT["project"]["optional-dependencies"]
    assert {"app", "models", "gen", "faiss", "ray", "tsne", "all", "test"} <= set(optional)
    # README's install (CI) runs the Ray test and the openTSNE maps
    assert optional["all"] == ["slics-explorer[app,models,gen,faiss,ray,tsne]"]
    # every optional library named in slics_core.extras comes with the extra it names
    for module, extra in extras.EXTRAS.items():
        dist = {"open_clip": "open_clip_torch", "faiss": "faiss-cpu"}.get(module, module)
        reqs = " ".join(optional[extra] + (optional["models"] if extra in ("gen", "ray") else []))
        assert dist in reqs or module == "torchvision", (module, extra)


# -- the library without torch, Streamlit, open_clip... ------------------------------------------
_BLOCK = textwrap.dedent("""
    import importlib.abc, sys
    HEAVY = {heavy!r}
    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in HEAVY:
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
    sys.meta_path.insert(0, Block())
""")


def test_core_workflow_imports_no_optional_library(tmp_path):
    """Fit, transform, project, retrieval, evaluation and captions from given text embeddings, with every
    optional library made unimportable (as in a bare install); none of them is imported."""
    script = _BLOCK.format(heavy=HEAVY) + textwrap.dedent("""
        import numpy as np
        from slics_core import SLiCS
        from slics_core import datasets  # noqa: F401 (pandas only when a metadata table is read)
        from slics_core.captions import word_captions
        from slics_core.metrics import RetrievalScorer, evaluate_rankings
        from slics_core.preprocessing import EmbeddingNormalizer
        from slics_core.retrieval import build_index
        from slics_core.splits import make_split  # noqa: F401
        from slics_core.synthetic import make_concept_cones
        from slics_core.weights import ASSETS_DIR

        data = make_concept_cones(n_samples=400, n_features=16, n_concepts=3, n_atoms=2, random_state=0)
        X = EmbeddingNormalizer().fit_transform(data.X)
        model = SLiCS(n_atoms=2, n_iter=3).fit(X[:300], data.Y[:300])
        coef = model.transform(X[300:])
        V = model.project(X[300:], None)
        idx = build_index(X[:300]).search(V.reshape(-1, 16), 20)[0].reshape(100, 3, 20)
        result = evaluate_rankings(idx, data.Y[300:], data.Y[:300], k=20)
        score = RetrievalScorer()(model, X[300:], data.Y[300:])
        words = np.random.default_rng(0).standard_normal((50, 16))
        caps = word_captions(model.atoms_, model.groups_, words, [f"w{i}" for i in range(50)], top_k=3)
        assert coef.shape == (100, 6) and 0 < result["general"] <= 1 and 0 < score <= 1 and len(caps) == 3
        assert (ASSETS_DIR / "emoji" / "preview_table.npz").is_file()
        loaded = sorted({m.split(".")[0] for m in sys.modules} & set(HEAVY))
        print("LOADED", loaded)
        assert not loaded, loaded
    """)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "LOADED []" in proc.stdout


def test_a_missing_extra_is_one_line_naming_it(monkeypatch, capsys):
    monkeypatch.setitem(extras.EXTRAS, "slics_no_such_lib", "faiss")
    with pytest.raises(extras.MissingExtraError) as info:
        extras.require("slics_no_such_lib", "the test back-end")
    assert str(info.value) == ('the test back-end needs slics_no_such_lib, which is not installed: '
                               'pip install "slics-explorer[faiss]"')
    with pytest.raises(ModuleNotFoundError) as other:  # a module no extra brings: the original error
        extras.require("slics_not_an_extra_either")
    assert not isinstance(other.value, extras.MissingExtraError)
    # the command line prints it as one line, exit code 2
    assert cli._missing_extra("fit", ModuleNotFoundError("No module named 'pandas'", name="pandas")) == 2
    err = capsys.readouterr().err
    assert err == 'slics fit: error: pandas is needed here, which is not installed: pip install "slics-explorer[app]"\n'


# -- slics app --------------------------------------------------------------------------------
def test_slics_app_runs_the_checkouts_app_with_its_settings_then_the_users():
    command = app_command.streamlit_command(["--server.port", "8604", "--server.headless", "true"])
    assert command[:5] == [sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py")]
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text(encoding="utf-8"))
    expected = [f"--{s}.{k}={str(v).lower() if isinstance(v, bool) else v}" for s, vals in config.items()
                for k, v in vals.items()]
    assert command[5:5 + len(expected)] == expected and "--server.headless=false" in expected
    assert command[-4:] == ["--server.port", "8604", "--server.headless", "true"]  # last: they win


def test_slics_app_without_streamlit_says_which_extra(monkeypatch, capsys):
    real = app_command.importlib.util.find_spec
    monkeypatch.setattr(app_command.importlib.util, "find_spec",
                        lambda name, *a: None if name == "streamlit" else real(name, *a))
    assert cli.main(["app", "--server.port", "8604"]) == 2
    assert capsys.readouterr().err == ('slics app: error: slics app needs streamlit, which is not installed: '
                                       'pip install "slics-explorer[app]"\n')


def test_slics_app_help_lists_the_command(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["app", "--help"])
    assert info.value.code == 0
    assert "streamlit run" in capsys.readouterr().out


def test_ci_runs_readmes_test_command_then_checks_the_wheel():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    blocks = [b.split("```", 1)[0].strip() for b in readme.split("```bash\n")[1:3]]
    assert 'pip install -e ".[all]"' in blocks[0] and blocks[1].endswith("python -m pytest -q")
    lines = [ln.strip() for ln in ci.splitlines()]
    assert blocks[1] in lines and "bash .ci/check_wheel.sh" in lines
    assert lines.index("bash .ci/check_wheel.sh") > lines.index(blocks[1])


def test_slics_app_serves_from_another_folder(tmp_path):
    """`slics app` from a folder that is not the checkout starts the explorer's server (health: ok)."""
    import signal
    import socket
    import time
    import urllib.request

    pytest.importorskip("streamlit")
    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, SLICS_EMOJI_CACHE=str(tmp_path / "cache"), SLICS_WORKSPACES=str(tmp_path / "ws"),
               PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    proc = subprocess.Popen([sys.executable, "-m", "slics_core", "app", "--server.headless", "true",
                             "--server.port", str(port)], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        health = None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                health = urllib.request.urlopen(f"http://localhost:{port}/_stcore/health", timeout=2).read()
                break
            except OSError:
                time.sleep(0.5)
        assert health == b"ok", proc.stdout.read() if proc.poll() is not None else "no answer"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
