"""``prep split-edges``: hold out validation and test edges of one edge type (link prediction).

Each edge of the type gets its split from a keyed hash of its endpoints, so one task per edge
chunk decides alone: the same bytes for any worker count and any chunking. The key is the
*undirected* pair, so duplicates share a split and both directions of an edge are held out
together: (u, v) and (v, u) within a type whose two ends are one node type, and an edge and its
twin in the reverse type (``dst:rev-rel:src``, as ``prep chunk --add-reverse-edges`` makes, or
named with ``--twin``).

The output is a chunked graph: the input's files hard-linked (copied across file systems) plus
edge data ``train_mask``/``val_mask``/``test_mask`` (bool, one ``.npy`` per edge chunk) on the
type and its twins; ``prep dispatch`` carries them into the parts like any edge data. A type
with 0 edges gets no masks, with a warning: a field needs at least one chunk file, and a 0-edge
type has none (FORMATS.md §1, as ``prep chunk`` treats DGL's 0-row edge data); the trainer's
link task then says that the type has no edges to predict.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass

import numpy as np

from graphprep.formats import ChunkedGraph, ChunkFiles, EdgeType, FormatError, load_chunked_graph
from graphprep.formats.output import link_files, write_array_chunk
from graphprep.formats.validate import read_checked_edges
from graphprep.pipeline.core.arrayops import mix
from graphprep.pipeline.core.cluster import ClusterOptions
from graphprep.pipeline.core.step import Work, finish_chunked, run_step

log = logging.getLogger(__name__)

MASKS = ("train_mask", "val_mask", "test_mask")
_UNIT = float(2 ** 53)


@dataclass(frozen=True)
class SplitSpec:
    """What to hold out: fractions of ``etype``'s edges for validation and test."""

    etype: EdgeType
    val: float
    test: float
    seed: int = 0

    def __post_init__(self):
        # written so that NaN (which fails every comparison) is refused too
        if not (0 <= self.val < 1 and 0 <= self.test < 1 and self.val + self.test < 1):
            raise FormatError(f"--val {self.val} and --test {self.test} must be >= 0 and sum "
                              "below 1 (something must be left to train on)", field="--val")


def split_codes(spec: SplitSpec, src: np.ndarray, dst: np.ndarray, reverse: bool = False):
    """Per edge: 0 train, 1 validation, 2 test. ``reverse``: the edges are the type's twin,
    oriented dst -> src. Holds a few 8-byte temporaries per edge."""
    a, b = (dst, src) if reverse else (src, dst)
    if spec.etype.src == spec.etype.dst:          # (u, v) and (v, u) are one undirected edge
        a, b = np.minimum(a, b), np.maximum(a, b)
    u = (mix(spec.seed, a, b) >> np.uint64(11)).astype(np.float64) / _UNIT
    return np.where(u < spec.val, 1, np.where(u < spec.val + spec.test, 2, 0)).astype(np.int8)


def twin_types(graph: ChunkedGraph, etype: EdgeType, named: tuple[str, ...] = ()) -> list:
    """The types holding ``etype``'s edges reversed: ``named`` ones, else those the graph's
    record says hold them (a tables config's ``reverse_type``) and those named
    ``rev-REL``/``rev_REL`` between the same node types the other way round."""
    if named:
        twins = [EdgeType.parse(t, field="--twin") for t in named]
        for t in twins:
            if t not in graph.edge_types or (t.src, t.dst) != (etype.dst, etype.src):
                raise FormatError(f"{t} is not an edge type {etype.dst}:*:{etype.src} of the "
                                  "graph", field="--twin")
        return twins
    made = graph.made.reverse if graph.made is not None else {}
    recorded = {b for a, b in made.items() if a == etype} | {a for a, b in made.items()
                                                             if b == etype}
    names = {f"rev-{etype.rel}", f"rev_{etype.rel}"}
    return [t for t in graph.edge_types
            if t != etype and (t.src, t.dst) == (etype.dst, etype.src)
            and (t.rel in names or t in recorded)]


