"""Learnable embeddings of featureless node types (``--featureless embed``) and ``--model rgcn``.

In process: a sparse update through two parts' servers moves exactly the batch's rows, as a
single-table SparseAdam does; R-GCN layers equal a dense reference, PyG's ``RGCNConv`` with the
same weights, and their basis decomposition the full weights. End to end (2 parts, 2 ranks) on
a heterogeneous graph whose classified type has no features: R-GCN learns from embeddings what
constant inputs cannot, and checkpoints, ``--resume`` and ``trainer embed`` carry the tables.
"""

import json
import re
import shutil
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from conftest import dispatched, node_data_of, run_prep
from graphprep.trainer.batch import Batch, Layer, full_graph_batch
from graphprep.trainer.data.embeddings import EmbeddingTable, SparseEmbeddings, featureless_types
from graphprep.trainer.data.features import EMBEDDING, FeatureFetcher
from graphprep.trainer.models.rgcn import RGCN, RGCNConv, build
from graphprep.trainer.models.spec import ModelSpec
from graphprep.trainer.runtime.checkpoint import shard_paths
from graphprep.trainer.runtime.outputs import is_checkpoint_folder
from graphprep.trainer.sampling.partition import LocalPart
from graphprep.trainer.sampling.service import LocalTransport, PartServer

from conftest import ROOT  # noqa: E402  (the repository)


@pytest.fixture(scope="module")
def featureless(scheduler, tmp_path_factory):
    """An ogbn-mag-shaped synth graph (6000 nodes, 40k edges, 8 planted communities) with
    ``paper/feat`` dropped from its chunked metadata, so no node type has features, dispatched
    into 2 random parts: ``(chunked, graph.json)``. Paper labels are the communities: only
    the structure tells them."""
    root = tmp_path_factory.mktemp("featureless")
    run_prep(scheduler, "synth", root / "g", "--hetero", "--nodes", 6000, "--edges", 40000,
             "--seed", 1)
    meta = json.loads((root / "g" / "metadata.json").read_text())
    del meta["node_data"]["paper"]["feat"]
    (root / "g" / "metadata.json").write_text(json.dumps(meta))
    shutil.rmtree(root / "g" / "node_data" / "paper" / "feat")
    return root / "g", dispatched(scheduler, root / "g", root / "d", 2)


# ------------------------------------------------------------------ sparse updates, in process

def two_parts(graph_json, dim=8, lr=0.1):
    """Both parts served in-process with their tables; rank 0's SparseEmbeddings."""
    parts = [LocalPart.load(graph_json, p) for p in range(2)]
    types = featureless_types(parts[0].graph)
    tables = [EmbeddingTable(part, types, dim, lr, seed=5) for part in parts]
    servers = {}
    for p, (part, table) in enumerate(zip(parts, tables)):
        table.register(part)
        servers[p] = PartServer(part)
        servers[p].embeddings = table
    transport = LocalTransport(servers)
    fetcher = FeatureFetcher(parts[0], servers[0], transport)
    return parts, tables, SparseEmbeddings(fetcher, tables[0], transport, types, dim)


def fake_batch(ids: dict[str, torch.Tensor], dim: int) -> Batch:
    """A batch holding only what pull/push read: the nodes, and zero rows in place of their
    embeddings with one appended column (as log-degree would be)."""
    x = {t: torch.cat([torch.zeros(len(v), dim), torch.ones(len(v), 1)], 1)
         for t, v in ids.items()}
    layer = Layer({}, {t: len(v) for t, v in ids.items()}, {t: 0 for t in ids})
    return Batch([layer], x, ids, ids, {t: 0 for t in ids}, next(iter(ids)))


