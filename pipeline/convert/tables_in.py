"""Tables in: node and edge tables keyed by any key type (``prep chunk CONFIG.yaml OUT``, or
a keyed edge list) -> a :class:`SourceGraph` of IDs with node and edge data.

Steps, each a Dask job over parts (about a chunk of rows each) or key buckets:

1. keys mapped out of core (``graphprep.pipeline.keys``): IDs, maps under ``OUT/keys/``, edges as IDs;
2. vocabularies of categorical and label columns (``graphprep.pipeline.tables.columns``), saved under
   ``OUT/vocab/<type>/<field>.parquet``;
3. each part's fields encoded as ``.npy`` in the staging folder, read by the generic writer.
"""

from __future__ import annotations

import logging
import os
import tempfile
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from graphprep.formats import ChunkFiles, EdgeType, FormatError
from graphprep.formats.output import save_npy, write_array_chunk, writing
from graphprep.formats.sparse import CsrRows
from graphprep.pipeline.keys.job import EdgeTable, MappedKeys, NodeTable, map_keys
from graphprep.pipeline.split_edges import SplitSpec as EdgeSplit
from graphprep.pipeline.tables.columns import (EncodeTask, VocabTask, encode_part, field_file,
                                               merge_vocabularies, part_vocabulary)
from graphprep.pipeline.tables.config import Fields, FieldSpec, JsonOptions, TablesConfig
from graphprep.pipeline.tables.parts import (JsonStageTask, csv_format, input_files, is_json,
                                             is_parquet, json_lines_parts, json_shape, stage_json,
                                             staged_json_parts, table_parts, with_columns)
from graphprep.pipeline.convert.options import ChunkOptions
from graphprep.formats.fields import ChunkedArray
from graphprep.pipeline.convert.sources import (ArrayEdges, EdgeSource, JoinedPart, JoinedRows,
                                                NpyArray, SourceGraph)

log = logging.getLogger(__name__)


def read_parts(files, key_columns: tuple[str, ...], fields: Fields, csv, chunk_size: int,
               json=None, staging: str = "", runner=None, owner: str = "table"):
    """Parts of every file of a table, reading its key columns and field columns. JSON
    arrays and objects (``json``: :class:`JsonOptions`) are first parsed by one task per file
    into Parquet copies under ``staging`` (``runner`` runs them, None: here; ``owner`` names
    the copies; no ``staging``: a new temporary folder, left for the caller to remove)."""
    columns = tuple(dict.fromkeys(key_columns + fields.columns))
    paths = input_files(list(files))
    json = json or JsonOptions()
    if not staging and any(is_json(p) for p in paths):
        staging = tempfile.mkdtemp(prefix="graphprep-json-")
    staged = {}
    stage = [JsonStageTask(p, shape, json.keys_as, json.values_as,
                           os.path.join(staging, "json", f"{owner}-{i:05d}.parquet"),
                           chunk_size, columns)
             for i, p in enumerate(paths) if is_json(p)
             for shape in [json_shape(p, json.shape)] if shape != "lines"]
    if stage:
        if runner is None:
            list(map(stage_json, stage))
        else:
            runner(stage_json, stage, "tables: parse JSON")
        staged = {t.path: t.target for t in stage}
    parts = []
    for path in paths:
        if path in staged:
            parts += staged_json_parts(path, staged[path], columns, chunk_size)
        elif is_json(path):
            parts += json_lines_parts(path, columns, chunk_size)
        else:
            fmt = None if is_parquet(path) else csv_format(
                path, columns, delimiter=csv.delimiter, header=csv.header, names=csv.names)
            parts += table_parts(path, columns, chunk_size, fmt)
    return parts


