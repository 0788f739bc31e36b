"""Edge features in sampling (issue 31): what ``--edge-feat`` costs; prints one JSON object.

A synth graph (10^6 edges by default, edges/10 nodes) gets an edge data array ``w`` (float32,
``--edge-dim`` values per edge), is partitioned into 2 parts (random) and dispatched. Then, in
the same run, with and without ``--edge-feat w``:

- ``sampler``: graphprep's distributed sampler in one process over both parts (part 1 answers
  through the in-process transport, counted as RPC is), the same seeds and keys with and
  without the rows, batches alternated: requests and bytes per batch, sampled edges per second,
  and the extra bytes received per remote edge (the rows ride in the sampling answers);
- ``trainer``: ``python -m graphprep.trainer`` with 2 ranks (GraphSAGE, which ignores the rows: the runs
  differ only by what the sampling answers carry), per epoch: RPC requests, bytes sent and
  received, epoch time (the first epoch excluded from the time when there are several).

``--workdir`` keeps the prepared graph; a later run with the same ``--workdir``, ``--edges`` and
``--edge-dim`` reuses it. ``--quick``: 2*10^4 edges, 2 epochs, batches of 64 (seconds; for the
test suite).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
from common import fresh_cluster, parse_args  # noqa: E402

from graphprep.formats import ChunkFiles, load_chunked_graph  # noqa: E402
from graphprep.formats.output import write_array_chunk  # noqa: E402
from graphprep.trainer.sampling.dist_sampler import DistNeighborSampler  # noqa: E402
from graphprep.trainer.sampling.partition import LocalPart  # noqa: E402
from graphprep.trainer.sampling.service import LocalTransport, PartServer  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def add_edge_data(chunked: str, out: str, name: str, dim: int) -> str:
    """``chunked`` plus edge data ``name`` (float32 ``[E, dim]``, seeded normal values) as a
    chunked graph at ``out``: its metadata names the input's chunk files by absolute path and
    one new data chunk per edge chunk. Holds one chunk's rows at a time."""
    g = load_chunked_graph(chunked)

    def absolute(files):
        return dataclasses.replace(files, files=tuple(os.path.abspath(g.path(f))
                                                      for f in files.files))
    edge_data = {et: {k: absolute(v) for k, v in d.items()} for et, d in g.edge_data.items()}
    for et in g.edge_types:
        rels = []
        for k, rows in enumerate(g.edge_chunks[et]):
            rels.append(f"edge_data/{et.dirname}/{name}/part-{k:05d}.npy")
            values = np.random.default_rng(k).standard_normal((rows, dim), np.float32)
            write_array_chunk(os.path.join(out, rels[-1]), values)
        edge_data.setdefault(et, {})[name] = ChunkFiles("numpy", tuple(rels))
    graph = dataclasses.replace(
        g, root=out, edges={et: absolute(f) for et, f in g.edges.items()},
        node_data={t: {k: absolute(v) for k, v in d.items()} for t, d in g.node_data.items()},
        edge_data=edge_data)
    with open(os.path.join(out, "metadata.json"), "w") as f:
        json.dump(graph.to_json(), f)
    return out


