"""prep partition --method multilevel: the range-CSR shuffle, cut against METIS, balance of every
constraint, determinism across workers and range sizes, awkward graphs, the CLI."""

import functools
import json
import os

import numpy as np
import pytest
from conftest import assign, cut_of, options, run_prep, weighted_level

from graphprep.formats import load_chunked_graph
from graphprep.pipeline.core.cluster import local_runner
from graphprep.pipeline.partition.graph_ops import symmetric_csr, vertex_weights
from graphprep.pipeline.partition.metis_method import MetisPartitioner
from graphprep.pipeline.partition.multilevel import MultilevelPartitioner
from graphprep.pipeline.partition.multilevel.budget import MIN_EDGES
from graphprep.pipeline.partition.multilevel.symmetric import build_level0


@pytest.fixture(scope="module")
def hetero(tmp_path_factory, scheduler):
    out = tmp_path_factory.mktemp("ml") / "hetero"
    run_prep(scheduler, "synth", out, "--hetero", "--nodes", 20000, "--edges", 200000,
             "--chunk-size", 60000, "--seed", 4)
    return out


@pytest.fixture(scope="module")
def powerlaw(tmp_path_factory, scheduler):
    """A Chung-Lu graph (power-law expected degrees, exponent ~2.4, no communities): 40k
    nodes, 2.4*10^5 edges."""
    root = tmp_path_factory.mktemp("ml")
    rng = np.random.default_rng(11)
    n, m = 40_000, 240_000
    w = np.arange(1, n + 1) ** -0.7
    w /= w.sum()
    np.savez(root / "e.npz", src=rng.choice(n, m, p=w), dst=rng.choice(n, m, p=w),
             num_nodes=np.int64(n))
    run_prep(scheduler, "chunk", root / "e.npz", root / "g", "--chunk-size", 100_000)
    return root / "g"


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


@functools.lru_cache(maxsize=None)
def undirected_edges(graph_dir: str) -> int:
    """Edges of the symmetric simple graph (multilevel's level 0) of a chunked graph."""
    xadj, _, _ = symmetric_csr(load_chunked_graph(graph_dir))
    return int(xadj[-1]) // 2


def assert_levels_forced(levels, budget, graph_dir):
    """The levels (``[{"nodes", "edges"}]``, level 0 first) are what a coarse-edge budget
    below the input's edges implies: level 0 is the whole symmetric simple graph, every level
    but the last above the budget (so coarsening went on), the last within it (no stall), each
    smaller than the one before; at least one coarsened level."""
    edges = [level["edges"] for level in levels]
    assert edges[0] == undirected_edges(str(graph_dir)) > budget, levels
    assert len(edges) >= 2, levels
    assert all(m > budget for m in edges[:-1]) and edges[-1] <= budget, levels
    assert all(a > b for a, b in zip(edges, edges[1:])), levels


def cut_ratio(graph_dir, k, out, coarse_edges, range_size=4096):
    """Multilevel's cut over METIS's on ``graph_dir`` forced to ``coarse_edges``; checks the
    levels and the balance."""
    ml = MultilevelPartitioner(range_size=range_size)
    parts = assign(ml, graph_dir, options(k, coarse_edges=coarse_edges), out / "ml")
    ref = assign(MetisPartitioner(), graph_dir, options(k), out / "metis")
    assert_levels_forced(ml.info["levels"], coarse_edges, graph_dir)
    assert max_imbalance(graph_dir, parts, (), k).max() <= 1.03 + 1e-9
    return cut_of(graph_dir, parts) / cut_of(graph_dir, ref)


