"""graphprep.trainer.tasks.link_metrics, graphprep.trainer.data.negatives, graphprep.trainer.models.scorer: exact metrics against hand counts
and brute force, negatives' ranges and determinism, scorers and their loss."""

import math

import pytest
import torch

from graphprep.trainer.tasks.link_metrics import (LinkEvaluation, auc, evaluate_link_scores,
                                                  ranking_metrics)
from graphprep.trainer.data.negatives import (filter_true_edges, fixed_eval_negatives,
                                              uniform_negatives)
from graphprep.trainer.sampling.edge_keys import edge_keys, true_edge_mask
from graphprep.trainer.models.scorer import DotScorer, MLPScorer, link_loss, make_scorer

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="CUDA-only path: no GPU on this machine; the same "
                                          "code runs on the device machine when lent"))]


def brute_auc(pos, neg):
    pos, neg = pos.flatten().tolist(), neg.flatten().tolist()
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def brute_ranks(pos, neg):
    out = []
    for p, row in zip(pos.tolist(), neg.tolist()):
        out.append(1 + sum(n > p for n in row) + 0.5 * sum(n == p for n in row))
    return out


# --- AUC ---------------------------------------------------------------------------------

def test_auc_hand_example_with_tie():
    # 0.9 beats 0.5, 0.1, 0.4 (3 wins); 0.4 loses to 0.5, beats 0.1, ties 0.4 (1.5): 4.5 / 6
    assert auc(torch.tensor([0.9, 0.4]), torch.tensor([0.5, 0.1, 0.4])) == 0.75


def test_auc_separated_identical_constant():
    assert auc(torch.tensor([2.0, 3.0, 5.0]), torch.tensor([-1.0, 0.0, 1.9])) == 1.0
    assert auc(torch.tensor([-1.0, 0.0]), torch.tensor([2.0, 3.0, 5.0])) == 0.0
    assert auc(torch.full((7,), 3.0), torch.full((4,), 3.0)) == 0.5        # all ties
    g = torch.Generator().manual_seed(0)
    same = auc(torch.randn(5000, generator=g), torch.randn(5000, generator=g))
    assert abs(same - 0.5) < 0.03                                         # sd about 0.006


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seed", range(5))
def test_auc_matches_brute_force_with_ties(device, seed):
    g = torch.Generator().manual_seed(seed)
    pos = torch.randint(0, 6, (int(torch.randint(1, 80, (1,), generator=g)),), generator=g)
    neg = torch.randint(-2, 4, (int(torch.randint(1, 120, (1,), generator=g)),), generator=g)
    expect = brute_auc(pos, neg)
    assert auc(pos.to(device), neg.to(device)) == pytest.approx(expect, abs=1e-12)
    assert auc(pos.float().to(device), neg.double().to(device)) == pytest.approx(expect,
                                                                                abs=1e-12)
    # swapping the classes mirrors the AUC (ties stay halves)
    assert auc(neg.to(device), pos.to(device)) == pytest.approx(1 - expect, abs=1e-12)


def test_auc_flattens_and_refuses_bad_input():
    neg = torch.tensor([[0.5, 0.1], [0.4, 0.0]])
    assert auc(torch.tensor([0.9, 0.4]), neg) == brute_auc(torch.tensor([0.9, 0.4]), neg)
    with pytest.raises(ValueError, match="NaN"):
        auc(torch.tensor([0.1, float("nan")]), torch.tensor([0.2]))
    with pytest.raises(ValueError, match="no scores"):
        auc(torch.tensor([]), torch.tensor([0.2]))


# --- MRR / Hits@k ------------------------------------------------------------------------

