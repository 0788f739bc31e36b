"""The layers of graphprep (issue 49 item 2), read from the source: every ``import`` and
``from ... import`` of every module under formats/, pipeline/, dispatch/ and trainer/ (module
level and function-local alike: moving an import into a function hides nothing from this
graph), then

- no import cycle between modules (strongly connected components of the graph);
- every edge goes down the layers, lowest first:

  formats   the on-disk formats: imports nothing else of graphprep;
  core      ``graphprep.pipeline.core``: formats and core only;
  steps     one unit per ``prep`` step (``UNITS``): formats, core, itself, and another step
            only through a module that step declares as its API (``DECLARED_API``, with the
            reason); the graph of steps is acyclic, and so are the chunk step's packages;
  top       the CLI and the Python API (cli.py, commands.py, api.py): anything but the trainer;
  trainer   formats, and the three Dask-free core modules ``TRAINER_CORE``.

A module in no unit fails the test: a new module is placed in the model when it is added.
The checker itself is tested on small planted trees, so it cannot pass vacuously.
"""

from __future__ import annotations

import ast
import os
from collections import defaultdict
from dataclasses import dataclass

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FOLDERS = ("formats", "pipeline", "dispatch", "trainer")     # graphprep.<folder> (pyproject)
G = "graphprep."

# unit -> module prefixes (a prefix is the module or package itself, or a package above it)
UNITS: dict[str, tuple[str, ...]] = {
    "formats": (G + "formats",),
    "core": (G + "pipeline.core",),
    # steps
    "synth": (G + "pipeline.synth", G + "pipeline.synth_job", G + "pipeline.rmat"),
    "chunk": (G + "pipeline.convert", G + "pipeline.tables", G + "pipeline.keys"),
    # workload.py: the work-imbalance warnings of an assignment's statistics, which partition
    # computes and stores (pipeline/ top level, not the partition package: prep inspect imports
    # it without the partitioners and Dask). partition/estimate.py: its --dry-run.
    "partition": (G + "pipeline.partition", G + "pipeline.workload"),
    "dispatch": (G + "dispatch",),          # prep dispatch and prep verify, and its --dry-run
    "split": (G + "pipeline.split_edges",),
    "export": (G + "pipeline.export",),
    "report": (G + "pipeline.report",),
    "inspect": (G + "pipeline.inspect",),
    # top
    "top": (G + "pipeline.cli", G + "pipeline.commands", G + "pipeline.api"),
    "trainer": (G + "trainer",),
}
# The package module graphprep.pipeline itself (its __init__: a docstring and a guard).
PACKAGE_ONLY = {G + "pipeline": "top"}
STEPS = ("synth", "chunk", "partition", "dispatch", "split", "export", "report", "inspect")

# step -> {module or package that other steps may import: why}
DECLARED_API: dict[str, dict[str, str]] = {
    "chunk": {
        G + "pipeline.tables": "the reader and encoder of the user's tables (config, parts, "
        "columns): prep verify --tables re-reads and re-encodes them exactly as chunk did",
        G + "pipeline.convert.tables_in": "read_parts: verify --tables reads each table in "
        "the parts chunk read (JSON staged as chunk staged it)",
        G + "pipeline.keys.lookup": "keys_of/ids_of, a chunked graph's key <-> ID map: "
        "inspect shows a node's key, verify --tables maps the tables' keys",
        G + "pipeline.keys.hashing": "normalize_keys: verify --tables compares keys as chunk "
        "normalized them",
    },
    "split": {
        G + "pipeline.split_edges": "SplitSpec/split_codes: the hash rule of held-out edges, "
        "applied by chunk's tables and checked by verify --tables",
    },
    "partition": {
        G + "pipeline.workload": "work_warnings/made_with (Dask-free): the work-imbalance "
        "warnings partition stores in its statistics, shown by inspect",
    },
    "inspect": {
        G + "pipeline.inspect": "the metadata-only readers: report renders describe()'s "
        "tables; dispatch's --dry-run sizes a field by field_layout/csr_nnz",
    },
    "export": {
        G + "pipeline.export.parts": "PartView, a dispatched part as export reads it: report "
        "profiles parts through it",
    },
}
# The chunk step's packages, lowest first: each may import only those before it.
CHUNK_PACKAGES = (G + "pipeline.tables", G + "pipeline.keys", G + "pipeline.convert")
# The core modules the trainer may import: Dask-free (no Dask, no other core module).
TRAINER_CORE = (G + "pipeline.core.console", G + "pipeline.core.cli_types",
                G + "pipeline.core.memory")