def from_config(config: TablesConfig, opts: ChunkOptions, out: str, staging: str,
                runner, nan_policy: str = "error") -> SourceGraph:
    """The :class:`SourceGraph` of a tables config, keys mapped and fields encoded
    (``nan_policy`` error: a NaN/inf feature names its table's file, column and row)."""
    nodes, node_fields, joins = [], {}, []
    for i, spec in enumerate(config.nodes):
        parts = read_parts(spec.files, (spec.key,), spec.data, spec.csv, opts.chunk_size,
                           spec.json, staging, runner, f"n{i}-{spec.ntype}")
        if spec.ntype in node_fields:       # more columns of the type's nodes, by key
            joins.append((EdgeTable(EdgeType(spec.ntype, f"join-{i}", spec.ntype),
                                    tuple(parts), spec.key, spec.key), spec.data))
            continue
        nodes.append(NodeTable(spec.ntype, tuple(parts), spec.key))
        node_fields[spec.ntype] = spec.data
    edges, edge_fields = [], {}
    for spec in config.edges:
        parts = read_parts(spec.files, (spec.src, spec.dst), spec.data, spec.csv,
                           opts.chunk_size, spec.json, staging, runner, f"e-{spec.etype.dirname}")
        edges.append(EdgeTable(spec.etype, tuple(parts), spec.src, spec.dst))
        edge_fields[spec.etype] = spec.data
    source = tables_source(config.name, nodes, node_fields, edges, edge_fields,
                           config.dangling or opts.dangling, out, staging, runner,
                           (config.path,) + tuple(f for s in config.nodes + config.edges
                                                  for f in s.files), nan_policy, joins)
    return replace(source, reverse={s.etype: s.reverse_type for s in config.edges
                                    if s.reverse})


def tables_source(name: str, nodes: list[NodeTable], node_fields: dict[str, Fields],
                  edges: list[EdgeTable], edge_fields: dict[EdgeType, Fields], dangling: str,
                  out: str, staging: str, runner, inputs: tuple[str, ...],
                  nan_policy: str = "error", joins=()) -> SourceGraph:
    """Map keys, encode fields, and describe the result as a :class:`SourceGraph` (with the
    dangling mode and its counts, recorded in the graph's metadata). ``joins``: ``(table,
    fields)`` of tables joined to a node type by key, each given as an edge table from the
    type to itself whose src and dst are the key column (so its keys are looked up as an
    edge's are: IDs per row, a key the type lacks as ``dangling`` says)."""
    keyed_nodes = [NodeTable(t.ntype, tuple(with_columns(p, (t.key,)) for p in t.parts), t.key)
                   for t in nodes]
    keyed_edges = [EdgeTable(e.etype, tuple(with_columns(p, tuple(dict.fromkeys((e.src, e.dst))))
                                            for p in e.parts), e.src, e.dst)
                   for e in list(edges) + [j for j, _ in joins]]
    mapped = map_keys(keyed_nodes, keyed_edges, out, staging, runner, dangling)
    vocab = _vocabularies(nodes, node_fields, edges, edge_fields, out, runner, joins, mapped)
    node_fields = {t: _inferred_dims(f, vocab.get(t, {})) for t, f in node_fields.items()}
    joins = [(j, _inferred_dims(f, vocab.get(j.etype.src, {}))) for j, f in joins]
    node_data = _node_data(nodes, node_fields, vocab, mapped, staging, runner, nan_policy)
    for ntype, fields in _joined_data(joins, vocab, mapped, staging, runner, nan_policy):
        node_data.setdefault(ntype, {}).update(fields)
    edge_sources = _edge_sources(edges, edge_fields, vocab, mapped, staging, runner,
                                 nan_policy)
    node_types = tuple(dict.fromkeys([t.ntype for t in nodes] +
                                     [n for e in edges for n in (e.etype.src, e.etype.dst)]))
    return SourceGraph(name, node_types, dict(mapped.num_nodes), tuple(edge_sources),
                       node_data, inputs=inputs, keys=dict(mapped.maps),
                       vocab={owner: {f: rel for f, (rel, _) in d.items()}
                              for owner, d in vocab.items()},
                       dangling=dangling, added_nodes=dict(mapped.added_nodes),
                       dropped_edges={et: n for et, n in mapped.dropped_edges.items()
                                      if n and et in {e.etype for e in edges}})


def _category_fields(fields: Fields) -> tuple[FieldSpec, ...]:
    """The fields the vocabulary pass reads: categorical, label, and sparse fields whose
    width is the largest index + 1."""
    return tuple(f for f in fields.fields if f.kind in ("categorical", "label")
                 or (f.kind == "sparse" and not f.dim))


def _inferred_dims(fields: Fields, vocab: dict) -> Fields:
    """``fields`` with each sparse field of unknown width given the width the vocabulary
    pass found (popped from ``vocab``: it is no vocabulary)."""
    out = []
    for f in fields.fields:
        if f.kind == "sparse" and not f.dim:
            f = replace(f, dim=vocab.pop(f.name)[1][0])
            log.info("sparse field %s: dim %d (the largest index + 1)", f.name, f.dim)
        out.append(f)
    return replace(fields, fields=tuple(out))