def test_ranking_hand_example():
    pos = torch.tensor([3.0, 1.0, 2.0])
    neg = torch.tensor([[1.0, 2.0, 3.0, 4.0],    # 1 above, 1 tie: rank 1 + 1 + 0.5 = 2.5
                        [0.0, 0.0, 1.0, 1.0],    # 0 above, 2 ties: rank 1 + 0 + 1 = 2
                        [2.0, 2.0, 2.0, 5.0]])   # 1 above, 3 ties: rank 1 + 1 + 1.5 = 3.5
    out = ranking_metrics(pos, neg, ks=(1, 2, 3, 4))
    assert out["mrr"] == pytest.approx((1 / 2.5 + 1 / 2 + 1 / 3.5) / 3)
    assert out["hits@1"] == 0.0
    assert out["hits@2"] == pytest.approx(1 / 3)
    assert out["hits@3"] == pytest.approx(2 / 3)
    assert out["hits@4"] == 1.0
    assert set(out) == {"mrr", "hits@1", "hits@2", "hits@3", "hits@4"}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seed", range(5))
def test_ranking_matches_brute_force_with_ties(device, seed):
    g = torch.Generator().manual_seed(100 + seed)
    pos = torch.randint(0, 5, (60,), generator=g).float()
    neg = torch.randint(0, 5, (60, 9), generator=g).float()
    r = brute_ranks(pos, neg)
    out = ranking_metrics(pos.to(device), neg.to(device), ks=(1, 3, 5, 20))
    assert out["mrr"] == pytest.approx(sum(1 / x for x in r) / len(r), abs=1e-12)
    for k in (1, 3, 5, 20):
        assert out[f"hits@{k}"] == pytest.approx(sum(x <= k for x in r) / len(r), abs=1e-12)
    assert out["hits@20"] == 1.0                               # k above K + 1: every positive


def test_ranking_refuses_bad_shapes_and_k():
    with pytest.raises(ValueError, match="want pos"):
        ranking_metrics(torch.zeros(3), torch.zeros(4, 2))
    with pytest.raises(ValueError, match="want pos"):
        ranking_metrics(torch.zeros(3), torch.zeros(3))
    with pytest.raises(ValueError, match="positive"):
        ranking_metrics(torch.zeros(3), torch.zeros(3, 2), ks=(0,))


def test_evaluate_link_scores_as_dict():
    pos = torch.tensor([3.0, 1.0, 2.0])
    neg = torch.tensor([[1.0, 2.0, 3.0, 4.0], [0.0, 0.0, 1.0, 1.0], [2.0, 2.0, 2.0, 5.0]])
    ev = evaluate_link_scores(pos, neg, pos, neg, ks=(2, 3))
    assert isinstance(ev, LinkEvaluation)
    d = ev.as_dict()
    assert list(d) == ["auc", "mrr", "hits@2", "hits@3", "num_positives", "num_negatives"]
    assert d["auc"] == pytest.approx(brute_auc(pos, neg))
    assert d["mrr"] == pytest.approx((1 / 2.5 + 1 / 2 + 1 / 3.5) / 3)
    assert d["hits@3"] == pytest.approx(2 / 3)
    assert (d["num_positives"], d["num_negatives"]) == (3, 4)
    assert all(type(v) in (float, int) for v in d.values())       # JSON-ready


# --- negatives ---------------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
def test_uniform_negatives_shape_range_determinism(device):
    src = torch.tensor([0, 4, 4, 7], device=device)

    def draw(seed):
        return uniform_negatives(src, 11, 5, torch.Generator(device=device).manual_seed(seed))

    neg_src, neg_dst = draw(3)
    assert neg_src.shape == neg_dst.shape == (20,)
    assert neg_src.dtype == neg_dst.dtype == torch.long
    assert torch.equal(neg_src.reshape(4, 5), src[:, None].expand(4, 5))  # positive-major
    assert int(neg_dst.min()) >= 0 and int(neg_dst.max()) < 11
    again = draw(3)
    assert torch.equal(neg_src, again[0]) and torch.equal(neg_dst, again[1])
    assert not torch.equal(neg_dst, draw(4)[1])


def test_uniform_negatives_cover_range_uniformly():
    g = torch.Generator().manual_seed(0)
    _, neg_dst = uniform_negatives(torch.zeros(20000, dtype=torch.long), 10, 3, g)
    counts = torch.bincount(neg_dst, minlength=10).double()
    assert len(counts) == 10
    chi2 = float(((counts - 6000) ** 2 / 6000).sum())
    assert chi2 < 40                        # 9 degrees of freedom: 40 is p ~ 1e-5


