"""No public function or class of the library exists only for the tests.

A public top-level name of ``slics_core`` is used by the product (the library, the command line, the app, the
benchmarks that measure them), or is a user's entry point (named in README / docs, or exported by a package's
``__init__``), or declares a protocol;
a helper only the tests call lives in ``tests/`` (e.g. ``tests/label_profiles.py``). Command functions
(``cmd_*``) are reached by name through :data:`slics_core.commands.COMMANDS`.
"""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("slics_core", "app_pages", "benchmarks")


def _product_files():
    for folder in PRODUCT:
        yield from sorted((ROOT / folder).rglob("*.py"))
    yield ROOT / "app.py"


def _used_names(tree):
    """Names a module reads (``f(...)``, ``mod.f``), not those it defines or imports."""
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | \
        {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}


def _is_protocol(node):
    return isinstance(node, ast.ClassDef) and any(getattr(b, "id", getattr(b, "attr", "")) == "Protocol"
                                                  for b in node.bases)


def _only_for_tests(files=None, docs=None):
    """Public definitions of the library that nothing but the tests uses (the rule of the module notes)."""
    files = list(_product_files()) if files is None else files
    trees = {p: ast.parse(p.read_text(encoding="utf-8")) for p in files}
    used = set().union(*(_used_names(t) for t in trees.values()))
    if docs is None:
        docs = (ROOT / "README.md").read_text(encoding="utf-8") + "".join(
            p.read_text(encoding="utf-8") for p in sorted((ROOT / "docs").rglob("*.md")))
    exported = {elt.value for p, t in trees.items() if p.name == "__init__.py" for node in t.body
                if isinstance(node, ast.Assign) and any(getattr(x, "id", "") == "__all__" for x in node.targets)
                for elt in getattr(node.value, "elts", []) if isinstance(elt, ast.Constant)}
    found = []
    for path, tree in trees.items():
        if "slics_core" not in path.parts:
            continue
        for node in tree.body:
            if not isinstance(node, (ast.FunctionDef, ast.ClassDef)) or node.name.startswith("_"):
                continue
            if node.name in used or _is_protocol(node) or node.name.startswith("cmd_"):
                continue
            if "explorer" not in path.parts and (node.name in docs or node.name in exported):  # for users
                continue
            found.append(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name}:{node.name}")
    return found


def test_no_public_function_exists_only_for_the_tests():
    found = _only_for_tests()
    assert not found, "used only by tests: make it private or move it to a tests/ helper: " + ", ".join(found)


def test_the_rule_sees_a_planted_test_only_function(tmp_path):
    lib = tmp_path / "slics_core" / "explorer"
    lib.mkdir(parents=True)
    (lib / "mod.py").write_text("def used():\n    return 1\n\ndef only_tests():\n    return 2\n\n"
                                "def _private():\n    return used()\n", encoding="utf-8")
    assert _only_for_tests([lib / "mod.py"], docs="only_tests") == ["mod.py:only_tests"]