@dataclass(frozen=True)
class Edge:
    src: str
    dst: str
    where: str        # file:line, relative to the root
    local: bool       # inside a function (still an edge)

    def __str__(self) -> str:
        kind = " (function-local)" if self.local else ""
        return f"{self.src} -> {self.dst}  at {self.where}{kind}"


def modules(root: str, folders=FOLDERS) -> dict[str, str]:
    """``graphprep.<dotted name>`` -> path of every .py file under ``folders`` of ``root``."""
    out = {}
    for top in folders:
        for d, dirs, files in os.walk(os.path.join(root, top)):
            dirs[:] = sorted(x for x in dirs if x != "__pycache__")
            for f in sorted(files):
                if f.endswith(".py"):
                    rel = os.path.relpath(os.path.join(d, f), root)[:-3].replace(os.sep, ".")
                    name = G + (rel[:-len(".__init__")] if rel.endswith(".__init__") else rel)
                    out[name] = os.path.join(d, f)
    return out


def _targets(mod: str, is_pkg: bool, node, mods) -> list[str]:
    """The project modules ``node`` imports (``from pkg import name``: ``pkg.name`` where that
    is a module, else ``pkg``; a dotted name: its longest prefix that is a module)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            parts = mod.split(".") if is_pkg else mod.split(".")[:-1]
            parts = parts[:len(parts) - (node.level - 1)]
            base = ".".join(parts + ([base] if base else []))
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base
                 for a in node.names]
    out = []
    for name in names:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        if name:
            out.append(name)
    return out


def import_graph(root: str, folders=FOLDERS) -> tuple[dict[str, str], list[Edge]]:
    mods = modules(root, folders)
    edges = []
    for mod, path in mods.items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        local_lines = {n.lineno for fn in ast.walk(tree)
                       if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                       for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom))}
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for dst in _targets(mod, path.endswith("__init__.py"), node, mods):
                    if dst != mod:
                        where = f"{os.path.relpath(path, root)}:{node.lineno}"
                        edges.append(Edge(mod, dst, where, node.lineno in local_lines))
    return mods, sorted(set(edges), key=lambda e: (e.src, e.dst, e.where))


def _within(mod: str, prefix: str) -> bool:
    return mod == prefix or mod.startswith(prefix + ".")


def unit_of(mod: str) -> str | None:
    if mod in PACKAGE_ONLY:
        return PACKAGE_ONLY[mod]
    best = max(((p, u) for u, ps in UNITS.items() for p in ps if _within(mod, p)),
               key=lambda pu: len(pu[0]), default=None)
    return best[1] if best else None


def _sccs(nodes, succ) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for start in sorted(nodes):
        if start in index:
            continue
        work = [(start, iter(sorted(succ.get(start, ()))))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(succ.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
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


def cycles(edges: list[Edge], key=lambda m: m) -> list[str]:
    """One message per cycle of the graph of ``key(module)``, listing the edges inside it."""
    succ = defaultdict(set)
    for e in edges:
        a, b = key(e.src), key(e.dst)
        if a is not None and b is not None and a != b:
            succ[a].add(b)
    nodes = set(succ) | {b for bs in succ.values() for b in bs}
    out = []
    for comp in _sccs(nodes, succ):
        inside = [e for e in edges if key(e.src) in comp and key(e.dst) in comp
                  and key(e.src) != key(e.dst)]
        out.append(f"cycle through {', '.join(comp)}:\n" +
                   "\n".join(f"    {e}" for e in inside))
    return out


def _declared(dst: str, unit: str) -> bool:
    return any(_within(dst, api) for api in DECLARED_API.get(unit, {}))


def violations(mods: dict[str, str], edges: list[Edge]) -> list[str]:
    """One message per module in no unit and per edge against the layers."""
    out = [f"{m} ({os.path.relpath(p, ROOT) if p.startswith(ROOT) else p}) is in no unit: "
           "place it in UNITS" for m, p in mods.items() if unit_of(m) is None]
    for e in edges:
        a, b = unit_of(e.src), unit_of(e.dst)
        if a is None or b is None or a == b or b == "formats":
            continue
        if a == "formats":
            why = "formats imports nothing else of graphprep"
        elif a == "core":
            why = "core imports formats and core only"
        elif a == "trainer":
            if e.dst in TRAINER_CORE:
                continue
            why = f"the trainer imports formats and {', '.join(TRAINER_CORE)} only"
        elif a == "top":
            if b != "trainer":
                continue
            why = "the CLI and API never import the trainer"
        elif a in STEPS:
            if b == "core" or (b in STEPS and _declared(e.dst, b)):
                continue
            why = (f"{e.dst} is not a declared API of step {b}" if b in STEPS else
                   f"a step ({a}) imports formats, core and other steps' APIs, not {b}")
        else:
            why = f"unit {a} has no rule"
        out.append(f"{a} -> {b}: {e}: {why}")
    for m in TRAINER_CORE:
        if m in mods:
            for e in edges:
                if e.src == m and unit_of(e.dst) != "formats" and e.dst not in TRAINER_CORE:
                    out.append(f"trainer-core: {e}: {m} must stay Dask-free (formats and "
                               "the other trainer-core modules only)")
            with open(mods[m], encoding="utf-8") as f:
                tree = ast.parse(f.read())
            for n in ast.walk(tree):
                names = ([a.name for a in n.names] if isinstance(n, ast.Import) else
                         [n.module or ""] if isinstance(n, ast.ImportFrom) else [])
                if any(x.split(".")[0] in ("dask", "distributed") for x in names):
                    out.append(f"trainer-core: {m} imports Dask at "
                               f"{os.path.relpath(mods[m], ROOT)}:{n.lineno}")
    return out


def step_cycles(edges: list[Edge]) -> list[str]:
    return cycles(edges, key=lambda m: unit_of(m) if unit_of(m) in STEPS else None)


def chunk_package_problems(edges: list[Edge]) -> list[str]:
    """The chunk step's packages, lowest first (``CHUNK_PACKAGES``): an import of a later one
    by an earlier one."""
    rank = lambda m: next((i for i, p in enumerate(CHUNK_PACKAGES) if _within(m, p)), None)  # noqa: E731
    return [f"chunk: {e}: {CHUNK_PACKAGES[rank(e.src)]} is below {CHUNK_PACKAGES[rank(e.dst)]} "
            "(move what both use down, into the lower package or formats)"
            for e in edges if rank(e.src) is not None and rank(e.dst) is not None
            and rank(e.src) < rank(e.dst)]


@pytest.fixture(scope="module")
def graph():
    return import_graph(ROOT)


def _fail(problems: list[str], what: str) -> None:
    assert not problems, f"{len(problems)} {what}:\n" + "\n".join(problems)


def test_the_graph_is_the_whole_project(graph):
    mods, edges = graph
    assert {m.split(".")[1] for m in mods} == set(FOLDERS)
    assert len(edges) > 300          # every step imports formats and core: hundreds of edges
    assert any(e.local for e in edges)


def test_no_import_cycle(graph):
    _fail(cycles(graph[1]), "import cycles (function-local imports count)")


def test_every_import_goes_down_the_layers(graph):
    _fail(violations(*graph), "imports against the layers")


def test_the_steps_import_each_other_without_a_cycle(graph):
    _fail(step_cycles(graph[1]), "cycles between steps")


def test_the_chunk_packages_are_layered(graph):
    _fail(chunk_package_problems(graph[1]), "imports against tables < keys < convert")


def test_every_declared_api_exists_and_is_used(graph):
    mods, edges = graph
    for unit, apis in DECLARED_API.items():
        for api, reason in apis.items():
            assert unit_of(api) == unit, (api, unit)
            assert any(_within(m, api) for m in mods), f"declared API {api} is no module"
            assert reason, api
            assert any(_within(e.dst, api) and unit_of(e.src) in STEPS and
                       unit_of(e.src) != unit for e in edges), \
                f"declared API {api} is imported by no other step: drop it"


# --- the checker itself, on planted trees -------------------------------------------------

def _tree(root, files: dict[str, str]) -> str:
    for rel, code in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(code)
    return str(root)


CLEAN = {
    "formats/__init__.py": "",
    "formats/schema.py": "",
    "formats/arrays.py": "from .schema import *\n",
    "pipeline/__init__.py": "",
    "pipeline/core/__init__.py": "",
    "pipeline/core/cluster.py": "from graphprep.formats import schema\n",
    "pipeline/core/console.py": "",
    "pipeline/synth.py": "from graphprep.pipeline import rmat\n",
    "pipeline/rmat.py": "from graphprep.pipeline.core.cluster import x\n",
    "pipeline/workload.py": "",
    "pipeline/partition/__init__.py": "from graphprep.pipeline.workload import w\n",
    "pipeline/partition/base.py": "from . import stats\n",
    "pipeline/partition/stats.py": "",
    "pipeline/inspect.py": "def f():\n    from graphprep.pipeline.workload import w\n",
    "pipeline/cli.py": "from graphprep.pipeline import commands\n",
    "pipeline/commands.py": "import graphprep.pipeline.partition.base\n",
    "dispatch/__init__.py": "",
    "trainer/__init__.py": "from graphprep.pipeline.core import console\n",
}


def _check(tmp_path, files):
    mods, edges = import_graph(_tree(tmp_path, files))
    return mods, edges, cycles(edges), violations(mods, edges), step_cycles(edges)


def test_checker_passes_a_clean_tree_and_resolves_every_import_form(tmp_path):
    mods, edges, cyc, bad, steps = _check(tmp_path, CLEAN)
    assert (cyc, bad, steps) == ([], [], [])
    pairs = {(e.src, e.dst) for e in edges}
    assert (G + "formats.arrays", G + "formats.schema") in pairs           # relative, star
    assert (G + "pipeline.synth", G + "pipeline.rmat") in pairs            # from pkg import module
    assert (G + "pipeline.partition.base", G + "pipeline.partition.stats") in pairs   # from .
    assert (G + "pipeline.commands", G + "pipeline.partition.base") in pairs  # import a.b.c
    assert (G + "trainer", G + "pipeline.core.console") in pairs
    assert [e.local for e in edges if e.src == G + "pipeline.inspect"] == [True]


def test_checker_catches_a_planted_cycle_even_in_a_function(tmp_path):
    files = dict(CLEAN)
    files["pipeline/partition/stats.py"] = ("def f():\n"
                                            "    from graphprep.pipeline.partition import base\n")
    files["pipeline/commands.py"] = "from graphprep.pipeline.cli import x\n"
    _, _, cyc, _, _ = _check(tmp_path, files)
    assert len(cyc) == 2, cyc
    text = "\n".join(cyc)
    assert "pipeline/partition/stats.py:2 (function-local)" in text
    assert "graphprep.pipeline.cli -> graphprep.pipeline.commands  at pipeline/cli.py:1" in text


def test_checker_catches_planted_layer_violations(tmp_path):
    files = dict(CLEAN)
    files["formats/schema.py"] = "from graphprep.pipeline.core import cluster\n"     # formats up
    files["pipeline/core/console.py"] = "import dask\nfrom graphprep.pipeline import rmat\n"
    files["pipeline/rmat.py"] = "from graphprep.pipeline.partition.stats import s\n"  # not API
    files["trainer/__init__.py"] = "from graphprep.pipeline.core.cluster import c\n"
    files["pipeline/orphan.py"] = ""
    _, _, _, bad, _ = _check(tmp_path, files)
    text = "\n".join(bad)
    assert "formats -> core: graphprep.formats.schema -> graphprep.pipeline.core.cluster" in text
    assert "core -> synth: graphprep.pipeline.core.console -> graphprep.pipeline.rmat" in text
    assert "graphprep.pipeline.partition.stats is not a declared API of step partition" in text
    assert "trainer -> core: graphprep.trainer -> graphprep.pipeline.core.cluster" in text
    assert "trainer-core: graphprep.pipeline.core.console imports Dask" in text
    assert "graphprep.pipeline.orphan" in text and "is in no unit" in text
    assert len(bad) == 7, bad          # the console -> rmat edge also breaks trainer-core


def test_checker_catches_a_cycle_between_steps_through_declared_apis(tmp_path):
    files = dict(CLEAN)
    files["pipeline/workload.py"] = "from graphprep.pipeline.inspect import table\n"
    _, _, cyc, bad, steps = _check(tmp_path, files)
    assert bad == [] and len(steps) == 1 and "inspect, partition" in steps[0], (bad, steps)
    assert cyc and "graphprep.pipeline.inspect, graphprep.pipeline.workload" in cyc[0]


def test_checker_catches_the_chunk_packages_importing_upwards(tmp_path):
    files = dict(CLEAN)
    files["pipeline/tables/__init__.py"] = ""
    files["pipeline/tables/parts.py"] = "from graphprep.pipeline.keys.pieces import read_part\n"
    files["pipeline/keys/__init__.py"] = ""
    files["pipeline/keys/pieces.py"] = "from graphprep.pipeline.tables.parts import TablePart\n"
    _, edges, cyc, _, _ = _check(tmp_path, files)
    problems = chunk_package_problems(edges)
    assert len(problems) == 1 and "pipeline/tables/parts.py:1" in problems[0], problems
