"""Shared fixtures: one Dask cluster for the session (steps reach it with --scheduler), the
CLI runner, readers that load a whole (small) chunked graph for comparisons, the graphs that
fight back (R-MAT, heterogeneous synth) with what a partition of them measures, and the
partitioners run directly."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from click.testing import CliRunner

from graphprep.formats import EdgeType, load_chunked_graph, read_array_chunk, read_edge_chunk
from graphprep.pipeline.core.cluster import local_runner
from graphprep.pipeline.partition.base import PartitionOptions
from graphprep.pipeline.partition.graph_ops import edge_cut

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))    # the repository
SHARED_DATA = os.path.join(ROOT, "..", "shared", "data")
BUNDLED_DATA = os.path.join(ROOT, "examples", "data")


@pytest.fixture(scope="session")
def scheduler():
    from graphprep.pipeline.core.cluster import local_cluster

    with local_cluster(2) as cluster:
        yield cluster.scheduler_address


@pytest.fixture
def prep(scheduler):
    """``prep(*args, code=0)`` runs the CLI on the session cluster and checks the exit code."""
    from graphprep.pipeline.cli import prep as cli

    def run(*args, code=0, cluster=True):
        extra = ["--no-progress"] + (["--scheduler", scheduler] if cluster else [])
        result = CliRunner().invoke(cli, [str(a) for a in args] + extra)
        assert result.exit_code == code, (result.output, result.exception)
        return result
    return run


def run_prep(scheduler, *args):
    """Run a ``prep`` command on the session cluster outside a test (module fixtures)."""
    from graphprep.pipeline.cli import prep as cli
    result = CliRunner().invoke(cli, [str(a) for a in args] +
                                ["--no-progress", "--scheduler", scheduler])
    assert result.exit_code == 0, (result.output, result.exception)


def synth_partitioned(scheduler, root, *synth_args, parts: int = 2):
    """Under ``root``: synth graph G (``synth_args``), its ``parts``-part random assignment A
    and dispatch D. Returns ``root``."""
    run_prep(scheduler, "synth", root / "G", *synth_args)
    run_prep(scheduler, "partition", root / "G", root / "A", "-p", parts)
    run_prep(scheduler, "dispatch", root / "G", root / "A", root / "D")
    return root


def dispatched(scheduler, chunked, out, parts, *partition_args) -> str:
    """Partition ``chunked`` into ``parts`` and dispatch it under ``out``: graph.json's path."""
    run_prep(scheduler, "partition", chunked, f"{out}-a", "-p", parts, *partition_args)
    run_prep(scheduler, "dispatch", chunked, f"{out}-a", out)
    return os.path.join(str(out), "graph.json")


def rerecord(folder, p, rel):
    """Update graph.json's manifest entry of part ``p``'s file ``rel`` (damaged on purpose),
    as if dispatch had written it so: only the structural checks can then see the damage."""
    from graphprep.formats.integrity import file_record
    path = os.path.join(folder, "graph.json")
    meta = json.loads(open(path).read())
    meta["parts"][p]["manifest"][rel] = file_record(
        os.path.join(folder, f"part-{p}", rel)).to_json()
    with open(path, "w") as f:
        json.dump(meta, f)


@pytest.fixture(scope="session")
def cora_chunked(scheduler, tmp_path_factory):
    """Cora from its Planetoid files, chunked once for the session."""
    out = tmp_path_factory.mktemp("cora") / "chunked"
    run_prep(scheduler, "chunk", shared_data("planetoid"), out, "--name", "cora")
    return out


@pytest.fixture(scope="session")
def citeseer_chunked(scheduler, tmp_path_factory):
    """CiteSeer from its Planetoid files, chunked once for the session."""
    out = tmp_path_factory.mktemp("citeseer") / "chunked"
    run_prep(scheduler, "chunk", shared_data("planetoid"), out, "--name", "citeseer")
    return out


@pytest.fixture(scope="session")
def homo(tmp_path_factory, scheduler):
    """A homogeneous synth graph (20k nodes, 200k edges, chunks of 60k rows), made once."""
    out = tmp_path_factory.mktemp("ml") / "homo"
    run_prep(scheduler, "synth", out, "--nodes", 20000, "--edges", 200000, "--chunk-size",
             60000, "--seed", 3)
    return out


@pytest.fixture(scope="session")
def mag_parts(scheduler, tmp_path_factory):
    """A small ogbn-mag-shaped synth graph and its 2-part dispatch: (chunked, graph.json)."""
    root = tmp_path_factory.mktemp("mag")
    run_prep(scheduler, "synth", root / "mag", "--hetero", "--nodes", 20000, "--edges", 100000,
             "--seed", 1)
    return root / "mag", dispatched(scheduler, root / "mag", root / "d", 2)


def shared_data(*parts) -> str:
    """A real dataset: bundled in examples/data (Cora, CiteSeer, partial ogbn-arxiv), else from
    ../shared/data."""
    path = os.path.join(BUNDLED_DATA, *parts)
    if not os.path.exists(path):
        path = os.path.join(SHARED_DATA, *parts)
    if not os.path.exists(path):
        pytest.skip(f"shared dataset {os.path.join(*parts)} not present on this machine")
    return path


def edges_of(folder, etype="_N:_E:_N"):
    """All edges of one type, concatenated in chunk order: ``(src, dst)``."""
    g = load_chunked_graph(str(folder))
    et = EdgeType.parse(etype)
    pairs = [read_edge_chunk(g.path(f), g.edges[et]) for f in g.edges[et].files]
    if not pairs:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return np.concatenate([p[0] for p in pairs]), np.concatenate([p[1] for p in pairs])


