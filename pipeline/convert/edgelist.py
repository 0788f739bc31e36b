"""Edge lists: CSV/TSV (plain or compressed) and Parquet, homogeneous or per type.

- a file: one homogeneous edge list (``--node-data NAME=FILE`` adds node data);
- a folder: ``edges/<src>__<rel>__<dst>.<ext>`` (or a folder of such files) per edge type and
  ``nodes/<ntype>/<name>.<ext>`` per node field (.npy, .parquet or headerless .csv).

Uncompressed CSV is split into byte ranges of about ``--chunk-size`` rows, read in parallel;
compressed CSV is streamed by one task; Parquet is split by row groups.
"""

from __future__ import annotations

import os

from graphprep.formats import ChunkFiles, EdgeType, FormatError
from graphprep.formats.fields import ArraySource, ChunkedArray
from graphprep.formats.storage import parquet_file
from graphprep.pipeline.convert import keyed
from graphprep.pipeline.convert.edgefiles import csv_columns, edge_files, is_edge_file, no_rows
from graphprep.pipeline.convert.options import ChunkOptions
from graphprep.pipeline.convert.sources import (CsvArray, CsvRange, CsvStream, EdgePart, EdgeSource,
                                               NpyArray, ParquetEdges, ScipyNpzArray, SourceGraph)
from graphprep.pipeline.tables.parts import COMPRESSED, strip_compression
from graphprep.pipeline.tables.ranges import byte_ranges, row_group_runs

HOMO_NODE, HOMO_EDGE = "_N", EdgeType("_N", "_E", "_N")


def edge_parts(path: str, opts: ChunkOptions) -> list[EdgePart]:
    """The parts of one edge file (or of every file in a folder, in name order)."""
    if os.path.isdir(path):
        files = sorted(os.path.join(path, f) for f in os.listdir(path) if is_edge_file(f))
        if not files:
            raise FormatError("folder holds no edge files (.csv/.tsv/.parquet)", file=path)
        return [p for f in files for p in edge_parts(f, opts)]
    if strip_compression(path.lower()).endswith((".parquet", ".pq")):
        return _parquet_parts(path, opts)
    columns = csv_columns(path, opts)
    if columns is None:
        return []  # an empty file: no edges (a graph of isolated nodes is valid)
    if path.lower().endswith(COMPRESSED):
        return [CsvStream(path, columns)]
    return [CsvRange(path, start, end, columns)
            for start, end in byte_ranges(path, opts.chunk_size)]


def _parquet_parts(path: str, opts: ChunkOptions) -> list[EdgePart]:
    md = parquet_file(path).metadata
    names = md.schema.to_arrow_schema().names
    src = opts.src_col or ("src" if "src" in names else names[0])
    dst = opts.dst_col or ("dst" if "dst" in names else names[1] if len(names) > 1 else "")
    for col, flag in ((src, "src"), (dst, "dst")):
        if col not in names:
            raise FormatError(f"column {col!r} not found (columns: {names})", file=path,
                              field=f"--{flag}-col")
    if src == dst:
        raise FormatError(f"--src-col and --dst-col name the same column: {dst!r}", file=path,
                          field="--dst-col")
    return [ParquetEdges(path, first, last, start, src_col=src, dst_col=dst)
            for first, last, start in row_group_runs(path, opts.chunk_size)]


def array_source(path: str) -> ArraySource:
    """A node data file: .npy (memory-mapped), .parquet, a scipy sparse matrix (.npz, kept
    sparse), or headerless CSV (streamed)."""
    lower = strip_compression(path.lower())
    if lower.endswith(".npy"):
        return NpyArray.open(path)
    if lower.endswith(".npz"):
        return ScipyNpzArray.open(path)
    if lower.endswith((".parquet", ".pq")):
        rows = parquet_file(path).metadata.num_rows
        return ChunkedArray(path, os.path.dirname(path),
                            ChunkFiles("parquet", (os.path.basename(path),)), (rows,))
    delimiter = "\t" if lower.endswith(".tsv") else ","
    return CsvArray(path, delimiter)


def from_edge_file(path: str, opts: ChunkOptions) -> SourceGraph:
    """One homogeneous edge list file (or folder of files)."""
    node_data = {}
    for key, file in opts.node_data.items():
        node_data[key.split("/")[-1]] = array_source(file)
    n = opts.num_nodes.get("") or opts.num_nodes.get(HOMO_NODE)
    if n is None and not node_data:
        files = edge_files(path)
        if files and all(no_rows(f, opts) for f in files):
            # named here, by the user's file: the writer's check names no file
            raise FormatError("holds no edges, so the graph has no nodes: --num-nodes N makes "
                              "N isolated nodes", file=path)
    name = opts.name or _stem(path)
    return SourceGraph(name, (HOMO_NODE,), {HOMO_NODE: n},
                       (EdgeSource(HOMO_EDGE, tuple(edge_parts(path, opts))),),
                       {HOMO_NODE: node_data} if node_data else {},
                       inputs=(path, *opts.node_data.values()))


