"""``trainer embed``'s results by the user's own keys: beside ``<ntype>/embeddings.npy`` (row
i: node ID i of the chunked graph, whose key is row i of ``keys/<ntype>/by_id/``),
``<ntype>/embeddings.parquet`` with the key column, and for node classification
``<target>/predictions.parquet`` (key, predicted class name or index): joined to the user's
tables by key, never by row position.

Written by rank 0 from the ``.npy`` outputs and the key files ``prep dispatch`` carried
(graph.json ``keys``), one key file's rows at a time: holds one file's keys and rows.
"""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from graphprep.formats.partitioned import PartitionedGraph
from graphprep.formats.storage import join

VECTORS = {"embeddings.npy": "embedding", "input_embeddings.npy": "input_embedding"}


def key_batches(graph: PartitionedGraph, ntype: str):
    """``(first_id, keys)`` per key file of ``ntype``, in ID order (keys as Arrow: int64, or
    strings where every key of the type is UTF-8 text, else bytes: one type for all files).
    Holds one file's keys."""
    spec = graph.keys[ntype]
    text = spec["kind"] == "string" and _all_text(graph, spec["by_id"])
    first = 0
    for rel, rows in zip(spec["by_id"], spec["rows_per_file"]):
        keys = pq.read_table(join(graph.root, rel)).column("key").combine_chunks()
        if spec["kind"] == "string":
            keys = keys.cast(pa.large_string() if text else pa.large_binary())
        yield first, keys
        first += rows


def _all_text(graph: PartitionedGraph, files) -> bool:
    """Whether every key file holds text: Parquet footers say so for string columns; bytes
    columns (graphs chunked before keys were written as text, or keys given as bytes) are
    read once to check that they decode, one file at a time."""
    for rel in files:
        path = join(graph.root, rel)
        dtype = pq.read_schema(path).field("key").type
        if pa.types.is_string(dtype) or pa.types.is_large_string(dtype):
            continue
        try:
            pq.read_table(path).column("key").cast(pa.large_string())
        except pa.ArrowInvalid:
            return False
    return True


def class_names(graph: PartitionedGraph, ntype: str) -> list | None:
    rel = graph.vocab.get(ntype, {}).get("label")
    return pq.read_table(join(graph.root, rel)).column("value").to_pylist() if rel else None


def write_keyed_outputs(graph: PartitionedGraph, folder: str) -> list[str]:
    """Write the Parquet files for every node type with keys and outputs in ``folder``;
    returns their paths relative to ``folder``."""
    written = []
    for t in graph.keys:
        vectors = {name: col for name, col in VECTORS.items()
                   if os.path.exists(os.path.join(folder, t, name))}
        if vectors:
            arrays = {col: np.load(os.path.join(folder, t, name), mmap_mode="r")
                      for name, col in vectors.items()}
            written.append(_write(graph, t, os.path.join(folder, t, "embeddings.parquet"),
                                  lambda a, b: {col: _vectors(x[a:b]) for col, x in
                                                arrays.items()}))
        if os.path.exists(os.path.join(folder, t, "predictions.npy")):
            predicted = np.load(os.path.join(folder, t, "predictions.npy"), mmap_mode="r")
            names = class_names(graph, t)

            def predictions(a, b):
                idx = np.asarray(predicted[a:b])
                out = {"class_index": pa.array(idx)}
                if names is not None:
                    out = {"prediction": pa.array(names).take(pa.array(idx)), **out}
                return out
            written.append(_write(graph, t, os.path.join(folder, t, "predictions.parquet"),
                                  predictions))
    return [os.path.relpath(p, folder) for p in written]


def _vectors(rows: np.ndarray) -> pa.Array:
    rows = np.ascontiguousarray(rows, dtype=np.float32)
    return pa.FixedSizeListArray.from_arrays(pa.array(rows.reshape(-1)), rows.shape[1])


def _write(graph: PartitionedGraph, ntype: str, path: str, columns) -> str:
    writer = None
    try:
        for first, keys in key_batches(graph, ntype):
            table = pa.table({"key": keys, **columns(first, first + len(keys))})
            if writer is None:
                writer = pq.ParquetWriter(path, table.schema)
            writer.write_table(table)
    finally:
        if writer is not None:
            writer.close()
    return path
