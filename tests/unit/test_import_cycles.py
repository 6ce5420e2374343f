"""mechlib's modules import one another one way only: no cycle, counting imports inside functions too (a deferred
import hides a cycle from Python, not from a reader). Read from each module's source, nothing imported."""

import ast
from pathlib import Path

import mechlib

ROOT = Path(mechlib.__file__).parent


def imports(path: Path) -> set[str]:
    """The mechlib modules ``path`` imports, anywhere in it: ``from mechlib import zoo`` names mechlib.zoo, and
    ``from mechlib.data import Copies`` mechlib.data (the package itself, which every submodule loads first, is
    left out)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            module = ".".join(filter(None, ("mechlib" if node.level else "", node.module)))  # relative: mechlib is flat
            found |= {f"{module}.{alias.name}" for alias in node.names} | {module}
    modules = {f"mechlib.{p.stem}" for p in ROOT.glob("*.py") if p.stem != "__init__"}
    return found & modules


def graph() -> dict[str, set[str]]:
    return {f"mechlib.{p.stem}": imports(p) for p in ROOT.glob("*.py") if p.stem != "__init__"}


def cycle(edges: dict[str, set[str]]) -> list[str]:
    """One import cycle (its modules, the first repeated at the end), or [] when there is none: a depth-first walk."""
    done: set[str] = set()

    def walk(module: str, path: list[str]) -> list[str]:
        if module in path:
            return path[path.index(module):] + [module]
        if module in done:
            return []
        for imported in sorted(edges[module]):
            if found := walk(imported, path + [module]):
                return found
        done.add(module)
        return []

    return next((found for module in sorted(edges) if (found := walk(module, []))), [])


def test_the_walk_finds_a_cycle_and_only_a_cycle():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []


def test_no_mechlib_module_imports_itself_back():
    edges = graph()
    assert "mechlib.induction" in edges["mechlib.copying"] and "mechlib.data" in edges["mechlib.induction"]  # read
    assert cycle(edges) == [], " → ".join(cycle(edges))


def test_data_imports_no_other_mechlib_module():
    """The corpora, tokenizers and synthetic sequences sit under every experiment: they import none."""
    assert graph()["mechlib.data"] == set()
