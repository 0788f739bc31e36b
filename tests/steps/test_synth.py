"""prep synth: determinism across workers and chunkings, and the properties of the model."""

import filecmp
import json
import os

import numpy as np

from conftest import edges_of, node_data_of
from graphprep.formats import load_chunked_graph
from graphprep.pipeline.synth import RankPermutation, SynthSpec, generate_edges


def _tree_files(root):
    return sorted(os.path.relpath(os.path.join(d, f), root)
                  for d, _, fs in os.walk(root) for f in fs)


def test_byte_identical_for_one_and_two_workers(tmp_path, prep):
    args = ["--nodes", 30000, "--edges", 300000, "--chunk-size", 50000, "--seed", 7]
    prep("synth", tmp_path / "w1", *args, "--workers", 1, cluster=False)
    prep("synth", tmp_path / "w2", *args, "--workers", 2, cluster=False)
    files = _tree_files(tmp_path / "w1")
    assert files == _tree_files(tmp_path / "w2") and len(files) > 10
    match, mismatch, errors = filecmp.cmpfiles(tmp_path / "w1", tmp_path / "w2", files,
                                               shallow=False)
    assert not mismatch and not errors


def test_same_edges_for_any_chunk_size_and_seed_matters(tmp_path, prep):
    args = ["--nodes", 5000, "--edges", 70000, "--seed", 3]
    prep("synth", tmp_path / "a", *args, "--chunk-size", 9000)
    prep("synth", tmp_path / "b", *args, "--chunk-size", 65536)
    prep("synth", tmp_path / "c", "--nodes", 5000, "--edges", 70000, "--seed", 4)
    a, b, c = (edges_of(tmp_path / x) for x in "abc")
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    assert not np.array_equal(a[0], c[0])
    assert np.array_equal(node_data_of(tmp_path / "a"), node_data_of(tmp_path / "b"))


def test_model_properties(tmp_path, prep):
    prep("synth", tmp_path / "g", "--nodes", 20000, "--edges", 400000, "--num-classes", 5,
         "--feat-dim", 8)
    g = load_chunked_graph(str(tmp_path / "g"))
    assert g.num_nodes == {"_N": 20000} and sum(g.num_edges.values()) == 400000
    src, dst = edges_of(tmp_path / "g")
    assert src.min() >= 0 and max(src.max(), dst.max()) < 20000
    assert not (src == dst).any()
    label = node_data_of(tmp_path / "g", name="label")
    assert set(np.unique(label)) == set(range(5))
    homophily = (label[src] == label[dst]).mean()
    assert 0.75 < homophily < 0.9          # 0.8 planted + 0.2 * 1/5 by chance
    deg = np.bincount(np.concatenate([src, dst]), minlength=20000)
    assert deg.max() > 20 * deg.mean()     # power law: hubs far above the mean
    feat = node_data_of(tmp_path / "g", name="feat")
    assert feat.shape == (20000, 8) and feat.dtype == np.float32
    masks = [node_data_of(tmp_path / "g", name=m) for m in ("train_mask", "val_mask", "test_mask")]
    assert (sum(m.astype(int) for m in masks) == 1).all()
    assert abs(masks[0].mean() - 0.6) < 0.02
    # class signal: nodes of one class share a mean direction
    means = np.stack([feat[label == c].mean(0) for c in range(5)])
    assert np.linalg.norm(means, axis=1).min() > 0.5


def test_hetero_mag_shape(tmp_path, prep):
    prep("synth", tmp_path / "h", "--hetero", "--nodes", 20000, "--edges", 100000)
    g = load_chunked_graph(str(tmp_path / "h"))
    assert set(g.node_types) == {"paper", "author", "institution", "field_of_study"}
    assert {str(e) for e in g.edge_types} == {
        "paper:cites:paper", "author:writes:paper", "author:affiliated_with:institution",
        "paper:has_topic:field_of_study"}
    assert sum(g.num_nodes.values()) == 20000 and sum(g.num_edges.values()) == 100000
    assert g.num_nodes["author"] > g.num_nodes["paper"] > g.num_nodes["institution"]
    src, dst = edges_of(tmp_path / "h", "author:writes:paper")
    assert src.max() < g.num_nodes["author"] and dst.max() < g.num_nodes["paper"]
    assert set(g.node_data) == {"paper"}


def test_rerun_is_noop_and_changed_options_refused(tmp_path, prep):
    out = tmp_path / "g"
    prep("synth", out, "--nodes", 1000, "--edges", 5000)
    stamp = os.path.getmtime(out / "metadata.json")
    prep("synth", out, "--nodes", 1000, "--edges", 5000)
    assert os.path.getmtime(out / "metadata.json") == stamp
    r = prep("synth", out, "--nodes", 1000, "--edges", 6000, code=2)
    assert "--overwrite" in r.output
    prep("synth", out, "--nodes", 1000, "--edges", 6000, "--overwrite")
    assert json.load(open(out / "metadata.json"))["num_edges_per_type"] == [6000]
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())


def test_rank_permutation_is_a_bijection():
    for n in (17, 1000, 2 ** 20 + 7):
        p = RankPermutation.for_type(n, seed=5, type_index=1)
        ids = p.to_id(np.arange(n))
        assert len(np.unique(ids)) == n
        assert np.array_equal(p.to_rank(ids), np.arange(n))


def test_generate_edges_slices_agree():
    spec = SynthSpec(num_nodes=1000, num_edges=200000)
    s, d = generate_edges(spec, 0, 0, 200000)
    s2, d2 = generate_edges(spec, 0, 65000, 131073)
    assert np.array_equal(s[65000:131073], s2) and np.array_equal(d[65000:131073], d2)
