"""``prep dispatch``: chunked graph + assignment -> partitioned graph (DESIGN §3), delivered.

Steps (each a set of Dask tasks; see the modules for what a task holds):
count nodes per part per range -> partition book -> relabel ranges (old->new map slices, owned
node pieces) -> bucket edge chunks by owner part -> build each part (on its machine's worker).

Built beside the output, swapped in whole: everything is written under ``.OUT.partial`` (on each
machine, for the parts it holds), intermediate results in ``.OUT.partial/.work`` (one renamed
folder per finished task); ``graph.json`` + ``manifest.json`` are written last, then each
machine, and the client, swap ``.OUT.partial`` in for ``OUT``. A failed run leaves a previous
``OUT`` untouched; a rerun after a kill continues and gives the same bytes as an uninterrupted
run.
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass, field, replace

import numpy as np

from graphprep.formats import FormatError, load_chunked_graph
from graphprep.formats.assignment import load_assignment
from graphprep.formats.integrity import dispatch_id
from graphprep.formats.output import (MANIFEST, fingerprint, link_files, make_manifest, read_manifest,
                            restore_previous, same_work, side_paths, swap_into_place, write_json)
from graphprep.formats.partitioned import GRAPH_JSON, PartInfo, PartitionedGraph
from graphprep.formats.storage import is_url
from graphprep.formats.sparse import CSR, csr_paths
from graphprep.pipeline.core.cluster import ClusterOptions, TaskRunner, dask_client
from graphprep.formats.guard import guarded_output
from graphprep.dispatch.build import PartTask, build_part
from graphprep.dispatch.deliver import staging_for, upload, url_up_to_date
from graphprep.dispatch.plan import RANGE_SIZE, DispatchPlan
from graphprep.dispatch.relabel import RangeTask, count_range, node_book, relabel_range
from graphprep.dispatch.shuffle import BucketTask, bucket_edges

log = logging.getLogger(__name__)
WORK = ".work"


def _prepare_out(out: str, manifest: dict, overwrite: bool) -> tuple[str, bool] | None:
    """``(folder to build out in, resumed)``: ``.OUT.partial`` beside it, resumed (True) when
    it holds this exact work, else started afresh. None when ``out`` already holds this exact
    work.

    An existing ``out`` is never touched here: the new output replaces it only when complete.
    """
    restore_previous(out)
    if os.path.exists(out):
        if same_work(read_manifest(out), manifest) and not overwrite:
            log.info("%s is up to date; nothing to do", out)
            shutil.rmtree(side_paths(out)[0], ignore_errors=True)  # debris of a killed rerun
            return None
        if not overwrite and os.listdir(out):
            raise FormatError("output folder exists and holds something else than this exact "
                              "dispatch; pass --overwrite to replace it", file=out)
    partial, _ = side_paths(out)
    work = os.path.join(partial, WORK)
    resumed = os.path.exists(partial) and same_work(read_manifest(work), manifest)
    if resumed:
        # Shown by default (a warning), as is the tally at the end: a resume is no silent event.
        log.warning("resuming the interrupted dispatch in %s", partial)
    elif os.path.exists(partial):
        shutil.rmtree(partial)
    os.makedirs(work, exist_ok=True)
    write_json(os.path.join(work, MANIFEST), manifest)
    return partial, resumed


@dataclass
class Reuse:
    """Per step that leaves files (relabel, shuffle, build): ``(tasks an earlier, interrupted
    run had done already, tasks)``, as the tasks themselves found (they skip a finished one).
    The node counts leave no files and are always redone: not counted."""

    steps: dict[str, tuple[int, int]] = field(default_factory=dict)

    def add(self, step: str, reused: list[bool]) -> None:
        self.steps[step] = (sum(map(bool, reused)), len(reused))

    def line(self, partial: str) -> str:
        """The report of a resumed run, e.g. "resumed the interrupted dispatch in P: 18 of 40
        tasks were done already (relabel 3 of 3, shuffle 15 of 30, build 0 of 7); ran 22"."""
        done = sum(d for d, _ in self.steps.values())
        total = sum(n for _, n in self.steps.values())
        each = ", ".join(f"{step} {d} of {n}" for step, (d, n) in self.steps.items())
        return (f"resumed the interrupted dispatch in {partial}: {done} of {total} tasks were "
                f"done already ({each}); ran {total - done}")


