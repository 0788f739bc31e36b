"""Our batches are PyG's: real PyG layers and models run on batches sampled from 2-part graphs
(in one process, LocalTransport) and give what PyG gives on the same edges of the input graph.

The reference of every check is built from the *chunked input* by original IDs, not from the
batch's own positions: the input features of every node, and a graph over all of its nodes
holding the batch's edges mapped to original IDs. A convolution's rows at the seeds must be
the same either way, so positions, prefixes, row order of ``x`` and the direction of
``edge_index`` are all checked at once. The whole-subgraph view is compared with PyG
``NeighborLoader``'s layout rebuilt from the input's edge lists (breadth first, all
neighbors); PyG's own sampler needs pyg-lib or torch-sparse, which this environment lacks.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch
from torch_geometric import nn as pygnn
from torch_geometric.data import Data, HeteroData
from torch_geometric.nn.models import GCN, GraphSAGE
from torch_geometric.transforms import ToUndirected
from torch_geometric.utils import trim_to_layer

from conftest import dispatched, edges_of, node_data_of
from test_dist_sampler import Cluster
from graphprep.trainer.data.batches import make_batch
from graphprep.trainer.data.features import FeatureFetcher

pytestmark = pytest.mark.timeout(150)

FANOUTS = [5, 4]
ATOL = 1e-4


class Graph:
    """A dispatched graph served in this process, and its chunked input by original ID:
    ``x[t]`` the input rows (a constant 1 where a type has no features, as the trainer
    feeds it), ``edges[et]`` the ``[2, E]`` original-ID edges, ``num_nodes[t]``."""

    def __init__(self, chunked, graph_json):
        self.cluster = Cluster(graph_json)
        meta = self.cluster.parts[0].graph
        self.types, self.etypes = list(meta.node_types), list(meta.edge_types)
        self.target = next(t for t in self.types if "label" in meta.node_feats.get(t, {}))
        self.num_nodes = dict(meta.num_nodes)
        self.x = {t: torch.from_numpy(node_data_of(chunked, t, "feat")).float()
                  if "feat" in meta.node_feats.get(t, {}) else torch.ones(n, 1)
                  for t, n in self.num_nodes.items()}
        self.edges = {key(et): torch.from_numpy(np.stack(edges_of(chunked, str(et)))).long()
                      for et in self.etypes}
        self.multiplicity = {et: Counter(pairs(ei)) for et, ei in self.edges.items()}

    def batch(self, seeds_orig: torch.Tensor, fanouts: list[int], p: int = 1, seed: int = 3):
        """The Batch rank ``p`` makes for these seeds (original IDs of the target type; any
        owner part)."""
        c = self.cluster
        seeds = c.new_of_orig(self.target, seeds_orig)
        fetcher = FeatureFetcher(c.parts[p], c.servers[p], c.transport)
        blocks = c.sampler(p, fanouts).sample_blocks({self.target: seeds}, seed=seed)
        return make_batch(blocks, fetcher, c.parts[p].graph, self.target, {self.target: seeds})


def key(et) -> tuple[str, str, str]:
    return (et.src, et.rel, et.dst)


def orig_edges(batch, edge_index_dict) -> dict:
    """``edge_index_dict`` (positions into the batch's nodes) in original IDs."""
    return {et: torch.stack([batch.orig_id_dict[et[0]][ei[0]], batch.orig_id_dict[et[2]][ei[1]]])
            for et, ei in edge_index_dict.items()}


def pairs(ei: torch.Tensor) -> list[tuple[int, int]]:
    return list(zip(ei[0].tolist(), ei[1].tolist()))


def seeds_orig(g: Graph, n: int, seed: int = 0) -> torch.Tensor:
    """``n`` target nodes spread over both parts (original IDs)."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randperm(g.num_nodes[g.target], generator=gen)[:n]


@pytest.fixture(scope="module")
def cora(scheduler, cora_chunked, tmp_path_factory):
    root = tmp_path_factory.mktemp("cora-pyg")
    return Graph(cora_chunked, dispatched(scheduler, cora_chunked, root / "d2", 2,
                                          "--method", "metis"))


@pytest.fixture(scope="module")
def mag(mag_parts):
    return Graph(*mag_parts)


@pytest.fixture(params=["cora", "mag"])
def graph(request):
    return request.getfixturevalue(request.param)


# --- the layers ------------------------------------------------------------------------------

def test_inputs_and_every_layer_edge_are_the_input_graphs(graph):
    batch = graph.batch(seeds_orig(graph, 64), FANOUTS)
    c = graph.cluster
    for t in graph.types:
        assert torch.equal(c.orig[t][batch.n_id_dict[t]], batch.orig_id_dict[t])
        assert torch.equal(batch.x_dict[t], graph.x[t][batch.orig_id_dict[t]])
        assert len(batch.orig_id_dict[t].unique()) == len(batch.orig_id_dict[t])
    assert batch.batch_size == 64 and batch.layers[-1].num_dst_dict[graph.target] == 64
    assert torch.equal(batch.orig_id_dict[graph.target][:64], seeds_orig(graph, 64))
    assert batch.layers[0].num_src_dict == {t: len(v) for t, v in batch.x_dict.items()}
    for lower, upper in zip(batch.layers, batch.layers[1:]):     # sources nest as prefixes
        assert upper.num_src_dict == lower.num_dst_dict
    for layer in batch.layers:
        assert set(layer.edge_index_dict) == set(graph.edges)    # every type, empty or not
        for et, ei in layer.edge_index_dict.items():
            assert ei.dtype == torch.int64 and ei.shape[0] == 2
            if ei.shape[1]:
                assert int(ei[0].max()) < layer.num_src_dict[et[0]]
                assert int(ei[1].max()) < layer.num_dst_dict[et[2]]
        for et, ei in orig_edges(batch, layer.edge_index_dict).items():
            # true input edges, each at most as often as the input holds it (the synthetic
            # graph has repeated edges)
            assert not Counter(pairs(ei)) - graph.multiplicity[et], et
    assert sum(ei.shape[1] for layer in batch.layers for ei in layer.edge_index_dict.values())


CONVS = {
    "SAGEConv": lambda i, o: pygnn.SAGEConv(i, o),
    "GATConv": lambda i, o: pygnn.GATConv(i, o, heads=2, concat=False),
    "GATConv-edge_dim": lambda i, o: pygnn.GATConv(i, o, heads=2, concat=False, edge_dim=3),
    "GATv2Conv": lambda i, o: pygnn.GATv2Conv(i, o, heads=2, concat=False),
    "GraphConv": lambda i, o: pygnn.GraphConv(i, o),
    "TransformerConv": lambda i, o: pygnn.TransformerConv(i, o, heads=2, concat=False),
}


@pytest.mark.parametrize("name", list(CONVS))
def test_pyg_convolutions_on_the_layers_equal_pyg_on_the_input_graph(cora, name):
    """Two layers of ``conv((h, h[:layer.num_dst]), layer.edge_index)`` (bipartite, as the
    README tells users) against (a) the same convolutions on each layer seen as one graph over
    its sources, ``conv(h, edge_index)[:num_dst]``, and (b) on all 2708 Cora nodes with each
    layer's edges in original IDs. GAT adds self-loops in all three: for the ``num_dst``
    nodes that are both source and destination in the bipartite form (the sources' prefix),
    for every node in the others; the destinations' rows see the same self-loop either way."""
    torch.manual_seed(0)
    convs = [CONVS[name](cora.x["_N"].shape[1], 16), CONVS[name](16, 7)]
    for conv in convs:
        conv.eval()
    batch = cora.batch(seeds_orig(cora, 64), [6, 4])
    with_attr = name.endswith("edge_dim")

    def attr(ei_orig):
        """An edge attribute that is a function of the edge's original ends: the same in
        all three forms."""
        return torch.stack([torch.sin(ei_orig[0] * 0.1), torch.cos(ei_orig[1] * 0.3),
                            (ei_orig[0] % 5).float()], 1)

    h = local = batch.x
    full = cora.x["_N"]
    with torch.no_grad():
        for i, (conv, layer) in enumerate(zip(convs, batch.layers)):
            ei_orig = orig_edges(batch, layer.edge_index_dict)[("_N", "_E", "_N")]
            extra = {"edge_attr": attr(ei_orig)} if with_attr else {}
            h = conv((h, h[:layer.num_dst]), layer.edge_index, **extra)
            local = conv(local, layer.edge_index, **extra)[:layer.num_dst]
            full = conv(full, ei_orig, **extra)
            if i == 0:
                h, local, full = h.relu(), local.relu(), full.relu()
            assert h.shape[0] == layer.num_dst
            torch.testing.assert_close(h, local, atol=ATOL, rtol=1e-4)
            dst_orig = batch.orig_id[:layer.num_dst]
            torch.testing.assert_close(h, full[dst_orig], atol=ATOL, rtol=1e-4)
    assert h.shape == (64, 7)


def full_hetero(graph: Graph, edge_dict: dict) -> HeteroData:
    """Every node of ``graph`` (its input rows) with only ``edge_dict``'s edges (original
    IDs)."""
    data = HeteroData()
    for t in graph.types:
        data[t].x = graph.x[t]
    for et, ei in edge_dict.items():
        data[et].edge_index = ei
    return data


@pytest.mark.filterwarnings("ignore:There exist node types")
def test_hetero_conv_on_the_layers_equals_it_on_the_input_graph(mag):
    """``HeteroConv`` per layer, ``conv(h_dict, layer.edge_index_dict)`` cut to each type's
    destinations, against the same module over every node of the graph with each layer's
    edges in original IDs."""
    torch.manual_seed(0)
    dims = {t: x.shape[1] for t, x in mag.x.items()}
    ets = list(mag.edges)
    hetero = [pygnn.HeteroConv({et: pygnn.SAGEConv((dims[et[0]], dims[et[2]]), 16)
                                for et in ets}, aggr="sum"),
              pygnn.HeteroConv({et: pygnn.GraphConv((16, 16), 8) for et in ets}, aggr="sum")]
    batch = mag.batch(seeds_orig(mag, 48), FANOUTS)

    def step(i, conv, h, edge_index_dict, num_dst):
        """One layer; a type that receives no edges gets zeros (HeteroConv keeps no rows)."""
        out = conv(h, edge_index_dict)
        out = {t: (v.relu() if i == 0 else v)[:num_dst[t]] for t, v in out.items()}
        return out, {t: out.get(t, torch.zeros(num_dst[t], 16)) for t in num_dst}

    h, full = batch.x_dict, dict(mag.x)
    with torch.no_grad():
        for i, (conv, layer) in enumerate(zip(hetero, batch.layers)):
            out, h = step(i, conv, h, layer.edge_index_dict, layer.num_dst_dict)
            ref, full = step(i, conv, full, orig_edges(batch, layer.edge_index_dict),
                             mag.num_nodes)
            assert mag.target in out
            for t, v in out.items():
                ids = batch.orig_id_dict[t][:layer.num_dst_dict[t]]
                torch.testing.assert_close(v, ref[t][ids], atol=ATOL, rtol=1e-4)
    assert h[mag.target].shape == (48, 8)


# --- the whole subgraph (NeighborLoader's layout) ----------------------------------------------

def neighbor_loader_layout(graph: Graph, seeds: torch.Tensor, hops: int):
    """PyG ``NeighborLoader``'s subgraph of ``seeds`` with every neighbor, in original IDs,
    from the input's edge lists: ``nodes[t][k]`` the nodes first reached at hop ``k`` (hop 0:
    the seeds), ``edges[et][k]`` the edges sampled at hop ``k + 1``: every in-edge of the
    nodes first reached at hop ``k``."""
    seen = {t: set() for t in graph.types}
    seen[graph.target] = set(seeds.tolist())
    nodes = {t: [set()] for t in graph.types}
    nodes[graph.target][0] = set(seeds.tolist())
    edges = {et: [] for et in graph.edges}
    for k in range(hops):
        new = {t: set() for t in graph.types}
        for et, ei in graph.edges.items():
            frontier = torch.tensor(sorted(nodes[et[2]][k]), dtype=torch.long)
            e = ei[:, torch.isin(ei[1], frontier)]
            edges[et].append(Counter(pairs(e)))
            new[et[0]] |= set(e[0].tolist()) - seen[et[0]]
        for t in graph.types:
            seen[t] |= new[t]
            nodes[t].append(new[t])
    return nodes, edges


def hop_slices(counts: list[int]) -> list[slice]:
    ends = np.cumsum([0] + list(counts))
    return [slice(int(a), int(b)) for a, b in zip(ends[:-1], ends[1:])]


@pytest.mark.parametrize("fanouts", [[-1, -1], [5, 4]], ids=["all", "sampled"])
def test_whole_subgraph_is_laid_out_as_neighbor_loader_lays_it_out(graph, fanouts):
    seeds = seeds_orig(graph, 12 if fanouts[0] < 0 else 64)
    batch = graph.batch(seeds, fanouts)
    hops = len(fanouts)
    ref_nodes, ref_edges = neighbor_loader_layout(graph, seeds, hops) if fanouts[0] < 0 \
        else (None, None)
    edge_orig = orig_edges(batch, batch.edge_index_dict)
    for t in graph.types:
        counts = batch.num_sampled_nodes_dict[t]
        assert len(counts) == hops + 1
        assert sum(counts) == len(batch.x_dict[t]) == batch.layers[0].num_src_dict[t]
        if ref_nodes is not None:                           # hop by hop, the same nodes
            got = [set(batch.orig_id_dict[t][s].tolist()) for s in hop_slices(counts)]
            assert got == ref_nodes[t], t
    for et, ei in batch.edge_index_dict.items():
        counts = batch.num_sampled_edges_dict[et]
        assert len(counts) == hops and sum(counts) == ei.shape[1]
        dst_hops = hop_slices(batch.num_sampled_nodes_dict[et[2]])
        src_hops = hop_slices(batch.num_sampled_nodes_dict[et[0]])
        for k, s in enumerate(hop_slices(counts)):
            # hop k + 1's edges point into the nodes first reached at hop k, from nodes
            # reached by hop k + 1
            assert bool(((ei[1, s] >= dst_hops[k].start) & (ei[1, s] < dst_hops[k].stop)).all())
            assert bool((ei[0, s] < src_hops[k + 1].stop).all())
            got = Counter(pairs(edge_orig[et][:, s]))
            assert not got - graph.multiplicity[et]             # input edges, none repeated
            if ref_edges is not None:
                assert got == ref_edges[et][k], (et, k)
    if ref_nodes is not None:
        assert sum(batch.num_sampled_nodes_dict[graph.target]) > 12 * 2


def test_pyg_models_and_trim_to_layer_run_on_the_whole_subgraph(cora):
    """``model(batch.x, batch.edge_index)[:batch.batch_size]`` with PyG's ``GraphSAGE`` equals
    the model over all Cora nodes with the subgraph's edges in original IDs, and equals itself
    trimmed layer by layer (``num_sampled_*_per_hop``: exact only when each hop's edges point
    into the previous hop's nodes); ``trim_to_layer`` keeps what is left at each layer, and
    ``GCN`` runs."""
    batch = cora.batch(seeds_orig(cora, 64), FANOUTS)
    torch.manual_seed(0)
    sage = GraphSAGE(-1, 16, num_layers=2, out_channels=7).eval()
    with torch.no_grad():
        out = sage(batch.x, batch.edge_index)[:batch.batch_size]
        trimmed = sage(batch.x, batch.edge_index,
                       num_sampled_nodes_per_hop=batch.num_sampled_nodes,
                       num_sampled_edges_per_hop=batch.num_sampled_edges)[:batch.batch_size]
        ref = sage(cora.x["_N"], orig_edges(batch, batch.edge_index_dict)[("_N", "_E", "_N")])
    assert out.shape == (64, 7)
    torch.testing.assert_close(out, ref[batch.orig_id[:64]], atol=ATOL, rtol=1e-4)
    torch.testing.assert_close(out, trimmed, atol=ATOL, rtol=1e-4)
    nodes, edges = batch.num_sampled_nodes, batch.num_sampled_edges
    x, ei, _ = trim_to_layer(1, nodes, edges, batch.x, batch.edge_index)
    assert len(x) == sum(nodes[:-1]) and ei.shape[1] == sum(edges[:-1])
    assert int(ei.max()) < len(x)
    gcn = GCN(batch.x.shape[1], 16, num_layers=2, out_channels=7).eval()
    with torch.no_grad():
        logits = gcn(batch.x, batch.edge_index)[:batch.batch_size]
    assert logits.shape == (64, 7) and bool(torch.isfinite(logits).all())


# --- to_pyg -----------------------------------------------------------------------------------

def test_to_pyg_gives_a_valid_data(cora):
    batch = cora.batch(seeds_orig(cora, 64), FANOUTS)
    batch.y = torch.arange(64) % 7
    data = batch.to_pyg()
    assert isinstance(data, Data) and data.validate()
    assert torch.equal(data.x, batch.x) and torch.equal(data.edge_index, batch.edge_index)
    assert torch.equal(data.n_id, batch.orig_id) and data.batch_size == 64
    assert data.num_nodes == len(batch.x) and torch.equal(data.y, batch.y)
    assert data.num_sampled_nodes == batch.num_sampled_nodes


class HeteroGNN(torch.nn.Module):
    """PyG's ``to_hetero`` example model (a convolution plus a skip per layer)."""

    def __init__(self):
        super().__init__()
        self.conv1, self.lin1 = pygnn.SAGEConv((-1, -1), 16), pygnn.Linear(-1, 16)
        self.conv2, self.lin2 = pygnn.SAGEConv((-1, -1), 8), pygnn.Linear(-1, 8)

    def forward(self, x, edge_index):
        x = (self.conv1(x, edge_index) + self.lin1(x)).relu()
        return self.conv2(x, edge_index) + self.lin2(x)


def test_to_pyg_heterodata_runs_to_hetero_and_rgcn_as_on_the_input_graph(mag):
    """The HeteroData validates, and two PyG models on it give the seeds' rows they give over
    every node of the graph holding the same edges by original ID: a ``to_hetero`` model on
    ``x_dict``/``edge_index_dict`` (PyG's to_hetero needs every node type to receive messages,
    so reverse edges are added with ``ToUndirected``, as PyG's MAG examples do, on both), and
    ``RGCNConv`` on ``to_homogeneous()`` (inputs first projected to one width per type)."""
    batch = mag.batch(seeds_orig(mag, 48), FANOUTS)
    data = batch.to_pyg()
    assert isinstance(data, HeteroData) and data.validate()
    assert set(data.node_types) == set(mag.types) and set(data.edge_types) == set(mag.edges)
    assert data[mag.target].batch_size == 48
    for t in mag.types:
        assert torch.equal(data[t].n_id, batch.orig_id_dict[t])
    nodes, edges = batch.num_sampled_nodes_dict, batch.num_sampled_edges_dict
    x, ei, _ = trim_to_layer(1, nodes, edges, data.x_dict, data.edge_index_dict)
    for t, v in x.items():                            # the last hop's nodes and edges gone
        assert len(v) == sum(nodes[t][:-1])
    for et, e in ei.items():
        assert e.shape[1] == sum(edges[et][:-1])
        assert not e.shape[1] or (int(e[0].max()) < len(x[et[0]]) and
                                  int(e[1].max()) < len(x[et[2]]))
    full = full_hetero(mag, orig_edges(batch, batch.edge_index_dict))
    torch.manual_seed(0)
    undirected, full_undirected = ToUndirected()(data.clone()), ToUndirected()(full.clone())
    model = pygnn.to_hetero(HeteroGNN(), undirected.metadata(), aggr="sum").eval()
    with torch.no_grad():
        model(undirected.x_dict, undirected.edge_index_dict)       # sizes the lazy layers
        out = model(undirected.x_dict, undirected.edge_index_dict)[mag.target][:48]
        ref = model(full_undirected.x_dict, full_undirected.edge_index_dict)[mag.target]
    assert out.shape == (48, 8)
    torch.testing.assert_close(out, ref[batch.orig_id_dict[mag.target][:48]], atol=ATOL,
                               rtol=1e-4)

    proj = {t: torch.nn.Linear(x.shape[1], 8) for t, x in mag.x.items()}
    rgcn = [pygnn.RGCNConv(8, 16, len(mag.edges)), pygnn.RGCNConv(16, 8, len(mag.edges))]

    def run(hdata: HeteroData, seed_rows: torch.Tensor) -> torch.Tensor:
        for t in hdata.node_types:
            hdata[t].x = proj[t](hdata[t].x)
            hdata[t].num_nodes = len(hdata[t].x)
        homo = hdata.to_homogeneous(node_attrs=["x"], edge_attrs=[])
        h = rgcn[0](homo.x, homo.edge_index, homo.edge_type).relu()
        h = rgcn[1](h, homo.edge_index, homo.edge_type)
        offset = hdata.node_types.index(mag.target)
        first = sum(hdata[t].num_nodes for t in hdata.node_types[:offset])
        return h[first + seed_rows]

    with torch.no_grad():
        ours = run(data.clone(), torch.arange(48))
        theirs = run(full_hetero(mag, orig_edges(batch, batch.edge_index_dict)),
                     batch.orig_id_dict[mag.target][:48])
    torch.testing.assert_close(ours, theirs, atol=ATOL, rtol=1e-4)
