"""Helpers for the benchmarks: a fresh Dask cluster per measurement (so worker peak RSS is the
measured job's own), timing, and peak RSS of a baseline run in a fresh subprocess."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from contextlib import contextmanager

from graphprep.pipeline.core.memory import status_counters
from graphprep.pipeline.core.cluster import ClusterOptions
from graphprep.pipeline.core.memory import peak_rss_bytes

MB = 1 << 20
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

QUICK_HELP = ("tiny sizes that run in seconds (the test suite runs every benchmark so): the same "
              "steps and JSON keys as the default run, but the figures mean nothing")


def parse_args(ap: argparse.ArgumentParser, quick: dict) -> argparse.Namespace:
    """``ap.parse_args()`` with a ``--quick`` flag added: with it, the defaults in ``quick``
    replace ``ap``'s (options given on the command line still win). The default run, and so
    the figures in RESULTS.md, stay as they are."""
    ap.add_argument("--quick", action="store_true", help=QUICK_HELP)
    # A quick size for an option since renamed would silently run the full size instead.
    unknown = set(quick) - {action.dest for action in ap._actions}
    if unknown:
        raise ValueError(f"--quick sets options this benchmark lacks: {sorted(unknown)}")
    # A first pass only for --quick: its defaults must be in place before the real parse.
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--quick", action="store_true")
    if pre.parse_known_args()[0].quick:
        ap.set_defaults(**quick)
    return ap.parse_args()


def commit_tree(commit: str, workdir: str) -> str:
    """``commit``'s source tree, ``git archive``d out of this repository into
    ``workdir/tree-COMMIT`` (once: a later call reuses it; no git state changes)."""
    import shutil

    tree = os.path.join(workdir, f"tree-{commit}")
    if not os.path.isdir(tree):
        os.makedirs(tree + ".partial", exist_ok=True)
        archive = subprocess.Popen(["git", "-C", ROOT, "archive", commit], stdout=subprocess.PIPE)
        subprocess.run(["tar", "-x", "-C", tree + ".partial"], stdin=archive.stdout, check=True)
        archive.stdout.close()
        if archive.wait() != 0:
            raise SystemExit(f"git archive {commit} failed")
        shutil.move(tree + ".partial", tree)
    return tree


def importable_tree(tree: str, workdir: str) -> tuple[str, str]:
    """``(PYTHONPATH entry, trainer module)`` that run the trainer of the source tree ``tree``
    (another commit's checkout, say) rather than the installed one. A tree of the one
    ``graphprep`` namespace gets a folder under ``workdir`` whose ``graphprep/`` links to the
    tree's top-level folders; an older tree had them as top-level packages itself."""
    with open(os.path.join(tree, "pyproject.toml")) as f:
        if '"graphprep.trainer"' not in f.read():
            return tree, "trainer"
    digest = hashlib.sha1(os.path.abspath(tree).encode()).hexdigest()[:12]
    root = os.path.join(workdir, f"import-root-{digest}")
    os.makedirs(os.path.join(root, "graphprep"), exist_ok=True)
    for name in ("formats", "pipeline", "dispatch", "trainer"):
        link = os.path.join(root, "graphprep", name)
        if not os.path.lexists(link):
            os.symlink(os.path.abspath(os.path.join(tree, name)), link)
    return root, "graphprep.trainer"


@contextmanager
def fresh_cluster(workers: int = 2):
    """Yields ``(ClusterOptions pointing at it, client)``; workers are new processes, sampled
    from here while it is open (:class:`WorkerMemorySampler`; read with
    :func:`worker_peak_rss_mb` and :func:`sampled_peaks_mb`)."""
    import dask
    from distributed import Client

    from graphprep.pipeline.core.cluster import local_cluster
    from graphprep.pipeline.core.recycle import AUTO_RECYCLE_MB, RECYCLE_MB_KEY

    # The step connects by address, where --recycle-mb's "auto" means never: this cluster is
    # this process's own, like the embedded one, so it gets the embedded default (a
    # DASK_GRAPHPREP__RECYCLE_MB in the environment still decides).
    recycle = dask.config.get(RECYCLE_MB_KEY, "auto")
    with local_cluster(workers) as cluster, Client(cluster) as client, \
            WorkerMemorySampler() as sampler, dask.config.set(
                {RECYCLE_MB_KEY: AUTO_RECYCLE_MB if recycle == "auto" else recycle}):
        _SAMPLERS[id(client)] = sampler
        try:
            yield ClusterOptions(scheduler=cluster.scheduler_address, progress=False), client
        finally:
            _SAMPLERS.pop(id(client), None)


def worker_rss_now_mb(client) -> list[float]:
    """Current RSS of each worker: before a job, the idle floor of a worker process."""
    import psutil
    return sorted(round(v / MB, 1) for v in
                  client.run(lambda: psutil.Process().memory_info().rss).values())


def worker_peak_rss_mb(client) -> list[float]:
    """Each worker's peak RSS (the kernel's high-water mark, ``VmHWM``), MB, sorted. On a
    :func:`fresh_cluster`: per worker process its sampler saw, the largest
    ones, one per worker slot; workers restarted between passes count with their own peaks."""
    sampler = _SAMPLERS.get(id(client))
    if sampler is not None:
        sampler.sample()
        return sampler.peaks_mb("hwm", slots=len(client.scheduler_info()["workers"]))
    return sorted(round(v / MB, 1) for v in client.run(peak_rss_bytes).values())


class PeriodicSampler:
    """A daemon thread that calls :meth:`sample` every ``interval_s`` while the ``with`` block
    runs, and once more as it ends (so a peak reached just before the end counts)."""

    def __init__(self, interval_s: float):
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def sample(self) -> None:
        raise NotImplementedError

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.sample()


class WorkerMemorySampler(PeriodicSampler):
    """Samples, from this process, every Dask worker process it has started (those of
    :func:`fresh_cluster`: ``cluster.embedded_workers``, forked or spawned), every
    ``interval_s``: per process the peak *anonymous* memory (``RssAnon``: heap, numpy
    arrays), the peak file-backed resident pages (``RssFile + RssShmem``: memory-mapped
    files, which the kernel can drop and reread, and shared libraries) and ``VmHWM``. From
    outside, so that a worker restarted between passes (``graphprep.pipeline.core.recycle``) keeps its
    figures and its successor is found (the process list is refreshed every ``refresh_s``
    and whenever a process has gone). ``root`` and ``marker``: sample instead the descendants
    of process ``root`` whose command line holds ``marker`` (a trainer's ranks)."""

    def __init__(self, interval_s: float = 0.05, refresh_s: float = 0.5,
                 root: int | None = None, marker: str | None = None):
        super().__init__(interval_s)
        self.root, self.marker = root, marker     # whose descendants; what their command holds
        self.refresh_every = max(1, round(refresh_s / interval_s))
        self.peaks: dict[int, dict[str, int]] = {}
        self._count, self._known_other = 0, set()
        self._lock = threading.Lock()
        self._refresh()

    def _refresh(self) -> None:
        import psutil

        from graphprep.pipeline.core.cluster import embedded_workers
        try:
            found = ([p.pid for p in embedded_workers(self.root)] if self.marker is None
                     else self._marked())
        except psutil.Error:          # the root has exited: its processes are gone too
            return
        for pid in found:
            self.peaks.setdefault(pid, {"anon": 0, "file": 0, "hwm": 0, "alive": 1})

    def _marked(self) -> list[int]:
        """New descendants of ``root`` whose command line holds ``marker`` (each process's
        command line is read once)."""
        import psutil
        found = []
        for child in psutil.Process(self.root).children(recursive=True):
            if child.pid in self.peaks or child.pid in self._known_other:
                continue
            try:
                marked = self.marker in " ".join(child.cmdline())
            except psutil.Error:
                continue
            if marked:
                found.append(child.pid)
            else:
                self._known_other.add(child.pid)
        return found

    def sample(self) -> None:
        with self._lock:
            self._count += 1
            gone = False
            for pid, peak in self.peaks.items():
                if not peak["alive"]:
                    continue
                m = status_counters(pid)
                if m is None:
                    peak["alive"], gone = 0, True
                    continue
                peak["anon"] = max(peak["anon"], m.get("RssAnon", 0))
                peak["file"] = max(peak["file"], m.get("RssFile", 0) + m.get("RssShmem", 0))
                peak["hwm"] = max(peak["hwm"], m.get("VmHWM", 0))
            if gone or self._count % self.refresh_every == 0:
                self._refresh()

    def reset(self) -> None:
        with self._lock:
            self.peaks = {pid: {"anon": 0, "file": 0, "hwm": 0, "alive": 1}
                          for pid, p in self.peaks.items() if p["alive"]}

    def peaks_mb(self, key: str, slots: int | None = None) -> list[float]:
        """Per process, MB, sorted; ``slots``: only the largest that many."""
        values = sorted(p[key] for p in self.peaks.values())
        return [round(v / MB, 1) for v in values[-slots if slots else 0:]]


_SAMPLERS: dict[int, WorkerMemorySampler] = {}


def start_memory_sampler(client) -> None:
    """Forget what ``client``'s sampler has seen so far (the cluster's start), so that the
    peaks read next are those of the job that follows."""
    _SAMPLERS[id(client)].reset()


def sampled_peaks_mb(client) -> dict:
    """``{"anon": [...], "file_backed": [...], "hwm": [...]}``, MB, one per worker slot: the
    largest peaks of any worker process (sorted), and ``worker_processes``: how many there
    were (more than the workers when some were restarted between passes)."""
    sampler = _SAMPLERS[id(client)]
    sampler.sample()
    slots = len(client.scheduler_info()["workers"])
    return {"anon": sampler.peaks_mb("anon", slots),
            "file_backed": sampler.peaks_mb("file", slots),
            "hwm": sampler.peaks_mb("hwm", slots), "worker_processes": len(sampler.peaks)}


@contextmanager
def timer():
    box = {}
    t = time.perf_counter()
    yield box
    box["s"] = time.perf_counter() - t


def run_baseline(code: str) -> dict:
    """Run ``code`` in a fresh Python; it must print a JSON dict. Adds its peak RSS (MB)."""
    wrapper = code + "\nimport json as _j\nfrom graphprep.pipeline.core.memory import peak_rss_bytes\n" \
        "print(_j.dumps({**RESULT, 'peak_rss_mb': peak_rss_bytes() / 2**20}))"
    out = subprocess.run([sys.executable, "-c", wrapper], check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def partitioned_synth(workdir: str, edges: int, parts: tuple[int, ...], feat_dim: int = 32,
                      split: tuple[float, float, float] = (0.05, 0.05, 0.1),
                      spec=None, edge_split=None) -> dict[int, str]:
    """A synth graph dispatched into each of ``parts`` (random partition): ``{P: path of
    graph.json}``; ``spec`` (a ``SynthSpec``, e.g. :func:`graph_spec`'s R-MAT), else the
    planted graph of ``edges`` edges (edges/10 nodes). ``edge_split``: ``(val, test)``
    fractions of its edges held out by ``prep split-edges`` before partitioning (link
    prediction). Reuses what ``workdir`` already holds."""
    import dataclasses
    import os

    from graphprep.dispatch.job import run_dispatch
    from graphprep.formats import EdgeType
    from graphprep.pipeline.partition import PartitionOptions, run_partition
    from graphprep.pipeline.split_edges import SplitSpec, run_split
    from graphprep.pipeline.synth import SynthSpec
    from graphprep.pipeline.synth_job import run_synth

    if spec is None:
        spec = SynthSpec(num_nodes=edges // 10, num_edges=edges, feat_dim=feat_dim)
        name = f"synth-{edges}"
    else:
        name = f"synth-{spec.generator}-{spec.num_edges}"
    spec = dataclasses.replace(spec, split=split)
    graph = os.path.join(workdir, name)
    out = {}
    with fresh_cluster() as (options, _):
        run_synth(spec, graph, 1 << 20, options)
        if edge_split:
            run_split(graph, f"{graph}-link", SplitSpec(EdgeType("_N", "_E", "_N"),
                                                        *edge_split, 0), options)
            graph = f"{graph}-link"
        for p in parts:
            assignment, dispatched = f"{graph}-a{p}", f"{graph}-d{p}"
            run_partition(graph, assignment, "random", PartitionOptions(p), options)
            run_dispatch(graph, assignment, dispatched, options)
            out[p] = os.path.join(dispatched, "graph.json")
    return out


def add_graph_options(ap) -> None:
    """``--graph planted|rmat`` and R-MAT's size options, for :func:`graph_spec`."""
    ap.add_argument("--graph", choices=("planted", "rmat"), default="planted",
                    help="planted: prep synth's block model (edges/10 nodes, 8 planted "
                         "communities); rmat: Graph500's R-MAT (prep synth --generator rmat), "
                         "the hard power-law case")
    ap.add_argument("--scale", type=int, default=None,
                    help="rmat: 2^SCALE nodes (default: the scale whose EDGE_FACTOR * 2^SCALE "
                         "is nearest --edges, e.g. 19 for 10^7: 8.4*10^6 edges)")
    ap.add_argument("--edge-factor", type=int, default=16, help="rmat: edges per node")


def graph_spec(args, edges: int, feat_dim: int, scale: int | None = None):
    """The ``SynthSpec`` of ``--graph`` at about ``edges`` edges (exactly, for planted);
    ``scale`` overrides the derived R-MAT scale."""
    import math

    from graphprep.pipeline.synth import SynthSpec

    if args.graph == "rmat":
        if scale is None:
            scale = max(1, round(math.log2(edges / args.edge_factor)))
        return SynthSpec.from_scale(scale, args.edge_factor, feat_dim=feat_dim)
    return SynthSpec(num_nodes=edges // 10, num_edges=edges, feat_dim=feat_dim)
