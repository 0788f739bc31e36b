"""``prep dispatch``: chunked graph + assignment -> partitioned graph (FORMATS.md §3), delivered.

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
from graphprep.formats.npyio import new_npy
from graphprep.formats.output import (MANIFEST, link_files, read_manifest, restore_previous,
                                      same_work, side_paths, swap_into_place, write_json)
from graphprep.formats.partitioned import GRAPH_JSON, PartInfo, PartitionedGraph
from graphprep.formats.storage import is_url
from graphprep.formats.sparse import CSR, csr_paths
from graphprep.pipeline.core.cluster import ClusterOptions, TaskRunner
from graphprep.pipeline.core.step import StepOutput, Work, run_step, write_manifest
from graphprep.dispatch.build import PartTask, build_part
from graphprep.dispatch.deliver import staging_for, upload, url_up_to_date
from graphprep.dispatch.plan import RANGE_SIZE, DispatchPlan
from graphprep.dispatch.relabel import RangeTask, count_range, node_book, relabel_range
from graphprep.dispatch.shuffle import BucketTask, bucket_edges

log = logging.getLogger(__name__)
WORK = ".work"


class _DispatchOutput(StepOutput):
    """Where dispatch builds its output (see :class:`StepOutput` for the standard one): in
    ``.OUT.partial`` beside the local folder, which a rerun after a kill resumes when it holds
    this exact work (its manifest in ``.OUT.partial/.work``, the intermediate results beside
    it), the parts of machine M on M's worker, each machine swapping its own in; a URL ``out``
    is built in ``staging`` and uploaded once complete. An empty folder at OUT is taken as it
    is; an existing output is never touched before the new one is complete."""

    def __init__(self, out: str, staging: str | None, machines: tuple[str, ...]):
        super().__init__(out)
        self.folder = staging or (out if not is_url(out) else staging_for(out))
        self.final, self.workers = out, machines
        self.partial, _ = side_paths(self.folder)
        self.resumed, self.reuse = False, Reuse()

    def current(self, manifest: dict, overwrite: bool) -> bool:
        return is_url(self.out) and url_up_to_date(self.out, manifest, overwrite)

    def up_to_date(self, manifest: dict, overwrite: bool) -> bool:
        out = self.folder
        restore_previous(out)
        if os.path.exists(out):
            if same_work(read_manifest(out), manifest) and not overwrite:
                log.info("%s is up to date; nothing to do", out)
                shutil.rmtree(self.partial, ignore_errors=True)  # debris of a killed rerun
                return True
            if not overwrite and os.listdir(out):
                raise FormatError("output folder exists and holds something else than this "
                                  "exact dispatch; pass --overwrite to replace it", file=out)
        return False

    def open(self, manifest: dict) -> "_DispatchOutput":
        """Resume ``.OUT.partial`` when it holds this exact work, else start it afresh."""
        work = os.path.join(self.partial, WORK)
        self.resumed = os.path.exists(self.partial) and same_work(read_manifest(work), manifest)
        if self.resumed:
            # Shown by default (a warning), as is the tally at the end: a resume is no silent event.
            log.warning("resuming the interrupted dispatch in %s", self.partial)
        elif os.path.exists(self.partial):
            shutil.rmtree(self.partial)
        os.makedirs(work, exist_ok=True)
        write_json(os.path.join(work, MANIFEST), manifest)
        return self

    def __enter__(self) -> str:
        return self.partial

    def commit(self, run: TaskRunner) -> None:
        if self.workers:  # each machine swaps its own parts in (a no-op where already done)
            run(_swap_task, [(self.partial, self.folder)] * len(self.workers), "commit",
                workers=self.workers)
        swap_into_place(self.partial, self.folder)

    def __exit__(self, exc_type, exc, tb) -> None:
        # A failure keeps .OUT.partial for the rerun to resume (the body removes it for bad input).
        if exc_type is None:
            shutil.rmtree(os.path.join(self.folder, WORK))
            if self.resumed:
                log.warning("%s", self.reuse.line(self.partial))

    def deliver(self) -> None:
        if is_url(self.out):
            upload(self.folder, self.out)


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
    output = _DispatchOutput(out, staging, machines)

    def body(work: Work) -> PartitionedGraph:
        try:
            plan = DispatchPlan(graph, assignment, os.path.join(work.tmp, WORK), range_size,
                                nan_policy=nan_policy)
            return _dispatch_into(plan, work.tmp, work.run, out, work.manifest["inputs"],
                                  machines, output.reuse)
        except FormatError:  # bad input: nothing worth resuming (fixed input, new work)
            if machines:
                work.run(_remove_task, [work.tmp] * len(machines), "clean up", workers=machines)
            shutil.rmtree(work.tmp, ignore_errors=True)
            raise

    def finish(result: PartitionedGraph, work: Work) -> PartitionedGraph:
        write_json(os.path.join(work.tmp, GRAPH_JSON), result.to_json())
        return write_manifest(result, work)

    return run_step("dispatch", output, cluster, body, inputs=[chunked, assignment_dir],
                    options={"machines": list(machines), "nan": nan_policy},
                    overwrite=overwrite, finish=finish)


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
            new_npy(plan.map_path(t) + ".tmp.npy", (graph.num_nodes[t],))
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
        held_out_last=tuple(et for et in graph.edge_types
                            if all(str(et) in b.held_out_last for b in built)),
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
