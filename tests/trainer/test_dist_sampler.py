"""The distributed sampler and feature fetch across parts, in one process (LocalTransport):
true edges by original ID, fanouts, blocks, distribution equal to a single-part sampler."""

from collections import Counter

import numpy as np
import pytest
import torch
from scipy.stats import chi2_contingency, chisquare

from conftest import dispatched, edges_of, node_data_of
from graphprep.formats import EdgeType
from graphprep.trainer.sampling.dist_sampler import (DistNeighborSampler, Relabeler, relabel,
                                                     relabel_unique, split_by_owner,
                                                     split_by_owner_argsort)
from graphprep.trainer.data.features import FeatureFetcher, HaloCache, halo_references
from graphprep.trainer.sampling.partition import LocalPart, PartitionBook
from graphprep.trainer.sampling.service import LocalTransport, PartServer

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="CUDA-only path: no GPU on this machine; the same "
                                          "code runs on the device machine when lent"))]


@pytest.fixture(scope="module")
def cora(scheduler, cora_chunked, tmp_path_factory):
    """Cora chunked, and dispatched into 1 and into 3 parts (METIS)."""
    root = tmp_path_factory.mktemp("cora-sampling")
    return {"chunked": cora_chunked,
            **{p: dispatched(scheduler, cora_chunked, root / f"d{p}", p, "--method", "metis")
               for p in (1, 3)}}


class Cluster:
    """Every part of a dispatched graph served in this process, and new -> original IDs."""

    def __init__(self, graph_json, placement="cpu"):
        self.parts = [LocalPart.load(graph_json, 0)]
        self.parts += [LocalPart.load(graph_json, p)
                       for p in range(1, self.parts[0].graph.num_parts)]
        self.servers = {p.p: PartServer(p.place(placement)) for p in self.parts}
        self.transport = LocalTransport(self.servers)
        self.orig = {t: torch.cat([p.orig_ids[t] for p in self.parts])
                     for t in self.parts[0].graph.node_types}

    def sampler(self, p, fanouts, device="cpu"):
        return DistNeighborSampler(self.parts[p], self.servers[p], self.transport, fanouts,
                                   device)

    def new_of_orig(self, ntype, orig):
        order = torch.argsort(self.orig[ntype])
        return order[torch.searchsorted(self.orig[ntype][order], orig)]


def block_edges_orig(cluster, block):
    """Per edge type: (src original IDs, dst original IDs) of a block's edges."""
    out = {}
    for et, (src, dst) in block.edges.items():
        s = block.src_nodes[et.src][src].cpu()
        d = block.src_nodes[et.dst][:block.num_dst[et.dst]][dst].cpu()
        out[et] = (cluster.orig[et.src][s], cluster.orig[et.dst][d])
    return out


@pytest.mark.parametrize("device", DEVICES)
def test_multi_hop_blocks_hold_true_edges_and_respect_fanouts(cora, device):
    cluster = Cluster(cora[3], placement="cuda" if device == "cuda" else "cpu")
    src, dst = edges_of(cora["chunked"])
    truth = set(zip(src.tolist(), dst.tolist()))
    in_deg = np.bincount(dst, minlength=2708)
    seeds = cluster.new_of_orig("_N", torch.arange(0, 2708, 37))
    fanouts = [5, 3, -1]
    mb = cluster.sampler(1, fanouts, device).sample("_N", seeds, seed=7)
    assert torch.equal(mb.blocks[-1].src_nodes["_N"][:len(seeds)].cpu(), seeds)
    for block, fanout in zip(reversed(mb.blocks), fanouts):
        (s_orig, d_orig), = block_edges_orig(cluster, block).values()
        pairs = list(zip(s_orig.tolist(), d_orig.tolist()))
        assert set(pairs) <= truth                                   # true input edges
        assert len(set(pairs)) == len(pairs)                         # no duplicates
        dst_orig = cluster.orig["_N"][block.src_nodes["_N"][:block.num_dst["_N"]].cpu()]
        got = Counter(d_orig.tolist())
        want = in_deg[dst_orig] if fanout < 0 else np.minimum(in_deg[dst_orig], fanout)
        assert [got.get(v, 0) for v in dst_orig.tolist()] == want.tolist()
        assert len(torch.unique(block.src_nodes["_N"])) == len(block.src_nodes["_N"])
    for lower, upper in zip(mb.blocks, mb.blocks[1:]):               # layers chain
        assert torch.equal(lower.src_nodes["_N"][:lower.num_dst["_N"]], upper.src_nodes["_N"])