def test_forced_coarsening_cut_close_to_metis(homo, hetero, powerlaw, tmp_path):
    """Issue 18: the budget forced to 1/32 of the edges (at least 10^4) on every graph of
    >= 10^5 edges, k in 2, 4, 8: each cut <= 1.10x METIS's, geometric mean <= 1.05x. The
    power-law graph has no communities: positive-gain refinement alone stayed 1.2-1.3x
    METIS there (a dense core must swap places with the periphery)."""
    ratios = {}
    for name, g in (("homo", homo), ("hetero", hetero), ("powerlaw", powerlaw)):
        m = sum(load_chunked_graph(str(g)).num_edges.values())
        assert m >= 10**5
        for k in (2, 4, 8):
            ratios[name, k] = cut_ratio(g, k, tmp_path / f"{name}{k}", max(10_000, m // 32))
    assert max(ratios.values()) <= 1.10, ratios
    assert np.exp(np.mean(np.log(list(ratios.values())))) <= 1.05, ratios


# Multilevel's cut over METIS's with Cora/CiteSeer forced to 1000 coarse edges, as
# bench_partition_families.py measured it (RESULTS.md, 2026-11-26, issue 32's coarsening:
# deterministic at seed 0). The bound is each ratio plus a margin of 0.05: enough for another
# METIS build's few edges (CiteSeer's METIS cuts are 62 / 132 / 360), small enough that a
# lost refinement or a worse hierarchy fails (without Jet: 1.13-1.38). Before issue 32 (4
# rounds, a mover/stayer coin, no two-hop grouping): Cora 1.051 / 1.049 / 0.989, CiteSeer
# 1.065 / 1.227 / 1.044; CiteSeer k=2 now coarsens to 946 nodes in one level (4 edges more).
PLANETOID_FORCED = {("cora", 2): 1.005, ("cora", 4): 0.976, ("cora", 8): 1.007,
                    ("citeseer", 2): 1.129, ("citeseer", 4): 1.106, ("citeseer", 8): 0.928}
RATIO_MARGIN = 0.05


@pytest.mark.parametrize("name", ["cora", "citeseer"])
@pytest.mark.parametrize("k", [2, 4, 8])
def test_forced_coarsening_on_planetoid_near_measured_cut(cora_chunked, citeseer_chunked,
                                                          tmp_path, prep, name, k):
    """Cora and CiteSeer through ``prep partition --coarse-edges 1000``. Their default budget
    (``MIN_EDGES``) exceeds their edges, so only forcing makes multilevel coarsen them at all.
    The levels its statistics record must be what forcing implies (``assert_levels_forced``),
    the node balance within the default 3%, and the cut within the measured ratio to METIS
    plus the margin."""
    g = cora_chunked if name == "cora" else citeseer_chunked
    budget = 1000
    # node counts balanced, as in the measured runs and the METIS reference (options(k))
    prep("partition", g, tmp_path / "ml", "-p", k, "--method", "multilevel",
         "--coarse-edges", budget, "--balance", "ntypes")
    stats = json.loads((tmp_path / "ml" / "partition_meta.json").read_text())["stats"]
    assert stats["coarse_edge_budget"] == budget
    assert_levels_forced(stats["levels"], budget, g)
    assert stats["imbalance"]["nodes"] <= 1.03 + 1e-9, stats["imbalance"]
    parts = np.load(tmp_path / "ml" / "_N.npy")
    assert stats["edge_cut"] == cut_of(g, parts)
    ref = assign(MetisPartitioner(), g, options(k), tmp_path / "metis")
    ratio = cut_of(g, parts) / cut_of(g, ref)
    assert ratio <= PLANETOID_FORCED[name, k] + RATIO_MARGIN, (ratio, stats["levels"])


@pytest.mark.parametrize("name", ["cora", "citeseer"])
def test_planetoid_at_the_default_budget_stays_metis(cora_chunked, citeseer_chunked,
                                                     tmp_path, name):
    """Issue 18: at the default budget (``MIN_EDGES`` coarse edges) Cora and CiteSeer are not
    coarsened at all: multilevel is METIS on level 0 plus a balance pass, so its cut stays
    within 1.10x of METIS's (measured 1.000 on both at k=4)."""
    g = cora_chunked if name == "cora" else citeseer_chunked
    ml = MultilevelPartitioner()
    parts = assign(ml, g, options(4), tmp_path / "ml")
    assert ml.info["coarse_edge_budget"] == MIN_EDGES and len(ml.info["levels"]) == 1
    assert max_imbalance(g, parts, (), 4).max() <= 1.03 + 1e-9
    ref = assign(MetisPartitioner(), g, options(4), tmp_path / "metis")
    assert cut_of(g, parts) <= 1.10 * cut_of(g, ref)


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

    from graphprep.pipeline.core.cluster import TaskRunner

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


def test_auto_picks_metis_when_it_fits_else_kaminpar_else_multilevel(homo, tmp_path, prep,
                                                                     monkeypatch):
    from graphprep.pipeline.core.costs import METIS_BYTES_PER_EDGE, kaminpar_peak_bytes
    from graphprep.pipeline.partition import auto

    # The rule at its boundaries: metis's, then kaminpar's estimate against 60% of the
    # worker limit; multilevel where neither fits or kaminpar is not installed.
    limit = int(METIS_BYTES_PER_EDGE * 10**7 / auto.SHARE) + 1
    assert auto.choose(10**7, limit).method == "metis"
    assert auto.choose(10**7 + 10, limit).method == "kaminpar"
    assert auto.choose(10**7 + 10, limit, kaminpar=False).method == "multilevel"
    edges = 10**7
    while kaminpar_peak_bytes(edges) <= limit * auto.SHARE:
        edges *= 2
    assert auto.choose(edges, limit).method == "multilevel"
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


def tiny_level(folder, edges, parts_now, range_size=4):
    """A level of unit-weight nodes from an undirected edge list, and its ``parts.npy``."""
    from graphprep.formats.npyio import new_npy

    n = len(parts_now)
    level = weighted_level(folder, edges, np.ones((n, 1)), range_size)
    parts = level.path("parts.npy")
    new_npy(parts, (n,))
    p = np.load(parts, mmap_mode="r+")
    p[:] = parts_now
    p.flush()
    return level, parts


@pytest.mark.parametrize("method", ["lp", "jet"])
def test_refinement_never_empties_a_part(tmp_path, method):
    """Node 0, alone in part 1, has every neighbour in part 0 and room there: the best move
    for the cut, but it would leave part 1 empty, so it stays."""
    from graphprep.pipeline.partition.multilevel.jet import jet_refine
    from graphprep.pipeline.partition.multilevel.refine import Refiner

    level, parts = tiny_level(tmp_path, [(0, 1), (0, 2), (0, 3), (1, 2), (4, 5), (3, 4)],
                              [1, 0, 0, 0, 0, 0])
    refiner = Refiner(level, 2, np.array([6.0]), 0, local_runner)
    if method == "lp":
        loads = refiner.refine(parts, refiner.loads(parts), rounds=4)
    else:
        loads = jet_refine(refiner, parts, refiner.loads(parts), rounds=4)
    assert loads[:, 0].tolist() == [5, 1]
    assert np.load(parts).tolist() == [1, 0, 0, 0, 0, 0]
    assert not [f for f in os.listdir(tmp_path) if ".jet_" in f or ".best" in f]


def test_jet_swaps_where_positive_gain_moves_are_stuck(tmp_path):
    """Two 4-cliques joined by one edge, with nodes 3 and 7 on the wrong sides and no room
    (caps of exactly 4): no single move fits, so label propagation keeps the cut of 7; Jet
    moves both at once (not neighbours: the afterburner keeps both) and reaches the cut of 1."""
    from graphprep.pipeline.partition.multilevel.jet import jet_refine
    from graphprep.pipeline.partition.multilevel.refine import Refiner

    clique = [(a, b) for a in range(4) for b in range(a + 1, 4)]
    edges = clique + [(a + 4, b + 4) for a, b in clique] + [(0, 4)]
    start = [0, 0, 0, 1, 1, 1, 1, 0]
    for method in ("lp", "jet"):
        level, parts = tiny_level(tmp_path / method, edges, start, range_size=3)
        refiner = Refiner(level, 2, np.array([4.0]), 0, local_runner)
        if method == "lp":
            refiner.refine(parts, refiner.loads(parts), rounds=4)
            assert np.load(parts).tolist() == start
        else:
            loads = jet_refine(refiner, parts, refiner.loads(parts), rounds=4)
            assert np.load(parts).tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
            assert loads[:, 0].tolist() == [4, 4]