def node_data_of(folder, ntype="_N", name="feat"):
    g = load_chunked_graph(str(folder))
    files = g.node_data[ntype][name]
    return np.concatenate([np.asarray(read_array_chunk(g.path(f), files)) for f in files.files])


def edge_data_of(folder, etype, name):
    g = load_chunked_graph(str(folder))
    files = g.edge_data[EdgeType.parse(etype)][name]
    return np.concatenate([np.asarray(read_array_chunk(g.path(f), files)) for f in files.files])


def sorted_pairs(src, dst):
    order = np.lexsort((dst, src))
    return np.stack([src[order], dst[order]])


# ------------------------------------------------------- graphs that fight back, and their partitions

IMBALANCE = 0.03            # --imbalance's default


# metis's rebalance pass enforces the caps; multilevel's balance pass may end a hair over one
# (it warns then), though none of these graphs needs it
TOLERANCE = {"metis": 1e-9, "multilevel": 0.005, "auto": 1e-9}


@pytest.fixture(scope="session")
def rmat(scheduler, tmp_path_factory):
    """Graph500 R-MAT, scale 13 (8,192 nodes, 131,072 edges, hubs and isolated nodes)."""
    out = tmp_path_factory.mktemp("bal") / "rmat"
    run_prep(scheduler, "synth", out, "--generator", "rmat", "--scale", 13, "--seed", 2)
    return out


@pytest.fixture(scope="session")
def hetero(scheduler, tmp_path_factory):
    """ogbn-mag-shaped planted graph: 4 node types, 4 edge types, train_mask on paper."""
    out = tmp_path_factory.mktemp("bal") / "hetero"
    run_prep(scheduler, "synth", out, "--hetero", "--nodes", 8000, "--edges", 40000,
             "--seed", 1)
    return out


def meta_of(folder) -> dict:
    return json.loads((folder / "partition_meta.json").read_text())


def measured(graph_dir, assignment, k: int) -> dict[str, float]:
    """max/mean per part of the nodes (per type), owned edges and train nodes, from the
    assignment files, the edges and the masks."""
    g = load_chunked_graph(str(graph_dir))
    parts = {t: np.load(assignment / f"{t}.npy") for t in g.node_types}
    out = {f"nodes[{t}]": _imb(np.bincount(parts[t], minlength=k)) for t in g.node_types}
    owned = np.zeros(k, np.int64)
    for et in g.edge_types:
        _, dst = edges_of(graph_dir, str(et))
        owned += np.bincount(parts[et.dst][dst], minlength=k)
    out["edges"] = _imb(owned)
    train = np.zeros(k, np.int64)
    for t in g.node_types:
        if "train_mask" in g.node_data.get(t, {}):
            mask = node_data_of(graph_dir, t, "train_mask").astype(bool)
            train += np.bincount(parts[t][mask], minlength=k)
    if train.sum():
        out["train"] = _imb(train)
    return out


def _imb(counts) -> float:
    return float(np.max(counts) / np.mean(counts))


def cut_ratio(graph_dir, assignment) -> float:
    g = load_chunked_graph(str(graph_dir))
    parts = {t: np.load(assignment / f"{t}.npy") for t in g.node_types}
    cut = total = 0
    for et in g.edge_types:
        src, dst = edges_of(graph_dir, str(et))
        cut += int((parts[et.src][src] != parts[et.dst][dst]).sum())
        total += len(src)
    return cut / total


# ------------------------------------------------------- partitioners run directly (no CLI)

def options(k, balance=(), imbalance=0.03, coarse_edges=None, seed=0):
    return PartitionOptions(k, seed, tuple(balance), "cut", imbalance, coarse_edges)


def assign(partitioner, graph_dir, opts, out, runner=local_runner):
    """Run a partitioner directly; returns the parts of all nodes in the one ID space."""
    g = load_chunked_graph(str(graph_dir))
    os.makedirs(out, exist_ok=True)
    partitioner.assign(g, opts, runner, str(out))
    return np.concatenate([np.load(os.path.join(out, f"{t}.npy")) for t in g.node_types])


def cut_of(graph_dir, parts) -> int:
    """Edge cut over the input edge rows (as the statistics count it)."""
    return edge_cut(load_chunked_graph(str(graph_dir)), parts)


def weighted_level(folder, edges, weights, range_size=4):
    """A level from an undirected edge list (unit edge weights) and ``[n, ncon]`` vertex
    weights whose first column counts nodes."""
    from graphprep.formats.npyio import new_npy
    from graphprep.pipeline.partition.multilevel.layout import Level, write_csr

    weights = np.asarray(weights, dtype=np.int64).reshape(len(weights), -1)
    n, ncon = weights.shape
    os.makedirs(folder, exist_ok=True)
    level = Level(str(folder), n, range_size, ncon, 1)
    edges = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    src = np.concatenate([edges[:, 0], edges[:, 1]])
    dst = np.concatenate([edges[:, 1], edges[:, 0]])
    for r in range(level.num_ranges):
        start, stop = level.bounds(r)
        mine = (src >= start) & (src < stop)
        order = np.lexsort((dst[mine], src[mine]))
        write_csr(level, r, src[mine][order] - start, dst[mine][order],
                  np.ones(int(mine.sum()), dtype=np.int64))
    new_npy(level.path("vwgt.npy"), (n, ncon))
    vw = level.vwgt("r+")
    vw[:] = weights
    vw.flush()
    return level
