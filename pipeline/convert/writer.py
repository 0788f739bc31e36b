"""Any :class:`SourceGraph` -> the chunked graph format, as Dask tasks over parts and chunks.

Tasks and what each holds in memory:

- node data, random access: one task per output chunk, holding that chunk's rows;
- node data, stream (compressed CSV): one task per field, holding one block plus one chunk;
- edges: one task per input part (a CSV byte range, Parquet row groups, an array slice, one
  DGL chunk), holding one block plus one output chunk; it checks IDs, drops self-loops and adds
  reverse edges on the way (a type's reversed edges follow its own, in the same order);
- dedupe (optional): a bucket shuffle (``graphprep.pipeline.convert.dedupe``), one bucket per task.

The client holds only metadata and per-part counts.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

import numpy as np

from graphprep.formats import ChunkedGraph, ChunkFiles, EdgeType, FormatError, even_chunks
from graphprep.formats.schema import ChunkRecord
from graphprep.formats.output import write_array_chunk, write_edge_chunk
from graphprep.formats.validate import check_ids
from graphprep.formats.sparse import as_rows, concat_rows
from graphprep.formats.fields import ArraySource
from graphprep.pipeline.convert.sources import EdgePart, SourceGraph

log = logging.getLogger(__name__)

# One count per node chunk goes into metadata.json: 2^24 chunks is a 16-trillion-node type at the
# default chunk size; far beyond it, the count is a typo or sparse IDs, not a graph.
MAX_CHUNKS_PER_TYPE = 1 << 24


@dataclass(frozen=True)
class Transforms:
    """Edge transforms applied while converting (``prep chunk`` options)."""

    add_reverse: bool = False      # homogeneous: into the same type; else new rev-<rel> types
                                   # (self loops stay single: one is its own reverse)
    drop_self_loops: bool = False  # edges u->u of types whose src and dst types are equal
    dedupe: bool = False           # keep one copy of each (src, dst) per edge type


# ----------------------------------------------------------------------------- node data

def data_path(section: str, owner: str, name: str, chunk: int | str, csr: bool = False) -> str:
    """A data chunk's path in the chunked graph (sparse fields: a CSR Parquet chunk)."""
    tag = f"{chunk:05d}" if isinstance(chunk, int) else chunk
    return f"{section}/{owner}/{name}/part-{tag}.{'parquet' if csr else 'npy'}"


@dataclass(frozen=True)
class ArrayChunkTask:
    source: ArraySource
    out: str
    relpath: str
    start: int
    stop: int


def write_array_range(task: ArrayChunkTask) -> int:
    """Read rows ``[start, stop)`` of a random-access source and write them as one chunk."""
    values = as_rows(task.source.read(task.start, task.stop))
    if len(values) != task.stop - task.start:
        raise FormatError(f"expected {task.stop - task.start} rows from row {task.start}, "
                          f"found {len(values)}", file=task.source.path)
    write_array_chunk(os.path.join(task.out, task.relpath), values)
    return len(values)


@dataclass(frozen=True)
class ArrayStreamTask:
    source: ArraySource
    out: str
    section: str
    owner: str
    name: str
    chunk_size: int


def write_array_stream(task: ArrayStreamTask) -> list[int]:
    """Stream a source into chunks of exactly ``chunk_size`` rows (last smaller)."""
    sizes = []
    for chunk in rechunk(task.source.blocks(), task.chunk_size):
        write_array_chunk(os.path.join(task.out, data_path(
            task.section, task.owner, task.name, len(sizes), bool(task.source.csr_dim))), chunk)
        sizes.append(len(chunk))
    return sizes


def rechunk(blocks, size: int):
    """Blocks of any length -> arrays of exactly ``size`` rows (the last may be shorter)."""
    pending, count = [], 0
    for block in blocks:
        pending.append(block)
        count += len(block)
        while count >= size:
            merged = concat_rows(pending)
            yield merged[:size]
            pending, count = [merged[size:]], count - size
    if count:
        yield np.concatenate(pending)


# ----------------------------------------------------------------------------- edges

@dataclass(frozen=True)
class EdgePartTask:
    part: EdgePart
    index: int
    etype: EdgeType
    out: str
    chunk_size: int
    limits: tuple[int | None, int | None]
    drop_self_loops: bool
    reverse: EdgeType | None         # the type the reversed edges go into (etype: same type)
    data_names: tuple[str, ...] = ()


@dataclass
class PartResult:
    chunk_rows: list[int] = field(default_factory=list)
    reverse_rows: list[int] = field(default_factory=list)   # per chunk: its reversed edges
    self_loops: int = 0              # self loops not reversed (with ``reverse``)
    rows_read: int = 0
    max_src: int = -1
    max_dst: int = -1
    problem: FormatError | None = None


