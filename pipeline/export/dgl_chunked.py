"""``prep export --to dgl-chunked``: a chunked graph (FORMATS.md §1) in DGL's chunked graph
format, the input of DGL's own pipeline (``tools/partition_algo/random_partition.py``,
``tools/dispatch_data.py`` -> ``tools/distpartitioning``)::

    OUT/metadata.json                                   DGL's keys, paths relative to OUT
    OUT/edges/<src>__<rel>__<dst>/part-00000.txt        "src dst" per line, space-separated
    OUT/node_data/<ntype>/<name>/part-00000.npy
    OUT/edge_data/<src>__<rel>__<dst>/<name>/part-00000.npy

Edges are headerless CSV with ``"delimiter": " "``: DGL's default edge format (what its
``chunk_graph.py`` writes) and the only delimiter its reader uses (``dataset_utils.py`` parses
every CSV edge file with ``delimiter=" "`` whatever the metadata says). An empty chunk is a
0-byte file, as DGL writes one and its pipeline skips it. Data is ``.npy`` (``"numpy"``):
DGL's pipeline reads data as numpy or Parquet only, never CSV; a ``.npy`` input chunk is
copied byte for byte, any other is converted.

Chunk boundaries stay ours: chunk i of the export is chunk i of the input, for edges and for
every data field, so ``num_nodes_per_chunk`` / ``num_edges_per_chunk`` are the input's lists
(DGL's ``chunk_graph.py`` cuts every type into the same number of near-equal chunks; its
pipeline reads any chunk count per type). ``metadata.json`` carries both count keys
(``num_nodes_per_type`` and ``num_nodes_per_chunk``, ``num_edges_per_type`` and
``num_edges_per_chunk``): ``random_partition.py`` and ``data_shuffle.py`` read the per-type
ones, which DGL's ``chunk_graph.py`` itself omits. Types keep their names; edge types are DGL's
canonical ``src:rel:dst`` strings (homogeneous graphs: ``_N`` and ``_N:_E:_N``).

One Dask task per chunk file holds that one chunk: it reads it, checks its row count (and, for
edges, the node ID range), and writes its counterpart. The client holds metadata only.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from graphprep.formats import ChunkedGraph, ChunkFiles, EdgeType, FormatError, load_chunked_graph
from graphprep.formats.arrays import read_array_chunk, read_edge_chunk
from graphprep.formats.sparse import is_csr
from graphprep.formats.output import save_npy, write_json, writing
from graphprep.formats.schema import METADATA
from graphprep.formats.storage import is_url
from graphprep.formats.validate import check_ids

log = logging.getLogger(__name__)

EDGE_FILES = "csv"
EDGE_DELIMITER = " "
# The dtypes DGL's pipeline carries (tools/distpartitioning/utils.py DATA_TYPE_ID).
DGL_DTYPES = frozenset(np.dtype(t).str for t in (
    "float32", "float64", "float16", "uint8", "int8", "int16", "int32", "int64", "bool"))


def edge_path(et: EdgeType, chunk: int) -> str:
    return f"edges/{et.dirname}/part-{chunk:05d}.txt"


def data_path(section: str, owner: str, name: str, chunk: int) -> str:
    return f"{section}/{owner}/{name}/part-{chunk:05d}.npy"


# ----------------------------------------------------------------------------- edges

@dataclass(frozen=True)
class EdgeChunkTask:
    source: str                    # input chunk file (path or URL)
    files: ChunkFiles              # its format
    target: str                    # output .txt path
    rows: int                      # edges num_edges_per_chunk declares
    limits: tuple[int, int]        # node counts of the source and destination types
    field: str                     # "edges.<etype>.data[<i>]", what errors name
    etype: EdgeType


def write_edge_csv(path: str, src: np.ndarray, dst: np.ndarray) -> None:
    """``src dst`` lines, no header, as DGL's CSV writer makes them (0 edges: a 0-byte file)."""
    with writing(path):
        if len(src) == 0:
            open(path, "wb").close()
            return
        table = pa.table({"src": pa.array(src, pa.int64()), "dst": pa.array(dst, pa.int64())})
        pacsv.write_csv(table, path, write_options=pacsv.WriteOptions(
            include_header=False, delimiter=EDGE_DELIMITER))


def export_edge_chunk(task: EdgeChunkTask) -> int:
    """One edge chunk as CSV; its rows must be the declared count and its IDs in range.
    Holds that chunk. Returns its edge count."""
    src, dst = read_edge_chunk(task.source, task.files)
    if len(src) != task.rows:
        raise FormatError(f"has {len(src)} edges, num_edges_per_chunk says {task.rows}",
                          file=task.source, field=task.field)
    check_ids(src, task.limits[0], file=task.source, field="src", ntype=task.etype.src)
    check_ids(dst, task.limits[1], file=task.source, field="dst", ntype=task.etype.dst)
    write_edge_csv(task.target, src, dst)
    return len(src)


# ----------------------------------------------------------------------------- data

@dataclass(frozen=True)
class DataChunkTask:
    source: str
    files: ChunkFiles
    target: str


@dataclass(frozen=True)
class ChunkInfo:
    """What a data task found: rows, dtype (``dtype.str``) and per-row shape."""

    rows: int
    dtype: str
    row_shape: tuple[int, ...]


