"""``--edge-feat``: the sampled edges' data rows come back with the sample (no extra request),
each row the edge's own (checked by the endpoints' original IDs, which the rows encode), on
homogeneous and heterogeneous graphs, from the local and a remote owner, after link
prediction's held-out edges are dropped and a batch's positives excluded; a user's module
trains on them over real ranks with as many requests as without them."""

import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from conftest import dispatched, run_prep
from graphprep.formats import ChunkFiles, EdgeType, load_chunked_graph, read_edge_chunk
from graphprep.formats.output import write_array_chunk
from graphprep.trainer.data.batches import make_batch
from graphprep.trainer.data.features import FeatureFetcher
from graphprep.trainer.data.link_data import exclusion_keys, split_edges, without_held_out
from graphprep.trainer.data.link_loader import seed_nodes
from graphprep.trainer.sampling.dist_sampler import DistNeighborSampler
from graphprep.trainer.sampling.partition import LocalPart
from graphprep.trainer.sampling.service import LocalTransport, PartServer

from conftest import ROOT  # noqa: E402  (the repository)
ET = EdgeType("_N", "_E", "_N")
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="CUDA-only path: no GPU on this machine; the same "
                                          "code runs on the device machine when lent"))]
WIDTH = 3          # a row: source original ID, destination original ID, edge type code


def with_edge_data(chunked, out, name, skip=()):
    """A chunked graph at ``out``: ``chunked`` (its chunk files named by absolute path) plus
    edge data ``name`` on every edge type but ``skip``, float32 rows ``[src, dst, code]`` (the
    endpoints' original IDs, ``code`` the type's position + 1), one data chunk per edge chunk.
    Returns ``out``."""
    g = load_chunked_graph(str(chunked))

    def absolute(files):
        return dataclasses.replace(files, files=tuple(os.path.abspath(g.path(f))
                                                      for f in files.files))
    edge_data = {et: {k: absolute(v) for k, v in d.items()} for et, d in g.edge_data.items()}
    for code, et in enumerate(g.edge_types, 1):
        if str(et) in skip:
            continue
        rels = []
        for k, f in enumerate(g.edges[et].files):
            src, dst = read_edge_chunk(g.path(f), g.edges[et])
            rels.append(f"edge_data/{et.dirname}/{name}/part-{k:05d}.npy")
            rows = np.stack([src, dst, np.full_like(src, code)], 1).astype(np.float32)
            write_array_chunk(os.path.join(out, rels[-1]), rows)
        edge_data.setdefault(et, {})[name] = ChunkFiles("numpy", tuple(rels))
    graph = dataclasses.replace(
        g, root=str(out), edges={et: absolute(f) for et, f in g.edges.items()},
        node_data={t: {k: absolute(v) for k, v in d.items()} for t, d in g.node_data.items()},
        edge_data=edge_data)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "metadata.json"), "w") as f:
        json.dump(graph.to_json(), f)
    assert float(np.float32(max(g.num_nodes.values()))) == max(g.num_nodes.values())  # exact
    return out


@pytest.fixture(scope="module")
def cora_w(scheduler, cora_chunked, tmp_path_factory):
    """Cora with edge data ``w`` and split masks (5% val, 10% test), in 2 METIS parts:
    ``(chunked, graph.json)``. Node runs use every edge; link runs drop the held-out ones."""
    root = tmp_path_factory.mktemp("cora-w")
    with_edge_data(cora_chunked, root / "w", "w")
    run_prep(scheduler, "split-edges", root / "w", root / "s", "--etype", str(ET))
    return root / "s", dispatched(scheduler, root / "s", root / "d", 2, "--method", "metis")