def test_same_key_same_blocks_and_remote_requests_batched(cora):
    cluster = Cluster(cora[3])
    sampler = cluster.sampler(0, [10, 10])
    seeds = torch.arange(0, 200)
    a = sampler.sample("_N", seeds, seed=3)
    counters = cluster.transport.take_counters()
    b = sampler.sample("_N", seeds, seed=3)
    assert all(torch.equal(x.src_nodes["_N"], y.src_nodes["_N"]) for x, y in zip(a.blocks,
                                                                                   b.blocks))
    assert counters["rpc_requests"] <= 2 * 2      # one request per remote owner per hop
    assert counters["rpc_bytes_sent"] > 0


def frontier_counts(cluster, p, seeds_orig, trials, fanouts):
    seeds = cluster.new_of_orig("_N", seeds_orig)
    sampler = cluster.sampler(p, fanouts)
    counts = Counter()
    for t in range(trials):
        mb = sampler.sample("_N", seeds, seed=1000 + t)
        counts.update(cluster.orig["_N"][mb.input_nodes["_N"]].tolist())
    return counts


def test_cross_part_frontier_distributed_like_a_single_part(cora):
    """Two-hop frontiers from a 3-part graph (most of them crossing parts) against the same
    sampler on 1 part: the node frequencies are one distribution (chi-square, contingency)."""
    seeds_orig = torch.tensor([0, 5, 633, 1701, 2045])
    one = frontier_counts(Cluster(cora[1]), 0, seeds_orig, 400, [4, 3])
    three = frontier_counts(Cluster(cora[3]), 2, seeds_orig, 400, [4, 3])
    nodes = sorted(set(one) | set(three))
    table = np.array([[one.get(v, 0) for v in nodes], [three.get(v, 0) for v in nodes]])
    table = table[:, table.sum(0) >= 10]          # chi-square needs populated cells
    assert table.shape[1] > 20
    assert chi2_contingency(table).pvalue > 0.001


def test_each_edge_sampled_with_probability_fanout_over_degree(cora):
    cluster = Cluster(cora[3])
    src, dst = edges_of(cora["chunked"])
    target = int(np.argmax(np.bincount(dst)))       # the highest in-degree node
    nbrs = np.sort(src[dst == target])
    sampler = cluster.sampler(0, [5])
    seed = cluster.new_of_orig("_N", torch.tensor([target]))
    counts = Counter()
    for t in range(600):
        (s_orig, _), = block_edges_orig(cluster, sampler.sample("_N", seed, t).blocks[0]).values()
        counts.update(s_orig.tolist())
    observed = np.array([counts[v] for v in nbrs])
    assert observed.sum() == 600 * 5
    assert chisquare(observed).pvalue > 0.001


def test_features_and_labels_fetched_across_parts_equal_the_input(cora):
    cluster = Cluster(cora[3])
    feat = node_data_of(cora["chunked"], name="feat")
    label = node_data_of(cora["chunked"], name="label")
    fetcher = FeatureFetcher(cluster.parts[1], cluster.servers[1], cluster.transport)
    ids = torch.randperm(2708, generator=torch.Generator().manual_seed(0))[:500]
    x = fetcher.fetch("feat", {"_N": ids})["_N"]
    y = fetcher.fetch("label", {"_N": ids})["_N"]
    orig = cluster.orig["_N"][ids].numpy()
    assert np.array_equal(x.numpy(), feat[orig]) and np.array_equal(y.numpy(), label[orig])
    assert cluster.transport.take_counters()["rpc_requests"] == 4   # 2 remote owners x 2 calls


