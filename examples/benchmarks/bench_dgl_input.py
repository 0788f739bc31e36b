"""Benchmark of ``prep chunk`` on DGL's chunked format against DGL's own readers; prints one
JSON object (issue 16: "the chunk time on the largest DGL-made fixture against reading the
same files with DGL's own array_readwriter").

1. A heterogeneous graph (author/institution/paper, three edge types, paper features, labels,
   masks and one edge field) is written in DGL's chunked format by the vendored DGL writer of
   the tests (tests/dgl_writer.py: DGL CI's ``_chunk_graph``; CSV edges, .npy data by default,
   as DGL's CI and tools/chunk_graph.py write them).
2. Baseline, in a fresh Python (its own peak RSS, ``VmHWM``): every file that metadata.json
   lists is read with DGL's vendored array readers (dgl_array_readwriter.py) and each edge type
   and field is concatenated into one array, as DGL's dispatch pipeline does on one rank
   (``np.concatenate`` of the per-chunk arrays, which also copies the memory-mapped .npy
   chunks into memory). A second, edges-only baseline runs the loop DGL's dispatch really uses
   for edge files (``pyarrow.csv.open_csv`` in 4 KiB blocks), for reference.
3. Ours: ``prep chunk DGL_FOLDER OUT`` as a user runs it (the ``prep`` script, default chunk
   size), on a fresh cluster of ``--workers`` (2, the CLI's default) single-threaded worker
   processes given with ``--scheduler`` so that the workers' peak memory can be read (common.py
   conventions); the cluster's start, which the embedded cluster of a plain ``prep chunk``
   also pays, is measured and reported apart.

The two sides do not do the same work: DGL's readers only load the arrays into memory, while
``prep chunk`` also validates every file (dtypes, row counts against the metadata, node IDs in
range, NaN/inf in float data), converts and writes the chunked format (Parquet edge chunks,
data chunks, metadata) with a validation pass before the output is moved into place. Both give
"a usable graph from DGL's files": the baseline in one process's memory, ours on disk. Both
read from the page cache (the files were just written; the machine has RAM for them).

Run from the project root (needs pandas, for DGL's readers):
``pip install -c constraints.txt '.[bench]'`` then
``.venv/bin/python examples/benchmarks/bench_dgl_input.py [--edges E] [--nodes N] [--chunks K]``.
``--quick``: 2*10^4 edges, 4000 nodes, 2 chunks, 8 features (seconds; for the test suite).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))

import numpy as np  # noqa: E402

from common import (MB, fresh_cluster, parse_args, run_baseline, sampled_peaks_mb,  # noqa: E402
                    start_memory_sampler, worker_peak_rss_mb, worker_rss_now_mb)
from dgl_writer import dgl_chunk_graph  # noqa: E402
from graphprep.pipeline.core.memory import status_counters  # noqa: E402

PANDAS_MISSING = ("bench_dgl_input.py needs pandas for DGL's own array readers (the baseline): "
                  "pip install -c constraints.txt '.[bench]' (from the project root)")


# ------------------------------------------------------------------ the DGL-made dataset

def make_graph(nodes: int, edges: int, feat_dim: int, seed: int = 0) -> dict:
    """A mini MAG240M in DGL's type order (sorted names): paper 1/2 of the nodes, author 2/5,
    institution the rest; edges 1/2 paper:cites:paper, 2/5 author:writes:paper, the rest
    author:affiliated_with:institution (uniform random endpoints). Paper: float32 ``feat``
    [n, feat_dim], int64 ``label``, bool ``train_mask``; author:writes:paper: int32 ``year``."""
    rng = np.random.default_rng(seed)
    paper, author = nodes // 2, nodes * 2 // 5
    num_nodes = {"author": author, "institution": nodes - paper - author, "paper": paper}
    cites, writes = edges // 2, edges * 2 // 5
    spec = {("author", "affiliated_with", "institution"): edges - cites - writes,
            ("author", "writes", "paper"): writes, ("paper", "cites", "paper"): cites}
    coo = {}
    for (s, r, d), m in sorted(spec.items()):
        e = np.empty((m, 2), np.int64)
        e[:, 0] = rng.integers(0, num_nodes[s], m)
        e[:, 1] = rng.integers(0, num_nodes[d], m)
        coo[(s, r, d)] = e
    ndata = {"paper": {"feat": rng.standard_normal((paper, feat_dim), np.float32),
                       "label": rng.integers(0, 153, paper),
                       "train_mask": rng.random(paper) < 0.1}}
    edata = {("author", "writes", "paper"):
             {"year": rng.integers(1990, 2022, writes).astype(np.int32)}}
    return {"ntypes": sorted(num_nodes), "etypes": sorted(coo), "num_nodes": num_nodes,
            "edges": coo, "ndata": ndata, "edata": edata}


def folder_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


# ------------------------------------------------------------------ baseline: DGL's readers

BASELINE = """
import json, os, sys, time
sys.path.insert(0, {here!r})
from common import MB
from graphprep.pipeline.core.memory import peak_rss_bytes
import numpy as np
from dgl_array_readwriter import get_array_parser
floor = peak_rss_bytes()
root = {root!r}
meta = json.load(open(os.path.join(root, "metadata.json")))
t = time.perf_counter()
graph = {{"edges": {{}}, "node_data": {{}}, "edge_data": {{}}}}
for etype, info in meta["edges"].items():
    # dispatch skips 0-byte CSV edge files (types with fewer edges than chunks)
    parts = [get_array_parser(**info["format"]).read(os.path.join(root, f))
             for f in info["data"]
             if info["format"]["name"] != "csv" or os.path.getsize(os.path.join(root, f))]
    graph["edges"][etype] = np.concatenate(parts)