def chunk_tag(part: int, j: int, reversed_: bool = False) -> str:
    """The temporary name of a part's chunk ``j`` (``r...``: its reversed edges)."""
    return f"{'r' if reversed_ else 'p'}{part:05d}-{j:04d}"


def part_file(etype: EdgeType, tag: str) -> str:
    return f"edges/{etype.dirname}/{tag}.parquet"


def write_edge_part(task: EdgePartTask) -> PartResult:
    """Read one input part, check and transform its edges, write chunks of its own.

    A bad ID or row is returned as ``problem`` (row relative to the part when its first row
    is unknown) so the client can name the exact row in the file.
    """
    result = PartResult()
    writer = _ChunkWriter(task, result)
    try:
        for block in task.part.blocks():
            _check_ids(task, block.src, block.dst, result.rows_read)
            result.rows_read += len(block.src)
            if len(block.src):
                result.max_src = max(result.max_src, int(block.src.max()))
                result.max_dst = max(result.max_dst, int(block.dst.max()))
            src, dst, data = block.src, block.dst, block.data
            if task.drop_self_loops and task.etype.src == task.etype.dst:
                keep = src != dst
                src, dst, data = src[keep], dst[keep], {k: v[keep] for k, v in data.items()}
            writer.add(src, dst, data, task.chunk_size)
        writer.flush()
    except FormatError as err:
        first = task.part.first_row
        row = None if err.row is None else err.row + (first or 0)
        result.problem = FormatError(err.message, file=err.file, field=err.field, row=row)
    return result


def _check_ids(task: EdgePartTask, src: np.ndarray, dst: np.ndarray, row0: int) -> None:
    """IDs in ``[0, count)`` of their type; without a count, in ``[0, 2^63-1)`` (so that the
    count inferred as the largest ID + 1 fits int64). A min and a max per column."""
    check_ids(src, task.limits[0], file=task.part.path, field="src", row0=row0,
              ntype=task.etype.src)
    check_ids(dst, task.limits[1], file=task.part.path, field="dst", row0=row0,
              ntype=task.etype.dst)


class _ChunkWriter:
    """Buffers edges of one part and writes them as chunks (plus reversed copies)."""

    def __init__(self, task: EdgePartTask, result: PartResult):
        self.task, self.result = task, result
        self.pending: list[tuple] = []
        self.count = 0

    def add(self, src, dst, data, per_chunk: int) -> None:
        self.pending.append((src, dst, data))
        self.count += len(src)
        while self.count >= per_chunk:
            self._write(*self._take(per_chunk))

    def flush(self) -> None:
        if self.count:
            self._write(*self._take(self.count))

    def _take(self, n: int):
        src = np.concatenate([p[0] for p in self.pending])
        dst = np.concatenate([p[1] for p in self.pending])
        data = {k: np.concatenate([p[2][k] for p in self.pending]) for k in self.task.data_names}
        self.pending = [(src[n:], dst[n:], {k: v[n:] for k, v in data.items()})]
        self.count -= n
        return src[:n], dst[:n], {k: v[:n] for k, v in data.items()}

    def _write(self, src, dst, data) -> None:
        t, j = self.task, len(self.result.chunk_rows)
        targets = [(t.etype, chunk_tag(t.index, j), src, dst, data)]
        if t.reverse is not None:
            # A self loop is its own reverse: reversing it would only double it.
            flip = src != dst if t.etype.src == t.etype.dst else np.ones(len(src), bool)
            self.result.self_loops += int(len(src) - flip.sum())
            self.result.reverse_rows.append(int(flip.sum()))
            if flip.any():
                targets.append((t.reverse, chunk_tag(t.index, j, True), dst[flip], src[flip],
                                {k: v[flip] for k, v in data.items()}))
        for et, tag, s, d, values_of in targets:
            write_edge_chunk(os.path.join(t.out, part_file(et, tag)), s, d)
            for name, values in values_of.items():
                write_array_chunk(os.path.join(t.out, data_path("edge_data", et.dirname, name,
                                                                tag)), values)
        self.result.chunk_rows.append(len(src))


# ----------------------------------------------------------------------------- the job

