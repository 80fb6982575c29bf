"""The package's layering, as a test: imports go down the layers, never up, and no module uses
another module's private names.

Layers, lowest first (see docs/architecture.md): types < mechanisms < engine < entry points <
front < applications. The applications (the OpenAI request rules, the proxy, replay, the client
adapters, the command line and the demo) are built on what users import, the ``Cache`` front,
exactly as a user's own code would be.
An import counts wherever it is written (a function-level import included); imports under
``if TYPE_CHECKING:`` do not, since they never run. A module may import from its own layer as
long as no import circle results (import circles are checked separately).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"cachekit": ROOT / "cachekit", "cachekit.adapters": ROOT / "adapters"}

TYPES, MECHANISMS, ENGINE, ENTRY_POINTS, FRONT, APPLICATIONS = range(6)
LAYER_NAMES = ["types", "mechanisms", "engine", "entry points", "front", "applications"]

#: Module (or package prefix) -> layer. The longest matching prefix wins.
LAYERS: dict[str, int] = {
    "cachekit._version": TYPES,
    "cachekit.types": TYPES,
    "cachekit.protocols": TYPES,
    # The envelope and its codec: values and pure functions every layer may use.
    "cachekit.serialization": TYPES,
    # Standard-library-only helpers every layer may use: optional-dependency checks, argument
    # checks, and the shared tier's health values with their diagnosis.
    "cachekit.extras": TYPES,
    "cachekit.lazy": TYPES,
    "cachekit.validation": TYPES,
    "cachekit.health": TYPES,
    "cachekit.keys": MECHANISMS,
    "cachekit.breaker": MECHANISMS,
    "cachekit.guard": MECHANISMS,
    "cachekit.namespace": MECHANISMS,
    "cachekit.invalidations": MECHANISMS,
    "cachekit.fast_path": MECHANISMS,
    "cachekit.l1": MECHANISMS,
    "cachekit.background": MECHANISMS,
    "cachekit.singleflight": MECHANISMS,
    "cachekit.sansio": MECHANISMS,
    "cachekit.telemetry": MECHANISMS,
    "cachekit.testing": MECHANISMS,
    "cachekit.storage": MECHANISMS,
    "cachekit.semantic.batcher": MECHANISMS,
    "cachekit.semantic.embedder": MECHANISMS,
    "cachekit.semantic.onnx_runner": MECHANISMS,
    "cachekit.semantic.bert_graph": MECHANISMS,
    "cachekit.semantic.model_files": MECHANISMS,
    "cachekit.semantic.hnsw": MECHANISMS,
    "cachekit.semantic.index": MECHANISMS,
    "cachekit.semantic.entries": MECHANISMS,
    "cachekit.semantic.embedding_cache": MECHANISMS,
    "cachekit.semantic.snapshots": MECHANISMS,
    "cachekit.semantic.tier_counters": MECHANISMS,
    "cachekit.semantic.rwlock": MECHANISMS,
    "cachekit.semantic.slot_lexicon": MECHANISMS,
    "cachekit.semantic.slot_order": MECHANISMS,
    "cachekit.semantic.slot_parse": MECHANISMS,
    "cachekit.semantic.shared_store": MECHANISMS,
    "cachekit.semantic.policy": MECHANISMS,
    "cachekit.semantic.verifier": MECHANISMS,
    "cachekit.semantic.verifier_features": MECHANISMS,
    "cachekit.semantic.slots": MECHANISMS,
    "cachekit.semantic.error_bounded": MECHANISMS,
    # Labelled pairs and their measures, and a tune's settings and loader: pure mechanisms.
    "cachekit.semantic.pairs": MECHANISMS,
    "cachekit.semantic.tune_config": MECHANISMS,
    "cachekit.semantic.tuned": MECHANISMS,
    "cachekit.semantic.testing": MECHANISMS,
    "cachekit.engine": ENGINE,
    "cachekit.decorators": ENTRY_POINTS,
    "cachekit.features": ENTRY_POINTS,
    "cachekit.semantic": ENTRY_POINTS,  # the package, its decorator and its tier
    "cachekit.cache": FRONT,
    "cachekit": FRONT,  # the package itself re-exports the front
    "cachekit.llm": APPLICATIONS,
    "cachekit.proxy": APPLICATIONS,
    "cachekit.replay": APPLICATIONS,
    "cachekit.adapters": APPLICATIONS,
    "cachekit.cli": APPLICATIONS,
    "cachekit.labels": APPLICATIONS,
    "cachekit.policy_options": APPLICATIONS,  # --policy and its setting, for serve and replay
    "cachekit.demo": APPLICATIONS,
    "cachekit.__main__": APPLICATIONS,
}


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


def layer_of(module: str) -> int | None:
    best = None
    for prefix in LAYERS:
        if (module == prefix or module.startswith(prefix + ".")) and (
            best is None or len(prefix) > len(best)
        ):
            best = prefix
    return None if best is None else LAYERS[best]


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


def test_every_module_has_a_layer() -> None:
    unplaced = [m for m in MODULES if layer_of(m) is None]
    assert not unplaced, f"assign a layer in tests/test_layering.py to: {unplaced}"


#: A module longer than this is split by job (docs/architecture.md names each module's job).
MAX_MODULE_LINES = 700


def test_no_module_is_over_the_line_bound() -> None:
    long = {
        str(path.relative_to(ROOT)): n
        for path in sorted((ROOT / "cachekit").rglob("*.py"))
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"over {MAX_MODULE_LINES} lines: {long}"


def test_imports_never_go_up_a_layer() -> None:
    bad = []
    for name in MODULES:
        own = layer_of(name)
        assert own is not None
        for line, target, _ in imports(name):
            if target not in MODULES or target == name:
                continue
            their = layer_of(target)
            if their is not None and their > own:
                bad.append(
                    f"{name}:{line} ({LAYER_NAMES[own]}) imports {target} ({LAYER_NAMES[their]})"
                )
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
    ("module", "layer"),
    [
        ("cachekit.types", TYPES),
        ("cachekit.engine", ENGINE),
        ("cachekit.semantic.tier", ENTRY_POINTS),
        ("cachekit.semantic.shared_store", MECHANISMS),
        ("cachekit.cache", FRONT),
        ("cachekit.storage.redis", MECHANISMS),
    ],
)
def test_layer_table(module: str, layer: int) -> None:
    assert module in MODULES
    assert layer_of(module) == layer


def test_checker_catches_an_upward_import() -> None:
    # The check must be able to fail: an engine-level import of the front is caught.
    tree = ast.parse("def f():\n    from cachekit.cache import Cache\n")
    TREES["cachekit.engine"], saved = tree, TREES["cachekit.engine"]
    try:
        with pytest.raises(AssertionError, match=r"cachekit\.engine:2"):
            test_imports_never_go_up_a_layer()
    finally:
        TREES["cachekit.engine"] = saved
