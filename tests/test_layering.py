"""The layout contract (docs/ARCHITECTURE.md "Layers", the layout issues): imports only go down —
rules ← match, lobby ← store ← projections ← service ← workers/tools ← gateway ← shuangkou
(the application: the command line) — the rules use the standard library only, the
match and lobby domains are pure (no Redis, dramatiq, clock or randomness), and no package has an
import cycle.

At the top level this reads as a staircase, engine → projections → workers / gateway
→ shuangkou, with one arrow back up: engine/service and engine/tools import
projections (the per-player views, the ledger, the settlement). That is the order on
purpose: the command service publishes each player's redacted view and checks
balances, so it reads the read models; the read models themselves know nothing of the
service. ``shuangkou`` may import anything, and nothing imports ``shuangkou``.

Every import counts, the ones inside functions too: a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OURS = ("engine", "workers", "projections", "gateway", "shuangkou")

# the layer of each group; a module may import its own group and groups of a lower layer
LAYERS: dict[str, int] = {
    "engine.rules": 0,
    "engine.match": 1, "engine.config": 1, "engine.lobby": 1,
    "engine.store": 2,
    "projections": 3,
    "engine.service": 4,
    "workers": 5, "engine.tools": 5,
    "gateway": 6,
    "shuangkou": 7,  # the application: may import anything, nothing imports it
    "engine": 0,  # engine/__init__: the version only
}
# the one arrow between top-level packages that runs back up the staircase (see the docstring)
BACK_ARROWS = {("engine", "projections")}
STAIRCASE = ("engine", "projections", "workers", "gateway", "shuangkou")
IMPURE = {"redis", "dramatiq", "fakeredis", "time", "random", "secrets", "socket", "threading", "os",
          "subprocess", "asyncio", "prometheus_client"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for top in OURS:
        for path in sorted((ROOT / top).rglob("*.py")) if (ROOT / top).is_dir() else []:
            found[_module_name(path)] = path
    return found


def _imports(path: Path, module: str) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            out.add(name)
            # ``from engine.store import keys`` imports the module engine.store.keys
            out.update(f"{name}.{alias.name}" for alias in node.names)
    return out


MODULES = _modules()
IMPORTS = {m: _imports(p, m) for m, p in MODULES.items()}


def group_of(module: str) -> str:
    for prefix in sorted(LAYERS, key=len, reverse=True):
        if module == prefix or module.startswith(prefix + "."):
            return prefix
    raise KeyError(module)


def _our_targets(module: str) -> set[str]:
    return {t for t in IMPORTS[module] if t in MODULES}


def test_every_module_has_a_layer():
    assert all(group_of(m) for m in MODULES)
    assert "engine.rules.cards" in MODULES and "engine.match.decide" in MODULES  # the walk found the tree


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_only_go_down(module: str):
    mine = LAYERS[group_of(module)]
    up = sorted(t for t in _our_targets(module) if LAYERS[group_of(t)] > mine)
    assert not up, f"{module} (layer {group_of(module)}) imports upward: {up}"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if group_of(m) == "engine.rules"))
def test_rules_use_the_standard_library_only(module: str):
    foreign = sorted(t for t in IMPORTS[module]
                     if t.split(".")[0] not in sys.stdlib_module_names and not t.startswith("engine.rules")
                     and t != "__future__")
    assert not foreign, f"{module} imports {foreign}"


@pytest.mark.parametrize("module", sorted(m for m in MODULES
                                          if group_of(m) in ("engine.rules", "engine.match", "engine.lobby")))
def test_rules_and_match_are_pure(module: str):
    impure = sorted(t for t in IMPORTS[module] if t.split(".")[0] in IMPURE)
    assert not impure, f"{module} imports {impure}: the domain reads no clock, randomness, Redis or network"


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state and (found := visit(m)):
                return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (found := visit(n)):
            return found
    return None


def test_cycle_finder_finds_a_cycle():  # positive control: the check below can fail
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle_between_modules():
    graph = {m: {t for t in _our_targets(m) if t != m and not m.startswith(t + ".")} for m in MODULES}
    assert _cycle(graph) is None, f"import cycle: {' -> '.join(_cycle(graph) or [])}"


def test_layer_check_catches_an_upward_import(monkeypatch):  # positive control
    monkeypatch.setitem(IMPORTS, "engine.rules.cards", IMPORTS["engine.rules.cards"] | {"engine.match.events"})
    with pytest.raises(AssertionError):
        test_imports_only_go_down("engine.rules.cards")


def test_nothing_imports_the_application():
    importers = sorted(m for m in MODULES if not m.startswith("shuangkou")
                       and any(t == "shuangkou" or t.startswith("shuangkou.") for t in IMPORTS[m]))
    assert not importers, f"these modules import the application (shuangkou): {importers}"


def test_top_level_reads_as_a_staircase_with_one_arrow_back_up():
    """engine → projections → workers / gateway → shuangkou; only engine/service and
    engine/tools reach up, into projections (the service reads the read models)."""
    step = {top: i for i, top in enumerate(STAIRCASE)}
    step["gateway"] = step["workers"]  # side by side on one stair
    arrows = {(m.split(".")[0], t.split(".")[0]) for m in MODULES for t in _our_targets(m)}
    back = {(a, b) for a, b in arrows if a != b and step[b] > step[a]}
    assert back == BACK_ARROWS, f"arrows back up the staircase: {sorted(back)}"
    reaching_up = {m.split(".")[1] for m in MODULES if m.startswith("engine.")
                   and any(t.startswith("projections") for t in _our_targets(m))}
    assert reaching_up <= {"service", "tools"}, reaching_up