@pytest.fixture(scope="module")
def mag_w(scheduler, tmp_path_factory):
    """An ogbn-mag-shaped synth graph whose edge types all have ``w`` but writes, in 2 parts:
    ``(chunked, graph.json)``."""
    root = tmp_path_factory.mktemp("mag-w")
    run_prep(scheduler, "synth", root / "g", "--hetero", "--nodes", 6000, "--edges", 30000,
             "--seed", 2)
    with_edge_data(root / "g", root / "w", "w", skip=("author:writes:paper",))
    return root / "w", dispatched(scheduler, root / "w", root / "d", 2)


class Served:
    """Both parts of a graph served in this process (``link``: held-out edges dropped, as the
    trainer does), new -> original node IDs, and a sampler per part."""

    def __init__(self, graph_json, placement="cpu", link=False, stored_tail=True):
        self.parts = [LocalPart.load(graph_json, p) for p in range(2)]
        if not stored_tail:        # as parts dispatched before held-out edges came last
            self.parts = [LocalPart(dataclasses.replace(p.graph, held_out_last=()), p.p, p.orig_ids,
                                    p.halo_ids, p.csc, p.node_data) for p in self.parts]
        served = [without_held_out(p) if link else p for p in self.parts]
        self.servers = {p: PartServer(part.place(placement)) for p, part in enumerate(served)}
        self.served = served
        self.transport = LocalTransport(self.servers)
        self.graph = self.parts[0].graph
        self.orig = {t: torch.cat([p.orig_ids[t] for p in self.parts])
                     for t in self.graph.node_types}

    def sampler(self, p, fanouts, edge_feat="w", device="cpu", dedup="stamp"):
        return DistNeighborSampler(self.served[p], self.servers[p], self.transport, fanouts,
                                   device, dedup=dedup, edge_feat=edge_feat)

    def owner(self, ntype, new_ids):
        return (new_ids >= self.graph.node_map[ntype][1][0]).long()

    def batch(self, p, blocks, seeds, target):
        fetcher = FeatureFetcher(self.served[p], self.servers[p], self.transport)
        return make_batch(blocks, fetcher, self.graph, target, seeds)


def code_of(graph):
    return {(et.src, et.rel, et.dst): i for i, et in enumerate(graph.edge_types, 1)}


def check_rows(orig_id, edge_index, attr, code):
    """Row ``i`` of ``attr`` is edge ``i``'s: its endpoints' original IDs and type code."""
    assert attr.dtype == torch.float32 and attr.shape == (edge_index.shape[1], WIDTH)
    assert torch.equal(attr[:, 0].long(), orig_id[0][edge_index[0]])
    assert torch.equal(attr[:, 1].long(), orig_id[1][edge_index[1]])
    assert (attr[:, 2] == code).all()


