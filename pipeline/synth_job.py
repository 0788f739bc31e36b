"""The ``prep synth`` Dask job: one task per chunk, then metadata, manifest, validation.

What the arguments ask for is checked before any work (:func:`check_fits`): the disk at OUT,
the memory of this process (the plan and Dask's state grow with the chunk count) and of a
worker (a task holds one chunk); a size that cannot fit is refused naming its argument.
"""

from __future__ import annotations

import logging
import os
import shutil

from graphprep.formats import FormatError
from graphprep.pipeline.core.cluster import ClusterOptions, workers_info
from graphprep.pipeline.core.costs import size
from graphprep.pipeline.core.step import Work, finish_chunked, run_step
from graphprep.pipeline.synth import (RMAT_DEFAULTS, SynthFootprint, SynthSpec, estimate_synth,
                                      plan, write_synth_chunk)

log = logging.getLogger(__name__)

DEFAULT_CHUNK = 1 << 20     # the CLI's --chunk-size
# More tasks than this, in chunks below the default size, cost more in Dask's scheduling
# (planning 10^5 chunks took 12 s before the first task) than they save in worker memory.
MAX_CHUNKS = 100_000


def run_synth(spec: SynthSpec, out: str, chunk_size: int, cluster: ClusterOptions,
              overwrite: bool = False):
    """Write the graph of ``spec`` into ``out``; returns the loaded graph (None if up to date).

    Each task generates and writes one chunk; the client holds only metadata. Refuses
    (``FormatError`` naming the argument) what cannot fit, before any work.
    """
    options = spec.manifest_options()
    options["chunk_size"] = chunk_size

    def body(work: Work):
        if cluster.scheduler or cluster.client is not None:
            check_fits(spec, out, chunk_size, worker_bytes=_smallest_limit(work.run.client),
                       disk=False)
        edge_tasks, node_tasks, graph = plan(spec, work.tmp, chunk_size)
        work.run(write_synth_chunk, node_tasks + edge_tasks, "synth")
        return graph

    return run_step("synth", out, cluster, body, options=options, seed=spec.seed,
                    overwrite=overwrite, finish=finish_chunked, before=lambda: check_fits(
                        spec, out, chunk_size, worker_bytes=embedded_worker_bytes(cluster)))


def dry_run(spec: SynthSpec, out: str, chunk_size: int, cluster: ClusterOptions) -> str:
    """``prep synth --dry-run``: the footprint of the run, one line (nothing is started or
    written); raises like the run would for what cannot fit."""
    footprint = check_fits(spec, out, chunk_size, worker_bytes=embedded_worker_bytes(cluster))
    return footprint.describe(spec.generator)


def embedded_worker_bytes(cluster: ClusterOptions) -> int | None:
    """The memory limit of one worker of the embedded cluster, as Dask sets it from
    ``--memory-limit``, after refusing a cluster that cannot start (``check_embedded``); None
    on a cluster given by address or by the caller (asked of its workers once connected)."""
    if cluster.scheduler or cluster.client is not None:
        return None
    from graphprep.pipeline.core.cluster import check_embedded, memory_limit_bytes
    check_embedded(cluster, cluster.workers)
    return memory_limit_bytes(cluster.memory_limit)


def _smallest_limit(client) -> int | None:
    limits = [w.get("memory_limit") or 0 for w in workers_info(client).values()]
    limits = [b for b in limits if b > 0]
    return min(limits) if limits else None


def size_arguments(spec: SynthSpec, edges_dominate: bool = True) -> str:
    """The arguments that set the size of ``spec``, as typed (the culprit of a refusal):
    R-MAT's ``--scale`` (and a non-default ``--edge-factor`` where edges dominate), the
    planted generator's ``--edges`` or ``--nodes``."""
    if spec.generator == "rmat":
        factor = spec.edge_factor != RMAT_DEFAULTS["edge_factor"] and edges_dominate
        return f"--scale {spec.scale}" + (f" --edge-factor {spec.edge_factor}" if factor else "")
    return f"--edges {spec.num_edges}" if edges_dominate else f"--nodes {spec.num_nodes}"


def check_fits(spec: SynthSpec, out: str, chunk_size: int, worker_bytes: int | None = None,
               disk: bool = True) -> SynthFootprint:
    """The footprint of the run (``synth.estimate_synth``), after refusing, with a
    ``FormatError`` naming the argument last, a run whose output exceeds the free disk at
    ``out``, whose chunks exceed this process's available memory, or whose one task exceeds
    ``worker_bytes`` (a worker's memory limit; None: not checked)."""
    import psutil

    fp = estimate_synth(spec, chunk_size)
    edges_dominate = fp.edge_disk >= fp.node_disk
    what = (f"{fp.edges:,} edges and {fp.nodes:,} nodes"
            + (f" of {spec.feat_dim} features" if not edges_dominate else ""))
    culprit = size_arguments(spec, edges_dominate)
    if not edges_dominate and spec.feat_dim > 32 and \
            spec.num_nodes * 4 * spec.feat_dim > fp.node_disk // 2:
        culprit = f"--feat-dim {spec.feat_dim}"
    if disk:
        free = shutil.disk_usage(_existing_folder(out)).free
        if fp.disk_bytes > free:
            raise FormatError(f"{what} need ~{size(fp.disk_bytes)} on disk, "
                              f"{size(free)} free at {out}: {culprit}")
    if fp.chunks > MAX_CHUNKS and chunk_size < DEFAULT_CHUNK:
        raise FormatError(f"{what} in chunks of {chunk_size:,} rows make {fp.chunks:,} tasks, "
                          f"each scheduled and tracked by Dask (~1 ms and a few KB a task); "
                          f"more than {MAX_CHUNKS:,} only slow the run, raise it: "
                          f"--chunk-size {chunk_size}")
    available = psutil.virtual_memory().available
    if fp.client_bytes > available:
        small = fp.edge_task_rows >= chunk_size and chunk_size < 1 << 16
        raise FormatError(f"{what} in {fp.chunks:,} chunks need ~{size(fp.client_bytes)} of "
                          f"memory in this process for their tasks and Dask's state, "
                          f"{size(available)} available: "
                          + (f"--chunk-size {chunk_size}" if small else culprit))
    if worker_bytes is not None and fp.peak_worker_bytes > worker_bytes:
        rows = max(fp.edge_task_rows, fp.node_task_rows)
        wide = fp.node_task_rows == rows and spec.feat_dim > 32 and rows < chunk_size
        raise FormatError(f"a task holds one chunk, {rows:,} rows: ~"
                          f"{size(fp.peak_worker_bytes)} per worker, over a worker's memory "
                          f"limit of {size(worker_bytes)}; lower it with --chunk-size, or give "
                          f"workers more (--memory-limit, fewer --workers): "
                          + (f"--feat-dim {spec.feat_dim}" if wide else
                             f"--chunk-size {chunk_size}"))
    return fp


def _existing_folder(path: str) -> str:
    """``path`` or its nearest existing ancestor (where OUT's disk is before it exists)."""
    path = os.path.abspath(path)
    while not os.path.isdir(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path
