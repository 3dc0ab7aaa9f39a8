"""How slics_core imports (docs/architecture.md): heavy optional libraries only through
``extras.require``, inside the functions that need them; everything else at the top of the module,
except the few imports deferred for a reason written here.

The layers and the absence of cycles are checked by ``lint-imports`` (pyproject.toml); this file
checks what import-linter cannot see: where in a module an import statement stands.
"""
from __future__ import annotations

import ast
from pathlib import Path

from slics_core.extras import EXTRAS

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "slics_core"

#: Imports kept inside functions, each with its reason. (file relative to slics_core/, module) -> why.
DEFERRED = {
    ("__init__.py", "slics_core.slics"):
        "`slics --version` and every `--help` stay instant: SLiCS brings scikit-learn and numba",
    ("_validation.py", "sklearn.utils.validation"):
        "the lowest layer: importing it must not load scikit-learn for the instant commands",
    ("encoders/titok.py", "slics_core.preprocessing"):
        "the token normaliser brings scikit-learn, which the instant commands must not load",
    ("generators/registry.py", "slics_core.encoders"):
        "`slics models` / `download` read the generator presets without loading the encoders' scikit-learn",
    ("images.py", "slics_core._jpeg"):
        "the damaged-JPEG check is compiled by numba: loaded only when an embedding run checks a file",
    ("embed.py", "slics_core._jpeg"):
        "the damaged-JPEG check is compiled by numba: loaded only when the jpeg route checks a batch",
    ("shards.py", "pyarrow.parquet"):
        "pyarrow is pandas' Parquet engine, no dependency of the library: read only when a pool's metadata is checked",
}

#: Packages whose modules import the work they run only when it runs (`slics CMD --help` is instant).
DEFERRING_PACKAGES = ("commands/",)


def _function_imports(path: Path):
    """``(line, module)`` of every import statement inside a function of ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, ast.Import):
                    yield from ((node.lineno, a.name) for a in node.names)
                elif isinstance(node, ast.ImportFrom):
                    yield node.lineno, ("." * node.level) + (node.module or "")


def _module_imports(path: Path):
    """``(line, module)`` of every import statement at a module's top level (outside functions)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    inner = {id(n) for fn in ast.walk(tree) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
             for n in ast.walk(fn)}
    for node in ast.walk(tree):
        if id(node) in inner:
            continue
        if isinstance(node, ast.Import):
            yield from ((node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            yield node.lineno, node.module or ""


def _files():
    return sorted(PACKAGE.rglob("*.py"))


def _rel(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def test_heavy_libraries_are_imported_through_extras_require():
    """No ``import torch`` (or any library an extra brings) inside a function: ``extras.require`` names
    the extra to install when it is missing."""
    bad = [f"{_rel(f)}:{line}: {mod}" for f in _files() for line, mod in _function_imports(f)
           if mod.split(".")[0] in EXTRAS]
    assert not bad, "import these through slics_core.extras.require:\n" + "\n".join(bad)


def test_the_library_imports_no_heavy_library_at_module_level():
    """Below the explorer (which needs the [app] extra), importing a module never loads an optional library."""
    bad = [f"{_rel(f)}:{line}: {mod}" for f in _files() if not _rel(f).startswith("explorer/")
           for line, mod in _module_imports(f) if mod.split(".")[0] in EXTRAS]
    assert not bad, "\n".join(bad)


def test_light_imports_stand_at_the_top_unless_a_reason_is_written():
    bad = []
    for f in _files():
        rel = _rel(f)
        if rel.startswith(DEFERRING_PACKAGES):
            continue
        for line, mod in _function_imports(f):
            if mod.split(".")[0] not in EXTRAS and (rel, mod) not in DEFERRED:
                bad.append(f"{rel}:{line}: {mod}")
    assert not bad, ("move these imports to the top of their module, or add them with a reason to DEFERRED:\n"
                     + "\n".join(bad))


def test_every_deferred_import_is_still_there():
    """A reason written for an import that has moved is stale: remove it from DEFERRED."""
    present = {(_rel(f), mod) for f in _files() for _, mod in _function_imports(f)}
    assert set(DEFERRED) <= present, sorted(set(DEFERRED) - present)


def test_the_rules_see_a_planted_violation(tmp_path):
    """The scanners find a function-level heavy import and a function-level light one."""
    f = tmp_path / "m.py"
    f.write_text("import os\n\ndef g():\n    import torch\n    from slics_core import rows\n"
                 "    return torch, rows, os\n")
    assert list(_function_imports(f)) == [(4, "torch"), (5, "slics_core")]
    assert list(_module_imports(f)) == [(1, "os")]
