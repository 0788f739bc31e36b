"""Benchmark of the whole preparation pipeline; prints one JSON object.

synth (the chunk step) -> partition (--method, default random; 4 parts) -> dispatch -> verify on
a synth graph of 10^7 edges (and 10^8 with --large; only 10^9 with --huge; ``--graph rmat``:
Graph500's R-MAT of about as many edges, ``--scale``/``--edge-factor`` to fix the first):
seconds, edges/s per step, peak RSS per worker (fresh workers per step), disk used (and the peak
of each step's writes, intermediate files included), output size. Baseline in the same run: an
in-memory single-process route (load all edges and node data, numpy argsort relabel, write the
same part files).
``--quick``: 10^4 edges (seconds; for the test suite).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from common import (PeriodicSampler, add_graph_options, fresh_cluster,  # noqa: E402
                    graph_spec, parse_args, run_baseline, sampled_peaks_mb,
                    start_memory_sampler, timer, worker_peak_rss_mb)

from graphprep.dispatch.job import run_dispatch  # noqa: E402
from graphprep.dispatch.verify import run_verify  # noqa: E402
from graphprep.pipeline.partition import PartitionOptions, run_partition  # noqa: E402
from graphprep.pipeline.synth_job import run_synth  # noqa: E402

IN_MEMORY = """
import glob, os, time, numpy as np, pyarrow.parquet as pq
t = time.perf_counter()
g, out, P = {graph!r}, {out!r}, {parts}
files = sorted(glob.glob(g + "/edges/*/*.parquet"))
tables = [pq.read_table(f) for f in files]
src = np.concatenate([x.column("src").to_numpy() for x in tables])
dst = np.concatenate([x.column("dst").to_numpy() for x in tables])
del tables
parts = np.load({assignment!r} + "/_N.npy").astype(np.int64)
data = {{}}
for name in os.listdir(g + "/node_data/_N"):
    fs = sorted(glob.glob(g + f"/node_data/_N/{{name}}/*.npy"))
    data[name] = np.concatenate([np.load(f) for f in fs])
order = np.argsort(parts, kind="stable")           # new ID -> original ID
new_id = np.empty_like(order); new_id[order] = np.arange(len(order))
counts = np.bincount(parts, minlength=P); starts = np.concatenate([[0], np.cumsum(counts)])
nd, ns = new_id[dst], new_id[src]
eorder = np.argsort(nd, kind="stable")             # CSC order, grouped by owner part
nd, ns, eid = nd[eorder], ns[eorder], eorder
ebounds = np.searchsorted(nd, starts)
for p in range(P):
    d = f"{{out}}/part-{{p}}"
    for sub in ("nodes/_N", "edges/_N___E___N", "node_feats/_N"):
        os.makedirs(f"{{d}}/{{sub}}", exist_ok=True)
    own = order[starts[p]:starts[p + 1]]
    np.save(f"{{d}}/nodes/_N/orig_ids.npy", own)
    sl = slice(ebounds[p], ebounds[p + 1])
    s, dd = ns[sl], nd[sl]
    outside = s[(s < starts[p]) | (s >= starts[p + 1])]
    outside.sort(); halo = outside[np.concatenate([[True], outside[1:] != outside[:-1]])] if len(outside) else outside
    np.save(f"{{d}}/nodes/_N/halo_ids.npy", halo)
    indptr = np.concatenate([[0], np.cumsum(np.bincount(dd - starts[p], minlength=counts[p]))])
    local = np.where((s >= starts[p]) & (s < starts[p + 1]), s - starts[p],
                     counts[p] + np.searchsorted(halo, s)).astype(np.int32)
    np.save(f"{{d}}/edges/_N___E___N/indptr.npy", indptr)
    np.save(f"{{d}}/edges/_N___E___N/indices.npy", local)
    np.save(f"{{d}}/edges/_N___E___N/orig_ids.npy", eid[sl])
    for name, values in data.items():
        np.save(f"{{d}}/node_feats/_N/{{name}}.npy", values[own])