for section in ("node_data", "edge_data"):
    for owner, fields in meta.get(section, {{}}).items():
        for name, info in fields.items():
            graph[section][owner + "/" + name] = np.concatenate(
                [get_array_parser(**info["format"]).read(os.path.join(root, f))
                 for f in info["data"]])
seconds = time.perf_counter() - t
RESULT = {{"seconds": seconds, "rss_after_imports_mb": floor / MB,
          "edges_read": sum(len(a) for a in graph["edges"].values()),
          "arrays_in_memory_mb": sum(a.nbytes for s in graph.values() for a in s.values()) / MB}}
"""

DISPATCH_EDGES = """
import json, os, sys, time
sys.path.insert(0, {here!r})
from common import MB
from graphprep.pipeline.core.memory import peak_rss_bytes
import numpy as np
from dgl_array_readwriter import read_edge_file_as_dispatch
floor = peak_rss_bytes()
root = {root!r}
meta = json.load(open(os.path.join(root, "metadata.json")))
t = time.perf_counter()
edges = {{}}
for etype, info in meta["edges"].items():
    src_ids, dst_ids = [], []
    for f in info["data"]:
        read_edge_file_as_dispatch(os.path.join(root, f), info["format"]["name"], src_ids,
                                   dst_ids)
    edges[etype] = (np.concatenate(src_ids), np.concatenate(dst_ids))
seconds = time.perf_counter() - t
RESULT = {{"seconds": seconds, "rss_after_imports_mb": floor / MB,
          "edges_read": sum(len(s) for s, _ in edges.values())}}
"""


def baseline(code: str, root: str, edges: int) -> dict:
    r = run_baseline(code.format(here=HERE, root=root))
    assert r["edges_read"] == edges, (r["edges_read"], edges)
    out = {k: round(v, 2) if isinstance(v, float) else v for k, v in r.items()}
    out["edges_per_s"] = round(edges / r["seconds"])
    return out


# ------------------------------------------------------------------ ours: prep chunk

def prep_command() -> list[str]:
    """The ``prep`` script beside this Python (how a user runs it), else ``-m graphprep.pipeline.cli``."""
    script = os.path.join(os.path.dirname(sys.executable), "prep")
    return [script] if os.path.exists(script) else [sys.executable, "-m", "graphprep.pipeline.cli"]


def prep_chunk(root: str, out: str, edges: int, workers: int, chunk_size: int | None) -> dict:
    t0 = time.perf_counter()
    with fresh_cluster(workers) as (options, client):
        cluster_start = time.perf_counter() - t0
        idle = worker_rss_now_mb(client)
        start_memory_sampler(client)
        args = ["chunk", root, out, "--no-progress",
                *(["--chunk-size", str(chunk_size)] if chunk_size else [])]
        cmd = [*prep_command(), *args, "--scheduler", options.scheduler]
        with tempfile.TemporaryFile("w+") as log:
            t = time.perf_counter()
            proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
            cli_peak = 0
            while proc.poll() is None:
                cli_peak = max(cli_peak, vm_hwm(proc.pid))
                time.sleep(0.05)
            seconds = time.perf_counter() - t
            log.seek(0)
            output = log.read()
        code = proc.returncode
        if code != 0:
            sys.exit(f"prep chunk failed (exit {code}): {' '.join(cmd)}\n{output}")
        peaks = worker_peak_rss_mb(client)
        sampled = sampled_peaks_mb(client)
    return {"command": "prep " + " ".join(args) + " --scheduler ADDR",
            "seconds": round(seconds, 2), "edges_per_s": round(edges / seconds),
            "cluster_start_s": round(cluster_start, 2),
            "seconds_with_cluster_start": round(seconds + cluster_start, 2),
            "worker_peak_rss_mb": peaks, "worker_peak_anon_mb": sampled["anon"],
            "worker_peak_file_backed_mb": sampled["file_backed"], "worker_idle_rss_mb": idle,
            "cli_process_peak_rss_mb": round(cli_peak / MB, 1),
            "output_bytes": folder_bytes(out), "warnings": warnings_of(output)}


def vm_hwm(pid: int) -> int:
    """``VmHWM`` of a running process (bytes; 0 once it has exited): the CLI process's own
    peak, its client side (metadata, scheduling). Not ru_maxrss: a child started by fork
    starts from this (large) process's resident size."""
    return (status_counters(pid) or {}).get("VmHWM", 0)


