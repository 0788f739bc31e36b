"""Our sampler + feature fetch against PyG's ``NeighborLoader``, side by side; prints one JSON
object.

The training recipe's batches (GraphSAGE's: fanouts 10,5, batches of 1024 training seeds, the
input features and labels of every sampled node) on the planted synth graph at each of
``--edges`` (10^7 and 10^8), dispatched into 1 part: graphprep's loader
(``NodeLoader``: ``DistNeighborSampler`` + ``FeatureFetcher`` on the memory-mapped part, the
trainer's code path without the network) and PyG's ``torch_geometric.loader.NeighborLoader``
over a ``Data`` holding the same graph (edges, features, labels) in memory, on the same seeds,
``--threads`` torch threads each. Reported per size: batches/s and sampled edges per batch of
each, their ratio, PyG's set-up time (its CSC conversion) and each side's peak RSS; and where
our batch's time goes (sampling, shaping the layers, input rows, labels: ``ms_per_batch``).

PyG samples with ``pyg-lib`` or ``torch-sparse``; neither has a wheel for this torch on the
package registry, so ``--pyg-python`` runs PyG's side in another interpreter: the venv that
``examples/benchmarks/pyg_venv.sh`` builds (torch-scatter and torch-sparse compiled from source
against the pinned torch). Without a backend PyG's side reports the error it raised.
``--quick``: 2*10^4 edges, 3 batches of 64 (seconds; for the test suite).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
from common import parse_args, partitioned_synth  # noqa: E402


def train_seeds(graph_json: str) -> torch.Tensor:
    """The training nodes of the 1-part graph (new IDs = local rows), in a fixed shuffle."""
    import numpy as np

    from graphprep.formats.partitioned import load_partitioned
    g = load_partitioned(graph_json)
    mask = np.load(g.part_path(0, "node_feats", "_N", "train_mask.npy"), mmap_mode="r")
    seeds = torch.from_numpy(np.flatnonzero(mask))
    return seeds[torch.randperm(len(seeds), generator=torch.Generator().manual_seed(0))]


def usable_batches(graph_json: str, batch: int, batches: int) -> int:
    """``batches``, or fewer where the training seeds hold fewer full batches after the
    warm-up one."""
    return max(1, min(batches, len(train_seeds(graph_json)) // batch - 1))


def peak_rss_mb() -> float:
    from graphprep.pipeline.core.memory import peak_rss_bytes
    return round(peak_rss_bytes() / 2**20, 1)


def ours(graph_json: str, fanouts: list[int], batch: int, batches: int) -> dict:
    """graphprep's loader on part 0: batches/s over ``batches`` batches after one warm-up."""
    from graphprep.trainer.data.features import FeatureFetcher
    from graphprep.trainer.data.loader import NodeLoader
    from graphprep.trainer.sampling.dist_sampler import DistNeighborSampler
    from graphprep.trainer.sampling.partition import LocalPart
    from graphprep.trainer.sampling.service import LocalTransport, PartServer

    batches = usable_batches(graph_json, batch, batches)
    part = LocalPart.load(graph_json, 0)
    server = PartServer(part)
    transport = LocalTransport({0: server})
    sampler = DistNeighborSampler(part, server, transport, fanouts)
    loader = NodeLoader(sampler, FeatureFetcher(part, server, transport), "_N",
                        train_seeds(graph_json)[:(batches + 1) * batch], batch, seed=0, rank=0,
                        shuffle=False, prefetch=1)
    edges, start = 0, None
    for i, b in enumerate(loader.epoch(0)):
        if i == 0:
            start = time.perf_counter()       # after the warm-up batch
            continue
        edges += sum(e.shape[1] for layer in b.layers for e in layer.edge_index_dict.values())
    took = time.perf_counter() - start
    return {"batches_per_s": round(batches / took, 2), "edges_per_batch": edges // batches,
            "batches": batches, "seconds": round(took, 2), "peak_rss_mb": peak_rss_mb(),
            "ms_per_batch": batch_split(loader, batches)}


def batch_split(loader, batches: int) -> dict:
    """Where one batch's time goes, on the loader's own seeds, one batch at a time in this
    thread (no prefetch): sampling the blocks, shaping them into the model's layers (the
    PyG-shaped ``edge_index_dict`` of every type), fetching the input rows, fetching the
    labels; milliseconds per batch."""
    from graphprep.trainer.data.batches import input_nodes, to_layer
    from graphprep.trainer.data.loader import mix_seed

    sampler, fetcher, graph = loader.sampler, loader.fetcher, loader.sampler.graph
    types, edge_types = list(graph.node_types), list(graph.edge_types)
    spent = dict.fromkeys(("sample", "layers", "input_rows", "labels"), 0.0)
    for i, seeds in enumerate(torch.split(loader.seeds, loader.batch_size)[1:batches + 1]):
        seeds_by_type = {loader.ntype: seeds}
        marks = [time.perf_counter()]
        blocks = sampler.sample_blocks(seeds_by_type, mix_seed(loader.seed, 0, loader.rank, i))
        marks.append(time.perf_counter())
        [to_layer(b, types, edge_types) for b in blocks]
        marks.append(time.perf_counter())
        fetcher.inputs(input_nodes(blocks, types), loader.feature)
        marks.append(time.perf_counter())
        fetcher.fetch(loader.label, seeds_by_type)
        marks.append(time.perf_counter())
        for name, a, b in zip(spent, marks, marks[1:]):
            spent[name] += b - a
    return {name: round(1000 * v / batches, 3) for name, v in spent.items()}


