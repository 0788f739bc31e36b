"""graphprep.trainer.sampling.kernel and graphprep.trainer.sampling.partition: true neighbors, fanout, no duplicates, uniformity."""

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from conftest import edges_of, shared_data
from graphprep.trainer.sampling.partition import LocalPart, PartitionBook
from graphprep.trainer.sampling.kernel import sample_neighbors

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="CUDA-only path: no GPU on this machine; the same "
                                          "code runs on the device machine when lent"))]


def random_csc(n=300, seed=0):
    rng = np.random.default_rng(seed)
    deg = rng.integers(0, 40, n)
    deg[:5] = [0, 1, 5, 6, 200]
    indptr = np.concatenate([[0], np.cumsum(deg)])
    return torch.from_numpy(indptr)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fanout", [1, 5, 15, -1])
def test_fanout_true_neighbors_no_duplicates(device, fanout):
    indptr = random_csc().to(device)
    seeds = torch.arange(len(indptr) - 1, device=device)
    g = torch.Generator(device=device).manual_seed(1)
    out = sample_neighbors(indptr, seeds, fanout, g)
    seed_pos, edge_pos = out.seed_pos.cpu().numpy(), out.edge_pos.cpu().numpy()
    ip = indptr.cpu().numpy()
    s = seeds.cpu().numpy()[seed_pos]
    assert ((edge_pos >= ip[s]) & (edge_pos < ip[s + 1])).all()      # a real in-edge of the seed
    deg = np.diff(ip)
    got = np.bincount(seed_pos, minlength=len(deg))
    expect = deg if fanout < 0 else np.minimum(deg, fanout)
    assert np.array_equal(got, expect)                                 # fanout respected, all if small
    assert len(np.unique(edge_pos)) == len(edge_pos)                   # no duplicates


def test_uniform_on_a_star():
    indptr = torch.tensor([0, 20])
    g = torch.Generator().manual_seed(0)
    counts = np.zeros(20)
    for _ in range(4000):
        counts += np.bincount(sample_neighbors(indptr, torch.tensor([0]), 5, g).edge_pos.numpy(),
                              minlength=20)
    assert counts.sum() == 20000
    assert chisquare(counts).pvalue > 0.001


def test_deterministic_with_a_seeded_generator():
    indptr = random_csc()
    seeds = torch.arange(100)
    a = sample_neighbors(indptr, seeds, 5, torch.Generator().manual_seed(3)).edge_pos
    b = sample_neighbors(indptr, seeds, 5, torch.Generator().manual_seed(3)).edge_pos
    c = sample_neighbors(indptr, seeds, 5, torch.Generator().manual_seed(4)).edge_pos
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_sampled_edges_of_a_dispatched_part_are_input_edges(tmp_path, prep):
    prep("chunk", shared_data("planetoid"), tmp_path / "cora", "--name", "cora")
    prep("partition", tmp_path / "cora", tmp_path / "a", "-p", 2)
    prep("dispatch", tmp_path / "cora", tmp_path / "a", tmp_path / "d")
    src, dst = edges_of(tmp_path / "cora")
    truth = set(zip(src.tolist(), dst.tolist()))
    part = LocalPart.load(str(tmp_path / "d" / "graph.json"), 1)
    book = PartitionBook(part.graph)
    (et, csc), = part.csc.items()
    seeds = torch.arange(len(part.orig_ids["_N"]))
    out = sample_neighbors(csc.indptr, seeds, 3, torch.Generator().manual_seed(0))
    new_src = part.local_to_new("_N", csc.indices[out.edge_pos].long())
    owners = book.owner("_N", new_src)
    other = LocalPart.load(str(tmp_path / "d" / "graph.json"), 0)
    starts = [r[0] for r in part.graph.node_map["_N"]]
    src_orig = torch.where(owners == 1,
                           part.orig_ids["_N"][(new_src - starts[1]).clamp(min=0)],
                           other.orig_ids["_N"][(new_src - starts[0]).clamp(
                               max=len(other.orig_ids["_N"]) - 1)])
    dst_orig = part.orig_ids["_N"][seeds[out.seed_pos]]
    pairs = set(zip(src_orig.tolist(), dst_orig.tolist()))
    assert pairs and pairs <= truth
    eids = csc.orig_ids(out.edge_pos).numpy()
    assert np.array_equal(src[eids], src_orig.numpy()) and np.array_equal(dst[eids],
                                                                         dst_orig.numpy())
