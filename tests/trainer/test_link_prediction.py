"""Link prediction end to end: held-out edges never carry messages, a batch's own positives
are excluded at the owners, training beats chance by a wide margin on Cora with 2 parts, and
``trainer embed`` writes exact full-neighbor outputs by original ID."""

import json
import math
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest
import torch

from conftest import dispatched, edge_data_of, edges_of, node_data_of, run_prep
from graphprep.formats import EdgeType
from graphprep.trainer.sampling.dist_sampler import DistNeighborSampler
from graphprep.trainer.data.link_data import (TrainPositives, exclusion_keys, split_edges,
                                              without_held_out)
from graphprep.trainer.data.shuffle import KeyedPermutation
from graphprep.trainer.data.link_loader import LinkLoader, seed_nodes
from graphprep.trainer.data.features import FeatureFetcher
from graphprep.trainer.sampling.partition import LocalPart
from graphprep.trainer.sampling.service import LocalTransport, PartServer

from conftest import ROOT  # noqa: E402  (the repository)
ET = EdgeType("_N", "_E", "_N")


@pytest.fixture(scope="module")
def cora_link(scheduler, cora_chunked, tmp_path_factory):
    """Cora with held-out edges (5% val, 10% test), dispatched into 2 METIS parts."""
    root = tmp_path_factory.mktemp("cora-link")
    run_prep(scheduler, "split-edges", cora_chunked, root / "s", "--etype", str(ET))
    return root / "s", dispatched(scheduler, root / "s", root / "d", 2, "--method", "metis")


def served(graph_json):
    """Both parts served in-process, held-out edges dropped as the trainer does."""
    full = [LocalPart.load(graph_json, p) for p in range(2)]
    servers = {p: PartServer(without_held_out(part)) for p, part in enumerate(full)}
    return full, servers, LocalTransport(servers)


def test_held_out_edges_are_served_without_a_copy(cora_link):
    """Dispatch stores each destination's held-out in-edges last: the served CSC is the
    stored one, mapped, served up to each destination's message_end (no per-edge array of
    the part's size is made), and it serves exactly the training edges."""
    chunked, graph_json = cora_link
    part = LocalPart.load(graph_json, 0)
    assert part.graph.held_out_last == (ET,)
    stored = part.csc[ET]
    served_csc = without_held_out(part).csc[ET]
    assert served_csc.indices.data_ptr() == stored.indices.data_ptr()
    assert served_csc.indptr.data_ptr() == stored.indptr.data_ptr()
    assert served_csc.stored_pos is None and served_csc.ends is not None
    train = part.edge_data(ET, "train_mask").bool()
    head = torch.arange(len(stored.indices)) < torch.repeat_interleave(
        served_csc.ends, stored.indptr[1:] - stored.indptr[:-1])
    assert torch.equal(head, train)                         # every split's edge in one mask
    served = without_held_out(part)
    src, dst = served.csc_edges(ET)
    full_src, full_dst = part.csc_edges(ET)
    assert torch.equal(src, full_src[train]) and torch.equal(dst, full_dst[train])
    assert int(served_csc.degrees.sum()) == int(train.sum()) > 0
    kept = stored.orig_ids(torch.nonzero(head).flatten())
    mask = edge_data_of(chunked, str(ET), "train_mask").astype(bool)
    assert mask[kept.numpy()].all()                         # every kept edge a training edge


def test_parts_dispatched_before_held_out_last_are_filtered_by_copy(cora_link):
    """graph.json without ``held_out_last`` (older dispatches): the served CSC is a filtered
    copy whose edges read their original IDs through int32 stored positions, and it serves
    the same edges as the stored tail does."""
    _, graph_json = cora_link
    part = LocalPart.load(graph_json, 0)
    old = LocalPart(replace(part.graph, held_out_last=()), part.p, part.orig_ids,
                    part.halo_ids, part.csc, part.node_data)
    stored, filtered = part.csc[ET], without_held_out(old).csc[ET]
    train = part.edge_data(ET, "train_mask").bool()
    assert filtered.stored_orig_ids is stored.stored_orig_ids
    assert filtered.stored_pos.dtype == torch.int32 and len(filtered.indices) == int(train.sum())
    assert torch.equal(filtered.orig_ids(torch.arange(len(filtered.indices))),
                       stored.stored_orig_ids[train])
    assert torch.equal(filtered.indices, stored.indices[train])
    new_src, new_dst = without_held_out(part).csc_edges(ET)
    old_src, old_dst = without_held_out(old).csc_edges(ET)
    assert torch.equal(new_src, old_src) and torch.equal(new_dst, old_dst)