def prepared_graph(workdir: str, edges: int, dim: int) -> str:
    """graph.json of the 2-part dispatch of a synth graph with edge data ``w``; reused from
    ``workdir`` when a previous run left it there."""
    from graphprep.dispatch.job import run_dispatch
    from graphprep.pipeline.partition import PartitionOptions, run_partition
    from graphprep.pipeline.synth import SynthSpec
    from graphprep.pipeline.synth_job import run_synth

    base = os.path.join(workdir, f"synth-{edges}-w{dim}")
    out = os.path.join(f"{base}-d2", "graph.json")
    if os.path.exists(out):
        return out
    with fresh_cluster() as (options, _):
        spec = SynthSpec(num_nodes=edges // 10, num_edges=edges, split=(0.05, 0.05, 0.1))
        run_synth(spec, base, 1 << 20, options)
        add_edge_data(base, f"{base}-w", "w", dim)
        run_partition(f"{base}-w", f"{base}-a2", "random", PartitionOptions(2), options)
        run_dispatch(f"{base}-w", f"{base}-a2", f"{base}-d2", options)
    return out


def sampler_cost(graph_json: str, fanouts: list[int], batch: int, batches: int) -> dict:
    """Sampling from part 0 with and without the rows, the same seeds and keys, alternating
    which goes first: per batch requests and bytes, edges/s; the extra bytes per remote edge."""
    parts = [LocalPart.load(graph_json, p) for p in range(2)]
    servers = {p.p: PartServer(p) for p in parts}
    transport = LocalTransport(servers)
    samplers = {name: DistNeighborSampler(parts[0], servers[0], transport, fanouts,
                                          edge_feat=feat)
                for name, feat in (("without", None), ("with", "w"))}
    n = parts[0].graph.num_nodes["_N"]
    g = torch.Generator().manual_seed(0)
    seeds = [torch.randperm(n, generator=g)[:batch] for _ in range(batches + 1)]
    for sampler in samplers.values():
        sampler.sample("_N", seeds[0], 0)                       # warm-up: maps the arrays
    transport.take_counters()
    start1 = parts[0].graph.node_map["_N"][1][0]
    res = {name: {"rpc_requests": 0, "rpc_bytes_sent": 0, "rpc_bytes_received": 0,
                  "edges": 0, "remote_edges": 0, "seconds": 0.0} for name in samplers}
    for i, s in enumerate(seeds[1:]):
        for name in (list(samplers) if i % 2 == 0 else list(samplers)[::-1]):
            t = time.perf_counter()
            mb = samplers[name].sample("_N", s, i)
            res[name]["seconds"] += time.perf_counter() - t
            for key, v in transport.take_counters().items():
                res[name][key] += v
            for block in mb.blocks:
                src, dst = next(iter(block.edges.values()))
                res[name]["edges"] += len(dst)
                res[name]["remote_edges"] += int((block.src_nodes["_N"][dst] >= start1).sum())
    out = {}
    for name, r in res.items():
        out[name] = {"rpc_requests_per_batch": r["rpc_requests"] / batches,
                     "rpc_bytes_sent_per_batch": round(r["rpc_bytes_sent"] / batches),
                     "rpc_bytes_received_per_batch": round(r["rpc_bytes_received"] / batches),
                     "edges_per_batch": r["edges"] // batches,
                     "edges_per_s": round(r["edges"] / r["seconds"])}
    extra = res["with"]["rpc_bytes_received"] - res["without"]["rpc_bytes_received"]
    out["extra_bytes_received_per_remote_edge"] = round(extra / res["with"]["remote_edges"], 2)
    out["edges_per_s_ratio_with_over_without"] = round(out["with"]["edges_per_s"] /
                                                       out["without"]["edges_per_s"], 3)
    return out


def trainer_cost(graph_json: str, workdir: str, args, *extra: str) -> dict:
    """One 2-rank training run: per-epoch RPC requests and bytes, epoch time."""
    name = "w" if extra else "plain"
    metrics = os.path.join(workdir, f"edge-feat-{name}.json")
    cmd = [sys.executable, "-m", "graphprep.trainer", "--graph", graph_json, "--no-progress",
           "--epochs", str(args.epochs), "--fanouts", args.fanouts, "--batch-size",
           str(args.batch_size), "--metrics-out", metrics,
           "--checkpoint-dir", os.path.join(workdir, f"ckpt-edge-feat-{name}"), *extra]
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    with open(metrics) as f:
        epochs = json.load(f)["epochs"]
    timed = epochs[1:] or epochs
    return {"rpc_requests_per_epoch": [e["rpc_requests"] for e in epochs],
            "rpc_bytes_sent_per_epoch": [e["rpc_bytes_sent"] for e in epochs],
            "rpc_bytes_received_per_epoch": [e["rpc_bytes_received"] for e in epochs],
            "epoch_s": round(sum(e["epoch_s"] for e in timed) / len(timed), 3)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--edges", type=int, default=10**6)
    ap.add_argument("--edge-dim", type=int, default=16, help="float32 values per edge row")
    ap.add_argument("--fanouts", default="10,5")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--batches", type=int, default=20, help="sampler batches per variant")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--workdir", default=None, help="keep (and reuse) the prepared graph here")
    args = parse_args(ap, {"edges": 2 * 10**4, "batch_size": 64, "batches": 3, "epochs": 2})
    fanouts = [int(f) for f in args.fanouts.split(",")]
    workdir = args.workdir or tempfile.mkdtemp(prefix="bench-edge-feat-")
    os.makedirs(workdir, exist_ok=True)
    graph_json = prepared_graph(workdir, args.edges, args.edge_dim)
    res = {"edges": args.edges, "edge_dim": args.edge_dim, "fanouts": fanouts,
           "batch_size": args.batch_size, "cores": os.cpu_count(),
           "sampler": sampler_cost(graph_json, fanouts, args.batch_size, args.batches)}
    without = trainer_cost(graph_json, workdir, args)
    with_w = trainer_cost(graph_json, workdir, args, "--edge-feat", "w")
    res["trainer"] = {"without": without, "with": with_w,
                      "same_requests": with_w["rpc_requests_per_epoch"] ==
                      without["rpc_requests_per_epoch"],
                      "bytes_received_ratio": round(
                          sum(with_w["rpc_bytes_received_per_epoch"]) /
                          sum(without["rpc_bytes_received_per_epoch"]), 3)}
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