def edge_type_entries(root: str) -> list[tuple[EdgeType, str]]:
    """``edges/<src>__<rel>__<dst>.<ext>`` (a file, or a folder of files) per edge type, in
    name order."""
    edge_dir = os.path.join(root, "edges")
    found, seen = [], {}
    for entry in sorted(os.listdir(edge_dir)):
        if entry.startswith("."):
            continue  # hidden files (.DS_Store, editors' swap files) are not edge types
        stem = strip_compression(entry)
        stem = os.path.splitext(stem)[0] if os.path.isfile(os.path.join(edge_dir, entry)) else stem
        parts = stem.split("__")
        if len(parts) != 3 or not all(parts):
            raise FormatError("edge file name must be '<src>__<rel>__<dst>.<ext>'",
                              file=os.path.join(edge_dir, entry))
        et = EdgeType(*parts)
        if et in seen:
            raise FormatError(f"edge type '{et}' is given twice: also by {seen[et]!r}",
                              file=os.path.join(edge_dir, entry))
        seen[et] = entry
        found.append((et, os.path.join(edge_dir, entry)))
    return found


def keyed_source(path: str, folder: bool, opts: ChunkOptions, out: str, staging: str,
                 runner) -> SourceGraph | None:
    """The edge list mapped from keys (``graphprep.pipeline.convert.keyed``) when its endpoints hold
    strings or ``--map-keys`` is given; None for plain integer IDs."""
    entries = edge_type_entries(path) if folder else [(HOMO_EDGE, path)]
    files = [(et, edge_files(p)) for et, p in entries]
    files = [(et, f) for et, f in files if f]
    if not files or not (opts.map_keys or any(keyed.has_string_keys(f, opts)
                                              for _, f in files)):
        return None
    if opts.node_data or (folder and os.path.isdir(os.path.join(path, "nodes"))):
        raise FormatError("node data files are rows by ID, but this edge list's nodes are "
                          "keys: give node tables with a key column in a config file "
                          "(prep chunk CONFIG.yaml OUT)", file=path)
    tables = [keyed.edge_table(et, f, opts) for et, f in files]
    name = opts.name or (os.path.basename(os.path.abspath(path)) if folder else _stem(path))
    source = keyed.keyed_source(name, tables, opts, out, staging, runner, (path,))
    empty = [t for t in source.node_types if not source.num_nodes.get(t)]
    if empty:
        # named here, by the user's file: the graph's own check would name the partial output
        named = [f for et, fs in files if empty[0] in (et.src, et.dst) for f in fs]
        raise FormatError(
            f"no edges, so node type {empty[0]!r} has no keys: a keyed edge list's nodes are "
            f"the keys its edges name" + ("" if folder else
                                          " (for isolated nodes give integer IDs and "
                                          "--num-nodes, without --map-keys)"),
            file=named[0] if len(named) == 1 else path)
    return source


def from_edge_folder(root: str, opts: ChunkOptions) -> SourceGraph:
    """The folder layout ``edges/<src>__<rel>__<dst>.<ext>`` + ``nodes/<ntype>/<name>.<ext>``."""
    edges, node_types = [], []
    for et, path in edge_type_entries(root):
        edges.append(EdgeSource(et, tuple(edge_parts(path, opts))))
        for t in (et.src, et.dst):  # one at a time: src and dst may be the same new type
            if t not in node_types:
                node_types.append(t)
    node_data: dict[str, dict[str, ArraySource]] = {}
    node_dir = os.path.join(root, "nodes")
    if os.path.isdir(node_dir):
        for t in sorted(os.listdir(node_dir)):
            if t not in node_types:
                node_types.append(t)
            for f in sorted(os.listdir(os.path.join(node_dir, t))):
                node_data.setdefault(t, {})[_stem(f)] = array_source(os.path.join(node_dir, t, f))
    for key, file in opts.node_data.items():
        t, _, name = key.rpartition("/")
        if t not in node_types:
            raise FormatError(f"--node-data names unknown node type {t!r}", field="--node-data")
        node_data.setdefault(t, {})[name] = array_source(file)
    for t in opts.num_nodes:
        if t not in node_types:
            raise FormatError(f"--num-nodes names unknown node type {t!r}", field="--num-nodes")
    return SourceGraph(opts.name or os.path.basename(os.path.abspath(root)), tuple(node_types),
                       {t: opts.num_nodes.get(t) for t in node_types}, tuple(edges), node_data,
                       inputs=(root,))


def _stem(path: str) -> str:
    name = strip_compression(os.path.basename(path))
    return os.path.splitext(name)[0]