def test_relabel_keeps_destinations_first_and_dedupes():
    dst = {"a": torch.tensor([7, 3])}
    edges = {EdgeType("b", "r", "a"): (torch.tensor([0, 0, 1]),
                                                            torch.tensor([9, 4, 9])),
             EdgeType("a", "s", "a"): (torch.tensor([1, 1]),
                                                            torch.tensor([7, 5]))}
    block = relabel(dst, edges)
    assert block.src_nodes["a"].tolist() == [7, 3, 5] and block.num_dst == {"a": 2, "b": 0}
    assert block.src_nodes["b"].tolist() == [9, 4]                  # first occurrence order
    for et, (s, d) in block.edges.items():
        assert block.src_nodes[et.src][s].tolist() == edges[et][1].tolist()
        assert d.tolist() == edges[et][0].tolist()


def test_heterogeneous_blocks_hold_true_edges_of_every_type(mag_parts):
    chunked, graph_json = mag_parts
    cluster = Cluster(graph_json)
    graph = cluster.parts[0].graph
    ntype = next(t for t in graph.node_types if "label" in graph.node_feats.get(t, {}))
    mb = cluster.sampler(0, [5, 5]).sample(ntype, torch.arange(0, 300, 3), seed=0)
    seen_types = set()
    for block in mb.blocks:
        for et, (s_orig, d_orig) in block_edges_orig(cluster, block).items():
            src, dst = edges_of(chunked, str(et))
            truth = set(zip(src.tolist(), dst.tolist()))
            assert set(zip(s_orig.tolist(), d_orig.tolist())) <= truth
            seen_types.add(et)
    assert len(seen_types) == 2          # writes and cites: the types into papers
    x = FeatureFetcher(cluster.parts[0], cluster.servers[0], cluster.transport).fetch(
        "feat", mb.input_nodes)
    assert x[ntype].shape[1] > 1 and all(v.shape[1] == 1 for t, v in x.items() if t != ntype)


