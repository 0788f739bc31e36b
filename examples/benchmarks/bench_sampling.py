"""Neighbor-sampling throughput; prints one JSON object.

graphprep's distributed sampler (3 hops, fanouts 15,10,5, batches of 1024 seeds) on a synth
graph of 10^7 edges, on 1 part and across 2 parts (in one process: the split by owner, the
per-owner requests and the merge, without the network), in sampled edges per second. In the
same run: PyG's ``torch_geometric`` neighbor sampler and DGL's ``dgl.sampling.sample_neighbors``
on the same CSC and seeds where they import (the reason is reported where they do not), and a
per-seed loop (``torch.randperm`` per node, the obvious implementation) as a floor.
``--device cuda`` places the graph on the GPU and samples there (the same code).

``--compare-unique`` also runs, in the same process on the same seeds, a sampler with the
previous sort-based relabel and owner split (``dedup="unique"``: ``torch.unique``, ``argsort``),
alternating the two batch by batch (which one goes first alternates too) so that a shared
machine's load falls on both alike; both rates and their ratio are printed. ``--workdir`` keeps
the prepared graphs and a later run with the same ``--workdir`` and ``--edges`` reuses them.
``--quick``: 10^4 edges, batches of 64 seeds, 3 batches (seconds; for the test suite).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
from common import commit_tree, parse_args, partitioned_synth  # noqa: E402

from graphprep.trainer.sampling.dist_sampler import DistNeighborSampler  # noqa: E402
from graphprep.trainer.sampling.partition import LocalPart  # noqa: E402
from graphprep.trainer.sampling.service import LocalTransport, PartServer  # noqa: E402


def graphprep_rate(graph_json, fanouts, batch, batches, device, compare_unique=False):
    """Sampled edges/s of the sampler on every part of ``graph_json`` (sampling from part 0);
    with ``compare_unique`` also of the sort-based baseline, batches alternated."""
    parts = [LocalPart.load(graph_json, p) for p in range(LocalPart.load(graph_json, 0)
                                                           .graph.num_parts)]
    placement = "cuda" if device == "cuda" else "cpu"
    servers = {p.p: PartServer(p.place(placement)) for p in parts}
    transport = LocalTransport(servers)
    samplers = {dedup: DistNeighborSampler(parts[0], servers[0], transport, fanouts, device,
                                           dedup=dedup)
                for dedup in (("stamp", "unique") if compare_unique else ("stamp",))}
    n0 = len(parts[0].orig_ids["_N"])
    g = torch.Generator().manual_seed(0)
    seeds = [torch.randperm(n0, generator=g)[:batch] for _ in range(batches + 1)]
    for sampler in samplers.values():
        sampler.sample("_N", seeds[0], 0)                 # warm-up
    edges = dict.fromkeys(samplers, 0)
    took = dict.fromkeys(samplers, 0.0)
    for i, s in enumerate(seeds[1:]):
        for name in (list(samplers) if i % 2 == 0 else list(samplers)[::-1]):
            if device == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            mb = samplers[name].sample("_N", s, i)
            if device == "cuda":
                torch.cuda.synchronize()
            took[name] += time.perf_counter() - start
            edges[name] += sum(len(e[0]) for b in mb.blocks for e in b.edges.values())

    def rate(name):
        return {"edges_per_s": round(edges[name] / took[name]),
                "batches_per_s": round(batches / took[name], 2),
                "edges_per_batch": edges[name] // batches, "seconds": round(took[name], 2)}
    out = rate("stamp")
    counters = transport.take_counters()
    if counters["rpc_requests"]:
        calls = (batches + 1) * len(samplers)
        out["remote_requests_per_batch"] = counters["rpc_requests"] / calls
        out["remote_mb_per_batch"] = round((counters["rpc_bytes_sent"] +
                                            counters["rpc_bytes_received"]) / calls / 1e6, 2)
    if compare_unique:
        out["unique_baseline"] = rate("unique")
        out["speedup_vs_unique"] = round(out["edges_per_s"] /
                                         out["unique_baseline"]["edges_per_s"], 2)
    return out, parts[0], seeds


def old_sampler(commit: str, graph_json: str, fanouts, workdir: str):
    """The 1-part sampler of ``commit``, for a same-process comparison: its tree extracted
    (``git archive``) under ``workdir`` and imported under its own top-level names (a commit
    from before the one ``graphprep`` namespace), reading a copy of ``graph_json`` without
    the fields its loader did not know yet."""
    import dataclasses
    import importlib

    tree = commit_tree(commit, workdir)
    with open(os.path.join(tree, "pyproject.toml")) as f:
        if '"graphprep.trainer"' in f.read():
            raise SystemExit(f"--against-commit {commit}: its trainer is graphprep.trainer, "
                             "the name of this one: run it in its own process instead")
    sys.path.insert(0, tree)

    def module(*names):
        for name in names:
            try:
                return importlib.import_module(name)
            except ImportError:
                continue
        raise SystemExit(f"--against-commit {commit}: none of {names} imports")
    partitioned = module("formats.partitioned")
    sampler = module("trainer.sampling.dist_sampler", "trainer.dist_sampler")
    partition = module("trainer.sampling.partition", "trainer.partition")
    service = module("trainer.sampling.service", "trainer.service")
    with open(graph_json) as f:
        meta = json.load(f)
    known = {f.name for f in dataclasses.fields(partitioned.PartInfo)}
    meta["parts"] = [{k: v for k, v in p.items() if k in known} for p in meta["parts"]]
    old_json = os.path.join(os.path.dirname(graph_json), f"graph.{commit}.json")
    with open(old_json, "w") as f:
        json.dump(meta, f)
    part = partition.LocalPart.load(old_json, 0)
    server = service.PartServer(part)
    return sampler.DistNeighborSampler(part, server, service.LocalTransport({0: server}),
                                       fanouts)


def against_commit(commit: str, graph_json: str, fanouts, batch: int, batches: int,
                   rounds: int, workdir: str) -> dict:
    """This tree's sampler against ``commit``'s on 1 part, the same seeds, batches
    alternated (which goes first alternates too), ``rounds`` times: edges/s of each and the
    ratio per round, and the median ratio."""
    import statistics

    new_part = LocalPart.load(graph_json, 0)
    server = PartServer(new_part)
    samplers = {"now": DistNeighborSampler(new_part, server, LocalTransport({0: server}),
                                           fanouts),
                commit: old_sampler(commit, graph_json, fanouts, workdir)}
    n0 = len(new_part.orig_ids["_N"])
    g = torch.Generator().manual_seed(0)
    out = {"rounds": []}
    for r in range(rounds):
        seeds = [torch.randperm(n0, generator=g)[:batch] for _ in range(batches + 1)]
        for sampler in samplers.values():
            sampler.sample("_N", seeds[0], 0)                 # warm-up
        edges, took = dict.fromkeys(samplers, 0), dict.fromkeys(samplers, 0.0)
        for i, s in enumerate(seeds[1:]):
            for name in (list(samplers) if (i + r) % 2 == 0 else list(samplers)[::-1]):
                start = time.perf_counter()
                mb = samplers[name].sample("_N", s, i)
                took[name] += time.perf_counter() - start
                edges[name] += sum(len(e[0]) for b in mb.blocks for e in b.edges.values())
        rates = {name: round(edges[name] / took[name]) for name in samplers}
        out["rounds"].append({**{f"{k}_edges_per_s": v for k, v in rates.items()},
                              "ratio": round(rates["now"] / rates[commit], 3)})
    out["median_ratio"] = statistics.median(x["ratio"] for x in out["rounds"])
    return out


def prepared_graphs(workdir, edges, parts):
    """``{P: graph.json}``: the graphs a previous run left in ``workdir``, else built."""
    out = {p: os.path.join(workdir, f"synth-{edges}-d{p}", "graph.json") for p in parts}
    if all(os.path.exists(path) for path in out.values()):
        return out
    return partitioned_synth(workdir, edges, parts)


def whole_csc(part):
    csc = next(iter(part.csc.values()))
    return csc.indptr, csc.indices.long()


def per_seed_loop_rate(part, seeds, fanouts, batches):
    """The obvious implementation: per node, ``randperm(deg)[:k]``; one part, local IDs."""
    indptr, indices = whole_csc(part)
    edges, start = 0, time.perf_counter()
    for s in seeds[1:batches + 1]:
        frontier = s
        for k in fanouts:
            nxt = []
            for v in frontier.tolist():
                a, b = int(indptr[v]), int(indptr[v + 1])
                pick = torch.randperm(b - a)[:k] + a if b - a > k else torch.arange(a, b)
                nxt.append(indices[pick])
                edges += len(pick)
            frontier = torch.unique(torch.cat(nxt))
    took = time.perf_counter() - start
    return {"edges_per_s": round(edges / took), "seconds": round(took, 2), "batches": batches}


def pyg_rate(part, seeds, fanouts, batches):
    try:
        import torch_geometric
        from torch_geometric.sampler import NeighborSampler, NodeSamplerInput
        from torch_geometric.data import Data
    except Exception as err:  # noqa: BLE001 - report why
        return {"error": f"{type(err).__name__}: {err}"}
    indptr, indices = whole_csc(part)
    n = len(indptr) - 1
    dst = torch.repeat_interleave(torch.arange(n), indptr[1:] - indptr[:-1])
    try:
        data = Data(edge_index=torch.stack([indices, dst]), num_nodes=n)
        sampler = NeighborSampler(data, num_neighbors=fanouts)
        sampler.sample_from_nodes(NodeSamplerInput(None, seeds[0]))
        edges, start = 0, time.perf_counter()
        for s in seeds[1:batches + 1]:
            out = sampler.sample_from_nodes(NodeSamplerInput(None, s))
            edges += out.row.numel()
        took = time.perf_counter() - start
    except Exception as err:  # noqa: BLE001
        return {"version": torch_geometric.__version__, "error": f"{type(err).__name__}: {err}"}
    return {"version": torch_geometric.__version__, "edges_per_s": round(edges / took),
            "seconds": round(took, 2)}


def dgl_rate(part, seeds, fanouts, batches):
    try:
        import dgl
    except Exception as err:  # noqa: BLE001
        return {"error": f"{type(err).__name__}: {str(err).splitlines()[0]}"}
    indptr, indices = whole_csc(part)
    n = len(indptr) - 1
    g = dgl.graph(("csc", (indptr, indices, torch.arange(len(indices)))), num_nodes=n)
    edges, start = 0, time.perf_counter()
    for s in seeds[1:batches + 1]:
        frontier = s
        for k in fanouts:
            sg = dgl.sampling.sample_neighbors(g, frontier, k)
            edges += sg.num_edges()
            frontier = torch.unique(sg.edges()[0])
    took = time.perf_counter() - start
    return {"version": dgl.__version__, "edges_per_s": round(edges / took),
            "seconds": round(took, 2)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--edges", type=int, default=10**7)
    ap.add_argument("--fanouts", default="15,10,5")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--loop-batches", type=int, default=2, help="batches for the per-seed loop")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--workdir", default=None, help="keep (and reuse) the prepared graphs here")
    ap.add_argument("--compare-unique", action="store_true",
                    help="also time the sort-based relabel/owner split (torch.unique, argsort)"
                         " in the same run, alternating batches")
    ap.add_argument("--graphprep-only", action="store_true",
                    help="skip PyG, DGL and the per-seed loop")
    ap.add_argument("--against-commit", default=None, metavar="COMMIT",
                    help="instead: this sampler against COMMIT's (a commit before the "
                         "graphprep namespace, e.g. 794b0e9) on 1 part, in this process, "
                         "batches alternated, --rounds times; the ratio per round and its "
                         "median")
    ap.add_argument("--rounds", type=int, default=5, help="--against-commit: rounds")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch intra-op threads (default: torch's); 1 is steadier on a shared "
                         "machine, where a descheduled OpenMP thread stalls every parallel op")
    args = parse_args(ap, {"edges": 10**4, "batch_size": 64, "batches": 3, "loop_batches": 1})
    if args.threads:
        torch.set_num_threads(args.threads)
    fanouts = [int(f) for f in args.fanouts.split(",")]
    workdir = args.workdir or tempfile.mkdtemp(prefix="bench-sampling-")
    if args.against_commit:
        graph = prepared_graphs(workdir, args.edges, (1,))[1]
        print(json.dumps({"edges": args.edges, "fanouts": fanouts, "batch_size":
                          args.batch_size, "batches": args.batches,
                          "torch_threads": torch.get_num_threads(),
                          "against": args.against_commit,
                          **against_commit(args.against_commit, graph, fanouts,
                                           args.batch_size, args.batches, args.rounds,
                                           workdir)}, indent=1))
        return
    graphs = prepared_graphs(workdir, args.edges, (1, 2))
    res = {"edges": args.edges, "fanouts": fanouts, "batch_size": args.batch_size,
           "device": args.device, "torch_threads": torch.get_num_threads()}
    res["graphprep_1_part"], part, seeds = graphprep_rate(graphs[1], fanouts, args.batch_size,
                                                         args.batches, args.device,
                                                         args.compare_unique)
    res["graphprep_2_parts"], _, _ = graphprep_rate(graphs[2], fanouts, args.batch_size,
                                                    args.batches, args.device,
                                                    args.compare_unique)
    if args.device == "cpu" and not args.graphprep_only:
        res["pyg"] = pyg_rate(part, seeds, fanouts, args.batches)
        res["dgl"] = dgl_rate(part, seeds, fanouts, args.batches)
        res["per_seed_loop"] = per_seed_loop_rate(part, seeds, fanouts, args.loop_batches)
        base = res["per_seed_loop"]["edges_per_s"]
        res["speedup_vs_per_seed_loop"] = round(res["graphprep_1_part"]["edges_per_s"] / base, 1)
        for name in ("pyg", "dgl"):
            if "edges_per_s" in res[name]:
                res[f"ratio_vs_{name}"] = round(res["graphprep_1_part"]["edges_per_s"] /
                                                res[name]["edges_per_s"], 2)
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
