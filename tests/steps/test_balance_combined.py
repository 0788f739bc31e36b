"""``--balance`` with keys joined by ``+``: one combined weight per node, the sum of its share of
each key's total (``pipeline/partition/weights.py``), balanced within ``--imbalance`` by metis,
multilevel and kaminpar alike. Checked from the output files, as in ``test_balance_defaults``:
the combined weight is balanced, and on a power-law graph it cuts fewer edges than the same
keys as separate constraints."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import edges_of, node_data_of
from graphprep.formats import FormatError, load_chunked_graph
from graphprep.pipeline.api import balance_constraints
from graphprep.pipeline.partition.base import num_constraints
from graphprep.pipeline.partition.weights import combined_weight, constraint_columns
from graphprep.pipeline.workload import work_warnings
from conftest import IMBALANCE, TOLERANCE, cut_ratio, meta_of


def combined_imbalance(graph_dir, assignment, k: int, keys: tuple[str, ...]) -> float:
    """max/mean over the parts of the summed shares of ``keys`` (``ntypes``: each node type's
    nodes over its count), from the assignment files, the edges and the masks."""
    g = load_chunked_graph(str(graph_dir))
    parts = {t: np.load(assignment / f"{t}.npy") for t in g.node_types}
    share = np.zeros(k)
    if "ntypes" in keys:
        for t in g.node_types:
            share += np.bincount(parts[t], minlength=k) / g.num_nodes[t]
    if "edges" in keys:
        owned = np.zeros(k)
        for et in g.edge_types:
            _, dst = edges_of(graph_dir, str(et))
            owned += np.bincount(parts[et.dst][dst], minlength=k)
        share += owned / owned.sum()
    if "train" in keys:
        train = np.zeros(k)
        for t in g.node_types:
            if "train_mask" in g.node_data.get(t, {}):
                mask = node_data_of(graph_dir, t, "train_mask").astype(bool)
                train += np.bincount(parts[t][mask], minlength=k)
        share += train / train.sum()
    return float(share.max() / share.mean())


def test_constraints_parse_into_combined_and_separate_keys():
    assert balance_constraints("ntypes,edges", "metis") == ("ntypes", "edges")
    assert balance_constraints("edges+ntypes", "multilevel") == ("ntypes+edges",)
    assert balance_constraints(("train", "edges+ntypes"), "kaminpar") == ("train",
                                                                          "ntypes+edges")
    for bad, says in (("ntypes+nodes", "'nodes' is not a balance constraint"),
                      ("edges,ntypes+edges", "'edges' is named twice"),
                      ("edges+edges", "'edges' is named twice")):
        with pytest.raises(FormatError, match=says):
            balance_constraints(bad, "metis")
    with pytest.raises(FormatError, match="random"):
        balance_constraints("ntypes+edges", "random")


def test_combined_columns_sum_each_keys_share(hetero):
    base = {"ntypes": np.array([[1, 0], [1, 0], [0, 1]]), "edges": np.array([[0], [3], [1]]),
            "train": np.array([[1], [0], [0]])}
    separate = constraint_columns(base, ("ntypes", "edges"))
    assert [c.shape[1] for c in separate] == [2, 1]            # counts first, then edges
    (one,) = constraint_columns(base, ("ntypes+edges",))       # counts inside: no own column
    expected = combined_weight(np.concatenate([base["ntypes"], base["edges"]], axis=1))
    assert (one[:, 0] == expected).all()
    # shares: node 0 is 1/2 of type 0 and no edge; node 1 1/2 and 3/4 of the edges; node 2
    # all of type 1 and 1/4 of the edges
    assert one[1, 0] == one[2, 0] and one[1, 0] / one[0, 0] == pytest.approx(2.5)
    # a slice of the nodes, with the whole graph's totals, gets the whole graph's weights
    (part,) = constraint_columns({k: v[1:] for k, v in base.items()}, ("ntypes+edges",),
                                 {"ntypes": np.array([2, 1]), "edges": np.array([4])}, 3)
    assert (part[:, 0] == expected[1:]).all()
    counts, mixed = constraint_columns(base, ("ntypes", "train+edges"))
    assert counts.shape[1] == 2 and mixed.shape[1] == 1
    g = load_chunked_graph(str(hetero))
    assert num_constraints(g, ("ntypes", "train", "edges")) == 6
    assert num_constraints(g, ("ntypes+edges",)) == 1
    assert num_constraints(g, ("ntypes+edges", "train")) == 2
    assert num_constraints(g, ("train+edges",)) == 2           # node count, then the sum


@pytest.mark.parametrize("method", ["metis", "multilevel", "kaminpar"])
def test_combined_weight_is_balanced_and_cuts_less_on_rmat(rmat, tmp_path, prep, method):
    if method == "kaminpar":
        pytest.importorskip("kaminpar")
    prep("partition", rmat, tmp_path / "one", "-p", 4, "--method", method,
         "--balance", "edges+ntypes")
    prep("partition", rmat, tmp_path / "two", "-p", 4, "--method", method,
         "--balance", "ntypes,edges")
    imb = combined_imbalance(rmat, tmp_path / "one", 4, ("ntypes", "edges"))
    assert imb <= 1 + IMBALANCE + TOLERANCE.get(method, 1e-9), imb
    meta = meta_of(tmp_path / "one")
    assert meta["options"]["balance"] == ["ntypes+edges"]
    assert meta["stats"]["imbalance"]["ntypes+edges"] == pytest.approx(imb, abs=1e-4)
    # each key alone is free to go over: R-MAT's hubs and isolated nodes sit apart
    assert cut_ratio(rmat, tmp_path / "one") < 0.97 * cut_ratio(rmat, tmp_path / "two")


@pytest.mark.parametrize("method", ["metis", "multilevel"])
def test_combined_weight_with_a_separate_constraint_on_a_hetero_graph(hetero, tmp_path, prep,
                                                                        method):
    prep("partition", hetero, tmp_path / "a", "-p", 3, "--method", method,
         "--balance", "ntypes+edges,train")
    tol = 1 + IMBALANCE + TOLERANCE[method]
    assert combined_imbalance(hetero, tmp_path / "a", 3, ("ntypes", "edges")) <= tol
    assert combined_imbalance(hetero, tmp_path / "a", 3, ("train",)) <= tol


def test_a_key_over_inside_a_combined_weight_is_warned_with_the_separate_remedy():
    stats = {"imbalance": {"edges": 1.8, "train": 1.7}, "edges_per_part": [90, 30, 30, 30],
             "train_per_part": [5, 15, 10, 5]}
    edges, train = work_warnings(stats, "multilevel", ("ntypes+edges",))
    assert "only within the combined weight ntypes+edges" in edges
    assert "--balance ntypes,edges to balance each on its own" in edges
    assert train.endswith("partition with --balance ntypes+edges,train (metis, multilevel "
                          "and auto balance edges and training nodes by default)")