def convert_source(source: SourceGraph, out: str, chunk_size: int, transforms: Transforms,
                   runner) -> ChunkedGraph:
    """Write ``source`` into the (temporary) folder ``out``; returns the graph's metadata.

    ``runner(fn, items, desc)`` runs tasks (a :class:`graphprep.pipeline.core.cluster.TaskRunner`).
    """
    num_nodes, node_chunks, node_data = _write_node_data(source, out, chunk_size, runner)
    reverse = reverse_types(source, transforms)
    tasks, owners = [], []
    for es in source.edges:
        limits = (num_nodes.get(es.etype.src), num_nodes.get(es.etype.dst))
        for part in es.parts:
            tasks.append(EdgePartTask(part, len(tasks), es.etype, out, chunk_size, limits,
                                      transforms.drop_self_loops, reverse.get(es.etype),
                                      es.data_names))
            owners.append(es)
    results = runner(write_edge_part, tasks, "convert edges")
    _raise_first_problem(tasks, results)
    for et in reverse:
        loops = sum(res.self_loops for task, res in zip(tasks, results) if task.etype == et)
        if loops:
            log.warning("edge type %s: %d self loops left single (a self loop is its own "
                        "reverse)", et, loops)
    _infer_node_counts(source, num_nodes, tasks, results)
    for t in source.node_types:
        if t not in node_chunks:
            _check_chunk_count(t, num_nodes[t], chunk_size, tasks, results)
            node_chunks[t] = even_chunks(num_nodes[t], chunk_size)

    edge_types, edge_chunks, edges, edge_data = [], {}, {}, {}
    out_types = [es.etype for es in source.edges]
    out_types += [r for r in reverse.values() if r not in out_types]
    for et in out_types:
        # The type's own edges, then the reversed edges it holds, each in input order.
        pieces = [(chunk_tag(task.index, j), rows)
                  for task, res in zip(tasks, results) if task.etype == et
                  for j, rows in enumerate(res.chunk_rows)]
        pieces += [(chunk_tag(task.index, j, True), rows)
                   for task, res in zip(tasks, results) if task.reverse == et
                   for j, rows in enumerate(res.reverse_rows) if rows]
        names = next(es.data_names for es in source.edges
                     if es.etype == et or reverse.get(es.etype) == et)
        edge_types.append(et)
        files, data_files = _sequential_edge_files(out, et, names, pieces)
        edge_chunks[et] = tuple(rows for _, rows in pieces)
        edges[et], edge_data[et] = files, data_files
    if transforms.dedupe:
        from graphprep.pipeline.convert.dedupe import dedupe_edge_type
        for et in edge_types:
            if edge_data.get(et):
                raise FormatError("--dedupe with edge data is not supported (which copy's data "
                                  "to keep is ambiguous)", field=f"edge_data.{et}")
            edges[et], edge_chunks[et] = dedupe_edge_type(
                out, et, edges[et], num_nodes[et.dst], runner)
    return ChunkedGraph(root=out, graph_name=source.name, node_types=source.node_types,
                        num_nodes=num_nodes, node_chunks=node_chunks,
                        edge_types=tuple(edge_types), edge_chunks=edge_chunks, edges=edges,
                        node_data=node_data,
                        edge_data={et: d for et, d in edge_data.items() if d},
                        keys=dict(source.keys), vocab=dict(source.vocab),
                        made=_record(source, reverse, transforms))


def _record(source: SourceGraph, reverse: dict, transforms: Transforms) -> ChunkRecord | None:
    """How the graph was made, where anything changed the input's rows: keys mapped (a
    dangling mode), reversed edges, dropped self loops, dedupe; None for a plain copy (so that
    re-chunking an exported graph gives the same metadata.json)."""
    made = ChunkRecord(reverse, source.dangling, dict(source.added_nodes),
                       dict(source.dropped_edges), transforms.drop_self_loops,
                       transforms.dedupe)
    return None if made == ChunkRecord() else made


def reverse_types(source: SourceGraph, transforms: Transforms) -> dict[EdgeType, EdgeType]:
    """Per input edge type to reverse, the type its reversed edges go into: the tables
    config's ``reverse``/``reverse_type``, then ``--add-reverse-edges`` for the others (a
    homogeneous graph: the same type; else ``dst:rev-<rel>:src``). Raises
    :class:`FormatError` when a reversed type would also be an input type or another's."""
    reverse = dict(source.reverse)
    if transforms.add_reverse:
        homogeneous = len(source.node_types) == 1 and len(source.edges) == 1
        for es in source.edges:
            reverse.setdefault(es.etype, es.etype if homogeneous else es.etype.reverse())
    inputs = {es.etype for es in source.edges}
    seen: dict[EdgeType, EdgeType] = {}
    for et, rt in reverse.items():
        if rt != et and (rt in inputs or rt in seen):
            other = f"holds the reversed edges of '{seen[rt]}'" if rt in seen else \
                "is an input edge type"
            raise FormatError(f"the reversed edges of '{et}' would go into a type that {other} "
                              f"(a tables config can name another: reverse_type): {rt}",
                              field="--add-reverse-edges")
        seen[rt] = et
    return reverse