@pytest.mark.parametrize("ratio", [1, 2, 3])
def test_corrupt_src_proportions(ratio):
    g = torch.Generator().manual_seed(1)
    src = torch.arange(1001) % 50
    dst = 1000 + torch.arange(1001) % 40
    neg_src, neg_dst = uniform_negatives(src, 30, ratio, g, corrupt_src=True,
                                         num_src_nodes=20, dst=dst)
    n = 1001 * ratio
    odd = torch.arange(n) % 2 == 1
    rep_src, rep_dst = src.repeat_interleave(ratio), dst.repeat_interleave(ratio)
    # odd flat positions: source corrupted, destination kept; even: the other way round
    assert int(odd.sum()) == n // 2
    assert torch.equal(neg_dst[odd], rep_dst[odd]) and bool((neg_src[odd] < 20).all())
    assert torch.equal(neg_src[~odd], rep_src[~odd]) and bool((neg_dst[~odd] < 30).all())
    assert int(neg_src[odd].min()) >= 0 and int(neg_dst[~odd].min()) >= 0
    with pytest.raises(ValueError, match="corrupt_src"):
        uniform_negatives(src, 30, ratio, g, corrupt_src=True, num_src_nodes=20)
    with pytest.raises(ValueError, match="corrupt_src"):
        uniform_negatives(src, 30, ratio, g, corrupt_src=True, dst=dst)


@pytest.mark.parametrize("device", DEVICES)
def test_filter_true_edges_removes_exactly_the_edges(device):
    num_src, num_dst = 6, 5
    src = torch.tensor([0, 0, 1, 3, 5, 5, 2, 0], device=device)
    dst = torch.tensor([1, 4, 0, 3, 4, 0, 2, 1], device=device)          # (0, 1) twice
    keys = edge_keys(src, dst, num_dst)
    assert keys.tolist() == sorted({s * num_dst + d for s, d in zip(src.tolist(),
                                                                       dst.tolist())})
    cand_src = torch.arange(num_src, device=device).repeat_interleave(num_dst).repeat(2)
    cand_dst = torch.arange(num_dst, device=device).repeat(num_src).repeat(2)
    kept_src, kept_dst = filter_true_edges(cand_src, cand_dst, keys, num_dst)
    edges = set(zip(src.tolist(), dst.tolist()))
    expect = [(s, d) for s, d in zip(cand_src.tolist(), cand_dst.tolist())
              if (s, d) not in edges]
    assert list(zip(kept_src.tolist(), kept_dst.tolist())) == expect     # order kept
    mask = true_edge_mask(cand_src.reshape(2, -1), cand_dst.reshape(2, -1), keys, num_dst)
    assert mask.shape == (2, num_src * num_dst) and int(mask.sum()) == 2 * len(edges)
    empty = torch.empty(0, dtype=torch.long, device=device)
    assert len(filter_true_edges(cand_src, cand_dst, empty, num_dst)[0]) == len(cand_src)


def test_uniform_negatives_hit_true_edges_at_density():
    g = torch.Generator().manual_seed(7)
    n, m = 2000, 20000
    keys = edge_keys(torch.randint(0, n, (m,), generator=g),
                     torch.randint(0, n, (m,), generator=g), n)
    density = len(keys) / n ** 2                                           # about 0.005
    src = torch.randint(0, n, (50000,), generator=g)
    neg_src, neg_dst = uniform_negatives(src, n, 4, g)
    frac = float(true_edge_mask(neg_src, neg_dst, keys, n).double().mean())
    sd = math.sqrt(density * (1 - density) / len(neg_src))
    assert abs(frac - density) < 5 * sd
    kept_src, kept_dst = filter_true_edges(neg_src, neg_dst, keys, n)
    assert not bool(true_edge_mask(kept_src, kept_dst, keys, n).any())