def _vocabularies(nodes, node_fields, edges, edge_fields, out, runner, joins=(),
                  mapped: MappedKeys | None = None):
    """``{owner: {field: (relpath, values)}}`` for every categorical and label field (and
    ``("", (dim,))`` for sparse fields of unknown width). ``mapped``: where each part's rows
    start in its file, for errors."""
    def rows(key, table):
        found = (getattr(mapped, table).get(key) or []) if mapped is not None else []
        return [r.first_row for r in found]
    owners = [(t.ntype, t.parts, node_fields[t.ntype], rows(t.ntype, "tables")) for t in nodes]
    owners += [(str(e.etype), e.parts, edge_fields.get(e.etype, Fields()),
                rows(e.etype, "edges")) for e in edges]
    owners += [(j.etype.src, j.parts, fields, rows(j.etype, "edges")) for j, fields in joins]
    tasks, spans = [], []
    for owner, parts, fields, first_rows in owners:
        cat = _category_fields(fields)
        if cat:
            spans.append((owner, cat, len(tasks), len(tasks) + len(parts)))
            first_rows = first_rows if len(first_rows) == len(parts) else [0] * len(parts)
            tasks += [VocabTask(p, cat, r) for p, r in zip(parts, first_rows)]
    if not tasks:
        return {}
    found = runner(part_vocabulary, tasks, "tables: vocabularies")
    vocab = {}
    for owner, cat, lo, hi in spans:
        merged = merge_vocabularies(found[lo:hi], cat, [t.part.path for t in tasks[lo:hi]])
        for f, values in zip(cat, merged):
            if f.kind == "sparse":
                vocab.setdefault(owner, {})[f.name] = ("", tuple(values))
                continue
            rel = f"vocab/{owner.replace(':', '__')}/{f.name}.parquet"
            path = os.path.join(out, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with writing(path):
                pq.write_table(pa.table({"value": pa.array(values)}), path)
            vocab.setdefault(owner, {})[f.name] = (rel, tuple(values))
    return vocab


def _encode_tasks(parts, fields: Fields, vocab: dict, where: list, target: str, split_of,
                  nan_policy: str = "error"):
    """One :class:`EncodeTask` per part; ``where[i]``: (first_row, first_id, keep)."""
    return [EncodeTask(with_columns(p, fields.columns), fields.fields,
                       tuple(vocab.get(f.name, ("", ()))[1] for f in fields.fields),
                       split_of, first_id, first_row, keep, f"{target}-{i:05d}",
                       nan_policy=nan_policy)
            for i, (p, (first_row, first_id, keep)) in enumerate(zip(parts, where))]


def _check_widths(tasks, name: str, fields: Fields) -> None:
    """Every part's ``name`` rows as wide as the first non-empty part's (a feature list or
    column count that differs between files), read from the staged headers; raises
    :class:`FormatError` naming the part's file and column."""
    ref = None
    for task in tasks:
        arr = np.load(f"{task.target}.{name}.npy", mmap_mode="r")
        if not len(arr):
            continue
        if ref is None:
            ref = (arr.shape[1:], task.part.path)
        elif arr.shape[1:] != ref[0]:
            spec = next((f for f in fields.fields if f.name == name), None)
            raise FormatError(f"field {name!r} has rows of shape {arr.shape[1:]} here, "
                              f"{ref[0]} in {ref[1]}: a feature must have one width in every "
                              f"file", file=task.part.path,
                              field=spec.columns[-1] if spec else name)


def _node_data(nodes, node_fields, vocab, mapped: MappedKeys, staging, runner,
               nan_policy: str = "error"):
    """``{ntype: {field: ArraySource}}``: each part's encoded rows, then fill rows for the
    keys that only edges named (``--dangling add``)."""
    out, tasks, owners = {}, [], []
    for t in nodes:
        fields = node_fields[t.ntype]
        if not fields.names:
            continue
        where = [(r.first_row, r.first_id, "") for r in mapped.tables[t.ntype]]
        mine = _encode_tasks(t.parts, fields, vocab.get(t.ntype, {}), where,
                             os.path.join(staging, "fields", "n-" + t.ntype), fields.split,
                             nan_policy)
        owners.append((t.ntype, fields, mine))
        tasks += mine
    rows = iter(runner(encode_part, tasks, "tables: encode node columns") if tasks else [])
    for ntype, fields, mine in owners:
        counts = [next(rows) for _ in mine]
        extra = mapped.num_nodes[ntype] - sum(counts)
        dims = {f.name: f.dim for f in fields.fields if f.kind == "sparse"}
        for name in fields.names:
            dim = dims.get(name, 0)
            if not dim:
                _check_widths(mine, name, fields)
            files = [field_file(task.target, name, bool(dim)) for task in mine]
            if extra:
                files.append(_fill(files[0], extra, dim))
            out.setdefault(ntype, {})[name] = ChunkedArray(
                files[0], staging, ChunkFiles("csr" if dim else "numpy",
                                              tuple(os.path.relpath(f, staging) for f in files),
                                              dim=dim),
                tuple(counts + ([extra] if extra else [])))
    return out


def _joined_data(joins, vocab, mapped: MappedKeys, staging, runner, nan_policy):
    """``(ntype, {field: JoinedRows})`` per joined table: its parts' fields encoded in their
    rows' order (rows whose key was dropped left out), gathered by node ID when written."""
    tasks, owners = [], []
    for j, fields in joins:
        translated = mapped.edges.pop(j.etype, [])
        if not fields.names:
            continue
        where = [(p.first_row, -1, p.keep) for p in translated]
        mine = _encode_tasks(j.parts, fields, vocab.get(j.etype.src, {}), where,
                             os.path.join(staging, "fields", "j-" + j.etype.dirname), None,
                             nan_policy)
        owners.append((j, fields, translated, mine))
        tasks += mine
    if tasks:
        runner(encode_part, tasks, "tables: encode joined columns")
    out = []
    for j, fields, translated, mine in owners:
        ntype, data = j.etype.src, {}
        dims = {f.name: f.dim for f in fields.fields if f.kind == "sparse"}
        for name in fields.names:
            dim = dims.get(name, 0)
            if not dim:
                _check_widths(mine, name, fields)
            parts = []
            for part, task in zip(translated, mine):
                ids = np.load(part.prefix + ".src.npy", mmap_mode="r")
                if len(ids):
                    parts.append(JoinedPart(part.prefix + ".src.npy",
                                            field_file(task.target, name, bool(dim)),
                                            int(ids.min()), int(ids.max()), task.part.path,
                                            part.first_row, part.keep))
            like = next((p.rows for p in parts), "")
            sample = np.load(like, mmap_mode="r") if like and not dim else None
            data[name] = JoinedRows(like or j.parts[0].path, mapped.num_nodes[ntype],
                                    tuple(parts), ChunkFiles("csr" if dim else "numpy", (),
                                                             dim=dim),
                                    str(sample.dtype) if sample is not None else _dtype(
                                        fields, name), tuple(sample.shape[1:]) if sample
                                    is not None else _row_shape(fields, name))
        out.append((ntype, data))
    return out


def _dtype(fields: Fields, name: str) -> str:
    """A field's dtype when no row gives it (a joined table of no rows)."""
    if name.endswith("_mask"):
        return "bool"
    spec = next(f for f in fields.fields if f.name == name)
    return "float32" if spec.kind == "feature" or spec.one_hot else "int64"


def _row_shape(fields: Fields, name: str) -> tuple[int, ...]:
    spec = next((f for f in fields.fields if f.name == name), None)
    return (len(spec.columns),) if spec is not None and spec.kind == "feature" else ()


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


def _edge_sources(edges, edge_fields, vocab, mapped: MappedKeys, staging, runner,
                  nan_policy: str = "error"):
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
                              None, nan_policy), translated)]
            tasks += mine
        owners.append((e, fields, translated, mine))
    if tasks:
        runner(encode_part, tasks, "tables: encode edge columns")
    sources = []
    for e, fields, translated, mine in owners:
        names = fields.names
        for f in fields.fields:
            _check_widths(mine, f.name, fields)
        if names and not sum(part.rows for part in translated):
            # No edges (header-only files): no chunks, so no data chunks to list either.
            log.info("edge type %s has no edges: its fields %s hold nothing", e.etype, names)
            names = ()
        parts = [ArrayEdges(part.prefix, src=NpyArray.open(part.prefix + ".src.npy"),
                            dst=NpyArray.open(part.prefix + ".dst.npy"),
                            data=tuple((name, NpyArray.open(f"{task.target}.{name}.npy"))
                                       for name in names), start=0, stop=part.rows)
                 for part, task in zip(translated, mine or [None] * len(translated))]
        sources.append(EdgeSource(e.etype, tuple(parts), names))
    return sources