def check_batch(batch, graph, with_w):
    """Every layer's and the whole subgraph's rows belong to their edges; the types without
    the array have none. Returns the number of edges checked per edge type (layers)."""
    codes, seen = code_of(graph), {}
    views = [(layer.edge_index_dict, layer.edge_attr_dict) for layer in batch.layers]
    views.append((batch.edge_index_dict, batch.edge_attr_dict))      # PyG NeighborLoader's
    for i, (edge_index, attrs) in enumerate(views):
        for key, ei in edge_index.items():
            if key not in with_w:
                assert key not in attrs
                continue
            if ei.shape[1] and i < len(batch.layers):
                seen[key] = seen.get(key, 0) + ei.shape[1]
            ends = (batch.orig_id_dict[key[0]].cpu(), batch.orig_id_dict[key[2]].cpu())
            check_rows(ends, ei.cpu(), attrs[key].cpu(), codes[key])
    return seen


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dedup", ["stamp", "unique"])
def test_rows_are_the_sampled_edges_own_from_local_and_remote_owners(cora_w, device, dedup):
    """Seeds of both parts sampled from part 0: part 1 answers through the transport. The
    rows cost no request, and exactly 12 bytes (3 float32) per edge a remote owner returns."""
    _, graph_json = cora_w
    served = Served(graph_json, placement="cuda" if device == "cuda" else "cpu")
    seeds = torch.randperm(2708, generator=torch.Generator().manual_seed(0))[:300]
    plain = served.sampler(0, [4, 3], edge_feat=None, device=device, dedup=dedup)
    with_w = served.sampler(0, [4, 3], device=device, dedup=dedup)
    a = plain.sample_blocks({"_N": seeds}, 5)
    cost_plain = served.transport.take_counters()
    b = with_w.sample_blocks({"_N": seeds}, 5)
    cost_w = served.transport.take_counters()
    remote_edges = 0
    for x, y in zip(a, b):            # the same sample, rows added
        assert x.edge_attr is None and set(y.edge_attr) == {ET}
        assert torch.equal(x.edges[ET][0], y.edges[ET][0])
        assert torch.equal(x.edges[ET][1], y.edges[ET][1])
        assert y.edge_attr[ET].device.type == device
        dst = y.src_nodes["_N"][y.edges[ET][1]].cpu()
        remote_edges += int(served.owner("_N", dst).sum())
    assert remote_edges > 100
    assert cost_w["rpc_requests"] == cost_plain["rpc_requests"] > 0
    assert cost_w["rpc_bytes_sent"] == cost_plain["rpc_bytes_sent"]
    assert cost_w["rpc_bytes_received"] - cost_plain["rpc_bytes_received"] == 12 * remote_edges
    batch = served.batch(0, b, {"_N": seeds}, "_N")
    seen = check_batch(batch, served.graph, {(ET.src, ET.rel, ET.dst)})
    assert seen[(ET.src, ET.rel, ET.dst)] == sum(len(blk.edges[ET][0]) for blk in b)
    assert torch.equal(batch.edge_attr, batch.edge_attr_dict[("_N", "_E", "_N")])
    assert batch.edge_attr.shape[0] == batch.edge_index.shape[1] < seen[("_N", "_E", "_N")]


