"""The layout rules of docs/architecture.md, checked on the source tree (issue 12).

import-linter (`make lint`) enforces the package layers and the forbidden imports; these tests
check what it cannot express: module-level import cycles, module and function size, prefix
families of modules, and that parsers stay pure.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
PKG = SRC / "minutiae"

MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 80
#: I/O a parser must never do (only ``read*`` modules open files, run commands or call NVML/HTTP)
IMPURE = {"subprocess", "socket", "httpx", "pynvml", "urllib.request", "shutil"}


def _modules() -> dict[str, Path]:
    out = {}
    for p in PKG.rglob("*.py"):
        parts = p.relative_to(SRC).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = p
    return out


MODULES = _modules()


def _type_checking_block(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _imports(path: Path) -> set[str]:
    """Every minutiae module ``path`` imports, at any depth, except under ``if TYPE_CHECKING``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()

    def visit(node: ast.AST) -> None:
        if _type_checking_block(node):
            return
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                out.add(full if full in MODULES else node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return {m for m in out if m in MODULES}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
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
    return out


def test_no_module_level_import_cycle() -> None:
    graph = {m: {d for d in _imports(p) if d != m and not m.startswith(d + ".")}
             for m, p in MODULES.items()}
    # a package's __init__ re-exporting its own modules is not a cycle through the package
    for m in graph:
        graph[m] = {d for d in graph[m] if not d.startswith(m + ".")}
    assert _cycles(graph) == []


def test_no_package_level_import_cycle() -> None:
    def top(m: str) -> str:
        parts = m.split(".")
        return ".".join(parts[:2])
    graph: dict[str, set[str]] = defaultdict(set)
    for m, p in MODULES.items():
        graph[top(m)]
        for d in _imports(p):
            if top(d) != top(m):
                graph[top(m)].add(top(d))
    assert _cycles(dict(graph)) == []


def test_no_module_over_400_lines() -> None:
    files = [*PKG.rglob("*.py"), *(ROOT / "bench").rglob("*.py"), *(ROOT / "tests").rglob("*.py")]
    long = {str(p.relative_to(ROOT)): n for p in files
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert long == {}


def test_no_function_over_80_lines() -> None:
    long = {}
    for m, p in MODULES.items():
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long[f"{m}:{node.name}"] = n
    assert long == {}


def test_no_prefix_family_of_three_modules() -> None:
    families: dict[tuple[Path, str], list[str]] = defaultdict(list)
    for p in PKG.rglob("*.py"):
        if "_" in p.stem.strip("_"):
            families[(p.parent, p.stem.strip("_").split("_")[0])].append(p.stem)
    big = {f"{d.relative_to(SRC)}/{prefix}_*": sorted(names)
           for (d, prefix), names in families.items() if len(names) >= 3}
    assert big == {}


def _is_parser(module: str) -> bool:
    return any(part == "parse" or part.startswith("parse_") for part in module.split(".")[2:])


def _is_reader(module: str) -> bool:
    return any(part == "read" or part.startswith("read_") for part in module.split(".")[2:])


def test_parsers_are_pure() -> None:
    bad = {}
    for m, p in MODULES.items():
        if not _is_parser(m):
            continue
        tree = ast.parse(p.read_text(encoding="utf-8"))
        names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        wrong = sorted(n for n in names if n in IMPURE or (n in MODULES and _is_reader(n)))
        if wrong:
            bad[m] = wrong
    assert bad == {}


def test_the_checks_can_fail() -> None:
    """The cycle finder and the family rule find what they are meant to (no vacuous pass)."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
    assert _is_parser("minutiae.node.sources.ib.parse_sysfs")
    assert _is_reader("minutiae.analyses.topology.read_sysfs")
    assert not _is_parser("minutiae.analyses.stragglers.prep")


def test_test_files_have_unique_basenames() -> None:
    """Test folders have no __init__.py, so two test files of one name are a collection error."""
    seen: dict[str, list[str]] = defaultdict(list)
    for p in (ROOT / "tests").rglob("test_*.py"):
        seen[p.name].append(str(p.relative_to(ROOT)))
    assert {n: ps for n, ps in seen.items() if len(ps) > 1} == {}
