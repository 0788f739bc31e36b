"""Per-pass memory of ``--method multilevel``: the largest task of each pass; prints JSON.

A diagnostic, not a benchmark: it runs ``MultilevelPartitioner`` on a chunked graph in this one
process (the default balance, ``--parts`` parts) with a runner that runs every task under
``tracemalloc`` and keeps, per pass (the runner's description, e.g. ``multilevel: contract``),
the largest peak one task allocated and which call and task it was. numpy's arrays are traced;
a worker's own baseline and its file-backed pages are not, so the figures say which task
grows with the graph, not a worker's RSS (``bench_partition.py`` measures that). It runs at
about half the speed of 2 workers.

    python examples/benchmarks/multilevel_task_peaks.py GRAPH [--parts 4]

This is how the 10^9-edge worker peak was traced to the contraction's merge of the hubs'
coarse row (RESULTS.md, "Where the 10^9 worker peak came from").
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import tracemalloc

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from formats import load_chunked_graph  # noqa: E402
from pipeline.partition.base import PartitionOptions, default_balance  # noqa: E402
from pipeline.partition.multilevel import MultilevelPartitioner  # noqa: E402


class PeakRunner:
    """A runner (``runner(fn, items, desc)``) that runs tasks one by one and keeps the largest
    traced peak of each pass."""

    def __init__(self):
        self.calls = 0
        self.peaks: dict[str, dict] = {}

    def __call__(self, fn, items, desc=None):
        self.calls += 1
        out = []
        for i, item in enumerate(items):
            tracemalloc.reset_peak()
            base = tracemalloc.get_traced_memory()[0]
            out.append(fn(item))
            peak = tracemalloc.get_traced_memory()[1] - base
            name = desc or fn.__name__
            if peak > self.peaks.get(name, {"mb": -1})["mb"] * 2**20:
                self.peaks[name] = {"mb": round(peak / 2**20, 1), "call": self.calls,
                                    "task": i, "tasks": len(items)}
        return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("graph", help="a chunked graph folder")
    ap.add_argument("--parts", type=int, default=4)
    ap.add_argument("--range-size", type=int, default=None,
                    help="nodes per level-0 range (default: the partitioner's, 2^17 up to "
                         "128 ranges); 781250 gives a 10^8-edge graph the ranges of 10^9's")
    args = ap.parse_args()
    graph = load_chunked_graph(args.graph)
    runner = PeakRunner()
    partitioner = MultilevelPartitioner(**({"range_size": args.range_size}
                                           if args.range_size else {}))
    options = PartitionOptions(args.parts, balance=default_balance(graph, "multilevel"))
    tracemalloc.start()
    with tempfile.TemporaryDirectory(dir=os.getcwd()) as out:
        start = time.perf_counter()
        partitioner.assign(graph, options, runner, out)
        seconds = time.perf_counter() - start
    tracemalloc.stop()
    print(json.dumps({"graph": args.graph, "parts": args.parts, "range_size": args.range_size,
                      "seconds": round(seconds, 1),
                      "levels": partitioner.info["levels"],
                      "largest_task_per_pass": dict(sorted(runner.peaks.items(),
                                                           key=lambda kv: -kv[1]["mb"]))},
                     indent=1))


if __name__ == "__main__":
    main()