def warnings_of(output: str) -> list[str]:
    return [line.strip() for line in output.splitlines() if "warn" in line.lower()][:5]


def check_output(out: str, sizes: dict) -> dict:
    """The chunked output holds every node and edge type with the source's counts."""
    from graphprep.formats import load_chunked_graph

    g = load_chunked_graph(out)
    assert g.num_nodes == sizes["nodes"], (g.num_nodes, sizes["nodes"])
    got = {str(et): n for et, n in g.num_edges.items()}
    assert got == sizes["edges"], (got, sizes["edges"])
    return {"node_types": len(g.num_nodes), "edge_types": len(got), "counts_match": True}


# ------------------------------------------------------------------ main

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--edges", type=int, default=5 * 10**7, help="edges over the 3 edge types")
    ap.add_argument("--nodes", type=int, default=10**7, help="nodes over the 3 node types")
    ap.add_argument("--chunks", type=int, default=8, help="DGL chunks per type (files)")
    ap.add_argument("--feat-dim", type=int, default=64, help="paper feat width (float32)")
    ap.add_argument("--edges-fmt", choices=["csv", "parquet"], default="csv")
    ap.add_argument("--data-fmt", choices=["numpy", "parquet"], default="numpy")
    ap.add_argument("--vector-rows", action="store_true",
                    help="Parquet data: 2-D fields as one list column (DGL's vector_rows)")
    ap.add_argument("--workers", type=int, default=2, help="prep's workers (CLI default: 2)")
    ap.add_argument("--chunk-size", type=int, default=None,
                    help="prep chunk --chunk-size (default: prep's)")
    ap.add_argument("--no-dispatch-edges", action="store_true",
                    help="skip the edges-only baseline of DGL's dispatch loop")
    ap.add_argument("--out", default=None, help="scratch folder (default: a temp folder)")
    args = parse_args(ap, {"edges": 2 * 10**4, "nodes": 4000, "chunks": 2, "feat_dim": 8})
    try:
        import pandas  # noqa: F401
    except ImportError:
        sys.exit(PANDAS_MISSING)

    tmp = args.out or tempfile.mkdtemp(prefix="bench_dgl_input_")
    os.makedirs(tmp, exist_ok=True)
    root, out = os.path.join(tmp, "dgl"), os.path.join(tmp, "chunked")
    for path in (root, out):
        shutil.rmtree(path, ignore_errors=True)
    try:
        t = time.perf_counter()
        graph = make_graph(args.nodes, args.edges, args.feat_dim)
        dgl_chunk_graph(graph, Path(root), args.chunks, data_fmt=args.data_fmt,
                        edges_fmt=args.edges_fmt, vector_rows=args.vector_rows)
        written = time.perf_counter() - t
        sizes = {"nodes": graph["num_nodes"],
                 "edges": {":".join(et): len(e) for et, e in graph["edges"].items()},
                 "total_nodes": args.nodes, "total_edges": args.edges, "chunks": args.chunks,
                 "feat_dim": args.feat_dim, "edges_fmt": args.edges_fmt,
                 "data_fmt": args.data_fmt, "vector_rows": args.vector_rows}
        on_disk = {part: folder_bytes(os.path.join(root, part))
                   for part in ("edge_index", "node_data", "edge_data")}
        on_disk["total"] = sum(on_disk.values())
        del graph  # this process holds nothing large while the two sides run

        dgl = baseline(BASELINE, root, args.edges)
        dispatch = None if args.no_dispatch_edges else baseline(DISPATCH_EDGES, root,
                                                                args.edges)
        ours = prep_chunk(root, out, args.edges, args.workers, args.chunk_size)
        ours["check"] = check_output(out, sizes)
        result = {
            "machine": {"cpus": os.cpu_count(), "prep_workers": args.workers},
            "sizes": sizes, "dgl_files_bytes": on_disk, "dgl_write_s": round(written, 2),
            "baseline_dgl_array_readwriter": dgl,
            "baseline_dgl_dispatch_edge_loop_edges_only": dispatch,
            "prep_chunk": ours,
            "time_ratio": round(ours["seconds"] / dgl["seconds"], 2),
            "time_ratio_with_cluster_start": round(
                ours["seconds_with_cluster_start"] / dgl["seconds"], 2),
            "peak_rss_ratio": round(max(ours["worker_peak_rss_mb"]) / dgl["peak_rss_mb"], 3),
            "note": ("the baseline only loads DGL's arrays into one process's memory (.npy "
                     "chunks memory-mapped, then concatenated as DGL's dispatch does); prep "
                     "chunk also validates every file, converts and writes the chunked format "
                     "on disk: both are 'getting a usable graph from DGL's files'. time_ratio: "
                     "prep chunk's seconds over the baseline's (>1: prep chunk slower); "
                     "peak_rss_ratio: the busier worker's peak over the baseline process's."),
        }
        print(json.dumps(result, indent=2))
    finally:
        if args.out is None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
