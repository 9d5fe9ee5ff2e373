"""The import graph of ``dse/``, ``models/`` and ``accel/``: no cycle (at module level or inside functions), no
underscore name imported from another module, and ``dse``'s sub-packages importing downward only.

Edges are read with :mod:`ast` from every ``import`` and ``from ... import`` in a file, wherever it sits (a
deferred import inside a function is an edge too), except under ``if TYPE_CHECKING:``, which never runs. An
import of a package's submodule is an edge to that submodule, not to the package's ``__init__``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("dse", "models", "accel")

#: dse's layers, lowest first: a module may import its own layer and the layers before it (``dse`` is the
#: package's ``__init__``, the public API the command line is a thin layer over)
DSE_LAYERS = ("dse.errors", "dse.config", "dse.evaluation", "dse.search", "dse.results", "dse.figures",
              "dse.api", "dse", "dse.cli")


def _modules(root: Path) -> dict[str, Path]:
    """Dotted module name -> file (a package is named by its ``__init__.py``)."""
    out = {}
    for pkg in PACKAGES:
        for f in sorted((root / pkg).rglob("*.py")):
            parts = list(f.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = f
    return out


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(n) for n in ast.walk(node)}
    return skip


def import_graph(text_of: dict[str, str], packages: frozenset[str] = frozenset()
                 ) -> tuple[dict[str, set[str]], list[tuple[str, str, str]]]:
    """(module -> modules it imports, [(importer, module, private name)]) over the modules given;
    ``packages``: the ones that are packages (a relative import in them is relative to themselves)."""
    mods = set(text_of)
    edges: dict[str, set[str]] = {m: set() for m in mods}
    private = []
    for mod, text in text_of.items():
        tree = ast.parse(text)
        skip = _type_checking_nodes(tree)
        for node in ast.walk(tree):
            if id(node) in skip or not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            targets: list[tuple[str, str | None]] = []
            if isinstance(node, ast.Import):
                targets = [(a.name, None) for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    here = mod.split(".") if mod in packages else mod.split(".")[:-1]
                    up = here[:len(here) - (node.level - 1)]
                    base = ".".join(up + ([node.module] if node.module else []))
                for a in node.names:
                    full = f"{base}.{a.name}"
                    targets.append((full, None) if full in mods else (base, a.name))
            for target, name in targets:
                t = target
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                if not t or t == mod:
                    continue
                edges[mod].add(t)
                if name and name.startswith("_") and not name.startswith("__"):
                    private.append((mod, t, name))
    return edges, private


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), and self-loops."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def _layer(mod: str) -> int:
    best = -1
    for i, prefix in enumerate(DSE_LAYERS):
        if mod == prefix or mod.startswith(prefix + "."):
            if best < 0 or len(prefix) > len(DSE_LAYERS[best]):
                best = i
    return best


@pytest.fixture(scope="module")
def graph():
    mods = _modules(ROOT)
    return import_graph({m: p.read_text() for m, p in mods.items()},
                        frozenset(m for m, p in mods.items() if p.name == "__init__.py"))


def test_no_import_cycle(graph):
    edges, _ = graph
    assert cycles(edges) == []


def test_no_private_name_is_imported_from_another_module(graph):
    _, private = graph
    assert private == [], "make what two modules share public in a leaf module"


def test_dse_layers_import_downward_only(graph):
    edges, _ = graph
    bad = [(a, b) for a, targets in edges.items() if a.startswith("dse")
           for b in targets if b.startswith("dse") and _layer(b) > _layer(a)]
    assert bad == []


def test_the_checks_find_what_they_look_for():
    """The checks on a made-up package: a cycle through a deferred import, a private import, a type-only
    import that is not an edge, an upward import, and relative imports from a package and from a module."""
    text_of = {
        "dse.config.a": "def f():\n    from dse.search.b import g\n",
        "dse.search.b": "from dse.config.a import _hidden\nfrom typing import TYPE_CHECKING\n"
                        "if TYPE_CHECKING:\n    from dse.cli.c import x\n",
        "dse.cli.c": "import dse.search.b\n",
        "dse.cli": "from .c import y\n",
        "dse.cli.d": "from ..search import b\n",
    }
    edges, private = import_graph(text_of, frozenset({"dse.cli"}))
    assert edges["dse.cli"] == {"dse.cli.c"} and edges["dse.cli.d"] == {"dse.search.b"}
    assert cycles(edges) == [["dse.config.a", "dse.search.b"]]
    assert private == [("dse.search.b", "dse.config.a", "_hidden")]
    assert "dse.cli.c" not in edges["dse.search.b"]
    assert _layer("dse.search.b") > _layer("dse.config.a")