def pyg(graph_json: str, fanouts: list[int], batch: int, batches: int) -> dict:
    """PyG's NeighborLoader over the same graph in memory, the same seeds."""
    import numpy as np
    try:
        import torch_geometric
        from torch_geometric.data import Data
        from torch_geometric.loader import NeighborLoader
        from torch_geometric import typing as pyg_typing
    except Exception as err:  # noqa: BLE001 - reported
        return {"error": f"{type(err).__name__}: {err}"}
    from graphprep.formats.partitioned import load_partitioned
    g = load_partitioned(graph_json)
    info = {"version": torch_geometric.__version__,
            "backend": "pyg-lib" if pyg_typing.WITH_PYG_LIB else
            "torch-sparse" if pyg_typing.WITH_TORCH_SPARSE else None}
    start = time.perf_counter()
    et = g.edge_types[0]
    load = lambda *p: torch.from_numpy(np.load(g.part_path(0, *p)))  # noqa: E731
    indptr, indices = load("edges", et.dirname, "indptr.npy"), load("edges", et.dirname,
                                                                     "indices.npy")
    dst = torch.repeat_interleave(torch.arange(len(indptr) - 1), indptr[1:] - indptr[:-1])
    data = Data(x=load("node_feats", "_N", "feat.npy"), y=load("node_feats", "_N", "label.npy"),
                edge_index=torch.stack([indices.long(), dst]), num_nodes=len(indptr) - 1)
    del indptr, indices, dst
    batches = usable_batches(graph_json, batch, batches)
    seeds = train_seeds(graph_json)[:(batches + 1) * batch]
    try:
        loader = NeighborLoader(data, num_neighbors=fanouts, batch_size=batch,
                                input_nodes=seeds, shuffle=False)
        it = iter(loader)
        next(it)                                 # warm-up (and PyG's CSC conversion)
        info["setup_s"] = round(time.perf_counter() - start, 2)
        edges, start = 0, time.perf_counter()
        for _ in range(batches):
            edges += next(it).edge_index.shape[1]
        took = time.perf_counter() - start
    except Exception as err:  # noqa: BLE001 - reported (no sampling backend, most often)
        return {**info, "error": f"{type(err).__name__}: {str(err).splitlines()[0]}"}
    return {**info, "batches_per_s": round(batches / took, 2), "edges_per_batch": edges // batches,
            "batches": batches, "seconds": round(took, 2), "peak_rss_mb": peak_rss_mb()}


def side_process(python: str, side: str, graph_json: str, args) -> dict:
    """One side (``ours`` or ``pyg``) run by ``python`` in a fresh process: its own peak
    RSS, and for PyG possibly another venv's interpreter (a failure is reported)."""
    cmd = [python, os.path.abspath(__file__), f"--{side}-side", graph_json, "--fanouts",
           args.fanouts, "--batch-size", str(args.batch_size), "--batches", str(args.batches),
           "--threads", str(args.threads)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        return {"error": f"{python} exited {done.returncode}: {done.stderr.strip()[-500:]}"}
    return json.loads(done.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--edges", default="1e7,1e8", help="graph sizes in edges (planted synth)")
    ap.add_argument("--fanouts", default="10,5")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--batches", type=int, default=30)
    ap.add_argument("--threads", type=int, default=1, help="torch threads of each side")
    ap.add_argument("--pyg-python", default=None,
                    help="the interpreter of a venv with PyG and a sampling backend "
                         "(pyg_venv.sh builds .venv-pyg); default: this one")
    ap.add_argument("--workdir", default=None, help="keep (and reuse) the prepared graphs")
    ap.add_argument("--pyg-side", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--ours-side", default=None, help=argparse.SUPPRESS)
    args = parse_args(ap, {"edges": "2e4", "batch_size": 64, "batches": 3})
    torch.set_num_threads(args.threads)
    fanouts = [int(f) for f in args.fanouts.split(",")]
    if args.pyg_side or args.ours_side:
        side = pyg if args.pyg_side else ours
        print(json.dumps(side(args.pyg_side or args.ours_side, fanouts, args.batch_size,
                              args.batches)))
        return
    workdir = args.workdir or tempfile.mkdtemp(prefix="bench-pyg-")
    res = {"fanouts": args.fanouts, "batch_size": args.batch_size, "batches": args.batches,
           "threads": args.threads, "pyg_python": args.pyg_python or sys.executable}
    for edges in (int(float(e)) for e in args.edges.split(",")):
        graph_json = partitioned_synth(workdir, edges, (1,))[1]
        row = {"graphprep": side_process(sys.executable, "ours", graph_json, args),
               "pyg": side_process(args.pyg_python or sys.executable, "pyg", graph_json, args)}
        if "batches_per_s" in row["pyg"]:
            row["batches_per_s_ratio"] = round(row["graphprep"]["batches_per_s"] /
                                               row["pyg"]["batches_per_s"], 2)
        res[str(edges)] = row
        print(json.dumps({str(edges): row}), file=sys.stderr, flush=True)
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
