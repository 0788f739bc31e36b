"""prep partition --method multilevel: the range-CSR shuffle, cut against METIS, balance of every
constraint, determinism across workers and range sizes, awkward graphs, the CLI."""

import json
import os

import numpy as np
import pytest
from conftest import run_prep

from formats import load_chunked_graph, read_edge_chunk
from pipeline.cluster import local_runner
from pipeline.partition.base import PartitionOptions
from pipeline.partition.metis_method import (
    MetisPartitioner,
    symmetric_csr,
    type_offsets,
    vertex_weights,
)
from pipeline.partition.multilevel import MultilevelPartitioner
from pipeline.partition.multilevel.symmetric import build_level0


@pytest.fixture(scope="module")
def hetero(tmp_path_factory, scheduler):
    out = tmp_path_factory.mktemp("ml") / "hetero"
    run_prep(scheduler, "synth", out, "--hetero", "--nodes", 20000, "--edges", 200000,
             "--chunk-size", 60000, "--seed", 4)
    return out


@pytest.fixture(scope="module")
def awkward(tmp_path_factory, scheduler):
    """Four dense communities plus: a hub adjacent to 1000 nodes, 149 isolated nodes, a path
    component of its own, 500 duplicated edges and 100 self-loops."""
    root = tmp_path_factory.mktemp("ml")
    rng = np.random.default_rng(7)
    src, dst = [], []
    for c in range(4):
        src.append(rng.integers(0, 300, 3000) + 300 * c)
        dst.append(rng.integers(0, 300, 3000) + 300 * c)
    src.append(rng.integers(0, 1200, 40))
    dst.append(rng.integers(0, 1200, 40))
    src.append(np.full(1000, 1200))
    dst.append(rng.choice(1200, 1000, replace=False))
    src.append(np.arange(1350, 1399))
    dst.append(np.arange(1351, 1400))
    src, dst = np.concatenate(src), np.concatenate(dst)
    src, dst = np.concatenate([src, src[:500], np.arange(100)]), \
        np.concatenate([dst, dst[:500], np.arange(100)])
    path = root / "e.csv"
    path.write_text("src,dst\n" + "\n".join(f"{a},{b}" for a, b in zip(src, dst)) + "\n")
    run_prep(scheduler, "chunk", path, root / "g", "--chunk-size", 5000)
    return root / "g"


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
    g = load_chunked_graph(str(graph_dir))
    off = type_offsets(g)
    cut = 0
    for et in g.edge_types:
        for f in g.edges[et].files:
            s, d = read_edge_chunk(g.path(f), g.edges[et])
            cut += int((parts[s + off[et.src]] != parts[d + off[et.dst]]).sum())
    return cut


def max_imbalance(graph_dir, parts, balance, k) -> np.ndarray:
    """max/mean load per constraint, with the weights --method metis uses."""
    g = load_chunked_graph(str(graph_dir))
    _, _, indeg = symmetric_csr(g, with_in_degree=True)
    w = vertex_weights(g, tuple(balance), indeg)
    loads = np.stack([np.bincount(parts, weights=w[:, c], minlength=k)
                      for c in range(w.shape[1])], axis=1)
    return loads.max(axis=0) / loads.mean(axis=0)


def test_level0_is_the_symmetric_simple_graph(awkward, tmp_path):
    g = load_chunked_graph(str(awkward))
    xadj, adj, indeg = symmetric_csr(g, with_in_degree=True)
    level = build_level0(g, ("edges",), str(tmp_path / "L0"), 333, local_runner)
    csrs = [level.read_csr(r) for r in range(level.num_ranges)]
    assert level.num_ranges > 1
    np.testing.assert_array_equal(np.concatenate([np.diff(c.indptr) for c in csrs]),
                                  np.diff(xadj))
    np.testing.assert_array_equal(np.concatenate([c.adj for c in csrs]), adj)
    assert all((c.wgt == 1).all() for c in csrs)          # deduplicated: unit weights
    # ... which are not stored, and IDs below 2^31 are stored as int32 (disk at 10^9 edges).
    assert not list(tmp_path.glob("L0/*.wgt.npy"))
    assert all(np.load(level.csr_path(r, "adj"), mmap_mode="r").dtype == np.int32
               for r in range(level.num_ranges))
    np.testing.assert_array_equal(np.asarray(level.vwgt())[:, 1], indeg)