RESULT = {{"seconds": time.perf_counter() - t}}
"""


def du(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


class DiskPeak(PeriodicSampler):
    """Peak bytes used on ``path``'s file system above its use at start (sampled every 2 s in
    a thread: intermediate files of a step count, such as the multilevel levels)."""

    def __init__(self, path: str, interval_s: float = 2.0):
        super().__init__(interval_s)
        self.path = path
        self.base = self.peak = shutil.disk_usage(path).used

    def sample(self) -> None:
        self.peak = max(self.peak, shutil.disk_usage(self.path).used)

    @property
    def peak_mb(self) -> int:
        return round((self.peak - self.base) / 2**20)


def step(name, edges, fn, disk_of: str):
    """One step on fresh workers: its figures, also written to stderr as soon as it ends (a
    long run that is stopped keeps the steps it finished)."""
    with fresh_cluster() as (opts, client), DiskPeak(disk_of) as disk:
        start_memory_sampler(client)
        with timer() as t:
            out = fn(opts)
        rss = worker_peak_rss_mb(client)
        sampled = sampled_peaks_mb(client)
    row = {"seconds": round(t["s"], 2), "edges_per_s": round(edges / t["s"]),
           "worker_peak_rss_mb": rss, "worker_peak_anon_mb": sampled["anon"],
           "worker_peak_file_backed_mb": sampled["file_backed"],
           "worker_processes": sampled["worker_processes"],
           "peak_disk_written_mb": disk.peak_mb}
    stats = getattr(out, "stats", None)
    if stats:
        row.update({k: stats[k] for k in ("edge_cut", "cut_ratio", "levels", "coarse_edges")
                    if k in stats})
    print(json.dumps({name: row}), file=sys.stderr, flush=True)
    return row


def pipeline(tmp: str, spec, parts: int, method: str = "random",
             baseline: bool = True) -> dict:
    """synth (``spec``) -> partition (``method``) -> dispatch -> verify, each step on fresh
    workers; disk used after each step. ``baseline``: also the in-memory route (it holds every
    edge: skip it where that does not fit in memory)."""
    g, a, d = (os.path.join(tmp, x) for x in ("graph", "assign", "parts"))
    edges = spec.num_edges
    res = {"generator": spec.generator, "edges": edges, "nodes": spec.num_nodes,
           "parts": parts, "method": method}
    res["synth"] = step("synth", edges, lambda o: run_synth(spec, g, 1 << 20, o), tmp)
    res["synth"]["disk_mb"] = round(du(g) / 2**20)
    res[f"partition_{method}"] = step("partition", edges, lambda o: run_partition(
        g, a, method, PartitionOptions(parts, balance=None), o), tmp)  # the CLI's default
    res[f"partition_{method}"]["disk_mb"] = round(du(a) / 2**20)
    res["dispatch"] = step("dispatch", edges, lambda o: run_dispatch(g, a, d, o), tmp)
    res["verify"] = step("verify", edges, lambda o: run_verify(g, d, o), tmp)
    res["output_mb"] = round(du(d) / 2**20)
    steps = ("synth", f"partition_{method}", "dispatch", "verify")
    res["total_s"] = round(sum(res[s]["seconds"] for s in steps), 1)
    peak = max(max(res[s]["worker_peak_rss_mb"]) for s in steps)
    res["max_worker_peak_rss_mb"] = peak
    if baseline:
        base = run_baseline(IN_MEMORY.format(graph=g, out=os.path.join(tmp, "inmem"),
                                             parts=parts, assignment=a))
        res["in_memory_route"] = {"seconds": round(base["seconds"], 2),
                                  "peak_rss_mb": round(base["peak_rss_mb"], 1)}
        res["dispatch_throughput_vs_in_memory"] = round(base["seconds"] /
                                                        res["dispatch"]["seconds"], 3)
        res["peak_rss_vs_in_memory"] = round(peak / base["peak_rss_mb"], 3)
    shutil.rmtree(tmp)
    os.makedirs(tmp)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--edges", type=int, default=10**7)
    ap.add_argument("--large", action="store_true", help="also run 10 x --edges")
    ap.add_argument("--huge", action="store_true",
                    help="only 10^9 edges, without the in-memory baseline (it would hold "
                         "~40 GB); needs 79 GB of free disk (enough on 2026-11-29; 68 GB ran out in "
                         "dispatch)")
    ap.add_argument("--parts", type=int, default=4)
    ap.add_argument("--method", default="random", help="partition method")
    add_graph_options(ap)
    args = parse_args(ap, {"edges": 10**4})
    if args.quick and args.huge:
        ap.error("--huge is 10^9 edges whatever --quick says: give one of them")
    tmp = tempfile.mkdtemp(prefix="bench_pipeline_", dir=os.getcwd())
    try:
        if args.huge:
            result = {"huge": pipeline(tmp, graph_spec(args, 10**9, 16, args.scale), args.parts,
                                       args.method, baseline=False)}
        else:
            result = {"small": pipeline(tmp, graph_spec(args, args.edges, 16, args.scale),
                                        args.parts, args.method)}
        if args.large and not args.huge:
            result["large"] = pipeline(tmp, graph_spec(args, 10 * args.edges, 16), args.parts,
                                       args.method)
            result["rss_growth"] = round(result["large"]["max_worker_peak_rss_mb"]
                                         / result["small"]["max_worker_peak_rss_mb"], 3)
        print(json.dumps(result, indent=2))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
