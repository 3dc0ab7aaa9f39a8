"""Public and private names: no public function or class of the library exists only for the tests, and the
product reads no private attribute of another library (numpy's ``memmap._mmap``, a DataLoader iterator's
``_shutdown_workers``: they change without notice).

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


#: Private-looking names of other libraries that are their documented public API.
DOCUMENTED = {"_exit"}  # os._exit: the documented exit without cleanup (a forked child, an orphaned builder)


def _foreign_private(files):
    """``obj._name`` reads and ``getattr(obj, "_name")`` of names the product defines nowhere itself."""
    trees = {p: ast.parse(p.read_text(encoding="utf-8")) for p in files}
    defined, reads = set(DOCUMENTED), []
    for path, tree in trees.items():
        for n in ast.walk(tree):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.add(n.name)
            elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                defined.add(n.id)
            elif isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store):
                defined.add(n.attr)
            elif isinstance(n, ast.arg):
                defined.add(n.arg)
            elif isinstance(n, ast.keyword) and n.arg:
                defined.add(n.arg)  # set_defaults(_parser=...)
            elif isinstance(n, ast.alias):
                defined.add(n.asname or n.name.split(".")[-1])
            name = None
            if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Load):
                name = n.attr
            elif isinstance(n, ast.Call) and getattr(n.func, "id", "") in ("getattr", "hasattr") and \
                    len(n.args) > 1 and isinstance(n.args[1], ast.Constant) and isinstance(n.args[1].value, str):
                name = n.args[1].value
            if name and name.startswith("_") and not name.startswith("__"):
                reads.append((path, n.lineno, name))
    return [f"{p.name}:{line} {name}" for p, line, name in reads if name not in defined]


def test_the_product_reads_no_private_attribute_of_another_library():
    found = _foreign_private(list(_product_files()))
    assert not found, "use the library's public API instead: " + ", ".join(found)


def test_the_private_rule_sees_numpy_and_torch_internals(tmp_path):
    mod = tmp_path / "mod.py"
    mod.write_text("def f(a, it):\n    m = getattr(a, '_mmap', None)\n    it._shutdown_workers()\n"
                   "    return a._own\n\nclass C:\n    def __init__(self):\n        self._own = 1\n",
                   encoding="utf-8")
    assert _foreign_private([mod]) == ["mod.py:2 _mmap", "mod.py:3 _shutdown_workers"]
