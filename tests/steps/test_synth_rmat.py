"""prep synth --generator rmat: Graph500's R-MAT degree distribution, determinism, the ID
permutation, option checks, and the rest of the pipeline on it."""

from __future__ import annotations

import filecmp
import json
import os

import numpy as np
import pytest

from conftest import edges_of, node_data_of
from graphprep.formats import FormatError, load_chunked_graph
from graphprep.pipeline.rmat import RmatPermutation, expected_isolated_fraction
from graphprep.pipeline.synth import SynthSpec

A, B, C = 0.57, 0.19, 0.19


def _tree_files(root):
    return sorted(os.path.relpath(os.path.join(d, f), root)
                  for d, _, fs in os.walk(root) for f in fs)


@pytest.fixture(scope="module")
def rmat13(scheduler, tmp_path_factory):
    """Scale 13, edge factor 16 (8,192 nodes, 131,072 edges), seed 5, chunks of 50,000 rows."""
    from conftest import run_prep
    out = tmp_path_factory.mktemp("rmat") / "g"
    run_prep(scheduler, "synth", out, "--generator", "rmat", "--scale", 13, "--seed", 5,
             "--chunk-size", 50000)
    return out


def test_degree_distribution_is_graph500s(rmat13):
    n, m = 1 << 13, 16 << 13
    g = load_chunked_graph(str(rmat13))
    assert g.graph_name == "synth-rmat"
    assert g.num_nodes == {"_N": n} and sum(g.num_edges.values()) == m
    src, dst = edges_of(rmat13)
    assert min(src.min(), dst.min()) >= 0 and max(src.max(), dst.max()) < n
    deg = np.bincount(src, minlength=n) + np.bincount(dst, minlength=n)
    indeg = np.bincount(dst, minlength=n)
    # isolated nodes: 20.9% expected at scale 13 (38.4% at scale 20); sd ~0.4% per graph
    isolated = (deg == 0).mean()
    assert abs(isolated - expected_isolated_fraction(13, 16)) < 0.02, isolated
    assert isolated > 0.15
    # the top hub is R-MAT index 0: in-degree ~ Binomial(m, (a+c)^13), mean 3,699
    hub = m * (A + C) ** 13
    assert abs(indeg.max() - hub) < 5 * hub ** 0.5, indeg.max()
    assert indeg.max() > 100 * indeg.mean()
    # kept as Graph500 makes them: repeated edges (~16% here) and a few self-loops
    assert (src == dst).any()
    assert 0.1 < 1 - len(np.unique(src * n + dst)) / m < 0.25


