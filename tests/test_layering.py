"""The package's layering, as a test: the folder a module lives in is its layer and job, and
imports between folders follow the rules below; no import circles; no module uses another module's
private names.

The rules, lowest first (docs/architecture.md draws them): the private core imports nothing else of
cachekit; the backends only the core; the private engine the core and the backends; the entry
points (``exact``, ``features``, ``semantic``) the engine and below, and ``semantic``'s own folders
(``embed``, ``index``, ``policy``, ``train``) never ``semantic``'s tier or decorator; the front
(``cache`` and the package) the entry points; the applications (``llm``, ``proxy``, ``replay``,
``cli``, ``testing``, the adapters) what they need, never the engine. Nothing imports an
application except a later application.
An import counts wherever it is written (a function-level import included); imports under
``if TYPE_CHECKING:`` do not, since they never run.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"cachekit": ROOT / "cachekit", "cachekit.adapters": ROOT / "adapters"}

CORE = {"cachekit._core", "cachekit._version"}
BACKENDS = CORE | {"cachekit.backends"}
ENGINE = BACKENDS | {"cachekit._engine"}
SEMANTIC_PARTS = {
    "cachekit.semantic.embed",
    "cachekit.semantic.index",
    "cachekit.semantic.policy",
    "cachekit.semantic.train",
}
ENTRY_POINTS = (
    ENGINE | SEMANTIC_PARTS | {"cachekit.exact", "cachekit.features", "cachekit.semantic"}
)
FRONT = ENTRY_POINTS | {"cachekit.cache", "cachekit"}
#: What an application may use: the front and what it re-exports, never the engine.
FOR_APPLICATIONS = FRONT - {"cachekit._engine"}

#: Folder -> the folders its modules may import from (its own always allowed). A module's folder is
#: the longest entry that prefixes its name; ``cachekit.cache`` and the package are the front.
ALLOWED: dict[str, set[str]] = {
    "cachekit._version": set(),
    "cachekit._core": {"cachekit._version"},
    "cachekit.backends": CORE,
    "cachekit._engine": BACKENDS,
    "cachekit.exact": ENGINE,
    "cachekit.features": ENGINE,
    "cachekit.semantic.embed": CORE,
    "cachekit.semantic.index": CORE,
    "cachekit.semantic.policy": CORE | {"cachekit.semantic.embed"},
    "cachekit.semantic.train": CORE | {"cachekit.semantic.embed", "cachekit.semantic.policy"},
    "cachekit.semantic": ENGINE | SEMANTIC_PARTS,
    "cachekit.cache": ENTRY_POINTS,
    "cachekit": FRONT,
    "cachekit.llm": FOR_APPLICATIONS,
    "cachekit.proxy": FOR_APPLICATIONS
    | {"cachekit.llm", "cachekit.proxy.inflight", "cachekit.proxy.ops"},
    "cachekit.proxy.inflight": FOR_APPLICATIONS | {"cachekit.llm", "cachekit.proxy"},
    "cachekit.proxy.ops": FOR_APPLICATIONS | {"cachekit.llm", "cachekit.proxy"},
    "cachekit.replay": FOR_APPLICATIONS | {"cachekit.llm", "cachekit.proxy"},
    "cachekit.testing": FOR_APPLICATIONS | {"cachekit.llm"},
    "cachekit.adapters": FOR_APPLICATIONS | {"cachekit.llm"},
    "cachekit.cli": FOR_APPLICATIONS | {"cachekit.llm", "cachekit.proxy", "cachekit.replay"},
    "cachekit.__main__": {"cachekit.cli"},
}

#: No folder under cachekit/ holds more than this many modules (``__init__`` included).
MAX_FOLDER_MODULES = 15


def modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package, root in PACKAGES.items():
        for path in sorted(root.rglob("*.py")):
            rel = path.relative_to(root).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            found[".".join([package, *parts])] = path
    return found


MODULES = modules()
TREES = {name: ast.parse(path.read_text(), str(path)) for name, path in MODULES.items()}


def folder_of(module: str) -> str | None:
    best = None
    for prefix in ALLOWED:
        if (module == prefix or module.startswith(prefix + ".")) and (
            best is None or len(prefix) > len(best)
        ):
            best = prefix
    return best


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            t = node.test
            if (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
                isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
            ):
                skip.update(id(n) for n in ast.walk(node))
    return skip


def imports(name: str) -> Iterator[tuple[int, str, str]]:
    """``(line, imported module, imported name or "")`` for every import that runs."""
    tree = TREES[name]
    skip = _type_checking_nodes(tree)
    is_package = MODULES[name].name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, ""
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([base] if base else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                yield node.lineno, full if full in MODULES else base, alias.name


def test_every_module_has_a_folder_rule() -> None:
    unplaced = [m for m in MODULES if folder_of(m) is None]
    assert not unplaced, f"give a rule in tests/test_layering.py to the folder of: {unplaced}"


def test_every_rule_names_a_folder_that_exists() -> None:
    gone = [f for f in ALLOWED if not any(m == f or m.startswith(f + ".") for m in MODULES)]
    assert not gone, f"rules for folders that no longer exist: {gone}"


def test_no_folder_holds_too_many_modules() -> None:
    crowded = {
        str(d.relative_to(ROOT)): n
        for d in [ROOT / "cachekit", *(p for p in (ROOT / "cachekit").rglob("*") if p.is_dir())]
        if (n := len(list(d.glob("*.py")))) > MAX_FOLDER_MODULES
    }
    assert not crowded, f"over {MAX_FOLDER_MODULES} modules: {crowded}"


#: A module longer than this is split by job (docs/architecture.md names each module's job).
MAX_MODULE_LINES = 700


def test_no_module_is_over_the_line_bound() -> None:
    long = {
        str(path.relative_to(ROOT)): n
        for path in sorted((ROOT / "cachekit").rglob("*.py"))
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"over {MAX_MODULE_LINES} lines: {long}"


def test_imports_follow_the_folder_rules() -> None:
    bad = []
    for name in MODULES:
        own = folder_of(name)
        assert own is not None
        for line, target, _ in imports(name):
            if target not in MODULES or target == name:
                continue
            theirs = folder_of(target)
            if theirs is not None and theirs != own and theirs not in ALLOWED[own]:
                bad.append(f"{name}:{line} ({own}) imports {target} ({theirs})")
    assert not bad, "\n".join(sorted(set(bad)))


def test_no_import_circles() -> None:
    graph: dict[str, set[str]] = {name: set() for name in MODULES}
    for name in MODULES:
        for _, target, _ in imports(name):
            # A package's __init__ re-exporting its own submodules is not a circle of design.
            if target in MODULES and target != name and not name.startswith(target + "."):
                graph[name].add(target)
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            cycle = visit(start)
            assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_no_private_names_imported_from_other_modules() -> None:
    bad = [
        f"{name}:{line} imports {imported} from {target}"
        for name in MODULES
        for line, target, imported in imports(name)
        if target in MODULES
        and target != name
        and imported.startswith("_")
        and not imported.startswith("__")
    ]
    assert not bad, "\n".join(sorted(set(bad)))


def _private_attributes_by_module() -> dict[str, set[str]]:
    """Private names each module's classes define (methods, and attributes set on self)."""
    owned: dict[str, set[str]] = {}
    for name, tree in TREES.items():
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            for node in ast.walk(cls):
                attr = None
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    attr = node.name
                elif (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.value, ast.Name)
                    and node.value.id == "self"
                    and isinstance(node.ctx, ast.Store)
                ):
                    attr = node.attr
                if attr and attr.startswith("_") and not attr.startswith("__"):
                    owned.setdefault(attr, set()).add(name)
    return owned