def test_halo_cache_serves_the_same_rows_with_less_traffic(cora):
    cluster = Cluster(cora[3])
    feat = node_data_of(cora["chunked"], name="feat")
    plain = FeatureFetcher(cluster.parts[0], cluster.servers[0], cluster.transport)
    halo = cluster.parts[0].halo_ids["_N"]
    rows = min(100, len(halo) // 2)      # a budget that binds: fewer rows than the halo has
    assert rows >= 20, len(halo)
    cache = HaloCache.build(plain, ("feat",), rows * 1433 * 4)
    assert len(cache.ids["_N"]) == rows and torch.isin(cache.ids["_N"], halo).all()
    cached = FeatureFetcher(cluster.parts[0], cluster.servers[0], cluster.transport,
                            cache=cache)
    ids = torch.cat([halo, torch.arange(0, 2708, 5)]).unique()
    cluster.transport.take_counters()
    x_plain = plain.fetch("feat", {"_N": ids})["_N"]
    bytes_plain = cluster.transport.take_counters()["rpc_bytes_received"]
    x_cached = cached.fetch("feat", {"_N": ids})["_N"]
    bytes_cached = cluster.transport.take_counters()["rpc_bytes_received"]
    assert torch.equal(x_plain, x_cached)
    assert np.array_equal(x_cached.numpy(), feat[cluster.orig["_N"][ids].numpy()])
    assert bytes_plain - bytes_cached == rows * 1433 * 4      # every cached row a hit


@pytest.mark.parametrize("with_cache", [False, True])
def test_remote_store_serves_fetched_rows_without_asking_again(cora, tmp_path, with_cache):
    """--remote-store: a remote row asked once is served from the store after (the same
    bytes as the owner's, with no request for it), owned rows still come from the part, the
    halo cache's rows stay the cache's, and the store's files are gone from the folder."""
    from graphprep.trainer.data.remote_store import RemoteStore
    from graphprep.trainer.sampling.partition import ORIG_ID
    from graphprep.trainer.sampling.timing import Breakdown

    cluster = Cluster(cora[3])
    feat = node_data_of(cora["chunked"], name="feat")
    part = cluster.parts[0]
    plain = FeatureFetcher(part, cluster.servers[0], cluster.transport)
    cache = HaloCache.build(plain, ("feat", ORIG_ID), 30 * (1433 * 4 + 8)) if with_cache \
        else None
    store = RemoteStore(part, ("feat", ORIG_ID), str(tmp_path / "store"))
    assert not list((tmp_path / "store").iterdir())        # unlinked: nothing left behind
    breakdown = Breakdown()
    fetcher = FeatureFetcher(part, cluster.servers[0], cluster.transport, breakdown, cache,
                             store=store)
    rng = torch.Generator().manual_seed(1)
    first = torch.randperm(2708, generator=rng)[:600]
    second = torch.cat([first[:300], torch.randperm(2708, generator=rng)[:300]]).unique()
    cluster.transport.take_counters()
    for ids in (first, second, first):
        got = fetcher.fetch_many({"feat": {"_N": ids}, ORIG_ID: {"_N": ids}})
        orig = cluster.orig["_N"][ids]
        assert torch.equal(got[ORIG_ID]["_N"], orig)
        assert np.array_equal(got["feat"]["_N"].numpy(), feat[orig.numpy()])
    s0, s1 = cluster.parts[0].graph.node_map["_N"][0]
    remote = lambda ids: ids[(ids < s0) | (ids >= s1)]  # noqa: E731
    in_cache = (lambda ids: torch.isin(ids, cache.ids["_N"])) if cache else \
        (lambda ids: torch.zeros(len(ids), dtype=torch.bool))
    asked_once = torch.cat([first, second]).unique()
    fetched = remote(asked_once)[~in_cache(remote(asked_once))]
    # every remote row not cached crossed the wire once, with its original ID
    row_bytes = 1433 * 4 + 8
    traffic = cluster.transport.take_counters()["rpc_bytes_received"]
    assert len(fetched) * row_bytes <= traffic < len(fetched) * row_bytes * 1.2, traffic
    counts = breakdown.take_counts()
    served_again = torch.isin(remote(second), remote(first)) & ~in_cache(remote(second))
    assert counts["halo_store_hits"] == int(served_again.sum()) + len(
        remote(first)[~in_cache(remote(first))])
    assert store.filled["_N"].sum() == len(fetched)


def test_remote_store_fill_takes_every_halo_row_ahead(cora, tmp_path):
    """--remote-store-fill: after the fill, the rows of every halo node come from the store
    (the owners' bytes, no request), in blocks of any size."""
    from graphprep.trainer.data.remote_store import RemoteStore
    from graphprep.trainer.sampling.partition import ORIG_ID

    cluster = Cluster(cora[3])
    feat = node_data_of(cora["chunked"], name="feat")
    part = cluster.parts[1]
    store = RemoteStore(part, ("feat", ORIG_ID), str(tmp_path / "store"))
    fetcher = FeatureFetcher(part, cluster.servers[1], cluster.transport, store=store)
    halo = part.halo_ids["_N"]
    assert store.fill(fetcher, block=97) == len(halo) > 97
    assert int(store.filled["_N"].sum()) == len(halo)
    cluster.transport.take_counters()
    got = fetcher.fetch_many({"feat": {"_N": halo}, ORIG_ID: {"_N": halo}})
    assert cluster.transport.take_counters()["rpc_requests"] == 0
    assert torch.equal(got[ORIG_ID]["_N"], cluster.orig["_N"][halo])
    assert np.array_equal(got["feat"]["_N"].numpy(), feat[cluster.orig["_N"][halo].numpy()])


def test_a_ranks_samplers_share_one_relabeler(cora):
    """The stamp arrays (4 B per node of the graph) are held once per rank, not once per
    loader: every sampler of a rank relabels with the same one, and samples as before."""
    from graphprep.trainer.config import TrainConfig
    from graphprep.trainer.loop import Rank
    from graphprep.trainer.sampling.timing import Breakdown
    cluster = Cluster(cora[3])
    rank = Rank(TrainConfig(graph=""), None, cluster.parts[0], cluster.servers[0],
                cluster.transport, Breakdown(), torch.device("cpu"), "_N")
    samplers = [rank.sampling(f, timed)[0] for f, timed in (([5, 3], True), ([4], False),
                                                            ([5, 3], False))]
    assert samplers[0].relabeler is samplers[1].relabeler is samplers[2].relabeler
    assert samplers[0].relabeler.nbytes == 0          # allocated at first use, once
    seeds = torch.arange(0, 300, 3)
    for sampler in samplers:
        alone = cluster.sampler(0, sampler.fanouts)
        for key in (1, 2):
            a, b = sampler.sample("_N", seeds, key), alone.sample("_N", seeds, key)
            for x, y in zip(a.blocks, b.blocks):
                assert all(torch.equal(x.src_nodes[t], y.src_nodes[t]) for t in x.src_nodes)
                assert all(torch.equal(u, v) for et in x.edges
                           for u, v in zip(x.edges[et], y.edges[et]))
    assert samplers[0].relabeler.nbytes == 4 * sum(cluster.parts[0].graph.num_nodes.values())


def test_halo_references_count_exactly_or_read_a_bounded_spread_sample():
    """The halo cache's pick counts every edge of a small part, and at most ``scan_edges``
    of a large one, spread over the whole CSC: the hubs still come out on top."""
    g = torch.Generator().manual_seed(0)
    owned, halo, n = 1000, 5000, 400_000
    indices = torch.randint(0, owned + halo, (n,), generator=g, dtype=torch.int32)
    hubs = torch.tensor([owned + 7, owned + 4242, owned + 999])
    for i, hub in enumerate(hubs):        # 3%, 2%, 1% of the edges, all along the array
        indices[torch.rand(n, generator=g) < 0.03 - 0.01 * i] = int(hub)
    exact = torch.zeros(halo, dtype=torch.int32)
    halo_references(indices, owned, exact, scan_edges=n)
    local = indices.long()
    assert torch.equal(exact, torch.bincount(local[local >= owned] - owned, minlength=halo)
                       .int())
    sampled = torch.zeros(halo, dtype=torch.int32)
    halo_references(indices, owned, sampled, scan_edges=n // 20)
    assert 0 < int(sampled.sum()) <= n // 20           # read 5% of the edges
    assert torch.equal(torch.topk(sampled, 3).indices, hubs - owned)
    # the runs span the array: the last edges are counted too
    tail = torch.zeros(halo, dtype=torch.int32)
    halo_references(indices[-(n // 20) // 16:], owned, tail, scan_edges=n)
    assert bool((sampled >= tail).all())


def random_hetero_batch(g, num_nodes, ets, narrow, device):
    """Unique destinations of one or two types and random sampled sources with duplicates
    (``narrow``: drawn from 20 IDs, so most repeat); some types and edge lists empty."""
    def rand(hi, size=()):
        return torch.randint(0, hi, size, generator=g)
    dst = {"a": torch.randperm(num_nodes["a"], generator=g)[:int(rand(120)) + 1]}
    if int(rand(2)):
        dst["b"] = torch.randperm(num_nodes["b"], generator=g)[:int(rand(30))]
    edges = {}
    for et in ets:
        if et.dst not in dst:
            continue
        m = int(rand(600)) if len(dst[et.dst]) else 0
        edges[et] = (rand(max(len(dst[et.dst]), 1), (m,)),
                     rand(20 if narrow else num_nodes[et.src], (m,)))
    return ({t: v.to(device) for t, v in dst.items()},
            {et: (d.to(device), s.to(device)) for et, (d, s) in edges.items()})


@pytest.mark.parametrize("device", DEVICES)
def test_stamp_relabel_equals_the_torch_unique_reference_batch_after_batch(device):
    """One Relabeler, as a sampler holds it, over 40 batches in a row (stale stamps from earlier
    batches must not leak, also after a failed call): the same nodes and the same edge
    endpoints by global ID as relabel_unique, destinations first, then first occurrences."""
    g = torch.Generator().manual_seed(0)
    num_nodes = {"a": 500, "b": 80}
    ets = [EdgeType("a", "r", "a"), EdgeType("b", "w", "a"), EdgeType("a", "x", "b"),
           EdgeType("b", "y", "b")]
    relabeler = Relabeler(num_nodes)
    for batch in range(40):
        if batch == 20:                                         # fails midway: still clean
            with pytest.raises(ValueError, match="not unique"):
                relabeler({"a": torch.tensor([3, 9, 3], device=device)},
                          {EdgeType("a", "r", "a"): (torch.tensor([0, 1], device=device),
                                                     torch.tensor([7, 3], device=device))})
        dst, edges = random_hetero_batch(g, num_nodes, ets, batch % 3 == 0, device)
        block, ref = relabeler(dst, edges), relabel_unique(dst, edges)
        assert block.num_dst == ref.num_dst
        assert set(block.src_nodes) == set(ref.src_nodes)
        for t, ref_nodes in ref.src_nodes.items():
            nodes = block.src_nodes[t]
            assert nodes.device.type == device
            assert sorted(nodes.tolist()) == sorted(ref_nodes.tolist())
            assert len(set(nodes.tolist())) == len(nodes)
            ids = torch.cat([dst.get(t, nodes[:0])] +
                            [edges[et][1] for et in edges if et.src == t])
            assert nodes.tolist() == list(dict.fromkeys(ids.tolist()))   # first occurrences
        for et, (dst_pos, src_ids) in edges.items():
            src, dst_local = block.edges[et]
            ref_src, ref_dst = ref.edges[et]
            assert torch.equal(block.src_nodes[et.src][src], src_ids)
            assert torch.equal(block.src_nodes[et.src][src], ref.src_nodes[et.src][ref_src])
            assert torch.equal(dst_local, dst_pos) and torch.equal(ref_dst, dst_pos)
        if batch == 30:                           # keys run out: the arrays start over
            relabeler.next_key = {t: Relabeler._KEY_LIMIT - 100 for t in relabeler.next_key}
    assert relabeler.nbytes == 4 * (500 + 80)                  # 4 B per node, allocated once


def test_relabel_rejects_repeated_destinations():
    with pytest.raises(ValueError, match="not unique"):
        relabel({"a": torch.tensor([4, 2, 4])},
                {EdgeType("a", "r", "a"): (torch.tensor([0]), torch.tensor([1]))})


def test_counting_owner_split_equals_the_argsort_split(cora):
    cluster = Cluster(cora[3])
    book = PartitionBook(cluster.parts[0].graph)
    starts = book.starts["_N"].tolist()
    g = torch.Generator().manual_seed(0)
    cases = [torch.randperm(2708, generator=g)[:n] for n in (0, 1, 50, 2708)]
    cases.append(torch.arange(starts[1], starts[2]))                      # one owner only
    cases.append(torch.randint(0, 2708, (3000,), generator=g))            # repeats
    for ids in cases:
        got = split_by_owner(book, {"_N": ids}, 3)
        want = split_by_owner_argsort(book, {"_N": ids}, 3)
        assert [set(q) for q in got] == [set(q) for q in want]
        assert all(torch.equal(got[q][t], want[q][t]) for q in range(3) for t in want[q])
    one = split_by_owner(book, {"_N": torch.tensor([5, 1, 3])}, 1)    # a one-part graph
    assert one[0]["_N"].tolist() == [0, 1, 2]


def test_stamp_and_unique_samplers_give_the_same_first_hop(cora):
    """The first hop's requests do not depend on the relabel, so both samplers sample the same
    edges there; their blocks hold the same nodes and edges, in different source orders."""
    cluster = Cluster(cora[3])
    stamp = cluster.sampler(0, [6, 4])
    unique = DistNeighborSampler(cluster.parts[0], cluster.servers[0], cluster.transport,
                                 [6, 4], dedup="unique")
    for batch in range(4):
        seeds = torch.randperm(2708, generator=torch.Generator().manual_seed(batch))[:300]
        a = stamp.sample("_N", seeds, seed=batch).blocks[-1]
        b = unique.sample("_N", seeds, seed=batch).blocks[-1]
        assert a.num_dst == b.num_dst
        assert torch.equal(a.src_nodes["_N"][:len(seeds)], seeds)
        assert torch.equal(b.src_nodes["_N"][:len(seeds)], seeds)
        assert sorted(a.src_nodes["_N"].tolist()) == sorted(b.src_nodes["_N"].tolist())
        (ea,), (eb,) = block_edges_orig(cluster, a).values(), block_edges_orig(cluster, b).values()
        assert torch.equal(ea[0], eb[0]) and torch.equal(ea[1], eb[1])