def orig_pairs(part, src_new, dst_new, orig_of_new):
    return set(zip(orig_of_new[src_new].tolist(), orig_of_new[dst_new].tolist()))


def test_held_out_edges_never_sampled_and_batch_positives_excluded(cora_link):
    chunked, graph_json = cora_link
    full, servers, transport = served(graph_json)
    orig = torch.cat([p.orig_ids["_N"] for p in full])
    src, dst = edges_of(chunked)
    split = {m: edge_data_of(chunked, str(ET), m).astype(bool) for m in ("train_mask", "val_mask", "test_mask")}
    held = {(int(s), int(d)) for s, d in zip(src[~split["train_mask"]],
                                             dst[~split["train_mask"]])}
    assert held and all((d, s) in held for s, d in held)      # both directions held out
    edges = split_edges(full[0], ET)
    assert len(edges["val"]) + len(edges["test"]) > 0
    assert orig_pairs(full[0], edges["val"].src, edges["val"].dst, orig) <= held
    sampler = DistNeighborSampler(full[0], servers[0], transport, [-1, -1])
    train = edges["train"]
    batch_src, batch_dst = train.src[:64], train.dst[:64]
    positives = orig_pairs(full[0], batch_src, batch_dst, orig)
    seeds, _, _ = seed_nodes(ET, batch_src, batch_dst)
    exclude = exclusion_keys(full[0], ET, batch_src, batch_dst)
    seen = set()
    for block in sampler.sample_blocks(seeds, 7, exclude=exclude):
        s, d = block.edges[ET]
        pairs = orig_pairs(full[0], block.src_nodes["_N"][s],
                           block.src_nodes["_N"][:block.num_dst["_N"]][d], orig)
        seen |= pairs
    assert seen, "all-neighbor sampling returned nothing"
    assert not seen & held, "a held-out edge carried a message"
    assert not seen & positives and not seen & {(d, s) for s, d in positives}
    every = set(zip(src.tolist(), dst.tolist()))
    assert seen <= every                                      # true edges only
    # without exclusion the positives do appear: the check above can fail
    again = set()
    for block in sampler.sample_blocks(seeds, 7):
        s, d = block.edges[ET]
        again |= orig_pairs(full[0], block.src_nodes["_N"][s],
                            block.src_nodes["_N"][:block.num_dst["_N"]][d], orig)
    assert again & positives


def test_link_batches_point_at_their_pairs(cora_link):
    _, graph_json = cora_link
    full, servers, transport = served(graph_json)
    sampler = DistNeighborSampler(full[1], servers[1], transport, [5, 5])
    fetcher = FeatureFetcher(full[1], servers[1], transport)
    edges = split_edges(full[1], ET)["train"]
    loader = LinkLoader(sampler, fetcher, full[1], ET, TrainPositives(full[1], ET), 100, seed=1,
                        rank=1, neg_ratio=3, shuffle=False, prefetch=1)
    batch = next(iter(loader.epoch(0)))
    seeds = batch.n_id[:batch.batch_size]
    pos, neg = batch.edge_label_index[:, :100], batch.edge_label_index[:, 100:]
    assert batch.edge_label.tolist() == [1.0] * 100 + [0.0] * 300
    assert torch.equal(seeds[pos[0]], edges.src[:100])
    assert torch.equal(seeds[pos[1]], edges.dst[:100])
    assert torch.equal(seeds[neg[0]], edges.src[:100].repeat_interleave(3))
    assert neg.shape[1] == 300 and batch.x.shape[0] == len(batch.n_id)
    assert len(loader) == math.ceil(len(edges) / 100) > 2
    loader.max_batches = 2                                  # --max-batches
    assert len(loader) == 2 and len(list(loader.epoch(1))) == 2


