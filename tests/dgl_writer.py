"""DGL's chunked-graph writer, vendored: writes a graph in DGL's chunked format exactly as DGL's
own tools do (metadata.json, edge_index/, node_data/, edge_data/). Used by
tests/steps/test_dgl_input.py for its fixtures and by examples/benchmarks/bench_dgl_input.py."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from numpy.lib.format import open_memmap

# A minimal copy of the writer logic of DGL 1.1.3 (identical on master as of 2025-08), from
# dmlc/dgl: tools/distpartitioning/array_readwriter/{parquet,numpy_array,csv}.py (the array
# writers) and tests/tools/pytest_utils.py `_chunk_graph` (DGL CI's generator, a superset of
# tools/chunk_graph.py with edges_fmt and vector_rows). Copyright by the DGL authors, Apache
# License 2.0. Changes: no pandas (DGL's `pa.Table.from_pandas(pd.DataFrame(a))` is built
# directly as columns "0", "1", ...: the schema metadata is replaced by {"shape": ...} in DGL
# anyway); the paths and metadata are the same. Checked once byte for byte against DGL's own
# writers run with pandas (Parquet plain, shape and vector-rows files; CSV; .npy).


def dgl_write_numpy(path, arr):
    """NumpyArrayParser.write: an open_memmap'd .npy."""
    out = open_memmap(path, mode="w+", dtype=arr.dtype, shape=arr.shape)
    out[:] = arr[:]
    out.flush()
    del out


def _frame_columns(arr) -> pa.Table:
    """``pa.Table.from_pandas(pd.DataFrame(arr))`` for a 1-D or 2-D array: columns "0".."k-1"."""
    cols = arr.reshape(len(arr), -1) if arr.ndim == 1 else arr
    return pa.table({str(j): cols[:, j] for j in range(cols.shape[1])})


def dgl_write_parquet(path, array, vector_rows=False):
    """ParquetArrayParser.write: >2-D arrays flattened to 2-D; list rows, or one column per
    value with the true shape in the schema metadata."""
    shape = array.shape
    if len(shape) > 2:
        array = array.reshape(shape[0], -1)
    if vector_rows:
        table = pa.table([pa.array(array.tolist())], names=["vector"])
    else:
        table = _frame_columns(array).replace_schema_metadata({"shape": str(shape)})
    pq.write_table(table, path)


def dgl_write_csv(path, arr, delimiter=" "):
    """CSVArrayParser.write: headerless CSV (0 rows: a 0-byte file)."""
    pacsv.write_csv(_frame_columns(arr), path,
                    write_options=pacsv.WriteOptions(include_header=False, delimiter=delimiter))


def dgl_chunk_sizes(n, k):
    """How DGL cuts n rows into k chunks."""
    return [n // k + (i < n % k) for i in range(k)]


def dgl_chunk_array(arr, fmt, sizes, path_fmt, vector_rows=False):
    """_chunk_numpy_array: one file per chunk, absolute paths."""
    paths, offset = [], 0
    for j, n in enumerate(sizes):
        path = os.path.abspath(path_fmt % j)
        chunk = arr[offset:offset + n]
        if fmt["name"] == "parquet":
            dgl_write_parquet(path, chunk, vector_rows and chunk.ndim > 1 and chunk.shape[1] > 1)
        elif fmt["name"] == "csv":
            dgl_write_csv(path, chunk, fmt["delimiter"])
        else:
            dgl_write_numpy(path, chunk)
        offset += n
        paths.append(path)
    return paths


def dgl_chunk_graph(graph, out, num_chunks, data_fmt="numpy", edges_fmt="csv",
                    vector_rows=False):
    """_chunk_graph of DGL's CI generator for ``graph`` into folder ``out`` (a Path). ``graph``:
    {"ntypes": [...], "etypes": [(src, rel, dst), ...] (DGL's order), "num_nodes": {ntype: n},
    "edges": {etype: int64 [E, 2]}, "ndata": {ntype: {name: array}}, "edata": {etype:
    {name: array}}} (see ``source_graph`` in tests/steps/test_dgl_input.py)."""
    ntypes, etypes = graph["ntypes"], graph["etypes"]
    meta = {"graph_name": "mag240m", "node_type": ntypes,
            "num_nodes_per_type": [graph["num_nodes"][t] for t in ntypes],
            "num_nodes_per_chunk": [dgl_chunk_sizes(graph["num_nodes"][t], num_chunks)
                                    for t in ntypes],
            "edge_type": [":".join(et) for et in etypes],
            "num_edges_per_type": [len(graph["edges"][et]) for et in etypes],
            "num_edges_per_chunk": [dgl_chunk_sizes(len(graph["edges"][et]), num_chunks)
                                    for et in etypes],
            "edges": {}, "node_data": {}, "edge_data": {}}
    fmt = {"name": "csv", "delimiter": " "} if edges_fmt == "csv" else {"name": "parquet"}
    suffix = "npy" if data_fmt == "numpy" else "parquet"
    os.makedirs(out / "edge_index")
    for et in etypes:
        name = ":".join(et)
        meta["edges"][name] = {"format": fmt, "data": dgl_chunk_array(
            graph["edges"][et], fmt, dgl_chunk_sizes(len(graph["edges"][et]), num_chunks),
            str(out / "edge_index" / f"{name}%d.txt"))}
    for section, owners, count in (("node_data", graph["ndata"], graph["num_nodes"].get),
                                   ("edge_data", graph["edata"],
                                    lambda et: len(graph["edges"][et]))):
        for owner, fields in owners.items():
            key = owner if isinstance(owner, str) else ":".join(owner)
            folder = out / section / key
            os.makedirs(folder)
            meta[section][key] = {name: {"format": {"name": data_fmt}, "data": dgl_chunk_array(
                arr, {"name": data_fmt}, dgl_chunk_sizes(count(owner), num_chunks),
                str(folder / f"{name}-%d.{suffix}"), vector_rows)}
                for name, arr in fields.items()}
    (out / "metadata.json").write_text(json.dumps(meta, sort_keys=True, indent=4))
    return out
