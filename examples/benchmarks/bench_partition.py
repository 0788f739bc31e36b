"""Benchmark of prep partition; prints one JSON object.

On a synth graph of 10^7 edges (``--edges`` to change; ``--graph rmat``: Graph500's R-MAT of
about that many edges, ``--scale``/``--edge-factor`` to fix it), for P = 2, 4, 8: time, worker peak
RSS (exact: the kernel's high-water mark), worker peak anonymous memory and peak file-backed
resident pages (memory-mapped files; both sampled from /proc/self/status at 20 Hz, so a
spike shorter than 50 ms can be missed) and edge cut of ``--method random``, ``--method metis``
and ``--method multilevel`` (default budget: derived from memory; ``--coarse-edges`` to force
one; its cut, time and peaks are also given as ratios to metis's, with the coarsening levels;
``forced``: again with the budget forced to 1/32 of the edges, at least 10^4, as issue 18 asks),
and graphprep's METIS step
(CSR assembly from the chunks + METIS + assignment + statistics) against a direct
single-process pymetis call on the same graph in the same run (the baseline reads the same
Parquet chunks, builds the same symmetric CSR with numpy and calls ``pymetis.part_graph``,
which balances node counts only: compare it with ``--balance ntypes``). metis and multilevel
run with the CLI's default ``--balance`` unless ``--balance`` says otherwise.

KaMinPar (issue 32; ``pip install kaminpar``, a dependency of graphprep) in the same run, twice:
``kaminpar``, the peer: a fresh single process reads the same Parquet chunks, builds the same
symmetric deduplicated CSR as the pymetis baseline, gives KaMinPar (default context, 2 threads,
seed 0, 3% imbalance) ONE combined vertex weight, node count + in-degree (each over its total,
summed: ``weights.combined_weight``; the in-degree counts every input edge row, as the
statistics' edges per part do), with no rebalance; its seconds with and without the CSR build,
peak RSS, edge cut (input edge rows cut, as the statistics count it: ``graph_ops.edge_cut``)
and node and edge imbalance (max/mean) are given. ``prep_kaminpar``: ``--method kaminpar``
(the same combined weight from the ``--balance`` constraints, one thread, then the rebalance
pass), measured as metis is, with its figures as ratios to metis's. ``--balance ntypes+edges``
gives metis, multilevel and ``--method kaminpar`` that same one combined weight (the peer's
on a homogeneous graph), so that their cuts compare under one constraint; each row then gives
the combined weight's imbalance (``imbalance_ntypes+edges``).
Each measurement uses fresh processes, so peak RSS is that run's own. Metis is skipped (with
the reason) where ``--method auto`` would not pick it: its estimated peak does not fit (and
``prep_kaminpar`` where its own estimate, ``core.costs.kaminpar_peak_bytes``, does not).
Each measurement runs once, its workers' memory sampled from the benchmark's process
(``common.WorkerMemorySampler``: reading three ``/proc`` status files 20 times a second, nothing
in the workers; until 2026-11-28 a sampler inside the workers made a second, untimed run
necessary, ``seconds_sampled_run``). Workers the runner restarts between passes count with
their own peaks.
``--quick``: 10^5 edges, 2 parts (seconds; for the test suite; coarsening still happens).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from common import (add_graph_options, fresh_cluster, graph_spec, parse_args,  # noqa: E402
                    run_baseline, sampled_peaks_mb, start_memory_sampler, timer,
                    worker_peak_rss_mb)

import psutil  # noqa: E402

from graphprep.pipeline.api import balance_constraints  # noqa: E402
from graphprep.pipeline.partition import PartitionOptions, run_partition  # noqa: E402
from graphprep.pipeline.core.costs import kaminpar_peak_bytes  # noqa: E402
from graphprep.pipeline.partition.auto import choose  # noqa: E402
from graphprep.pipeline.synth_job import run_synth  # noqa: E402

# The baselines' shared start: the input edge rows of every Parquet chunk into one process.
READ = """
import glob, time, numpy as np, pyarrow.parquet as pq
t = time.perf_counter()
files = sorted(glob.glob({graph!r} + "/edges/*/*.parquet"))
tables = [pq.read_table(f) for f in files]
src = np.concatenate([t_.column("src").to_numpy() for t_ in tables])
dst = np.concatenate([t_.column("dst").to_numpy() for t_ in tables])
n = {n}
"""
# ... then the symmetric deduplicated CSR without self-loops (xadj, col), as METIS takes it.
CSR = """
keep = src != dst
keys = np.concatenate([src[keep] * n + dst[keep], dst[keep] * n + src[keep]])
keys.sort()  # sort + mask: numpy 2.4's np.unique is ~100x slower (see pipeline/core/arrayops.py)
keys = keys[np.concatenate([[True], keys[1:] != keys[:-1]])]
del src, dst, keep, tables
row, col = keys // n, keys % n
xadj = np.zeros(n + 1, dtype=np.int64)
np.cumsum(np.bincount(row, minlength=n), out=xadj[1:])
del keys, row
"""
DIRECT = READ + CSR + """
import pymetis
cut, parts = pymetis.part_graph({p}, adjacency=pymetis.CSRAdjacency(xadj, col),
                                options=pymetis.Options(seed=0, ufactor=30))
