"""Benchmark of the foundation steps; prints one JSON object.

(a) prep synth at 10^7 edges: edges/s and peak RSS per worker (2 workers);
(b) CSV -> chunked for 10^7 edges vs a single-process pyarrow.csv.read_csv +
    parquet.write_table baseline in the same run: time ratio and peak-RSS ratio;
(c) peak RSS per worker of synth at 10^7 vs 10^8 edges (should stay flat);
(d) the CPU an idle embedded cluster (2 workers) uses, against the same cluster with Dask's
    defaults for its profiler and event-loop check (``local_cluster`` without ``cluster.IDLE_QUIET``);
(e) what a step pays per set of tasks beyond the tasks' own time: sets of 2 tasks that each
    take 0, 30 or 150 ms, run by the steps' ``TaskRunner`` (failures named, lost workers
    watched) against Dask's own ``client.map`` + ``client.gather`` of the same tasks on the
    same cluster (the floor), in ms per set.

Times exclude the Dask cluster's start (reported apart): a job on an existing cluster
(``--scheduler``) does not pay it. Run from the project root:
``.venv/bin/python examples/benchmarks/bench_chunk.py [--small] [--out DIR]``; ``--quick``:
10^4/10^5 edges (seconds; for the test suite).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from common import (fresh_cluster, parse_args, run_baseline, timer,  # noqa: E402
                    worker_peak_rss_mb, worker_rss_now_mb)

import pyarrow as pa  # noqa: E402
import pyarrow.csv as pacsv  # noqa: E402

from graphprep.pipeline.convert import run_chunk  # noqa: E402
from graphprep.pipeline.convert.options import ChunkOptions  # noqa: E402
from graphprep.pipeline.convert.writer import Transforms  # noqa: E402
from graphprep.pipeline.synth import SynthSpec, generate_edges  # noqa: E402
from graphprep.pipeline.synth_job import run_synth  # noqa: E402


def bench_synth(out: str, edges: int, feat_dim: int) -> dict:
    spec = SynthSpec(num_nodes=edges // 10, num_edges=edges, feat_dim=feat_dim)
    with fresh_cluster() as (opts, client):
        with timer() as t:
            run_synth(spec, out, 1 << 20, opts, overwrite=True)
        rss = worker_peak_rss_mb(client)
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(out) for f in fs)
    shutil.rmtree(out)
    return {"edges": edges, "nodes": spec.num_nodes, "feat_dim": feat_dim,
            "seconds": round(t["s"], 2), "edges_per_s": round(edges / t["s"]),
            "worker_peak_rss_mb": rss, "output_mb": round(size / 2**20)}


def write_edge_csv(path: str, edges: int) -> None:
    spec = SynthSpec(num_nodes=edges // 10, num_edges=edges)
    with pacsv.CSVWriter(path, pa.schema([("src", pa.int64()), ("dst", pa.int64())])) as w:
        for start in range(0, edges, 1 << 21):
            s, d = generate_edges(spec, 0, start, min(start + (1 << 21), edges))
            w.write_table(pa.table({"src": s, "dst": d}))


BASELINE = """
import time, pyarrow.csv as pacsv, pyarrow.parquet as pq
t = time.perf_counter()
table = pacsv.read_csv({csv!r})
pq.write_table(table, {out!r})
RESULT = {{"seconds": time.perf_counter() - t, "rows": table.num_rows}}
"""


def _convert(csv: str, out: str, chunk_size: int) -> dict:
    with fresh_cluster() as (opts, client):
        idle = worker_rss_now_mb(client)
        with timer() as t:
            run_chunk(csv, out, "csv", ChunkOptions(chunk_size=chunk_size), Transforms(), opts,
                      overwrite=True)
        return {"seconds": round(t["s"], 2), "worker_peak_rss_mb": worker_peak_rss_mb(client),
                "worker_idle_rss_mb": idle}


def bench_csv(tmp: str, edges: int) -> dict:
    csv = os.path.join(tmp, "edges.csv")
    write_edge_csv(csv, edges)
    base = run_baseline(BASELINE.format(csv=csv, out=os.path.join(tmp, "baseline.parquet")))
    ours = _convert(csv, os.path.join(tmp, "chunked"), 1 << 20)
    small = _convert(csv, os.path.join(tmp, "chunked-small"), 1 << 18)
    t, rss, idle = {"s": ours["seconds"]}, ours["worker_peak_rss_mb"], ours["worker_idle_rss_mb"]
    return {"edges": edges, "csv_mb": round(os.path.getsize(csv) / 2**20),
            "graphprep": ours,
            "baseline_read_csv_write_table": {k: round(v, 2) for k, v in base.items()},
            "time_ratio": round(t["s"] / base["seconds"], 2),
            "peak_rss_ratio": round(max(rss) / base["peak_rss_mb"], 3),
            "peak_rss_above_idle_ratio": round((max(rss) - min(idle)) / base["peak_rss_mb"], 3),
            "graphprep_chunk_size_2^18": {
                **small, "time_ratio": round(small["seconds"] / base["seconds"], 2),
                "peak_rss_ratio": round(max(small["worker_peak_rss_mb"]) / base["peak_rss_mb"],
                                        3)}}


def cluster_start_seconds() -> float:
    t = time.perf_counter()
    with fresh_cluster():
        pass
    return round(time.perf_counter() - t, 2)


def idle_cluster_cpu(window_s: float) -> dict:
    """CPU seconds per minute that an idle 2-worker embedded cluster costs (this process, where
    its scheduler runs, and its workers), ours and with Dask's defaults."""
    from graphprep.pipeline.core import cluster

    def measure(config: dict) -> float:
        import psutil
        with cluster.local_cluster(2, config=config):
            me = psutil.Process()
            procs = [me, *me.children(recursive=True)]
            before = [sum(p.cpu_times()[:2]) for p in procs]
            time.sleep(window_s)
            used = sum(sum(p.cpu_times()[:2]) - b for p, b in zip(procs, before))
        return round(used * 60 / window_s, 2)

    ours = measure(cluster.CLUSTER_CONFIG)
    defaults = measure(cluster.WORKER_ENVIRON)           # Dask's profiler and tick back
    return {"window_s": window_s, "graphprep_cpu_s_per_min": ours,
            "dask_defaults_cpu_s_per_min": defaults,
            "ratio": round(ours / defaults, 3) if defaults else None}


