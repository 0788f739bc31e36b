"""Shared fixtures: one Dask cluster for the session (steps reach it with --scheduler), the
CLI runner, and readers that load a whole (small) chunked graph for comparisons."""

from __future__ import annotations

import os

import numpy as np
import pytest
from click.testing import CliRunner

from graphprep.formats import EdgeType, load_chunked_graph, read_array_chunk, read_edge_chunk

SHARED_DATA = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data")
BUNDLED_DATA = os.path.join(os.path.dirname(__file__), "..", "examples", "data")


@pytest.fixture(scope="session")
def scheduler():
    from graphprep.pipeline.cluster import local_cluster

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