def test_heterogeneous_rows_per_type_and_none_for_a_type_without_the_array(mag_w):
    _, graph_json = mag_w
    served = Served(graph_json)
    graph = served.graph
    seeds = {t: torch.arange(0, graph.num_nodes[t], max(1, graph.num_nodes[t] // 150))
             for t in ("paper", "institution", "field_of_study")}
    for p in (0, 1):
        blocks = served.sampler(p, [5, 5]).sample_blocks(seeds, 11)
        for block in blocks:
            assert block.edge_attr and all(et.rel != "writes" for et in block.edge_attr)
        batch = served.batch(p, blocks, seeds, "paper")
        with_w = {k for k in code_of(graph) if k[1] != "writes"}
        seen = check_batch(batch, graph, with_w)
        assert set(seen) == with_w                  # every type with w had edges to check
        writes = ("author", "writes", "paper")
        assert sum(layer.edge_index_dict[writes].shape[1] for layer in batch.layers) > 0
        assert served.transport.take_counters()["rpc_requests"] > 0


@pytest.mark.parametrize("stored_tail", [True, False], ids=["tail", "copy"])
def test_link_rows_follow_the_held_out_filter_and_the_exclusion(cora_w, stored_tail):
    """The served CSC lacks the held-out edges: served up to each destination's stored
    message_end (tail), or, for parts dispatched before that, a filtered copy whose positions
    are not the stored rows' (rows gathered by served position would be other edges': checked
    below, so this test can fail). With exclusion, the rows still belong to the edges
    returned."""
    _, graph_json = cora_w
    served = Served(graph_json, link=True, stored_tail=stored_tail)
    part = served.served[0]
    csc = part.csc[ET]
    if stored_tail:
        assert csc.stored_pos is None and (csc.ends < csc.indptr[1:]).any()
    else:
        assert csc.stored_pos is not None and \
            len(csc.stored_pos) < len(served.parts[0].csc[ET].indices)
    s_new, d_new = part.csc_edges(ET)
    rows = part.edge_data(ET, "w")                     # served order, after the filter
    ends = (served.orig["_N"], served.orig["_N"])
    check_rows(ends, torch.stack([s_new, d_new]), rows, 1)
    if not stored_tail:
        naive = part.stored_edge_data(ET, "w")[:len(s_new)]
        assert not torch.equal(naive[:, 0].long(), served.orig["_N"][s_new])
    positives = split_edges(served.parts[0], ET)["train"]
    batch_src, batch_dst = positives.src[:64], positives.dst[:64]
    seeds, _, _ = seed_nodes(ET, batch_src, batch_dst)
    exclude = exclusion_keys(part, ET, batch_src, batch_dst)
    pos_keys = set(zip(batch_src.tolist(), batch_dst.tolist()))
    pos_keys |= {(d, s) for s, d in pos_keys}
    held = set()                       # both parts' held-out edges, by new IDs
    for full, kept in zip(served.parts, served.served):
        held |= set(zip(*(v.tolist() for v in full.csc_edges(ET)))) - set(
            zip(*(v.tolist() for v in kept.csc_edges(ET))))
    assert held

    def sampled(p, fanouts, key, excluded):
        """(pairs, edges checked) of a batch sampled from part ``p``; rows checked."""
        pairs, total = set(), 0
        for block in served.sampler(p, fanouts).sample_blocks(seeds, key, exclude=excluded):
            s, d = block.edges[ET]
            s_ids, d_ids = block.src_nodes["_N"][s], block.src_nodes["_N"][d]
            check_rows(ends, torch.stack([s_ids, d_ids]), block.edge_attr[ET], 1)
            pairs |= set(zip(s_ids.tolist(), d_ids.tolist()))
            total += len(s)
        return pairs, total

    for p, fanouts, key in ((0, [-1, -1], 3), (1, [-1, 5], 4)):   # 1: part 0 is remote
        pairs, total = sampled(p, fanouts, key, exclude)
        assert total > 1000 and not pairs & pos_keys and not pairs & held
    assert sampled(0, [-1, -1], 3, None)[0] & pos_keys      # exclusion had edges to drop


def run_trainer(*args, env=None, timeout=300):
    cmd = [sys.executable, "-m", "graphprep.trainer", *map(str, args)]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env=env)


def test_bad_edge_feat_exits_2_before_any_rank(cora_w):
    _, graph_json = cora_w
    missing = run_trainer("--graph", graph_json, "--edge-feat", "weight", "--no-progress")
    assert missing.returncode == 2
    line = missing.stderr.strip().splitlines()[-1]
    assert "--edge-feat weight" in line and "w" in line.split("edge data:")[1], line
    assert "launching" not in missing.stderr
    mask = run_trainer("--graph", graph_json, "--edge-feat", "train_mask", "--no-progress")
    assert mask.returncode == 2 and "--edge-feat train_mask" in mask.stderr
    assert "bool" in mask.stderr.strip().splitlines()[-1]


USER_MODEL = '''
import torch
from torch import nn


class EdgeGatedMean(nn.Module):
    """Mean of neighbour messages, each gated by a linear function of its edge's row. Refuses
    a batch whose rows do not belong to their edges (columns 0, 1: endpoints' original IDs)."""

    def __init__(self, spec, scale=2708.0):
        super().__init__()
        self.edge_dim, self.scale = spec.edge_dim, scale
        dims = [spec.in_dim] + [spec.hidden] * (spec.num_layers - 1) + [spec.out_dim]
        self.own = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims, dims[1:]))
        self.nbr = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims, dims[1:]))
        self.gate = nn.ModuleList(nn.Linear(self.edge_dim, 1) for _ in dims[1:]) \\
            if self.edge_dim else None

    def forward(self, batch):
        h, orig = batch.x.float(), batch.orig_id
        for i, layer in enumerate(batch.layers):
            src, dst = layer.edge_index
            msg = h[src]
            if self.gate is not None:
                a = layer.edge_attr
                if a is None or len(a) != len(src) or not (
                        torch.equal(a[:, 0].long(), orig[src]) and
                        torch.equal(a[:, 1].long(), orig[dst])):
                    raise ValueError("edge_attr rows do not belong to their edges")
                msg = msg * torch.sigmoid(self.gate[i](a.float() / self.scale))
            agg = torch.zeros((layer.num_dst, msg.shape[1]), dtype=msg.dtype,
                              device=msg.device).index_add_(0, dst, msg)
            deg = torch.bincount(dst, minlength=layer.num_dst).clamp(min=1).unsqueeze(1)
            h = self.own[i](h[:layer.num_dst]) + self.nbr[i](agg / deg)
            if i < len(batch.layers) - 1:
                h = torch.relu(h)
        return h


def build(spec, **args):
    return EdgeGatedMean(spec, **args)
'''


def test_user_model_trains_on_edge_rows_with_the_same_requests(cora_w, tmp_path):
    """Two ranks, 2 parts: the module checks every layer's rows against its edges' endpoints
    (it raises otherwise, failing the run), and the epochs make exactly the requests of a
    run without --edge-feat, receiving more bytes: the rows ride in the sampling answers."""
    _, graph_json = cora_w
    (tmp_path / "edgemod.py").write_text(USER_MODEL)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    runs = {}
    for name, extra in (("plain", ()), ("w", ("--edge-feat", "w"))):
        metrics = tmp_path / f"{name}.json"
        proc = run_trainer("--graph", graph_json, "--model", "edgemod:build", "--fanouts",
                           "5,5", "--batch-size", 32, "--epochs", 2, "--hidden", 64,
                           "--lr", 0.02, "--cache-mb", 0, "--no-progress", "--threads", 1,
                           "--metrics-out", metrics, "--checkpoint-dir", tmp_path / f"c-{name}",
                           *extra, env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs[name] = json.loads(metrics.read_text())
    plain, w = runs["plain"]["epochs"], runs["w"]["epochs"]
    assert runs["w"]["config"]["edge_feat"] == "w"
    assert len(plain) == len(w) == 2
    for a, b in zip(plain, w):
        assert a["rpc_requests"] == b["rpc_requests"] > 0
        assert b["rpc_bytes_received"] > a["rpc_bytes_received"]
        assert b["rpc_bytes_sent"] == a["rpc_bytes_sent"]
    assert runs["w"]["summary"]["test_acc"] > 0.5     # learns: 0.737 seen; chance 0.319


def test_gat_uses_edge_rows_in_training_and_layer_wise_embed(cora_w, tmp_path):
    """The built-in gat with --edge-feat: its attention takes the rows (the spec's edge_dims),
    it trains on 2 ranks, and trainer embed, rebuilt from the checkpoint (edge_feat with it),
    runs layer-wise with the rows of every in-edge."""
    _, graph_json = cora_w
    proc = run_trainer("--graph", graph_json, "--model", "gat", "--edge-feat", "w",
                       "--model-args", '{"heads": 2}', "--fanouts", "5,5", "--batch-size", 64,
                       "--epochs", 1, "--hidden", 16, "--no-progress", "--threads", 1,
                       "--checkpoint-dir", tmp_path / "c")
    assert proc.returncode == 0, proc.stderr[-3000:]
    state = torch.load(tmp_path / "c" / "best.pt", weights_only=False)
    assert state["config"]["edge_feat"] == "w"
    assert any("lin_edge" in k for k in state["model"]), sorted(state["model"])[:10]
    out = tmp_path / "emb"
    proc = run_trainer("embed", "--graph", graph_json, "--checkpoint", tmp_path / "c",
                       "--out", out, "--no-progress")
    assert proc.returncode == 0, proc.stderr[-3000:]
    info = json.loads((out / "embed.json").read_text())
    assert info["inference"] == "layer-wise"
    assert np.isfinite(np.load(out / "_N" / "logits.npy")).all()