@dataclass(frozen=True)
class SplitTask:
    spec: SplitSpec
    etype: EdgeType                 # the type whose chunk this is (the split type or a twin)
    reverse: bool
    path: str
    files: ChunkFiles               # the type's edge files entry (format, delimiter)
    rows: int
    num_src: int
    num_dst: int
    targets: tuple[str, ...]        # where the three masks of this chunk go


def split_chunk(task: SplitTask) -> list[int]:
    """Write one chunk's masks; returns its (train, val, test) counts. Holds one chunk."""
    src, dst = read_checked_edges(task.path, task.files, rows=task.rows,
                                  num_src=task.num_src, num_dst=task.num_dst, etype=task.etype)
    codes = split_codes(task.spec, src, dst, task.reverse)
    for code, target in enumerate(task.targets):
        write_array_chunk(target, codes == code)
    return np.bincount(codes, minlength=3).tolist()


def _link_inputs(graph: ChunkedGraph, out: str) -> None:
    """Hard-link (or copy) every local, relative chunk file of ``graph`` into ``out``."""
    link_files(graph.root, [rel for _, files in graph.file_lists() for rel in files.files], out)


def run_split(chunked: str, out: str, spec: SplitSpec, cluster: ClusterOptions,
              twins: tuple[str, ...] = (), overwrite: bool = False):
    """Write ``chunked`` with the split masks of ``spec`` into ``out``; returns the graph and
    the counts ``{type: [train, val, test]}`` (None when ``out`` is already up to date)."""
    graph = load_chunked_graph(chunked)
    if spec.etype not in graph.edge_types:
        raise FormatError(f"no edge type {spec.etype} (the graph has "
                          f"{', '.join(map(str, graph.edge_types))})", field="--etype")
    types = [(spec.etype, False)] + [(t, True) for t in twin_types(graph, spec.etype, twins)]
    options = {**{k: str(v) if k == "etype" else v for k, v in
                  dataclasses.asdict(spec).items() if k != "seed"},
               "twins": [str(t) for t, _ in types[1:]]}
    totals = {str(et): [0, 0, 0] for et, _ in types}       # a 0-edge type: no tasks, 0s

    def body(work: Work) -> ChunkedGraph:
        _link_inputs(graph, work.tmp)
        tasks, edge_data = [], dict(graph.edge_data)
        for et, reverse in types:
            if not graph.num_edges[et]:
                # A field needs at least one chunk file (FORMATS.md §1): a 0-edge type
                # carries no edge data, as `prep chunk` leaves DGL's 0-row files behind.
                log.warning("edge type '%s' has 0 edges: no split masks are written for "
                            "it (a 0-edge type carries no edge data)", et)
                continue
            rels = {m: tuple(f"edge_data/{et.dirname}/{m}/part-{k:05d}.npy"
                             for k in range(len(graph.edge_chunks[et]))) for m in MASKS}
            if set(MASKS) & set(edge_data.get(et, {})):
                log.warning("%s already has split masks: replaced by this split", et)
            edge_data[et] = {**edge_data.get(et, {}),
                             **{m: ChunkFiles("numpy", rels[m]) for m in MASKS}}
            tasks += [SplitTask(spec, et, reverse, graph.path(rel), graph.edges[et], rows,
                                graph.num_nodes[et.src], graph.num_nodes[et.dst],
                                tuple(os.path.join(work.tmp, rels[m][k]) for m in MASKS))
                      for k, (rel, rows) in enumerate(zip(graph.edges[et].files,
                                                          graph.edge_chunks[et]))]
        counts = work.run(split_chunk, tasks, "split edges")
        for task, c in zip(tasks, counts):
            totals[str(task.etype)] = [a + b for a, b in zip(totals[str(task.etype)], c)]
        return dataclasses.replace(graph, root=work.tmp, edge_data=edge_data)

    result = run_step("split-edges", out, cluster, body, options=options, inputs=[chunked],
                      seed=spec.seed, overwrite=overwrite, finish=finish_chunked)
    return None if result is None else (result, totals)