def test_no_private_attributes_of_other_modules() -> None:
    owned = _private_attributes_by_module()
    bad = []
    for name, tree in TREES.items():
        for node in ast.walk(tree):
            on_self = (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in ("self", "cls")
            )
            if (
                isinstance(node, ast.Attribute)
                and node.attr in owned
                and name not in owned[node.attr]
                and not on_self
            ):
                bad.append(
                    f"{name}:{node.lineno} .{node.attr} (defined in "
                    f"{', '.join(sorted(owned[node.attr]))})"
                )
    assert not bad, "\n".join(sorted(set(bad)))


@pytest.mark.parametrize(
    ("module", "folder"),
    [
        ("cachekit._core.types", "cachekit._core"),
        ("cachekit._engine.engine", "cachekit._engine"),
        ("cachekit.semantic.tier", "cachekit.semantic"),
        ("cachekit.semantic.policy.slots", "cachekit.semantic.policy"),
        ("cachekit.cache", "cachekit.cache"),
        ("cachekit.backends.redis", "cachekit.backends"),
        ("cachekit.adapters.openai", "cachekit.adapters"),
    ],
)
def test_folder_of(module: str, folder: str) -> None:
    assert module in MODULES
    assert folder_of(module) == folder


@pytest.mark.parametrize(
    ("module", "source"),
    [
        (
            "cachekit._engine.engine",
            "def f():\n    from cachekit.semantic.tier import SemanticTier\n",
        ),
        ("cachekit._engine.engine", "import cachekit.llm.rules\n"),
        ("cachekit.semantic.policy.slots", "from cachekit.semantic.tier import SemanticTier\n"),
        ("cachekit.proxy.app", "from cachekit._engine.engine import Engine\n"),
    ],
)
def test_checker_catches_a_forbidden_import(module: str, source: str) -> None:
    # The check must be able to fail: each of these imports breaks a rule.
    TREES[module], saved = ast.parse(source), TREES[module]
    try:
        with pytest.raises(AssertionError, match=module.replace(".", r"\.")):
            test_imports_follow_the_folder_rules()
    finally:
        TREES[module] = saved