parts = np.asarray(parts)
RESULT = {{"seconds": time.perf_counter() - t, "metis_edge_cut": cut}}
"""
# The KaMinPar peer: one combined weight (node count + in-degree, each over its total), the CSR
# written as the ParHIP file KaMinPar's bindings read, 2 threads, seed 0, no rebalance.
KAMINPAR = READ + """
in_degree = np.bincount(dst, minlength=n)     # every input edge row, as the statistics count
""" + CSR + """
import kaminpar
from graphprep.formats import load_chunked_graph
from graphprep.pipeline.partition.weights import combined_weight
from graphprep.pipeline.partition.graph_ops import edge_cut
from graphprep.pipeline.partition.parhip import write_parhip
csr_s = time.perf_counter() - t
weight = combined_weight(np.stack([np.ones(n, dtype=np.int64), in_degree], axis=1))
write_parhip({scratch!r}, xadj, col, weight, 8 if kaminpar.__64bit__ else 4)
del col, weight
write_s = time.perf_counter() - t - csr_s
t1 = time.perf_counter()
kaminpar.reseed(0)
graph = kaminpar.load_graph({scratch!r}, kaminpar.GraphFileFormat.PARHIP)
solver = kaminpar.KaMinPar(2, kaminpar.default_context())
parts = np.asarray(solver.compute_partition(graph, {p}, 0.03), dtype=np.int64)
partition_s = time.perf_counter() - t1
seconds = time.perf_counter() - t
kaminpar_cut = kaminpar.edge_cut(graph, parts.tolist())
del graph, solver
nodes = np.bincount(parts, minlength={p})
edges = np.bincount(parts, weights=in_degree, minlength={p})
cut = edge_cut(load_chunked_graph({graph!r}), parts)
RESULT = {{"seconds": seconds, "seconds_without_csr_build": seconds - csr_s,
          "seconds_csr_build": csr_s, "seconds_parhip_write": write_s,
          "seconds_kaminpar": partition_s, "threads": 2, "edge_cut": cut,
          "cut_ratio": round(cut / int(in_degree.sum()), 6), "kaminpar_edge_cut": kaminpar_cut,
          "imbalance_nodes": round(float(nodes.max() / nodes.mean()), 4),
          "imbalance_edges": round(float(edges.max() / edges.mean()), 4)}}
