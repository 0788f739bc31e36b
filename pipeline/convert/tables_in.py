"""Tables in: node and edge tables keyed by any key type (``prep chunk CONFIG.yaml OUT``, or
a keyed edge list) -> a :class:`SourceGraph` of IDs with node and edge data.

Steps, each a Dask job over parts (about a chunk of rows each) or key buckets:

1. keys mapped out of core (``pipeline.keys``): IDs, maps under ``OUT/keys/``, edges as IDs;
2. vocabularies of categorical and label columns (``pipeline.tables.columns``), saved under
   ``OUT/vocab/<type>/<field>.parquet``;
3. each part's fields encoded as ``.npy`` in the staging folder, read by the generic writer.
"""

from __future__ import annotations

import os
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from formats import ChunkFiles, EdgeType
from formats.output import save_npy, write_array_chunk, writing
from formats.sparse import CsrRows
from ..keys.job import EdgeTable, MappedKeys, NodeTable, map_keys
from ..split_edges import SplitSpec as EdgeSplit
from ..tables.columns import (EncodeTask, VocabTask, encode_part, field_file, merge_vocabularies,
                              part_vocabulary)
from ..tables.config import Fields, FieldSpec, TablesConfig
from ..tables.parts import csv_format, input_files, is_parquet, table_parts, with_columns
from .options import ChunkOptions
from .sources import ArrayEdges, ChunkedArray, EdgeSource, NpyArray, SourceGraph


def read_parts(files, key_columns: tuple[str, ...], fields: Fields, csv, chunk_size: int):
    """Parts of every file of a table, reading its key columns and field columns."""
    columns = tuple(dict.fromkeys(key_columns + fields.columns))
    parts = []
    for path in input_files(list(files)):
        fmt = None if is_parquet(path) else csv_format(path, columns, delimiter=csv.delimiter,
                                                       header=csv.header)
        parts += table_parts(path, columns, chunk_size, fmt)
    return parts


def from_config(config: TablesConfig, opts: ChunkOptions, out: str, staging: str,
                runner) -> SourceGraph:
    """The :class:`SourceGraph` of a tables config, keys mapped and fields encoded."""
    nodes, node_fields = [], {}
    for spec in config.nodes:
        parts = read_parts(spec.files, (spec.key,), spec.data, spec.csv, opts.chunk_size)
        nodes.append(NodeTable(spec.ntype, tuple(parts), spec.key))
        node_fields[spec.ntype] = spec.data
    edges, edge_fields = [], {}
    for spec in config.edges:
        parts = read_parts(spec.files, (spec.src, spec.dst), spec.data, spec.csv,
                           opts.chunk_size)
        edges.append(EdgeTable(spec.etype, tuple(parts), spec.src, spec.dst))
        edge_fields[spec.etype] = spec.data
    return tables_source(config.name, nodes, node_fields, edges, edge_fields,
                         config.dangling or opts.dangling, out, staging, runner,
                         (config.path,) + tuple(f for s in config.nodes + config.edges
                                                for f in s.files))


def tables_source(name: str, nodes: list[NodeTable], node_fields: dict[str, Fields],
                  edges: list[EdgeTable], edge_fields: dict[EdgeType, Fields], dangling: str,
                  out: str, staging: str, runner, inputs: tuple[str, ...]) -> SourceGraph:
    """Map keys, encode fields, and describe the result as a :class:`SourceGraph`."""
    keyed_nodes = [NodeTable(t.ntype, tuple(with_columns(p, (t.key,)) for p in t.parts), t.key)
                   for t in nodes]
    keyed_edges = [EdgeTable(e.etype, tuple(with_columns(p, (e.src, e.dst)) for p in e.parts),
                             e.src, e.dst) for e in edges]
    mapped = map_keys(keyed_nodes, keyed_edges, out, staging, runner, dangling)
    vocab = _vocabularies(nodes, node_fields, edges, edge_fields, out, runner)
    node_data = _node_data(nodes, node_fields, vocab, mapped, staging, runner)
    edge_sources = _edge_sources(edges, edge_fields, vocab, mapped, staging, runner)
    node_types = tuple(dict.fromkeys([t.ntype for t in nodes] +
                                     [n for e in edges for n in (e.etype.src, e.etype.dst)]))
    return SourceGraph(name, node_types, dict(mapped.num_nodes), tuple(edge_sources),
                       node_data, inputs=inputs, keys=dict(mapped.maps),
                       vocab={owner: {f: rel for f, (rel, _) in d.items()}
                              for owner, d in vocab.items()})


def _category_fields(fields: Fields) -> tuple[FieldSpec, ...]:
    return tuple(f for f in fields.fields if f.kind in ("categorical", "label"))