@pytest.mark.parametrize("shares", [1, 2])
def test_each_epoch_visits_every_training_edge_once_in_a_new_order(cora_link, shares):
    """The ranks of a part share its training edges, each visiting its share once per epoch,
    in batches of exactly the batch size but the last, in an order that changes with the
    epoch; nothing per edge is held (the positions come from a keyed permutation)."""
    _, graph_json = cora_link
    part = LocalPart.load(graph_json, 0)
    train = split_edges(part, ET, ("train",))["train"]
    every = set(zip(train.src.tolist(), train.dst.tolist()))
    orders = []
    for epoch in (0, 1):
        seen, order = [], []
        for index in range(shares):
            positives = TrainPositives(part, ET, shares, index)
            batches = list(positives.batches(64, 1000 * epoch + index))
            assert all(len(b) == 64 for b in batches[:-1]) and 0 < len(batches[-1]) <= 64
            assert sum(map(len, batches)) == len(positives)
            pos = torch.cat(batches)
            assert part.edge_data(ET, "train_mask").bool()[pos].all()
            src, dst = positives.ends(pos)
            seen += list(zip(src.tolist(), dst.tolist()))
            order.append(pos)
        assert len(seen) == len(train) and set(seen) == every     # each edge once
        orders.append(torch.cat(order))
    assert not torch.equal(orders[0], orders[1])
    assert not torch.equal(orders[0], torch.sort(orders[0]).values)   # shuffled


@pytest.mark.parametrize("n", [0, 1, 2, 3, 1000, 4097])
def test_keyed_permutation_is_a_bijection_that_the_key_changes(n):
    out = KeyedPermutation(n, 7)(torch.arange(n))
    assert torch.equal(torch.sort(out).values, torch.arange(n))
    if n > 100:
        assert (out != KeyedPermutation(n, 8)(torch.arange(n))).float().mean() > 0.9
        assert torch.equal(out[5:9], KeyedPermutation(n, 7)(torch.arange(5, 9)))


def run_trainer(*args, timeout=600):
    cmd = [sys.executable, "-m", "graphprep.trainer", *map(str, args)]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def test_cora_link_prediction_two_parts_beats_auc_090_then_embed_matches(cora_link, tmp_path):
    _, graph_json = cora_link
    metrics = tmp_path / "m.json"
    proc = run_trainer("--graph", graph_json, "--task", "link", "--fanouts", "10,10",
                       "--batch-size", 256, "--epochs", 10, "--lr", 0.01, "--hidden", 64,
                       "--no-progress", "--threads", 1, "--metrics-out", metrics,
                       "--checkpoint-dir", tmp_path / "ckpt")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(metrics.read_text())["summary"]
    assert summary["test_auc"] >= 0.90, summary
    assert summary["test_mrr"] >= 0.25, summary           # chance: ~0.05 with 100 negatives
    assert "test AUC" in proc.stdout
    last = json.loads(metrics.read_text())["epochs"][-1]
    assert last["test_edges"] > 0 and last["train_edges"] > 0
    out = tmp_path / "emb"
    proc = run_trainer("embed", "--graph", graph_json, "--checkpoint", tmp_path / "ckpt",
                       "--out", out, "--no-progress")
    assert proc.returncode == 0, proc.stderr[-3000:]
    info = json.loads((out / "embed.json").read_text())
    emb = np.load(out / "_N" / "embeddings.npy")
    assert emb.shape == (2708, 64) and np.isfinite(emb).all() and (np.abs(emb).sum(1) > 0).all()
    full, sampled = info["full_neighbor"]["test_auc"], info["sampled_at_training"]["test_auc"]
    assert abs(full - sampled) <= 0.03, info