@pytest.mark.parametrize("k", [2, 4, 8])
def test_cut_close_to_metis_on_synth_with_coarsening(homo, tmp_path, k):
    ml = MultilevelPartitioner(range_size=4096)
    parts = assign(ml, homo, options(k, coarse_edges=10_000), tmp_path / "ml")
    ref = assign(MetisPartitioner(), homo, options(k), tmp_path / "metis")
    assert len(ml.info["levels"]) >= 3                    # coarsening really happened
    assert ml.info["coarse_edges"] <= 10_000
    ratio = cut_of(homo, parts) / cut_of(homo, ref)
    assert ratio <= 1.10, ratio
    assert max_imbalance(homo, parts, (), k).max() <= 1.03 + 1e-9


@pytest.mark.parametrize("k", [2, 4, 8])
def test_cut_close_to_metis_on_cora(cora_chunked, tmp_path, k):
    ml = MultilevelPartitioner(range_size=1000)
    # Cora has ~10^4 edges: a budget of 1000 forces several levels.
    parts = assign(ml, cora_chunked, options(k, coarse_edges=1000), tmp_path / "ml")
    ref = assign(MetisPartitioner(), cora_chunked, options(k), tmp_path / "metis")
    assert len(ml.info["levels"]) >= 2
    ratio = cut_of(cora_chunked, parts) / cut_of(cora_chunked, ref)
    assert ratio <= 1.10, ratio


@pytest.mark.parametrize("k", [2, 4])
def test_every_constraint_within_imbalance_hetero(hetero, tmp_path, k):
    balance = ("ntypes", "train", "edges")
    parts = assign(MultilevelPartitioner(range_size=4096), hetero,
                   options(k, balance, 0.05, coarse_edges=10_000), tmp_path / "ml")
    imb = max_imbalance(hetero, parts, balance, k)
    assert len(imb) == 6                                  # 4 node types + train + edges
    assert imb.max() <= 1.05 + 1e-9, imb


def test_train_and_edges_within_imbalance_homo(homo, tmp_path):
    balance = ("train", "edges")
    parts = assign(MultilevelPartitioner(range_size=4096), homo,
                   options(4, balance, 0.02, coarse_edges=10_000), tmp_path / "ml")
    imb = max_imbalance(homo, parts, balance, 4)
    assert imb.max() <= 1.02 + 1e-9, imb


def test_same_bytes_for_workers_and_range_sizes(hetero, tmp_path, scheduler):
    from distributed import Client

    from pipeline.cluster import TaskRunner

    # Few levels and rounds: every pass is a Dask round trip, and two levels already cover
    # coarsening, contraction, projection, refinement and balance.
    opts = options(4, ("ntypes", "train"), 0.05, coarse_edges=40_000, seed=5)

    def method(range_size):
        return MultilevelPartitioner(range_size=range_size, refine_rounds=3)
    one = assign(method(4096), hetero, opts, tmp_path / "a")
    with Client(scheduler) as client:
        two = assign(method(4096), hetero, opts, tmp_path / "b",
                     TaskRunner(client, progress=False))
    other = assign(method(1500), hetero, opts, tmp_path / "c")
    np.testing.assert_array_equal(one, two)
    np.testing.assert_array_equal(one, other)
    for t in load_chunked_graph(str(hetero)).node_types:
        a, c = ((tmp_path / x / f"{t}.npy").read_bytes() for x in "ac")
        assert a == c
    # Another seed gives another partition: the seed really reaches the rounds.
    assert (assign(method(4096), hetero,
                   options(4, ("ntypes", "train"), 0.05, coarse_edges=40_000, seed=6),
                   tmp_path / "d") != one).any()


def test_hubs_isolated_duplicates_loops_and_components(awkward, tmp_path):
    k = 4
    ml = MultilevelPartitioner(range_size=200)
    parts = assign(ml, awkward, options(k, ("edges",), 0.05, coarse_edges=1000),
                   tmp_path / "ml")
    ref = assign(MetisPartitioner(), awkward, options(k, ("edges",), 0.05), tmp_path / "m")
    assert len(ml.info["levels"]) >= 2
    assert parts.min() >= 0 and parts.max() < k
    assert (np.bincount(parts, minlength=k) > 0).all()
    assert max_imbalance(awkward, parts, ("edges",), k).max() <= 1.05 + 1e-9
    # Four planted communities: the cut stays near METIS's (both only a little above the
    # 40 inter-community edges plus the hub's and the isolated nodes' share).
    assert cut_of(awkward, parts) <= 1.10 * cut_of(awkward, ref) + 20
    assert not os.path.exists(tmp_path / "ml" / ".multilevel")      # scratch removed