def test_sparse_update_moves_only_the_batch_rows_like_one_sparse_adam(featureless):
    """Two steps of a batch with nodes of both parts (part 1 is remote to rank 0): each
    part's table equals the same rows of one table per type stepped by SparseAdam with the
    batch's gradient; rows outside the batches stay bit-identical, and the first step moves
    every touched value against its gradient by the learning rate."""
    dim, lr = 8, 0.1
    parts, tables, emb = two_parts(featureless[1], dim, lr)
    types = list(tables[0].weights)
    before = {t: torch.cat([tb.weights[t].detach().clone() for tb in tables]) for t in types}
    reference = {t: torch.nn.Parameter(before[t].clone()) for t in types}
    opt = torch.optim.SparseAdam(list(reference.values()), lr=lr)
    gen = torch.Generator().manual_seed(0)
    touched = {t: torch.zeros(len(before[t]), dtype=torch.bool) for t in types}
    for step in range(2):
        ids = {}
        for t in types:
            # a random half of each part's nodes of the type: both owners get rows
            owned = [torch.arange(len(p.orig_ids[t])) + p.start(t) for p in parts]
            ids[t] = torch.cat([o[torch.randperm(len(o), generator=gen)[:max(1, len(o) // 2)]]
                                for o in owned])
            touched[t][ids[t]] = True
        batch = fake_batch(ids, dim)
        leaves = emb.pull(batch, "cpu")
        for t in types:   # the pulled rows are the tables' current rows, as leaves
            assert leaves[t].is_leaf and leaves[t].requires_grad
            assert torch.equal(batch.x_dict[t][:, :dim], reference[t].detach()[ids[t]])
            assert torch.equal(batch.x_dict[t][:, dim], torch.ones(len(ids[t])))
        targets = {t: torch.randn(len(ids[t]), dim + 1, generator=gen) for t in types}
        loss = sum((batch.x_dict[t] * targets[t]).sum() ** 2 for t in types)
        loss.backward()
        emb.push(batch, leaves)
        emb.wait()
        for t in types:
            reference[t].grad = torch.sparse_coo_tensor(ids[t].unsqueeze(0), leaves[t].grad,
                                                        reference[t].shape,
                                                        check_invariants=True)
        opt.step()
        opt.zero_grad()
        if step == 0:
            for t in types:
                now = torch.cat([tb.weights[t].detach() for tb in tables])
                g = torch.zeros_like(now)
                g[ids[t]] = leaves[t].grad
                moved = (now - before[t])[ids[t]]
                # Adam's first step: lr * g / (|g| + eps / sqrt(1 - beta2)) per value
                assert torch.allclose(moved, -lr * torch.sign(g[ids[t]]), atol=1e-4)
    for t in types:
        now = torch.cat([tb.weights[t].detach() for tb in tables])
        assert torch.equal(now, reference[t].detach())     # the same arithmetic, bit for bit
        assert torch.equal(now[~touched[t]], before[t][~touched[t]])
        assert not torch.equal(now[touched[t]], before[t][touched[t]])
        # the served node data is the table itself: reads see the update
        assert parts[1].node_data[t][EMBEDDING].data_ptr() == tables[1].weights[t].data_ptr()
    # rank 0 pushed part 1's rows over the transport, its own in place
    assert emb.counters["push_bytes"] > 0 and emb.transport.requests > 0


def test_a_refused_update_changes_nothing_and_leaves_no_gradient_behind():
    part = SimpleNamespace(p=0, start=lambda t: 10,
                           orig_ids={"a": torch.arange(5), "b": torch.arange(3)})
    table = EmbeddingTable(part, ["a", "b"], 4, 0.1, seed=0)
    before = {t: w.detach().clone() for t, w in table.weights.items()}
    with pytest.raises(ValueError, match="'b' names nodes that part 0 does not own"):
        table.apply({"a": (torch.tensor([10, 11]), torch.ones(2, 4)),
                     "b": (torch.tensor([13]), torch.ones(1, 4))})     # b owns 10..12
    assert all(torch.equal(w.detach(), before[t]) for t, w in table.weights.items())
    table.apply({"b": (torch.tensor([12]), torch.ones(1, 4))})
    assert torch.equal(table.weights["a"].detach(), before["a"])       # no stale gradient
    changed = (table.weights["b"].detach() != before["b"]).any(1)
    assert changed.tolist() == [False, False, True]


def test_initial_rows_follow_the_original_id_not_the_part(featureless):
    """The same seed gives every node the same start on any part; another seed differs."""
    parts = [LocalPart.load(featureless[1], p) for p in range(2)]
    tables = [EmbeddingTable(p, ["author"], 4, 0.1, seed=3) for p in parts]
    rows = torch.cat([tb.weights["author"].detach() for tb in tables])
    orig = torch.cat([p.orig_ids["author"] for p in parts])
    again = EmbeddingTable(parts[1], ["author"], 4, 0.1, seed=3).weights["author"].detach()
    assert torch.equal(again, tables[1].weights["author"].detach())
    from graphprep.trainer.data.embeddings import initial_rows
    assert torch.equal(initial_rows(3, "author", orig, 4), rows)
    assert not torch.equal(initial_rows(4, "author", orig, 4), rows)
    assert rows.abs().max() <= 0.5 and rows.std() > 0.25      # uniform in [-1/2, 1/2)


# ------------------------------------------------------------------ R-GCN against references

HETERO_IN = {"a": 5, "b": 3}
HETERO_ET = [("a", "r0", "a"), ("b", "r1", "a"), ("a", "r2", "b"), ("b", "r3", "b")]


def random_graph(counts, edge_types, edges=60, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = {t: torch.randn(n, HETERO_IN.get(t, 4), generator=g) for t, n in counts.items()}
    ei = {et: torch.stack([torch.randint(counts[et[0]], (edges,), generator=g),
                           torch.randint(counts[et[2]], (edges,), generator=g)])
          for et in edge_types}
    return x, ei


def dense_rgcn(conv: RGCNConv, x, ei, attrs=None):
    """One R-GCN layer by dense matrices: ``x_v W_self + b + sum_r D_r^-1 A_r (x W_r)``, with
    the edge term as a per-edge matrix averaged the same way."""
    out = {t: x[t] @ conv.self_lin[t].weight.T + conv.self_lin[t].bias for t in x}
    for et, e in ei.items():
        n_src, n_dst = len(x[et[0]]), len(x[et[2]])
        a = torch.zeros(n_dst, n_src)
        for s, d in e.T.tolist():
            a[d, s] += 1
        norm = a.sum(1, keepdim=True).clamp(min=1)
        out[et[2]] = out[et[2]] + (a / norm) @ (x[et[0]] @ conv.weight(et))
        if attrs is not None:
            per_edge = torch.zeros(n_dst, len(e.T))
            per_edge[e[1], torch.arange(len(e.T))] = 1
            proj = attrs[et] @ conv.edge_lin[":".join(et)].weight.T
            out[et[2]] = out[et[2]] + (per_edge / norm) @ proj
    return out


@pytest.mark.parametrize("num_bases", [None, 2])
def test_rgcn_layer_equals_a_dense_reference(num_bases):
    counts = {"a": 7, "b": 4}
    x, ei = random_graph(counts, HETERO_ET)
    conv = RGCNConv(HETERO_IN, 6, HETERO_ET, num_bases)
    with torch.no_grad():
        for lin in conv.self_lin.values():
            lin.bias.normal_()
    layer = Layer(ei, dict(counts), dict(counts))
    out = conv(layer, x)
    ref = dense_rgcn(conv, x, ei)
    for t in counts:
        assert torch.allclose(out[t], ref[t], atol=1e-5)


def test_rgcn_edge_data_is_a_projection_added_to_the_message():
    counts = {"a": 7, "b": 4}
    x, ei = random_graph(counts, HETERO_ET)
    dims = {HETERO_ET[1]: 3, HETERO_ET[2]: 2}
    attrs = {et: torch.randn(ei[et].shape[1], d) for et, d in dims.items()}
    conv = RGCNConv(HETERO_IN, 6, HETERO_ET, edge_dims=dims)
    out = conv(Layer(ei, dict(counts), dict(counts), attrs), x)
    plain = dense_rgcn(conv, x, ei)
    with_attr = {t: plain[t].clone() for t in plain}
    for et in dims:    # only the edge types with data get the term
        extra = dense_rgcn(conv, x, {et: ei[et]}, {et: attrs[et]})
        extra_plain = dense_rgcn(conv, x, {et: ei[et]})
        with_attr[et[2]] += extra[et[2]] - extra_plain[et[2]]
    for t in counts:
        assert torch.allclose(out[t], with_attr[t], atol=1e-5)
    with pytest.raises(ValueError, match="carries none"):
        conv(Layer(ei, dict(counts), dict(counts)), x)


@pytest.mark.parametrize("num_bases", [None, 2])
def test_rgcn_layer_equals_pyg_rgcnconv_with_the_same_weights(num_bases):
    """One node type, three relations: PyG's RGCNConv (mean aggregation per relation, root
    weight, bias) with our weights copied in gives the same output."""
    from torch_geometric.nn import RGCNConv as PygRGCN
    n, ets = 20, [("n", f"r{i}", "n") for i in range(3)]
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 4, generator=g)
    ei = {et: torch.randint(n, (2, 30), generator=g) for et in ets}
    ours = RGCNConv({"n": 4}, 5, ets, num_bases)
    pyg = PygRGCN(4, 5, len(ets), num_bases=num_bases, aggr="mean")
    with torch.no_grad():
        if num_bases:
            pyg.weight.copy_(ours.bases["4"])
            pyg.comp.copy_(torch.cat([ours.coefficients[":".join(et)] for et in ets]))
        else:
            pyg.weight.copy_(torch.stack([ours.weights[":".join(et)] for et in ets]))
        pyg.root.copy_(ours.self_lin["n"].weight.T)
        pyg.bias.copy_(torch.randn(5, generator=g))
        ours.self_lin["n"].bias.copy_(pyg.bias)
    edge_index = torch.cat([ei[et] for et in ets], 1)
    edge_type = torch.cat([torch.full((30,), i) for i in range(len(ets))])
    expected = pyg(x, edge_index, edge_type)
    got = ours(Layer(ei, {"n": n}, {"n": n}), {"n": x})["n"]
    assert torch.allclose(got, expected, atol=1e-5)


def test_bases_with_identity_coefficients_equal_the_full_weights():
    """B = R bases holding the full model's weights, coefficients the identity: the same
    layer, for a whole 2-layer model and through layer-wise calls."""
    counts = {"a": 7, "b": 4}
    x, ei = random_graph(counts, HETERO_ET)
    # one input width, so one basis set serves every relation
    x = {t: torch.randn(n, 4) for t, n in counts.items()}
    full = RGCN({"a": 4, "b": 4}, 4, 3, HETERO_ET, 2, dropout=0.0)
    based = RGCN({"a": 4, "b": 4}, 4, 3, HETERO_ET, 2, dropout=0.0, num_bases=len(HETERO_ET))
    with torch.no_grad():
        for fl, bl in zip(full.layers, based.layers):
            bl.self_lin.load_state_dict(fl.self_lin.state_dict())
            bl.bases["4"].copy_(torch.stack([fl.weights[":".join(et)] for et in HETERO_ET]))
            for i, et in enumerate(HETERO_ET):
                bl.coefficients[":".join(et)].copy_(torch.eye(len(HETERO_ET))[i:i + 1])
    batch = full_graph_batch(x, ei, 2)
    a, b = full(batch), based(batch)
    for t in counts:
        assert torch.allclose(a[t], b[t], atol=1e-5)
    h = x
    for i, layer in enumerate(batch.layers):
        h = based.layer(i, layer, h)
    assert all(torch.allclose(h[t], b[t]) for t in counts)


def test_rgcn_homogeneous_graph_returns_a_tensor_and_build_checks_its_args():
    spec = ModelSpec({"_N": 4}, 3, 8, 2, 0.1, ["_N"], [("_N", "_E", "_N")], "_N", "node")
    model = build(spec)
    x, ei = torch.randn(9, 4), torch.randint(9, (2, 20))
    out = model(full_graph_batch({"_N": x}, {("_N", "_E", "_N"): ei}, 2))
    assert isinstance(out, torch.Tensor) and out.shape == (9, 3)
    assert build(spec, num_bases=0).layers[0].num_bases == 0
    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="num_bases"):
            build(spec, num_bases=bad)
    with pytest.raises(TypeError):
        build(spec, heads=2)


# ------------------------------------------------------------------ end to end

def trainer(*args):
    """``python -m graphprep.trainer`` started (its own process: ranks are processes); see finish."""
    return subprocess.Popen([sys.executable, "-m", "graphprep.trainer", *map(str, args), "--no-progress",
                             "--threads", "1"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(proc, timeout=300):
    """Wait for a started command; it must succeed. Returns (stdout, stderr)."""
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-3000:]
    return out, err


RUN = ("--model", "rgcn", "--fanouts", "10,5", "--batch-size", 128, "--lr", 0.01)


def test_rgcn_learns_featureless_labels_from_embeddings_and_checkpoints_carry_them(
        featureless, tmp_path):
    """Acceptance (2 parts, 2 ranks): no type has features, labels are planted communities.
    Learnable embeddings reach far above chance; constant inputs cannot tell nodes apart
    (measured: 0.93 after 4 epochs against 0.12 after 1; the majority class holds 0.14). Then the
    checkpoint folder holds each part's shard of the last epoch, ``--resume`` continues from
    the trained rows (not from fresh ones), ``trainer embed``'s layer-wise inference over the
    trained rows scores like the sampled evaluation and writes those rows out, and a shard
    missing or of another epoch is refused before any rank starts."""
    chunked, graph = featureless
    ckpt = tmp_path / "ckpt"
    runs = {mode: trainer("--graph", graph, *RUN, "--epochs", 4 if mode == "embed" else 1,
                          "--featureless", mode, "--checkpoint-dir", tmp_path / f"ck-{mode}"
                          if mode == "constant" else ckpt,
                          "--metrics-out", tmp_path / f"{mode}.json")
            for mode in ("embed", "constant")}
    for proc in runs.values():
        finish(proc)
    m = {mode: json.loads((tmp_path / f"{mode}.json").read_text()) for mode in runs}
    test = node_data_of(chunked, "paper", "test_mask").astype(bool)
    chance = np.bincount(node_data_of(chunked, "paper", "label")[test]).max() / test.sum()
    assert chance < 0.2
    assert m["constant"]["summary"]["test_acc"] < chance + 0.1, m["constant"]["summary"]
    assert m["embed"]["summary"]["test_acc"] >= chance + 0.5, m["embed"]["summary"]
    last = m["embed"]["epochs"][-1]
    assert last["embedding_rows"] > 0 and last["embedding_push_bytes"] > 0
    assert "embedding_rows" not in m["constant"]["epochs"][-1]

    # each part's first rank wrote its shard of the last (and of the best) epoch
    for p in range(2):
        for name in ("checkpoint.pt", "best.pt"):
            shard = torch.load(shard_paths(str(ckpt / name), p)[0], weights_only=True)
            assert shard["part"] == p
        assert shard_paths(str(ckpt / "checkpoint.pt"), p)[1]       # previous kept
    shard = torch.load(shard_paths(str(ckpt / "checkpoint.pt"), 0)[0], weights_only=True)
    assert shard["epoch"] == 3 and set(shard["rows"]) == {"paper", "author", "institution",
                                                          "field_of_study"}
    assert is_checkpoint_folder(str(ckpt))

    # resume one more epoch (on a copy: embed reads the original) and embed, side by side
    copy = tmp_path / "ckpt-copy"
    shutil.copytree(ckpt, copy)
    resumed = trainer("--graph", graph, *RUN, "--epochs", 5, "--resume", "--checkpoint-dir",
                      copy, "--metrics-out", tmp_path / "resumed.json")
    out = tmp_path / "emb"
    embed = subprocess.Popen([sys.executable, "-m", "graphprep.trainer", "embed", "--graph", graph,
                              "--checkpoint", ckpt, "--out", out, "--no-progress",
                              "--threads", "1"], cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    # meanwhile: a checkpoint with a shard missing, or of another epoch, is refused in one
    # line (exit 2) before any rank starts
    broken = tmp_path / "broken"
    shutil.copytree(ckpt, broken)
    for f in broken.glob("checkpoint.embeddings-part1*"):
        f.unlink()
    for f in broken.glob("best.embeddings-part0*"):
        stale = torch.load(f, weights_only=True)
        stale["epoch"] = 99
        torch.save(stale, f)
    refused = [subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
               for cmd in ([sys.executable, "-m", "graphprep.trainer", "--graph", graph, *map(str, RUN),
                            "--epochs", "5", "--resume", "--checkpoint-dir", str(broken),
                            "--no-progress"],
                           [sys.executable, "-m", "graphprep.trainer", "embed", "--graph", graph,
                            "--checkpoint", str(broken), "--out", str(tmp_path / "e2"),
                            "--no-progress"])]
    for proc, says in zip(refused, ("part 1's shard .*part1.pt is missing",
                                    r"part 0's shard .* does not match it \(best.embeddings-"
                                    r"part0.pt of epoch 99")):
        errors = [line for line in proc.stderr.splitlines() if line.startswith("Error")]
        assert proc.returncode == 2 and len(errors) == 1, proc.stderr[-2000:]
        assert re.search(says, errors[0]), errors[0]
        assert "launching" not in proc.stderr
    finish(resumed)
    finish(embed)
    epochs = json.loads((tmp_path / "resumed.json").read_text())["epochs"]
    assert [e["loss"] for e in epochs[:4]] == [e["loss"] for e in m["embed"]["epochs"]]
    # from the trained rows the loss goes on falling (measured 0.067 -> 0.024); from fresh
    # rows the trained weights see other inputs and it rises (measured 0.067 -> 0.72)
    assert epochs[4]["loss"] < epochs[3]["loss"], epochs
    assert epochs[4]["test_acc"] >= epochs[3]["test_acc"] - 0.05, epochs
    meta = json.loads((out / "embed.json").read_text())
    assert meta["inference"] == "layer-wise"
    assert meta["full_neighbor"]["test_acc"] >= chance + 0.5, meta
    # measured 0.927, as sampled; over fresh rows it scores 0.36
    assert abs(meta["full_neighbor"]["test_acc"] - meta["sampled_at_training"]["test_acc"]) \
        < 0.06, meta
    assert np.load(out / "paper" / "predictions.npy").shape == (len(test),)
    # the trained input rows written out by original ID are the best epoch's shards
    for p in range(2):
        part = LocalPart.load(graph, p)
        rows = torch.load(shard_paths(str(ckpt / "best.pt"), p)[0], weights_only=True)["rows"]
        for t in ("paper", "author"):
            written = np.load(out / t / "input_embeddings.npy")[part.orig_ids[t].numpy()]
            assert np.array_equal(written, rows[t].numpy()), (p, t)


def test_a_missing_or_stale_shard_is_refused(tmp_path):
    """A part's shard is found among the current and previous ones by the checkpoint's epoch;
    gone, or of another epoch, it is refused naming the part, the files and their epochs. The
    best epoch's shard keeps its epoch when later ones are written."""
    from graphprep.trainer.runtime.checkpoint import CheckpointRefused, load_embedding_shard
    ckpt = tmp_path / "c"
    ckpt.mkdir()
    path = str(ckpt / "checkpoint.pt")
    with pytest.raises(CheckpointRefused, match="part 1's shard .* is missing"):
        load_embedding_shard(path, 1, 3, "--resume")
    from graphprep.trainer.runtime.checkpoint import save_embedding_shard
    save_embedding_shard(path, 1, 2, {"rows": {}, "optimizer": {}})
    save_embedding_shard(path, 1, 3, {"rows": {}, "optimizer": {}})
    assert load_embedding_shard(path, 1, 3, "--resume")["epoch"] == 3
    assert load_embedding_shard(path, 1, 2, "--resume")["epoch"] == 2     # the previous one
    with pytest.raises(CheckpointRefused, match=r"does not match it \(checkpoint.embeddings-"
                                                r"part1.pt of epoch 3, .*of epoch 2\)"):
        load_embedding_shard(path, 1, 4, "--resume")
    assert is_checkpoint_folder(str(ckpt))     # shards alone: still this trainer's folder
    best = str(ckpt / "best.pt")
    save_embedding_shard(path, 1, 4, {"rows": {}, "optimizer": {}}, best=best)
    save_embedding_shard(path, 1, 5, {"rows": {}, "optimizer": {}})
    assert load_embedding_shard(best, 1, 4, "--checkpoint")["epoch"] == 4    # kept its epoch
    assert load_embedding_shard(path, 1, 5, "--resume")["epoch"] == 5
    with pytest.raises(CheckpointRefused, match=r"part1.pt of epoch 5, .*prev.pt of epoch 4"):
        load_embedding_shard(path, 1, 3, "--resume")                  # two generations only