def _vocabularies(nodes, node_fields, edges, edge_fields, out, runner):
    """``{owner: {field: (relpath, values)}}`` for every categorical and label field."""
    owners = [(t.ntype, t.parts, node_fields[t.ntype]) for t in nodes]
    owners += [(str(e.etype), e.parts, edge_fields.get(e.etype, Fields())) for e in edges]
    tasks, spans = [], []
    for owner, parts, fields in owners:
        cat = _category_fields(fields)
        if cat:
            spans.append((owner, cat, len(tasks), len(tasks) + len(parts)))
            tasks += [VocabTask(p, cat) for p in parts]
    if not tasks:
        return {}
    found = runner(part_vocabulary, tasks, "tables: vocabularies")
    vocab = {}
    for owner, cat, lo, hi in spans:
        merged = merge_vocabularies(found[lo:hi], cat)
        for f, values in zip(cat, merged):
            rel = f"vocab/{owner.replace(':', '__')}/{f.name}.parquet"
            path = os.path.join(out, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with writing(path):
                pq.write_table(pa.table({"value": pa.array(values)}), path)
            vocab.setdefault(owner, {})[f.name] = (rel, tuple(values))
    return vocab


def _encode_tasks(parts, fields: Fields, vocab: dict, where: list, target: str, split_of):
    """One :class:`EncodeTask` per part; ``where[i]``: (first_row, first_id, keep)."""
    return [EncodeTask(with_columns(p, fields.columns), fields.fields,
                       tuple(vocab.get(f.name, ("", ()))[1] for f in fields.fields),
                       split_of, first_id, first_row, keep, f"{target}-{i:05d}")
            for i, (p, (first_row, first_id, keep)) in enumerate(zip(parts, where))]


def _node_data(nodes, node_fields, vocab, mapped: MappedKeys, staging, runner):
    """``{ntype: {field: ArraySource}}``: each part's encoded rows, then fill rows for the
    keys that only edges named (``--dangling add``)."""
    out, tasks, owners = {}, [], []
    for t in nodes:
        fields = node_fields[t.ntype]
        if not fields.names:
            continue
        where = [(r.first_row, r.first_id, "") for r in mapped.tables[t.ntype]]
        mine = _encode_tasks(t.parts, fields, vocab.get(t.ntype, {}), where,
                             os.path.join(staging, "fields", "n-" + t.ntype), fields.split)
        owners.append((t.ntype, fields, mine))
        tasks += mine
    rows = iter(runner(encode_part, tasks, "tables: encode node columns") if tasks else [])
    for ntype, fields, mine in owners:
        counts = [next(rows) for _ in mine]
        extra = mapped.num_nodes[ntype] - sum(counts)
        dims = {f.name: f.dim for f in fields.fields if f.kind == "sparse"}
        for name in fields.names:
            dim = dims.get(name, 0)
            files = [field_file(task.target, name, bool(dim)) for task in mine]
            if extra:
                files.append(_fill(files[0], extra, dim))
            out.setdefault(ntype, {})[name] = ChunkedArray(
                files[0], staging, ChunkFiles("csr" if dim else "numpy",
                                              tuple(os.path.relpath(f, staging) for f in files),
                                              dim=dim),
                tuple(counts + ([extra] if extra else [])))
    return out


def _fill(like: str, rows: int, csr_dim: int = 0) -> str:
    """Rows for added nodes, shaped like ``like``'s: 0 features (sparse: no entries), label
    -1, masks False."""
    if csr_dim:
        path = like[:-len(".parquet")] + ".added.parquet"
        write_array_chunk(path, CsrRows(np.zeros(rows + 1, np.int64), np.empty(0, np.int32),
                                        np.empty(0, np.float32), csr_dim))
        return path
    sample = np.load(like, mmap_mode="r")
    fill = -1 if sample.dtype.kind == "i" else 0
    path = like[:-4] + ".added.npy"
    save_npy(path, np.full((rows,) + sample.shape[1:], fill, dtype=sample.dtype))
    return path


def _edge_sources(edges, edge_fields, vocab, mapped: MappedKeys, staging, runner):
    """One :class:`EdgeSource` per edge table: its parts as IDs, with their encoded fields
    and split masks (as ``prep split-edges`` draws them: by endpoints, for any chunking)."""
    tasks, owners = [], []
    for e in edges:
        fields = edge_fields.get(e.etype, Fields())
        translated = mapped.edges.get(e.etype, [])
        mine = []
        if fields.names:
            split = None
            if fields.split is not None:
                _, val, test = fields.split.fractions
                split = EdgeSplit(e.etype, val, test, fields.split.seed)
            where = [(p.first_row, -1, p.keep) for p in translated]
            mine = [replace(task, edge_split=split, ids=part.prefix) for task, part in zip(
                _encode_tasks(e.parts, Fields(fields.fields), vocab.get(str(e.etype), {}),
                              where, os.path.join(staging, "fields", "e-" + e.etype.dirname),
                              None), translated)]
            tasks += mine
        owners.append((e, fields, translated, mine))
    if tasks:
        runner(encode_part, tasks, "tables: encode edge columns")
    sources = []
    for e, fields, translated, mine in owners:
        names = fields.names
        parts = [ArrayEdges(part.prefix, src=NpyArray.open(part.prefix + ".src.npy"),
                            dst=NpyArray.open(part.prefix + ".dst.npy"),
                            data=tuple((name, NpyArray.open(f"{task.target}.{name}.npy"))
                                       for name in names), start=0, stop=part.rows)
                 for part, task in zip(translated, mine or [None] * len(translated))]
        sources.append(EdgeSource(e.etype, tuple(parts), names))
    return sources
