"""Rules of the code's layout that a reader relies on (docs/architecture.md).

* Every ``slics_core.…`` name and every repository path written in the docs, docstrings and comments
  exists, so no page sends a reader to a module that moved.
* No module is over 700 lines unless its docstring says why it is one job (``One job:``).
* Every module of ``slics_core`` and its packages is listed in docs/architecture.md's table of packages and
  modules (a new module gets its row when it is written).
"""
import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_SKIP = {".venv", "build", ".git", "slics_explorer.egg-info", ".pytest_cache", ".hypothesis", "node_modules"}
_NAME = re.compile(r"\bslics_core(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
_PATH = re.compile(r"(?<![\w/.-])(?:slics_core|app_pages|benchmarks|tests|scripts|docs|assets)/"
                   r"[A-Za-z0-9_./-]*[A-Za-z0-9_]\.(?:py|md|json|npz|png|safetensors)\b")
#: names that are not modules: the package's lazy attribute and files that are package data
_NOT_MODULES = {"slics_core.SLiCS", "slics_core.__version__", "slics_core.__file__", "slics_core.assets"}


def _files(*suffixes):
    for p in ROOT.rglob("*"):
        if p.suffix in suffixes and not _SKIP & set(p.relative_to(ROOT).parts):
            yield p


def _defines(module: Path, name: str) -> bool:
    text = module.read_text(encoding="utf-8")
    return re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{name}\b|^\s*{name}\s*[:=]|\bimport\b[^\n]*\b{name}\b"
                     rf"|^\s+{name}(?:\s+as\s+\w+)?,?\s*(?:#.*)?$", text, re.M) is not None


def _resolve(dotted: str):
    """The problem with a dotted ``slics_core`` name, or None when it names a module or one of its names."""
    if dotted in _NOT_MODULES or dotted.startswith("slics_core.assets."):
        return None
    parts = dotted.split(".")
    for i in range(len(parts), 1, -1):
        base = ROOT.joinpath(*parts[:i])
        for module in (base.with_suffix(".py"), base / "__init__.py"):
            if module.exists():
                rest = parts[i:]
                if rest and not _defines(module, rest[0]):
                    return f"{rest[0]} is not defined in {module.relative_to(ROOT)}"
                return None
    return "no such module"


def _stale_references():
    found = []
    for f in _files(".py", ".md"):
        text = f.read_text(encoding="utf-8", errors="replace")
        for m in _NAME.finditer(text):
            problem = _resolve(m.group(0))
            if problem:
                found.append(f"{f.relative_to(ROOT)}: {m.group(0)} ({problem})")
        for m in _PATH.finditer(text):
            if "*" not in m.group(0) and not (ROOT / m.group(0)).exists():
                found.append(f"{f.relative_to(ROOT)}: {m.group(0)} (no such file)")
    return sorted(set(found))


def test_every_module_and_path_named_in_the_tree_exists():
    assert _stale_references() == []


def test_the_reference_check_finds_a_stale_name(tmp_path, monkeypatch):
    assert _resolve("slics_core." + "no_such_module") == "no such module"  # split: the scan reads this file too
    assert _resolve("slics_core.slics." + "NoSuchClass").startswith("NoSuchClass is not defined")
    assert _resolve("slics_core.slics.SLiCS") is None
    assert _resolve("slics_core.explorer") is None


@pytest.mark.parametrize("module", sorted(p.relative_to(ROOT).as_posix() for p in _files(".py")
                                          if p.relative_to(ROOT).parts[0] in ("slics_core", "app_pages")))
def test_no_module_over_700_lines_without_saying_why_it_is_one_job(module):
    text = (ROOT / module).read_text(encoding="utf-8")
    n = text.count("\n")
    if n > 700:
        doc = ast.get_docstring(ast.parse(text)) or ""
        assert "One job:" in doc, f"{module} has {n} lines; split it by job or say why it is one (``One job: ...``)"


def _module_table(text):
    """``{package: set of module names}`` of docs/architecture.md's "Packages and modules" table."""
    table = text.split("## Packages and modules", 1)[1].strip().split("\n\n", 1)[0]
    out = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0].startswith("`"):
            package = cells[0].split("`")[1]
            out.setdefault(package, set()).update(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", cells[1]))
    return out


def _unlisted(table, root=ROOT / "slics_core"):
    missing = []
    for package in [root] + sorted(p for p in root.iterdir() if (p / "__init__.py").exists()):
        name = ".".join(package.relative_to(root.parent).parts)
        listed = table.get(name, set())
        for module in sorted(package.glob("*.py")):
            if module.stem not in ("__init__", "__main__") and module.stem not in listed:
                missing.append(f"{name}.{module.stem}")
    return missing


def test_every_module_has_a_row_in_the_architecture_table():
    table = _module_table((ROOT / "docs" / "architecture.md").read_text(encoding="utf-8"))
    assert _unlisted(table) == [], "add them to docs/architecture.md, \"Packages and modules\""


def test_the_table_check_finds_a_module_without_a_row(tmp_path):
    pkg = tmp_path / "slics_core"
    (pkg / "sub").mkdir(parents=True)
    for f in ("__init__.py", "listed.py", "new.py", "sub/__init__.py", "sub/inner.py"):
        (pkg / f).write_text("", encoding="utf-8")
    text = "## Packages and modules\n\n| package | modules |\n| --- | --- |\n| `slics_core` (library) | `listed` |\n"
    pkg_name = "slics_core."  # split: the reference scan reads this file too
    assert _unlisted(_module_table(text), pkg) == [pkg_name + "new", pkg_name + "sub.inner"]