"""
KAMINPAR_MISSING = ("kaminpar is not installed: pip install -c constraints.txt -e . "
                    "(from the project root)")


def run_ours(graph: str, out: str, method: str, p: int, coarse_edges: int | None = None,
             balance: str | None = None) -> dict:
    """``balance``: ``--balance`` as the CLI takes it; None: the CLI's default (metis and
    multilevel balance node counts, edges and training nodes; before issue 30, node counts)."""
    balance = balance_constraints(balance, method)
    options = PartitionOptions(p, balance=balance, coarse_edges=coarse_edges)
    with fresh_cluster() as (opts, client):
        start_memory_sampler(client)
        with timer() as t:
            meta = run_partition(graph, out, method, options, opts, overwrite=True)
        rss = worker_peak_rss_mb(client)
        sampled = sampled_peaks_mb(client)
    s = meta.stats
    row = {"seconds": round(t["s"], 2), "worker_peak_rss_mb": rss,
           "worker_processes": sampled["worker_processes"],
           "worker_peak_anon_mb": sampled["anon"],
           "worker_peak_file_backed_mb": sampled["file_backed"], "edge_cut": s["edge_cut"],
           "cut_ratio": s["cut_ratio"], "imbalance_nodes": s["imbalance"]["nodes"],
           "imbalance_edges": s["imbalance"]["edges"], "imbalance_train":
           s["imbalance"].get("train"), "balance": meta.options["balance"],
           "warnings": s["warnings"]}
    # a combined constraint (--balance ntypes+edges): the imbalance of its summed shares
    row.update({f"imbalance_{c}": s["imbalance"][c] for c in meta.options["balance"] if "+" in c})
    if method == "multilevel":
        row.update(levels=s["levels"], coarse_edge_budget=s["coarse_edge_budget"],
                   budget=s["budget"])
    if method == "kaminpar":
        row.update({k: s[k] for k in ("kaminpar_edge_cut", "kaminpar_blocks",
                                      "kaminpar_runs")})
    return row


def direct_kaminpar(graph: str, n: int, p: int, scratch: str) -> dict:
    """The KaMinPar peer (``KAMINPAR``) in a fresh process; its ParHIP file removed after."""
    try:
        out = run_baseline(KAMINPAR.format(graph=graph, n=n, p=p, scratch=scratch))
    finally:
        if os.path.exists(scratch):
            os.remove(scratch)
    return {k: round(v, 2) if isinstance(v, float) and not k.startswith(("cut", "imb")) else v
            for k, v in out.items()}


def vs_metis(ml: dict, metis: dict) -> dict:
    """Multilevel's (or --method kaminpar's) figures as ratios to metis's in the same run."""
    def peak(row, key):
        return max(row[key])
    return {"cut_vs_metis": round(ml["edge_cut"] / metis["edge_cut"], 4),
            "time_vs_metis": round(ml["seconds"] / metis["seconds"], 3),
            "peak_rss_vs_metis": round(peak(ml, "worker_peak_rss_mb") /
                                       peak(metis, "worker_peak_rss_mb"), 3),
            "peak_anon_vs_metis": round(peak(ml, "worker_peak_anon_mb") /
                                        peak(metis, "worker_peak_anon_mb"), 3)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--edges", type=int, default=10**7)
    ap.add_argument("--parts", default="2,4,8")
    ap.add_argument("--balance", default=None,
                    help="metis/multilevel --balance (default: the CLI's default; 'ntypes': "
                         "node counts only, as runs before issue 30)")
    ap.add_argument("--coarse-edges", type=int, default=None,
                    help="multilevel budget (default: derived from memory)")
    ap.add_argument("--methods",
                    default="random,metis,multilevel,forced,direct,kaminpar,prep_kaminpar",
                    help="forced: multilevel with --coarse-edges max(10^4, edges/32); direct: "
                         "pymetis in one process; kaminpar: KaMinPar in one process (one "
                         "combined weight, 2 threads); prep_kaminpar: --method kaminpar")
    add_graph_options(ap)
    # --quick: 10^5 edges, above the budget's 10^4 floor, so that multilevel coarsens.
    args = parse_args(ap, {"edges": 10**5, "parts": "2"})
    tmp = tempfile.mkdtemp(prefix="bench_partition_")
    try:
        graph = os.path.join(tmp, "graph")
        spec = graph_spec(args, args.edges, feat_dim=8, scale=args.scale)
        with fresh_cluster() as (opts, _):
            run_synth(spec, graph, 1 << 20, opts)
        result = {"graph": {"generator": spec.generator, "nodes": spec.num_nodes,
                            "edges": spec.num_edges}, "runs": {}}
        # The embedded cluster's default worker limit: the machine's memory over 2 workers.
        fits = choose(spec.num_edges, psutil.virtual_memory().total // 2)
        metis_fits = fits.method == "metis"
        have_kaminpar = importlib.util.find_spec("kaminpar") is not None
        # --method kaminpar also holds the whole graph: its own estimate, the same budget
        kaminpar_peak = kaminpar_peak_bytes(spec.num_edges, spec.num_nodes, 3)
        kaminpar_fits = fits.budget_bytes is None or kaminpar_peak <= fits.budget_bytes
        for p in (int(x) for x in args.parts.split(",")):
            methods = args.methods.split(",")
            row = result["runs"][str(p)] = {}
            if "random" in methods:
                row["random"] = run_ours(graph, os.path.join(tmp, f"r{p}"), "random", p)
            if "metis" in methods and metis_fits:
                row["metis"] = run_ours(graph, os.path.join(tmp, f"m{p}"), "metis", p,
                                        balance=args.balance)
            elif "metis" in methods:
                row["metis"] = {"skipped": fits.describe()}
            if "multilevel" in methods:
                ml = row["multilevel"] = run_ours(graph, os.path.join(tmp, f"l{p}"),
                                                  "multilevel", p, args.coarse_edges,
                                                  args.balance)
                if "edge_cut" in row.get("metis", {}):
                    ml.update(vs_metis(ml, row["metis"]))
            if "forced" in methods:       # issue 18: coarsening forced to 1/32 of the edges
                forced = row["multilevel_forced"] = run_ours(
                    graph, os.path.join(tmp, f"f{p}"), "multilevel", p,
                    max(10_000, spec.num_edges // 32), args.balance)
                if "edge_cut" in row.get("metis", {}):
                    forced.update(vs_metis(forced, row["metis"]))
            if "prep_kaminpar" in methods and have_kaminpar and kaminpar_fits:
                kmp = row["prep_kaminpar"] = run_ours(graph, os.path.join(tmp, f"k{p}"),
                                                      "kaminpar", p, balance=args.balance)
                if "edge_cut" in row.get("metis", {}):
                    kmp.update(vs_metis(kmp, row["metis"]))
            elif "prep_kaminpar" in methods:
                row["prep_kaminpar"] = {"skipped": KAMINPAR_MISSING if not have_kaminpar else
                                        f"estimated peak {kaminpar_peak / 1e9:.2f} GB over "
                                        f"the budget ({fits.describe()})"}
            if "kaminpar" in methods:
                row["direct_kaminpar"] = (
                    direct_kaminpar(graph, spec.num_nodes, p, os.path.join(tmp, "g.parhip"))
                    if have_kaminpar else {"skipped": KAMINPAR_MISSING})
            if "direct" in methods:
                direct = run_baseline(DIRECT.format(graph=graph, n=spec.num_nodes, p=p))
                row["direct_pymetis"] = {k: round(v, 2) if isinstance(v, float) else v
                                         for k, v in direct.items() if v is not None}
                if "edge_cut" in row.get("metis", {}):
                    row["metis_overhead_time"] = round(row["metis"]["seconds"] /
                                                       direct["seconds"], 3)
                    row["metis_overhead_peak_rss"] = round(max(row["metis"]["worker_peak_rss_mb"])
                                                           / direct["peak_rss_mb"], 3)
        print(json.dumps(result, indent=2))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
