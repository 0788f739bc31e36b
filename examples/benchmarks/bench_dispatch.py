"""`prep dispatch`'s worker memory as the graph grows; prints one JSON object.

R-MAT (``prep synth --generator rmat``, 16-dim features) at each of ``--scales`` (default 23
and 26: 1.3*10^8 and 1.07*10^9 edges), partitioned by ``--method`` (default multilevel) into
``--parts`` (default 4), then ``prep dispatch`` on 2 fresh workers: seconds, edges/s, each
worker's peak anonymous memory (sampled from outside; file-backed pages and the kernel's RSS
high-water mark beside it), and the largest scale against the one before (issue 50's target:
anonymous peak <= 1.5x). ``--against-commit C``: C's dispatch too, on the same graphs and
assignments, each side in its own process (C's tree ``git archive``d under ``--workdir``),
which goes first alternating per scale. ``--workdir`` keeps the graphs and assignments (they
take most of the time at 10^9: synth ~3 min, the partition ~35 min) for later runs.
``--quick``: scales 10 and 11 (seconds; for the test suite).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from common import (ROOT, commit_tree, fresh_cluster, importable_tree,  # noqa: E402
                    parse_args, sampled_peaks_mb, start_memory_sampler, timer,
                    worker_peak_rss_mb)


def prepared(workdir: str, scale: int, parts: int, method: str) -> tuple[str, str, int]:
    """``(chunked graph, assignment, edges)`` of R-MAT ``scale`` under ``workdir``, made by
    ``prep synth`` and ``prep partition`` unless a finished one is there already."""
    from graphprep.formats import load_chunked_graph
    from graphprep.pipeline.partition import PartitionOptions, run_partition
    from graphprep.pipeline.synth import SynthSpec
    from graphprep.pipeline.synth_job import run_synth

    graph = os.path.join(workdir, f"rmat-s{scale}", "graph")
    assign = os.path.join(workdir, f"rmat-s{scale}", f"assign-{method}-{parts}")
    with fresh_cluster() as (options, _):
        if not os.path.exists(os.path.join(graph, "graph.json")):
            run_synth(SynthSpec.from_scale(scale, 16, feat_dim=16), graph, 1 << 20, options)
        if not os.path.exists(assign):
            run_partition(graph, assign, method, PartitionOptions(parts, balance=None), options)
    return graph, assign, sum(load_chunked_graph(graph).num_edges.values())


def dispatch_once(graph: str, assign: str, out: str) -> dict:
    """``run_dispatch`` of whichever graphprep this process imports (``--dispatch-one``), on 2
    fresh workers: seconds and each worker's peaks (MB, sorted). Removes ``out`` after."""
    try:
        from graphprep.dispatch.job import run_dispatch
    except ImportError:  # a tree from before the one graphprep namespace
        from dispatch.job import run_dispatch
    with fresh_cluster() as (options, client):
        start_memory_sampler(client)
        with timer() as t:
            run_dispatch(graph, assign, out, options)
        hwm = worker_peak_rss_mb(client)
        peaks = sampled_peaks_mb(client)
    shutil.rmtree(out, ignore_errors=True)
    return {"seconds": round(t["s"], 2), "worker_peak_anon_mb": peaks["anon"],
            "worker_peak_file_backed_mb": peaks["file_backed"], "worker_peak_rss_mb": hwm}


def run_side(graph: str, assign: str, edges: int, workdir: str, tree: str | None) -> dict:
    """One dispatch in its own process: this tree's (``tree`` None) or ``tree``'s code."""
    env = dict(os.environ)
    if tree:
        env["PYTHONPATH"] = os.pathsep.join([importable_tree(tree, workdir)[0],
                                             env.get("PYTHONPATH", "")])
    out = os.path.join(workdir, "dispatched")
    shutil.rmtree(out, ignore_errors=True)
    done = subprocess.run([sys.executable, __file__, "--dispatch-one", graph, assign, out],
                          env=env, cwd=ROOT, check=True, capture_output=True, text=True)
    row = json.loads(done.stdout.strip().splitlines()[-1])
    row["edges_per_s"] = round(edges / row["seconds"])
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scales", default="23,26",
                    help="R-MAT scales (2^SCALE nodes, 16 edges per node), smallest first")
    ap.add_argument("--parts", type=int, default=4, help="parts of the partition")
    ap.add_argument("--method", default="multilevel", help="partition method")
    ap.add_argument("--against-commit", default=None, metavar="COMMIT",
                    help="also COMMIT's dispatch on the same inputs, in its own process")
    ap.add_argument("--workdir", default=None,
                    help="keep the graphs and assignments here (default: a temporary folder, "
                         "removed at the end)")
    ap.add_argument("--dispatch-one", nargs=3, metavar=("GRAPH", "ASSIGN", "OUT"),
                    help=argparse.SUPPRESS)   # one side's dispatch (run_side's subprocess)
    args = parse_args(ap, {"scales": "10,11", "parts": 2})
    if args.dispatch_one:
        print(json.dumps(dispatch_once(*args.dispatch_one)))
        return
    workdir = args.workdir or tempfile.mkdtemp(prefix="bench-dispatch-", dir=os.getcwd())
    os.makedirs(workdir, exist_ok=True)
    tree = commit_tree(args.against_commit, workdir) if args.against_commit else None
    res = {"parts": args.parts, "method": args.method, "workers": 2, "rows": {}}
    try:
        for i, scale in enumerate(int(s) for s in args.scales.split(",")):
            graph, assign, edges = prepared(workdir, scale, args.parts, args.method)
            sides = [("now", None)] + ([(args.against_commit, tree)] if tree else [])
            row = {"edges": edges}
            for name, side_tree in (sides if i % 2 == 0 else sides[::-1]):
                row[name] = run_side(graph, assign, edges, workdir, side_tree)
                print(json.dumps({scale: {name: row[name]}}), file=sys.stderr, flush=True)
            res["rows"][str(scale)] = row
        scales = list(res["rows"])
        if len(scales) > 1:
            big, small = res["rows"][scales[-1]], res["rows"][scales[-2]]
            res["largest_vs_previous_anon"] = {
                name: round(max(big[name]["worker_peak_anon_mb"]) /
                            max(small[name]["worker_peak_anon_mb"]), 3)
                for name in big if name != "edges"}
        print(json.dumps(res, indent=1))
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