def test_fixed_eval_negatives_reproducible_from_seed():
    a = fixed_eval_negatives(100, 7, 50, seed=3)
    assert a.shape == (100, 7) and a.dtype == torch.long
    assert int(a.min()) >= 0 and int(a.max()) < 50
    torch.manual_seed(12345)                                # global RNG state is not used
    torch.rand(10)
    assert torch.equal(a, fixed_eval_negatives(100, 7, 50, seed=3))
    assert not torch.equal(a, fixed_eval_negatives(100, 7, 50, seed=4))
    assert fixed_eval_negatives(0, 7, 50, seed=3).shape == (0, 7)
    with pytest.raises(ValueError):
        fixed_eval_negatives(10, 0, 50, seed=3)


# --- scorers -----------------------------------------------------------------------------

def test_dot_and_mlp_scorers():
    g = torch.Generator().manual_seed(0)
    h_src, h_dst = torch.randn(9, 16, generator=g), torch.randn(9, 16, generator=g)
    assert torch.allclose(DotScorer()(h_src, h_dst), (h_src * h_dst).sum(-1))
    mlp = MLPScorer(16, 8)
    assert mlp(h_src, h_dst).shape == (9,)
    assert isinstance(make_scorer("dot", 16), DotScorer)
    assert isinstance(make_scorer("mlp", 16), MLPScorer)
    assert make_scorer("mlp", 16, hidden=4).mlp[0].out_features == 4
    with pytest.raises(ValueError, match="--scorer 'cosine'"):
        make_scorer("cosine", 16)


def test_link_loss_value():
    pos, neg = torch.tensor([0.0, 2.0]), torch.tensor([[0.0, -1.0], [3.0, 0.5]])
    terms = [-math.log(1 / (1 + math.exp(-x))) for x in (0.0, 2.0)] + \
            [-math.log(1 - 1 / (1 + math.exp(-x))) for x in (0.0, -1.0, 3.0, 0.5)]
    assert float(link_loss(pos, neg)) == pytest.approx(sum(terms) / 6)


@pytest.mark.parametrize("name", ["dot", "mlp"])
def test_link_loss_training_reduces_loss(name):
    # toy separable graph: node i links to i +- 1 (mod 20); negatives are fixed non-edges
    torch.manual_seed(0)
    n = 20
    src = torch.arange(n).repeat(2)
    dst = torch.cat([(torch.arange(n) + 1) % n, (torch.arange(n) - 1) % n])
    neg_src = torch.arange(n).repeat_interleave(4)
    neg_dst = (neg_src + torch.tensor([5, 8, 10, 13]).repeat(n)) % n
    emb = torch.nn.Embedding(n, 8)
    scorer = make_scorer(name, 8)
    opt = torch.optim.Adam(list(emb.parameters()) + list(scorer.parameters()), lr=0.05)

    def loss():
        return link_loss(scorer(emb(src), emb(dst)), scorer(emb(neg_src), emb(neg_dst)))

    first = float(loss().detach())
    for _ in range(60):
        opt.zero_grad()
        value = loss()
        value.backward()
        opt.step()
    last = float(loss().detach())
    assert last < 0.5 * first, (first, last)
    with torch.no_grad():
        pos_s, neg_s = scorer(emb(src), emb(dst)), scorer(emb(neg_src), emb(neg_dst))
    assert auc(pos_s, neg_s) > 0.95


@pytest.mark.parametrize("device", DEVICES)
def test_lookup_takes_ids_and_keys_on_any_device(device):
    """``trainer embed`` keeps the ID keys on the CPU and the rows on the rank's device:
    ``index_select`` on CUDA rows refuses a CPU index, so the lookup must move it."""
    from graphprep.trainer.tasks.link import lookup
    keys = torch.tensor([2, 5, 9])
    rows = torch.arange(6.).view(3, 2).to(device)
    got = lookup((keys, rows), torch.tensor([9, 2, 9]))
    assert got.device == rows.device
    assert got.cpu().tolist() == [[4., 5.], [0., 1.], [4., 5.]]