def test_ids_permuted_so_hubs_are_spread(rmat13):
    n = 1 << 13
    src, dst = edges_of(rmat13)
    deg = np.bincount(src, minlength=n) + np.bincount(dst, minlength=n)
    hubs = np.argsort(deg)[-n // 100:]
    # unpermuted, hubs are the indices with few 1-bits: mostly small (median ~n/8)
    assert 0.3 * n < np.median(hubs) < 0.7 * n
    label = node_data_of(rmat13, name="label")
    # each class is an exact 1/8 of the R-MAT indices: the inverse is a bijection too
    assert np.array_equal(np.bincount(label, minlength=8), np.full(8, n // 8))


@pytest.mark.parametrize("scale", [1, 2, 5, 12, 13])
def test_permutation_is_a_bijection_with_its_inverse(scale):
    n = 1 << scale
    perm = RmatPermutation(scale, seed=9)
    ids = perm(np.arange(n))
    assert np.array_equal(np.sort(ids), np.arange(n))
    assert np.array_equal(perm.inverse(ids), np.arange(n))
    if scale >= 12:
        assert (ids != np.arange(n)).mean() > 0.99
        assert not np.array_equal(ids, RmatPermutation(scale, seed=10)(np.arange(n)))


def test_labels_follow_rmat_bits_and_are_learnable(rmat13):
    n = 1 << 13
    src, dst = edges_of(rmat13)
    deg = np.bincount(src, minlength=n) + np.bincount(dst, minlength=n)
    label = node_data_of(rmat13, name="label")
    # class 0 = indices 0xx..: the hubs (expected 3.5x the mean degree); class 7: (0.24/0.5)^3
    per_class = np.array([deg[label == c].mean() for c in range(8)]) / deg.mean()
    assert per_class[0] > 2.5 and per_class[7] < 0.25, per_class
    # edge homophily (a+d)^3 = 0.238 from degree alone, not communities
    assert 0.2 < (label[src] == label[dst]).mean() < 0.28
    feat = node_data_of(rmat13, name="feat")
    train, test = (node_data_of(rmat13, name=f"{s}_mask") for s in ("train", "test"))
    means = np.stack([feat[train & (label == c)].mean(0) for c in range(8)])
    pred = np.argmin(((feat[test, None, :] - means[None]) ** 2).sum(-1), axis=1)
    assert (pred == label[test]).mean() > 0.5       # chance 0.125; measured 0.68 at scale 14


def test_manifest_records_generator_rerun_is_noop_changed_refused(rmat13, prep):
    with open(os.path.join(rmat13, "manifest.json")) as f:
        options = json.load(f)["options"]
    assert options["generator"] == "rmat" and options["scale"] == 13
    assert options["edge_factor"] == 16 and options["rmat_abc"] == [A, B, C]
    assert "homophily" not in options and "nodes" not in options
    args = ["synth", rmat13, "--generator", "rmat", "--scale", 13, "--seed", 5,
            "--chunk-size", 50000]
    before = os.path.getmtime(os.path.join(rmat13, "metadata.json"))
    prep(*args)
    assert os.path.getmtime(os.path.join(rmat13, "metadata.json")) == before
    prep(*args, "--rmat-abc", "0.45,0.15,0.15", code=2)


def test_planted_manifest_options_unchanged():
    """Outputs made before R-MAT existed stay up to date: the planted options are as then."""
    assert set(SynthSpec(100, 1000).manifest_options()) == {
        "num_nodes", "num_edges", "hetero", "num_classes", "feat_dim", "homophily", "exponent",
        "feat_signal", "split"}


def test_byte_identical_for_workers_same_for_chunk_sizes_seed_matters(tmp_path, prep):
    args = ["--generator", "rmat", "--scale", 12, "--edge-factor", 24, "--seed", 2]
    prep("synth", tmp_path / "w1", *args, "--chunk-size", 40000, "--workers", 1, cluster=False)
    prep("synth", tmp_path / "w2", *args, "--chunk-size", 40000, "--workers", 2, cluster=False)
    files = _tree_files(tmp_path / "w1")
    assert files == _tree_files(tmp_path / "w2") and len(files) > 5
    _, mismatch, errors = filecmp.cmpfiles(tmp_path / "w1", tmp_path / "w2", files,
                                           shallow=False)
    assert not mismatch and not errors
    prep("synth", tmp_path / "c", *args, "--chunk-size", 70000)
    a, c = edges_of(tmp_path / "w1"), edges_of(tmp_path / "c")
    assert len(a[0]) == 24 << 12
    assert np.array_equal(a[0], c[0]) and np.array_equal(a[1], c[1])
    for name in ("feat", "label", "train_mask"):
        assert np.array_equal(node_data_of(tmp_path / "w1", name=name),
                              node_data_of(tmp_path / "c", name=name))
    prep("synth", tmp_path / "s", "--generator", "rmat", "--scale", 12, "--edge-factor", 24)
    s = edges_of(tmp_path / "s")
    assert not np.array_equal(s[0], a[0])
    # the seed reaches the edge draws, not only the ID permutation: other degree sequences
    degrees = [np.sort(np.bincount(x[1], minlength=1 << 12)) for x in (a, s)]
    assert not np.array_equal(*degrees)


@pytest.mark.parametrize("args, names", [
    (["--generator", "rmat", "--nodes", 1000], ["--nodes", "--scale"]),
    (["--generator", "rmat", "--edges", 1000], ["--edges", "--edge-factor"]),
    (["--generator", "rmat", "--hetero"], ["--hetero"]),
    (["--generator", "rmat", "--homophily", 0.5], ["--homophily"]),
    (["--scale", 12], ["--scale", "--nodes"]),
    (["--edge-factor", 8], ["--edge-factor"]),
    (["--rmat-abc", "0.57,0.19,0.19"], ["--rmat-abc"]),
    (["--generator", "rmat", "--rmat-abc", "0.6,0.3,0.2"], ["--rmat-abc", "a+b+c < 1"]),
    (["--generator", "rmat", "--rmat-abc", "0.57,0,0.19"], ["--rmat-abc", "> 0"]),
    (["--generator", "rmat", "--rmat-abc", "nan,0.19,0.19"], ["--rmat-abc", "finite"]),
    (["--generator", "rmat", "--rmat-abc", "0.57,0.19"], ["--rmat-abc", "three"]),
    (["--generator", "rmat", "--rmat-abc", "0.57,x,0.19"], ["--rmat-abc", "three"]),
    (["--generator", "rmat", "--scale", 0], ["--scale"]),
    (["--generator", "rmat", "--scale", 41], ["--scale"]),
    (["--generator", "rmat", "--edge-factor", 0], ["--edge-factor"]),
    (["--generator", "rmat", "--scale", 3, "--num-classes", 8], ["--scale"]),
    (["--generator", "kronecker"], ["--generator"]),
])
def test_bad_options_exit_2_in_one_line(tmp_path, prep, args, names):
    result = prep("synth", tmp_path / "g", *args, code=2)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    for name in names:
        assert name in lines[0], (name, lines[0])
    assert not os.path.exists(tmp_path / "g")


def test_api_refuses_mixing_generators(tmp_path):
    from graphprep.pipeline import api
    with pytest.raises(FormatError, match="--nodes"):
        api.synth(tmp_path / "g", generator="rmat", nodes=1000)
    with pytest.raises(FormatError, match="--edge-factor"):
        api.synth(tmp_path / "g", edge_factor=4)
    assert not os.path.exists(tmp_path / "g")


@pytest.mark.parametrize("method", ["random", "metis", "multilevel"])
def test_partition_dispatch_verify_run_on_rmat(tmp_path, prep, method):
    """Hubs, isolated nodes, self-loops and repeated edges all get through."""
    g, a, d = tmp_path / "g", tmp_path / "a", tmp_path / "d"
    prep("synth", g, "--generator", "rmat", "--scale", 12, "--seed", 1)
    prep("partition", g, a, "-p", 2, "--method", method)
    parts = np.concatenate([np.load(os.path.join(a, f)) for f in sorted(os.listdir(a))
                            if f.endswith(".npy")])
    assert len(parts) == 1 << 12 and set(np.unique(parts)) == {0, 1}
    prep("dispatch", g, a, d)
    done = prep("verify", g, d)
    assert "65,536 edges and 4,096 nodes match" in done.output
