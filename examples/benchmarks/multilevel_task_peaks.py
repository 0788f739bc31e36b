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

``--workers N`` measures the workers themselves instead: the partition runs on N fresh Dask
workers, and each task samples its worker's anonymous memory (``RssAnon``) every 20 ms while it
runs. Per pass: the task of the largest peak, with what its worker held when it began
(``held_mb``: memory earlier tasks left behind, which tracemalloc does not see) and how much of
that was freed heap glibc kept (``held_free_heap_mb``, glibc's ``mallinfo2``; null elsewhere).
RESULTS.md, "What a multilevel worker carries between tasks at 10^9 edges" and "The planted
10^9 peak, task by task".
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

from graphprep.formats import load_chunked_graph  # noqa: E402
from graphprep.pipeline.partition.base import PartitionOptions, default_balance  # noqa: E402
from graphprep.pipeline.partition.multilevel import MultilevelPartitioner  # noqa: E402


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


def _anon_mb() -> float:
    from graphprep.pipeline.core.memory import anon_bytes
    return anon_bytes() / 2**20


def _free_heap_mb() -> float | None:
    """Bytes (MB) glibc's heaps hold free (``mallinfo2().fordblks``, all arenas); None where
    the C library is not glibc 2.33+. The structure is declared here, not at module level:
    tasks travel to the workers by value, and a module-level ctypes class does not pickle."""
    import ctypes

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
            "fordblks", "keepcost")]
    try:
        mallinfo2 = ctypes.CDLL("libc.so.6").mallinfo2
    except (OSError, AttributeError):
        return None
    mallinfo2.restype = MallInfo2
    return round(mallinfo2().fordblks / 2**20, 1)


class _Sampled:
    """A task (called with ``(index, item)``) that records, on its worker, its anonymous
    memory at start and its sampled peak."""

    def __init__(self, fn, desc: str):
        self.fn, self.desc = fn, desc
        self.__name__ = getattr(fn, "__name__", "task")

    def __call__(self, indexed):
        import threading

        from distributed import get_worker

        index, item = indexed
        held, free = _anon_mb(), _free_heap_mb()
        peak = held
        done = threading.Event()

        def sample():
            nonlocal peak
            while not done.wait(0.02):
                peak = max(peak, _anon_mb())
        thread = threading.Thread(target=sample, daemon=True)
        thread.start()
        try:
            return self.fn(item)
        finally:
            done.set()
            thread.join()
            peak = max(peak, _anon_mb())
            worker = get_worker()
            records = getattr(worker, "graphprep_task_peaks", None)
            if records is None:
                records = worker.graphprep_task_peaks = []
            records.append((self.desc, index, round(held, 1), free, round(peak, 1)))


class SampledRunner:
    """A cluster runner whose tasks each record their worker's memory (:class:`_Sampled`),
    fetched after every pass: a worker restarted before the next one (``graphprep.pipeline.core.recycle``)
    takes nothing with it."""

    def __init__(self, runner):
        self.runner, self.client = runner, runner.client
        self.records: list[tuple] = []

    def __call__(self, fn, items, desc=None, **kwargs):
        desc = desc or getattr(fn, "__name__", "tasks")
        out = self.runner(_Sampled(fn, desc), list(enumerate(items)), desc, **kwargs)

        def take(dask_worker):
            records = getattr(dask_worker, "graphprep_task_peaks", [])
            dask_worker.graphprep_task_peaks = []
            return records
        for worker, records in self.client.run(take).items():
            self.records += [(worker, *r) for r in records]
        return out

    def peaks(self) -> dict[str, dict]:
        """Per pass, the task of the largest peak: ``{"mb", "held_mb", "held_free_heap_mb",
        "task", "worker"}``."""
        out: dict[str, dict] = {}
        for worker, desc, index, held, free, peak in self.records:
            if peak > out.get(desc, {"mb": -1})["mb"]:
                out[desc] = {"mb": peak, "held_mb": held, "held_free_heap_mb": free,
                             "task": index, "worker": worker}
        return dict(sorted(out.items(), key=lambda kv: -kv[1]["mb"]))


def on_workers(args, graph, partitioner, options) -> dict:
    """The partition on ``args.workers`` fresh workers; per pass the largest sampled peak."""
    from distributed import Client

    from graphprep.pipeline.core.cluster import TaskRunner, local_cluster

    with local_cluster(args.workers) as cluster, Client(cluster) as client, \
            tempfile.TemporaryDirectory(dir=os.getcwd()) as out:
        runner = SampledRunner(TaskRunner(client, progress=False))
        start = time.perf_counter()
        partitioner.assign(graph, options, runner, out)
        seconds = time.perf_counter() - start
        recycler = runner.runner.recycler
        return {"seconds": round(seconds, 1), "levels": partitioner.info["levels"],
                "workers_restarted": recycler.restarts if recycler else 0,
                "largest_worker_peak_per_pass": runner.peaks()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("graph", help="a chunked graph folder")
    ap.add_argument("--parts", type=int, default=4)
    ap.add_argument("--range-size", type=int, default=None,
                    help="nodes per level-0 range (default: the partitioner's, 2^17 up to "
                         "128 ranges); 781250 gives a 10^8-edge graph the ranges of 10^9's")
    ap.add_argument("--workers", type=int, default=None,
                    help="run on this many fresh Dask workers and sample each task's worker "
                         "memory (RssAnon) instead of tracing allocations in this process")
    args = ap.parse_args()
    graph = load_chunked_graph(args.graph)
    partitioner = MultilevelPartitioner(**({"range_size": args.range_size}
                                           if args.range_size else {}))
    options = PartitionOptions(args.parts, balance=default_balance(graph, "multilevel"))
    if args.workers:
        print(json.dumps({"graph": args.graph, "parts": args.parts, "workers": args.workers,
                          "range_size": args.range_size,
                          **on_workers(args, graph, partitioner, options)}, indent=1))
        return
    runner = PeakRunner()
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