def test_cli_multilevel_with_stats(homo, tmp_path, prep):
    r = prep("partition", homo, tmp_path / "a", "-p", 4, "--method", "multilevel",
             "--coarse-edges", 40000, "--balance", "train")
    assert "multilevel, 4 parts" in r.output
    meta = json.loads((tmp_path / "a" / "partition_meta.json").read_text())
    assert meta["algo_name"] == "multilevel"
    stats = meta["stats"]
    assert stats["coarse_edge_budget"] == 40000 and len(stats["levels"]) >= 2
    assert stats["imbalance"]["train"] <= 1.03 and stats["imbalance"]["nodes"] <= 1.03
    assert sorted(os.listdir(tmp_path / "a")) == ["_N.npy", "manifest.json",
                                                   "partition_meta.json"]


def test_auto_picks_metis_when_it_fits_else_multilevel(homo, tmp_path, prep, monkeypatch):
    from pipeline.partition import auto

    # The rule at its boundary: metis's estimate against 60% of the worker limit.
    limit = int(auto.METIS_BYTES_PER_EDGE * 10**7 / auto.SHARE) + 1
    assert auto.choose(10**7, limit).method == "metis"
    assert auto.choose(10**7 + 10, limit).method == "multilevel"
    prep("partition", homo, tmp_path / "m", "-p", 2, "--method", "auto")
    meta = json.loads((tmp_path / "m" / "partition_meta.json").read_text())
    assert meta["algo_name"] == "metis" and meta["stats"]["auto"]["chosen"] == "metis"
    # Workers of 1 MB: metis's ~54 MB estimate on 2*10^5 edges does not fit.
    monkeypatch.setattr(auto, "worker_memory_bytes", lambda runner: 1 << 20)
    r = prep("partition", homo, tmp_path / "l", "-p", 2, "--method", "auto",
             "--coarse-edges", 10000)
    assert "multilevel, 2 parts" in r.output
    meta = json.loads((tmp_path / "l" / "partition_meta.json").read_text())
    assert meta["algo_name"] == "multilevel"
    assert meta["stats"]["auto"]["budget_bytes"] == int((1 << 20) * auto.SHARE)


def test_refinement_never_empties_a_part(tmp_path):
    """Node 0, alone in part 1, has every neighbour in part 0 and room there: the best move
    for the cut, but it would leave part 1 empty, so it stays."""
    from pipeline.partition.multilevel.layout import Level, new_array, write_csr
    from pipeline.partition.multilevel.refine import Refiner

    level = Level(str(tmp_path), 6, 4, 1, 1)
    edges = np.array([(0, 1), (0, 2), (0, 3), (1, 2), (4, 5), (3, 4)])
    src = np.concatenate([edges[:, 0], edges[:, 1]])
    dst = np.concatenate([edges[:, 1], edges[:, 0]])
    for r in range(level.num_ranges):
        start, stop = level.bounds(r)
        mine = (src >= start) & (src < stop)
        order = np.lexsort((dst[mine], src[mine]))
        write_csr(level, r, src[mine][order] - start, dst[mine][order],
                  np.ones(int(mine.sum()), dtype=np.int64))
    new_array(level.path("vwgt.npy"), (6, 1))
    vw = level.vwgt("r+")
    vw[:] = 1
    vw.flush()
    parts = level.path("parts.npy")
    new_array(parts, (6,))
    p = np.load(parts, mmap_mode="r+")
    p[:] = [1, 0, 0, 0, 0, 0]
    p.flush()
    refiner = Refiner(level, 2, np.array([6.0]), 0, local_runner)
    loads = refiner.refine(parts, refiner.loads(parts), rounds=4)
    assert loads[:, 0].tolist() == [5, 1]
    assert np.load(parts).tolist() == [1, 0, 0, 0, 0, 0]


def test_budget_follows_memory_and_stays_flat():
    from pipeline.partition.multilevel.budget import FLAT_EDGES, derive_budget

    # A quarter of metis's estimate, in weighted coarse edges, at 10^6 input edges ...
    small = derive_budget(10**6, 16 << 30, None)
    assert small.edges == int(10**6 / 4 / 1.5) and "1/4 of --method metis" in small.how
    # ... capped so that the coarse task does not grow with the input (flat worker peak) ...
    assert derive_budget(10**8, 16 << 30, None).edges == FLAT_EDGES
    # ... within half a small worker's limit, never below the floor; an override wins.
    assert derive_budget(10**8, 100 << 20, None).edges == int((100 << 20) * 0.5 / 405)
    assert derive_budget(10**3, None, None).edges == 10_000
    assert derive_budget(10**8, 16 << 30, 12345).edges == 12345
