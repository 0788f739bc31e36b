"""``prep partition``: a chunked graph -> a partition assignment (FORMATS.md §2), with statistics.

Methods are plug-ins (:class:`graphprep.pipeline.partition.base.Partitioner`) registered in
``PARTITIONERS``; a new method only implements ``assign``.
"""

from __future__ import annotations

import dataclasses
import logging
import os

import numpy as np

from graphprep.formats import load_chunked_graph
from graphprep.formats.assignment import AssignmentMeta, load_assignment, write_meta
from graphprep.pipeline.core.cluster import ClusterOptions, TaskRunner, dask_client
from graphprep.formats.guard import OutputLock
from graphprep.pipeline.core.step import Work, run_step
from graphprep.pipeline.partition.auto import choose_for
from graphprep.pipeline.partition.base import PartitionOptions, default_balance
from graphprep.pipeline.partition.kaminpar_method import KaminparPartitioner
from graphprep.pipeline.partition.metis_method import MetisPartitioner
from graphprep.pipeline.partition.multilevel import MultilevelPartitioner
from graphprep.pipeline.partition.random_method import RandomPartitioner
from graphprep.pipeline.workload import made_with, work_warnings
from graphprep.pipeline.partition.stats import combined_imbalance, format_table, partition_stats

log = logging.getLogger(__name__)

PARTITIONERS = {"random": RandomPartitioner, "metis": MetisPartitioner,
                "multilevel": MultilevelPartitioner, "kaminpar": KaminparPartitioner}


def run_partition(chunked: str, out: str, method: str, options: PartitionOptions,
                  cluster: ClusterOptions, overwrite: bool = False, dgl_compat: bool = False):
    """Partition the chunked graph at ``chunked`` into the assignment folder ``out``.

    Returns the assignment's metadata (None when ``out`` is already up to date).
    """
    graph = load_chunked_graph(chunked)
    if options.balance is None:
        # the method's default, resolved here so the manifest (and so partition_meta.json's
        # options) records what was balanced, and an explicit equal --balance is the same work
        options = dataclasses.replace(options, balance=default_balance(graph, method))
    opts = {k: v for k, v in dataclasses.asdict(options).items() if k != "seed"}
    opts.update(method=method, dgl_compat=dgl_compat)
    meta = run_step("partition", out, cluster,
                    lambda work: _partition_into(work, graph, method, options, dgl_compat),
                    options=opts, inputs=[chunked], seed=options.seed, overwrite=overwrite)
    if meta is not None:
        log_warnings(meta.stats)
    return meta


def _partition_into(work: Work, graph, method: str, options: PartitionOptions,
                    dgl_compat: bool) -> AssignmentMeta:
    """The assignment of ``graph`` and its statistics, written into ``work.tmp``."""
    runner, tmp = work.run, work.tmp
    fp, = work.manifest["inputs"].values()
    # auto: metis or multilevel, by metis's estimated memory against the workers' (auto.py)
    choice = choose_for(graph, runner, options.balance) if method == "auto" else None
    partitioner = PARTITIONERS[choice.method if choice else method]()
    algo = partitioner.assign(graph, options, runner, tmp)
    meta = AssignmentMeta(options.num_parts, algo, graph.graph_name, options.seed, fp,
                          graph.node_types, work.manifest["options"])
    if dgl_compat and algo not in DGL_ALGO_NAMES:
        # DGL's dispatch refuses other names; multilevel and kaminpar are METIS-style
        # partitions
        meta = dataclasses.replace(meta, algo_name="metis", method=algo)
    write_meta(tmp, meta)
    assignment = load_assignment(tmp, graph)          # checks lengths and ranges
    stats = partition_stats(graph, assignment, runner)
    stats["imbalance"].update(combined_imbalance(stats, options.balance))
    stats.update(getattr(partitioner, "info", {}))
    stats["warnings"] = work_warnings(stats, choice.method if choice else method,
                                      options.balance)
    if choice is not None:
        stats["auto"] = {"chosen": choice.method, "reason": choice.describe(),
                         "metis_peak_bytes": choice.metis_peak_bytes,
                         "budget_bytes": choice.budget_bytes}
    meta = dataclasses.replace(meta, stats=stats)
    write_meta(tmp, meta)
    if dgl_compat:
        write_dgl_txt(tmp, graph.node_types)
    return meta


def log_warnings(stats: dict) -> None:
    """The statistics' warnings, at default verbosity."""
    for warning in stats.get("warnings", []):
        log.warning("%s", warning)


# algo_name values DGL's partition tools accept (tools/partition_algo/base.py)
DGL_ALGO_NAMES = ("random", "metis")


def write_dgl_txt(folder: str, node_types) -> None:
    """DGL's ``<ntype>.txt`` (one partition id per line), written in slices."""
    for t in node_types:
        parts = np.load(os.path.join(folder, f"{t}.npy"), mmap_mode="r")
        with open(os.path.join(folder, f"{t}.txt"), "w") as f:
            for s in range(0, len(parts), 1 << 22):
                np.savetxt(f, np.asarray(parts[s:s + (1 << 22)]), fmt="%d")


def run_stats(chunked: str, assignment_dir: str, cluster: ClusterOptions) -> dict:
    """Statistics of an existing assignment (graphprep's or DGL's) on ``chunked``; stored into
    its ``partition_meta.json``."""
    graph = load_chunked_graph(chunked)
    assignment = load_assignment(assignment_dir, graph)
    with OutputLock(assignment_dir), dask_client(cluster) as client:
        stats = partition_stats(graph, assignment, TaskRunner(client, cluster.progress))
        stats["warnings"] = work_warnings(stats, *made_with(assignment.meta))
        write_meta(assignment_dir, dataclasses.replace(assignment.meta, stats=stats))
    log_warnings(stats)
    return stats


__all__ = ["PARTITIONERS", "PartitionOptions", "run_partition", "run_stats", "format_table"]