def run_dispatch(chunked: str, assignment_dir: str, out: str, cluster: ClusterOptions,
                 machines: tuple[str, ...] = (), overwrite: bool = False,
                 range_size: int = RANGE_SIZE, staging: str | None = None,
                 nan_policy: str = "error"):
    """Build the partitioned graph of ``chunked`` under ``assignment_dir`` at ``out`` (a local
    folder or an fsspec URL, then built in ``staging`` and uploaded). ``nan_policy`` applies to
    float node/edge data as it is read. Returns the :class:`PartitionedGraph` (None when
    already up to date)."""
    graph = load_chunked_graph(chunked)
    assignment = load_assignment(assignment_dir, graph)
    inputs = {os.path.abspath(chunked): fingerprint(chunked),
              os.path.abspath(assignment_dir): fingerprint(assignment_dir)}
    manifest = make_manifest("dispatch", inputs, {"machines": list(machines), "nan": nan_policy},
                             None)
    local = staging or (out if not is_url(out) else staging_for(out))
    if is_url(out) and url_up_to_date(out, manifest, overwrite):
        return None
    with guarded_output(local, [chunked, assignment_dir]):
        prepared = _prepare_out(local, manifest, overwrite)
        if prepared is None:
            return None
        build, resumed = prepared
        reuse = Reuse()
        with dask_client(cluster, machines) as client:
            run = TaskRunner(client, cluster.progress)
            try:
                plan = DispatchPlan(graph, assignment, os.path.join(build, WORK), range_size,
                                    nan_policy=nan_policy)
                result = _dispatch_into(plan, build, run, out, inputs, machines, reuse)
            except FormatError:  # bad input: nothing worth resuming (fixed input, new work)
                if machines:
                    run(_remove_task, [build] * len(machines), "clean up", workers=machines)
                shutil.rmtree(build, ignore_errors=True)
                raise
            write_json(os.path.join(build, GRAPH_JSON), result.to_json())
            write_json(os.path.join(build, MANIFEST), manifest)
            if machines:  # each machine swaps its own parts in (a no-op where already done)
                run(_swap_task, [(build, local)] * len(machines), "commit", workers=machines)
            swap_into_place(build, local)
        shutil.rmtree(os.path.join(local, WORK))
        if resumed:
            log.warning("%s", reuse.line(build))
    if is_url(out):
        upload(local, out)
    return result


def _remove_task(folder: str) -> None:
    shutil.rmtree(folder, ignore_errors=True)


def _swap_task(paths: tuple[str, str]) -> bool:
    return swap_into_place(*paths)