def export_data_chunk(task: DataChunkTask) -> ChunkInfo:
    """One data chunk as ``.npy``: a local ``.npy`` is checked (header) and copied byte for
    byte, anything else is read (one chunk) and saved. Returns its rows, dtype, row shape."""
    array = read_array_chunk(task.source, task.files)     # .npy: memory-mapped, header only
    if array.ndim == 0:
        raise FormatError("data chunk is a scalar, expected rows", file=task.source)
    if task.files.format == "numpy" and not is_url(task.source):
        with writing(task.target):
            shutil.copyfile(task.source, task.target)
    else:     # DGL's format is dense: a sparse chunk is densified (its rows x width held)
        save_npy(task.target, array.to_dense() if is_csr(array) else np.asarray(array))
    return ChunkInfo(int(array.shape[0]), array.dtype.str, tuple(array.shape[1:]))


def _data_tasks(graph: ChunkedGraph, out: str):
    """``(field label, ChunkFiles of the export, tasks)`` for every node and edge data field."""
    fields = [("node_data", t, t, name, files) for t, d in graph.node_data.items()
              for name, files in d.items()]
    fields += [("edge_data", str(et), et.dirname, name, files)
               for et, d in graph.edge_data.items() for name, files in d.items()]
    for section, owner, folder, name, files in fields:
        rels = tuple(data_path(section, folder, name, i) for i in range(len(files.files)))
        tasks = [DataChunkTask(graph.path(rel_in), files, os.path.join(out, rel_out))
                 for rel_in, rel_out in zip(files.files, rels)]
        yield (section, owner, name), ChunkFiles("numpy", rels), tasks


def _check_field(graph: ChunkedGraph, key: tuple[str, str, str], tasks: list[DataChunkTask],
                 infos: list[ChunkInfo]) -> None:
    """Rows of a field's chunks sum to its type's count; every chunk has the first's dtype and
    row shape. A field DGL's pipeline cannot carry (more than 2-D, or a dtype outside its
    list) is exported, with a warning."""
    section, owner, name = key
    label = f"{section}.{owner}.{name}"
    for task, info in zip(tasks, infos):
        if (info.dtype, info.row_shape) != (infos[0].dtype, infos[0].row_shape):
            raise FormatError(f"dtype {np.dtype(info.dtype)} rows {info.row_shape} differ from "
                              f"the field's first chunk ({np.dtype(infos[0].dtype)} rows "
                              f"{infos[0].row_shape})", file=task.source, field=label)
    total = sum(info.rows for info in infos)
    expected = (graph.num_nodes[owner] if section == "node_data"
                else graph.num_edges[EdgeType.parse(owner)])
    if total != expected:
        kind = "nodes" if section == "node_data" else "edges"
        raise FormatError(f"chunks hold {total} rows, the type has {expected} {kind}",
                          file=graph.path(METADATA), field=label)
    if infos and (len(infos[0].row_shape) > 1 or infos[0].dtype not in DGL_DTYPES):
        log.warning("%s (%s, rows %s): DGL's pipeline reads only 1-D/2-D data of %s", label,
                    np.dtype(infos[0].dtype), infos[0].row_shape,
                    ", ".join(sorted(np.dtype(d).name for d in DGL_DTYPES)))


# ----------------------------------------------------------------------------- the job

def _edge_tasks(graph: ChunkedGraph, out: str) -> tuple[dict, list[EdgeChunkTask]]:
    """The export's ``ChunkFiles`` per edge type, and one task per input edge chunk."""
    files, tasks = {}, []
    for et in graph.edge_types:
        source = graph.edges[et]
        rels = tuple(edge_path(et, i) for i in range(len(source.files)))
        files[et] = ChunkFiles(EDGE_FILES, rels, EDGE_DELIMITER)
        limits = (graph.num_nodes[et.src], graph.num_nodes[et.dst])
        tasks += [EdgeChunkTask(graph.path(rel_in), source, os.path.join(out, rel_out), rows,
                                limits, f"edges.{et}.data[{i}]", et)
                  for i, (rel_in, rel_out, rows) in enumerate(
                      zip(source.files, rels, graph.edge_chunks[et]))]
    return files, tasks


def export_dgl_chunked(graph: ChunkedGraph, out: str, runner) -> dict:
    """Write ``graph`` in DGL's chunked format into ``out`` (a fresh folder); the metadata is
    checked by loading it back. Returns counts."""
    edge_files, edge_tasks = _edge_tasks(graph, out)
    fields = list(_data_tasks(graph, out))
    data_tasks = [task for _, _, tasks in fields for task in tasks]
    # Folders are made here, never by a task: one still running after a failed export was
    # cancelled and its output removed would make them again.
    for folder in sorted({os.path.dirname(t.target) for t in edge_tasks + data_tasks}):
        os.makedirs(folder, exist_ok=True)
    results = runner(_export_chunk, edge_tasks + data_tasks, "export dgl-chunked")
    infos = iter(results[len(edge_tasks):])
    node_data, edge_data = {}, {}
    for key, files, tasks in fields:
        _check_field(graph, key, tasks, [next(infos) for _ in tasks])
        section, owner, name = key
        if section == "node_data":
            node_data.setdefault(owner, {})[name] = files
        else:
            edge_data.setdefault(EdgeType.parse(owner), {})[name] = files
    # DGL's format has no keys: they go beside it (keys.json, run_export's _carry_keys)
    exported = dataclasses.replace(graph, root=out, edges=edge_files, node_data=node_data,
                                   edge_data=edge_data, keys={}, vocab={})
    write_json(os.path.join(out, METADATA), exported.to_json())
    load_chunked_graph(out)            # our own reader takes what we wrote (metadata, files)
    return {"root": out, "edges": int(sum(results[:len(edge_tasks)])),
            "edge_chunks": len(edge_tasks), "data_chunks": len(data_tasks)}


def _export_chunk(task: EdgeChunkTask | DataChunkTask):
    """One task of the job: edge and data chunks run together, so no phase idles a core."""
    if isinstance(task, EdgeChunkTask):
        return export_edge_chunk(task)
    return export_data_chunk(task)