def _busy(seconds: float) -> float:
    """A task that holds its worker thread for ``seconds`` (a stand-in for a step's task)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass
    return seconds


def task_set_overhead(sets: int) -> dict:
    """ms per set of 2 tasks above the tasks' own time, ours and Dask's map + gather, for
    tasks of 0, 30 and 150 ms (``sets`` sets each, after one to warm up)."""
    from graphprep.pipeline.core.cluster import TaskRunner

    out = {}
    with fresh_cluster() as (_, client):
        runner = TaskRunner(client, progress=False)
        ways = {"graphprep": lambda items: runner(_busy, items),
                "dask_map_gather": lambda items: client.gather(client.map(_busy, items,
                                                                          pure=False))}
        for ms in (0, 30, 150):
            items = [ms / 1000] * 2
            for way, run in ways.items():
                run(items)
                t = time.perf_counter()
                for _ in range(sets):
                    run(items)
                per_set = (time.perf_counter() - t) / sets * 1000
                out.setdefault(f"task_{ms}_ms", {})[way] = round(per_set - ms, 1)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true", help="10^6/10^7 instead of 10^7/10^8")
    ap.add_argument("--large", action="store_true",
                    help="also convert a 10^8-edge CSV (1.3 GB; the baseline needs ~5 GB)")
    ap.add_argument("--out", default=None, help="scratch folder (default: a temp folder)")
    # The sizes are derived below, not argparse defaults: --quick only has to say so.
    args = parse_args(ap, {})
    e7, e8 = ((10**4, 10**5) if args.quick else (10**6, 10**7) if args.small
              else (10**7, 10**8))
    tmp = args.out or tempfile.mkdtemp(prefix="bench_chunk_")
    os.makedirs(tmp, exist_ok=True)
    try:
        result = {"machine": {"cpus": os.cpu_count()},
                  "cluster_start_s": cluster_start_seconds(),
                  "idle_cluster": idle_cluster_cpu(3.0 if args.quick else 30.0),
                  "task_set_overhead_ms": task_set_overhead(3 if args.quick else 40),
                  "synth": bench_synth(os.path.join(tmp, "s7"), e7, 32),
                  "csv_to_chunked": bench_csv(tmp, e7),
                  "synth_scaling": {"small": bench_synth(os.path.join(tmp, "a"), e7, 16),
                                    "large": bench_synth(os.path.join(tmp, "b"), e8, 16)}}
        if args.large:
            result["csv_to_chunked_large"] = bench_csv(tmp, 10 * e7)
        sc = result["synth_scaling"]
        sc["rss_growth"] = round(max(sc["large"]["worker_peak_rss_mb"])
                                 / max(sc["small"]["worker_peak_rss_mb"]), 3)
        print(json.dumps(result, indent=2))
    finally:
        if args.out is None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