def _dispatch_into(plan: DispatchPlan, local: str, run: TaskRunner, out: str, inputs: dict,
                   machines: tuple[str, ...], reuse: Reuse) -> PartitionedGraph:
    """Build every part of ``plan`` under ``local`` (parts of machine M on M's worker);
    returns the partitioned graph's metadata. Tallies in ``reuse`` the tasks found done."""
    graph, assignment = plan.graph, plan.assignment
    p_count = plan.num_parts
    node_map, bases = {}, {}
    for t in graph.node_types:
        tasks = [RangeTask(plan, t, k, a, b) for k, (a, b) in enumerate(plan.ranges(t))]
        node_map[t], bases[t] = node_book(run(count_range, tasks, f"count {t}"))
        if not os.path.exists(plan.map_path(t)):
            os.makedirs(os.path.dirname(plan.map_path(t)), exist_ok=True)
            np.lib.format.open_memmap(plan.map_path(t) + ".tmp.npy", mode="w+",
                                      dtype=np.int64, shape=(graph.num_nodes[t],)).flush()
            os.replace(plan.map_path(t) + ".tmp.npy", plan.map_path(t))
    relabel = [RangeTask(plan, t, k, a, b, bases[t][k]) for t in graph.node_types
               for k, (a, b) in enumerate(plan.ranges(t))]
    reuse.add("relabel", run(relabel_range, relabel, "relabel nodes"))
    buckets = [BucketTask(plan, et, k, path, a, b, tuple(map(tuple, node_map[et.dst])))
               for et in graph.edge_types for k, (path, a, b) in enumerate(plan.edge_chunks(et))]
    reuse.add("shuffle", run(bucket_edges, buckets, "shuffle edges"))
    parts = [PartInfo(f"{machines[p % len(machines)]}/part-{p}" if machines else f"part-{p}",
                      machines[p % len(machines)] if machines else "")
             for p in range(p_count)]
    did = dispatch_id(inputs, {"machines": list(machines)})
    part_tasks = [PartTask(plan, p, node_map, os.path.join(local, parts[p].path), did)
                  for p in range(p_count)]
    built = run(build_part, part_tasks, "build parts",
                workers=[pi.machine for pi in parts] if machines else None)
    reuse.add("build", [b.reused for b in built])
    parts = [replace(pi, manifest=b.manifest) for pi, b in zip(parts, built)]
    num_classes = {t: max(b.label_max[t] for b in built) + 1 for t in graph.node_types
                   if all(t in b.label_max for b in built)}
    edge_map = {}
    for et in graph.edge_types:
        sizes = np.array([b.counts[str(et)] for b in built])
        starts = np.concatenate([[0], np.cumsum(sizes)])
        edge_map[et] = [[int(starts[p]), int(starts[p + 1])] for p in range(p_count)]
    return PartitionedGraph(
        root=out, graph_name=graph.graph_name, num_parts=p_count,
        part_method=assignment.meta.method_name, seed=assignment.meta.seed,
        node_types=graph.node_types, edge_types=graph.edge_types,
        num_nodes=dict(graph.num_nodes), num_edges=dict(graph.num_edges), node_map=node_map,
        edge_map=edge_map, node_feats=_feat_specs(local, parts[0].path, graph.node_data, "node"),
        edge_feats=_feat_specs(local, parts[0].path, graph.edge_data, "edge"),
        parts=tuple(parts), source=inputs, dispatch_id=did, num_classes=num_classes,
        **carry_keys(graph, local))


def carry_keys(graph, local: str) -> dict:
    """The chunked graph's key maps (in ID order) and vocabularies, linked into ``local`` so
    that results can be written by the user's keys; graph.json's ``keys`` and ``vocab``."""
    keys = {t: m.by_id_json() for t, m in graph.keys.items()}
    link_files(graph.root, [f for m in graph.keys.values() for f in m.by_id] +
               [f for d in graph.vocab.values() for f in d.values()], local)
    return {"keys": keys, "vocab": {o: dict(d) for o, d in graph.vocab.items()}}


def _feat_specs(local: str, part0: str, section: dict, kind: str) -> dict:
    """dtype and row shape of each feature, read from part 0's files."""
    specs = {}
    for owner, fields in section.items():
        folder = f"{kind}_feats/{owner if kind == 'node' else owner.dirname}"
        key = owner if kind == "node" else owner
        specs[key] = {}
        for name, files in fields.items():
            base = os.path.join(local, part0, folder, name)
            if files.format == CSR:      # sparse rows stay sparse in the parts
                values = np.load(csr_paths(base)["values"], mmap_mode="r")
                specs[key][name] = {"dtype": str(values.dtype), "shape": [files.dim],
                                    "format": CSR}
                continue
            arr = np.load(base + ".npy", mmap_mode="r")
            specs[key][name] = {"dtype": str(arr.dtype), "shape": list(arr.shape[1:])}
    return specs