def test_embed_node_task_equals_single_process_full_graph_forward(cora_link, tmp_path):
    """Layer-wise distributed inference is exact: its logits by original ID equal one
    full-graph forward of the same weights over the input edges (training edges only: the
    held-out ones are dropped in link runs, not in node runs, so this node run uses all)."""
    chunked, graph_json = cora_link
    proc = run_trainer("--graph", graph_json, "--fanouts", "5,5", "--epochs", 1,
                       "--no-progress", "--threads", 1, "--checkpoint-dir", tmp_path / "c")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = tmp_path / "emb"
    proc = run_trainer("embed", "--graph", graph_json, "--checkpoint", tmp_path / "c",
                       "--out", out, "--batch-size", 500, "--no-progress")
    assert proc.returncode == 0, proc.stderr[-3000:]
    from graphprep.trainer.batch import full_graph_batch
    from graphprep.trainer.models.sage import GraphSAGE
    state = torch.load(tmp_path / "c" / "best.pt", weights_only=False)
    x = torch.from_numpy(node_data_of(chunked, "_N", "feat")).float()
    model = GraphSAGE({"_N": x.shape[1]}, 128, 7, [(ET.src, ET.rel, ET.dst)], 2)
    model.load_state_dict(state["model"])
    model.eval()
    src, dst = (torch.from_numpy(a).long() for a in edges_of(chunked))
    n = len(x)
    batch = full_graph_batch({"_N": x}, {(ET.src, ET.rel, ET.dst): torch.stack([src, dst])}, 2)
    with torch.no_grad():
        logits = model(batch).numpy()
    got = np.load(out / "_N" / "logits.npy")
    np.testing.assert_allclose(got, logits, rtol=1e-4, atol=1e-4)
    assert (np.load(out / "_N" / "predictions.npy") == logits.argmax(1)).all()
    assert np.load(out / "_N" / "embeddings.npy").shape == (n, 128)
    assert not (tmp_path / ".emb.layers").exists()       # the layer files are gone


def test_layer_outputs_are_file_backed_rows_written_in_place(tmp_path):
    """trainer embed's layer outputs live in memory-mapped files, not anonymous memory: the
    rows written through the tensor are the file's, and close removes the files."""
    from graphprep.trainer.tasks.inference import LayerFiles
    files = LayerFiles(str(tmp_path / "layers"))
    rows = files.rows("__layer1", "_N", 10, (3,))
    rows[4:6] = torch.arange(6.0).reshape(2, 3)
    on_disk = np.load(tmp_path / "layers" / "__layer1._N.npy", mmap_mode="r")
    assert on_disk.shape == (10, 3) and (on_disk[4:6] == np.arange(6.0).reshape(2, 3)).all()
    files.close()
    assert not (tmp_path / "layers").exists() and float(rows[5, 2]) == 5.0   # still mapped
    assert LayerFiles(None).rows("x", "_N", 2, (3,)).shape == (2, 3)


def test_heterogeneous_link_prediction_beats_chance(scheduler, mag_parts, tmp_path):
    """paper:cites:paper of an ogbn-mag-shaped graph: the other edge types carry messages
    into papers (author:writes:paper) and their held-out edges stay out of training."""
    chunked, _ = mag_parts
    run_prep(scheduler, "split-edges", chunked, tmp_path / "s", "--etype", "paper:cites:paper")
    graph_json = dispatched(scheduler, tmp_path / "s", tmp_path / "d", 2)
    metrics = tmp_path / "m.json"
    proc = run_trainer("--graph", graph_json, "--task", "link", "--target-etype", "cites",
                       "--fanouts", "5,5", "--batch-size", 512, "--epochs", 3, "--lr", 0.01,
                       "--hidden", 32, "--no-progress", "--threads", 1, "--metrics-out",
                       metrics, "--checkpoint-dir", tmp_path / "ckpt")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(metrics.read_text())["summary"]
    assert summary["test_auc"] >= 0.75, summary                # chance: 0.5
    bad = run_trainer("--graph", graph_json, "--task", "link", "--target-etype", "writes",
                      "--no-progress")
    assert bad.returncode == 2 and "--target-etype writes" in bad.stderr
    unsplit = run_trainer("--graph", mag_parts[1], "--task", "link", "--no-progress")
    assert unsplit.returncode == 2 and "prep split-edges" in unsplit.stderr