def _write_node_data(source: SourceGraph, out: str, chunk_size: int, runner):
    num_nodes = {t: n for t, n in source.num_nodes.items() if n is not None}
    range_tasks, stream_tasks = [], []
    for t, fields in source.node_data.items():
        for name, src in fields.items():
            if src.num_rows is None:
                stream_tasks.append(ArrayStreamTask(src, out, "node_data", t, name, chunk_size))
                continue
            bounds = np.cumsum((0,) + even_chunks(src.num_rows, chunk_size))
            range_tasks += [ArrayChunkTask(src, out, data_path("node_data", t, name, i,
                                                               bool(src.csr_dim)),
                                           int(bounds[i]), int(bounds[i + 1]))
                            for i in range(len(bounds) - 1)]
    rows: dict[tuple[str, str], list[int]] = {}
    for task, n in zip(range_tasks, runner(write_array_range, range_tasks, "node data")):
        _, t, name, _ = task.relpath.split("/")
        rows.setdefault((t, name), []).append(n)
    for task, sizes in zip(stream_tasks, runner(write_array_stream, stream_tasks, "node data")):
        rows[(task.owner, task.name)] = sizes
    node_chunks, node_data = {}, {}
    for (t, name), sizes in rows.items():
        total = sum(sizes)
        src = source.node_data[t][name]
        if t in num_nodes and total != num_nodes[t]:
            raise FormatError(f"has {total} rows, node type {t!r} has {num_nodes[t]} nodes",
                              file=src.path, field=f"{t}/{name}")
        num_nodes[t] = total
        node_chunks[t] = tuple(sizes)
        dim = src.csr_dim     # sparse rows stay sparse: CSR chunks, graphprep.formats.sparse
        node_data.setdefault(t, {})[name] = ChunkFiles(
            "csr" if dim else "numpy", tuple(data_path("node_data", t, name, i, bool(dim))
                                             for i in range(len(sizes))), dim=dim)
    return num_nodes, node_chunks, node_data


def _raise_first_problem(tasks: list[EdgePartTask], results: list[PartResult]) -> None:
    rows_before: dict[str, int] = {}
    for task, res in zip(tasks, results):
        if res.problem is not None:
            err = res.problem
            if task.part.first_row is None and err.row is not None:
                err = FormatError(err.message, file=err.file, field=err.field,
                                  row=err.row + rows_before.get(task.part.path, 0))
            raise err
        rows_before[task.part.path] = rows_before.get(task.part.path, 0) + res.rows_read


def _infer_node_counts(source, num_nodes, tasks, results) -> None:
    for t in source.node_types:
        if t in num_nodes:
            continue
        top = [res.max_src for task, res in zip(tasks, results) if task.etype.src == t]
        top += [res.max_dst for task, res in zip(tasks, results) if task.etype.dst == t]
        n = max(top, default=-1) + 1
        if n == 0:
            raise FormatError(f"node type {t!r} is empty: no count given, no data, no edges",
                              field="num_nodes")
        log.info("node type %s: %d nodes (largest ID in the edges + 1)", t, n)
        num_nodes[t] = n


def _check_chunk_count(t: str, n: int, chunk_size: int, tasks, results) -> None:
    """Refuse node counts whose chunk list could not even be held (metadata.json lists one
    count per chunk): an ID like 2^62 in an edge list implies that many nodes. Names the file
    holding the largest ID when the count was inferred from the edges."""
    chunks = -(-n // chunk_size)
    if chunks <= MAX_CHUNKS_PER_TYPE:
        return
    why = (f"node type {t!r} would have {n:,} nodes in {chunks:,} chunks of {chunk_size:,} "
           f"rows (at most {MAX_CHUNKS_PER_TYPE:,} chunks): node IDs must be dense, 0-based "
           f"(--map-keys numbers sparse IDs as keys)")
    ends = [(res.max_src, task.part.path, "src") for task, res in zip(tasks, results)
            if task.etype.src == t]
    ends += [(res.max_dst, task.part.path, "dst") for task, res in zip(tasks, results)
             if task.etype.dst == t]
    top = max(ends, default=None)
    if top is not None and top[0] + 1 == n:
        raise FormatError(f"node ID {top[0]}: {why}", file=top[1], field=top[2])
    raise FormatError(why, field="--num-nodes")


def _sequential_edge_files(out: str, et: EdgeType, data_names, pieces):
    """Rename the per-part files of ``et`` (``pieces``: (tag, rows) in order) to
    part-00000..."""
    files, data = [], {name: [] for name in data_names}
    for k, (tag, _) in enumerate(pieces):
        new = f"edges/{et.dirname}/part-{k:05d}.parquet"
        os.rename(os.path.join(out, part_file(et, tag)), os.path.join(out, new))
        files.append(new)
        for name in data_names:
            old_d = data_path("edge_data", et.dirname, name, tag)
            new_d = data_path("edge_data", et.dirname, name, k)
            os.rename(os.path.join(out, old_d), os.path.join(out, new_d))
            data[name].append(new_d)
    return (ChunkFiles("parquet", tuple(files)),
            {name: ChunkFiles("numpy", tuple(f)) for name, f in data.items()})
