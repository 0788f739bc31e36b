"""``prep inspect PATH``: what one of graphprep's folders or files holds, from metadata only.

Four kinds (``formats/FORMATS.md``): a chunked graph (``metadata.json``, §1), a partition
assignment (``partition_meta.json``, §2), a partitioned graph (``graph.json`` and its part
folders, §3) and a trainer metrics file (``--metrics-out``, §4). Each describer returns a plain
dict, JSON-ready with stable keys and ``"kind"``; :func:`render_text` turns it into aligned
tables. Nothing here reads an edge chunk or a data array: counts come from the metadata, dtypes
and shapes from ``.npy`` headers and Parquet footers (first chunk of a field only; a sparse
field's stored entries from every chunk's footer), sizes from ``stat``. The cost is one
``stat`` per file, so a 10^9-edge graph is described in well under a second. No torch, no
Dask.
"""

from __future__ import annotations

import json
import math
import os
import re

import numpy as np

from graphprep.formats import FormatError, load_chunked_graph
from graphprep.formats.assignment import META as ASSIGNMENT_META
from graphprep.formats.assignment import load_assignment
from graphprep.formats.integrity import PART_JSON
from graphprep.formats.npyio import read_npy_header
from graphprep.formats.output import MANIFEST, side_paths
from graphprep.formats.partitioned import GRAPH_JSON, load_partitioned
from graphprep.formats.schema import METADATA, ChunkFiles
from graphprep.formats.storage import exists, is_url, join, open_file, read_text, size
from graphprep.pipeline.workload import made_with, work_warnings

KINDS = ("chunked", "assignment", "partitioned", "metrics")
EXPECTED = ("a chunked graph folder (metadata.json), a partition assignment folder "
            "(partition_meta.json), a partitioned graph (graph.json or its folder) or a "
            "trainer metrics file (--metrics-out JSON with config, epochs, summary)")
# loss and the split metrics (train_acc, val_auc, test_hits@50, final_test_acc...), not the
# work counts beside them (halo_cache_hits, sampled_edges)
METRIC_KEY = re.compile(r"^(loss|(final_)?(train|val|test)_(acc|auc|mrr|hits@\d+))$")


# ---------------------------------------------------------------- kind detection

def detect_kind(path: str) -> tuple[str, str]:
    """Which kind ``path`` is: ``(kind, path to describe)`` with kind one of :data:`KINDS`.

    Takes a local path or URL (a folder, or ``metadata.json`` / ``partition_meta.json`` /
    ``graph.json`` / a metrics JSON file). Looks only at file names, except for a ``.json``
    file other than those three, which is parsed (small: a metrics or graph.json file). Raises
    :class:`FormatError` naming ``path`` and what was expected for anything else.
    """
    url = is_url(path)
    if not exists(path):
        raise FormatError(_missing_hint(path), file=path)
    name = path.rstrip("/").rsplit("/", 1)[-1]
    is_dir = (not url and os.path.isdir(path)) or (url and not name.endswith(".json"))
    if is_dir:
        for marker, kind in ((METADATA, "chunked"), (GRAPH_JSON, "partitioned"),
                             (ASSIGNMENT_META, "assignment")):
            if exists(join(path, marker)):
                return kind, path
        if not url and _looks_like_unfinished_dispatch(path):
            raise FormatError("graph.json is missing: an unfinished or interrupted dispatch "
                              "(graph.json is written last; rerun the same prep dispatch to "
                              "finish it)", file=path)
        raise FormatError(f"not a graphprep folder: expected {EXPECTED}", file=path)
    parent = path[:-len(name)].rstrip("/") or "."
    if name == METADATA:
        return "chunked", parent
    if name == ASSIGNMENT_META:
        return "assignment", parent
    if name.endswith(".json"):
        obj = _read_json(path)
        if isinstance(obj, dict) and "node_map" in obj and "parts" in obj:
            return "partitioned", path
        if isinstance(obj, dict) and "epochs" in obj and "summary" in obj:
            return "metrics", path
        if name == MANIFEST:
            raise FormatError("a step's run manifest: inspect the folder that holds it",
                              file=path)
    if name.endswith((".pt", ".pth")):
        raise FormatError(f"a torch file (trainer checkpoint or PyG data), which prep does not "
                          f"read: expected {EXPECTED}", file=path)
    raise FormatError(f"not a file graphprep describes: expected {EXPECTED}", file=path)


def _missing_hint(path: str) -> str:
    if not is_url(path):
        partial, old = side_paths(path)
        if os.path.exists(partial):
            return (f"no such file or folder; {os.path.basename(partial)} beside it holds an "
                    "unfinished run's output (rerun the step to finish it)")
        if os.path.exists(old):
            return (f"no such file or folder; {os.path.basename(old)} beside it holds the "
                    "previous output of an interrupted replacement (rerun the step)")
    return "no such file or folder"


def _looks_like_unfinished_dispatch(folder: str) -> bool:
    try:
        names = os.listdir(folder)
    except OSError:
        return False
    return ".work" in names or any(n.startswith("part-") for n in names)


def _read_json(path: str):
    try:
        return json.loads(read_text(path))
    except json.JSONDecodeError as err:
        raise FormatError(f"invalid JSON: {err.msg} (line {err.lineno}, column {err.colno})",
                          file=path) from None
    except UnicodeDecodeError:
        raise FormatError(f"not a text file: expected {EXPECTED}", file=path) from None


def describe(path: str) -> dict:
    """Describe whatever ``path`` holds (see :func:`detect_kind`): the dict of the matching
    describer. Holds the metadata only (metadata.json / partition_meta.json / graph.json /
    the metrics file, plus per-file sizes)."""
    kind, target = detect_kind(path)
    return {"chunked": describe_chunked, "assignment": describe_assignment,
            "partitioned": describe_partitioned, "metrics": describe_metrics}[kind](target)


# ---------------------------------------------------------------- shared helpers

def _abs(path: str) -> str:
    return path if is_url(path) else os.path.abspath(path)


def _manifest_summary(folder: str) -> dict | None:
    """The step manifest beside an output (``manifest.json``), reduced to what says how it was
    made: step, graphprep version, seed, inputs, options. None when absent (DGL's files)."""
    path = join(folder, MANIFEST)
    if not exists(path):
        return None
    obj = _read_json(path)
    if not isinstance(obj, dict):
        raise FormatError("top level must be a JSON object", file=path)
    return {"step": obj.get("step"), "graphprep_version": (obj.get("versions") or {}).get(
                "graphprep"),
            "seed": obj.get("seed"), "inputs": obj.get("inputs", {}),
            "options": obj.get("options", {})}


def _npy_header(path: str) -> tuple[str, tuple[int, ...]]:
    """``(dtype, shape)`` from a ``.npy`` header (reads a few hundred bytes)."""
    try:
        with open_file(path) as f:
            shape, dtype, _, _ = read_npy_header(f)
    except (ValueError, OSError, EOFError, SyntaxError) as err:
        raise FormatError(f"not a readable .npy header ({err})", file=path,
                          field="header") from None
    return str(dtype), shape


def _arrow_dtype(arrow_type) -> str:
    try:
        return str(np.dtype(arrow_type.to_pandas_dtype()))
    except (NotImplementedError, TypeError):
        return str(arrow_type)


def _parquet_field(path: str) -> tuple[str, list]:
    """``(dtype, per-row shape)`` of a Parquet data chunk from its footer's schema (see
    ``graphprep.formats.arrays.read_array_chunk``: one numeric column is 1-D, a list column or several
    columns 2-D). A variable-length list column's width is not in the schema: ``None``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(open_file(path) if is_url(path) else path)
    except (pa.ArrowInvalid, OSError) as err:
        raise FormatError(f"unreadable Parquet footer ({err})", file=path) from None
    if len(schema) == 0:
        raise FormatError("table has no columns", file=path)
    if len(schema) > 1:
        return _arrow_dtype(schema.field(0).type), [len(schema)]
    t = schema.field(0).type
    if pa.types.is_fixed_size_list(t):
        return _arrow_dtype(t.value_type), [t.list_size]
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _arrow_dtype(t.value_type), [None]
    return _arrow_dtype(t), []


def _csv_field(path: str, delimiter: str) -> tuple[str | None, list]:
    """Per-row shape of a headerless CSV data chunk from its first line; dtype unknown (text)."""
    with open_file(path, compression="infer") as f:
        line = f.readline().decode("utf-8", "replace").strip()
    width = len(line.split(delimiter)) if line else 1
    return None, ([] if width == 1 else [width])


def _csr_field(path: str, dim: int) -> tuple[str, list]:
    """``(dtype, per-row shape)`` of a sparse (CSR) field: its values' dtype from the first
    chunk's Parquet footer, its width from metadata.json's ``format.dim``."""
    import pyarrow as pa

    schema = _parquet_schema(path)
    names = schema.names
    if "values" in names:
        t = schema.field("values").type
        dtype = _arrow_dtype(t.value_type if pa.types.is_list(t) or
                             pa.types.is_large_list(t) else t)
    else:           # no values column: every stored entry is 1 (multi-hot)
        dtype = "float32"
    return dtype, [int(dim)]


def _parquet_schema(path: str):
    import pyarrow as pa
    import pyarrow.parquet as pq
    try:
        return pq.read_schema(open_file(path) if is_url(path) else path)
    except (pa.ArrowInvalid, OSError) as err:
        raise FormatError(f"unreadable Parquet footer ({err})", file=path) from None


def csr_nnz(paths: list[str]) -> int | None:
    """Stored entries of a sparse field over its chunks, from each chunk's Parquet footer
    (the ``indices`` column's statistics: values, not the empty rows' placeholders); None
    where a chunk's footer has no statistics."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    total = 0
    for path in paths:
        try:
            meta = pq.ParquetFile(open_file(path) if is_url(path) else path).metadata
        except (pa.ArrowInvalid, OSError) as err:
            raise FormatError(f"unreadable Parquet footer ({err})", file=path) from None
        column = next((c for c in range(meta.num_columns) if meta.row_group(0).column(c)
                       .path_in_schema.split(".")[0] == "indices"), None) \
            if meta.num_row_groups else None
        for rg in range(meta.num_row_groups if column is not None else 0):
            stats = meta.row_group(rg).column(column).statistics
            if stats is None:
                return None
            total += stats.num_values
    return total


def field_layout(first_chunk: str, files: ChunkFiles) -> tuple[str | None, list]:
    """``(dtype, per-row shape)`` of a data field, from the header of its first chunk (a
    sparse field: its values' dtype and its width, ``[dim]``)."""
    if files.format == "csr":
        return _csr_field(first_chunk, files.dim)
    if files.format == "numpy":
        dtype, shape = _npy_header(first_chunk)
        return dtype, list(shape[1:])
    if files.format == "parquet":
        return _parquet_field(first_chunk)
    return _csv_field(first_chunk, files.delimiter)


def _clean(obj):
    """NaN/inf floats as None, so the result is strict JSON."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


# ---------------------------------------------------------------- chunked graph

def describe_chunked(root: str) -> dict:
    """A chunked graph folder (loaded with ``graphprep.formats.load_chunked_graph``, which checks the
    metadata and that every chunk file exists).

    Returns ``{"kind": "chunked", path, graph_name, format_version, manifest, num_nodes,
    num_edges, node_types: [{name, num_nodes, num_chunks, data_fields, bytes}], edge_types:
    [{name, num_edges, num_chunks, format, bytes}], node_data / edge_data: [{type, name,
    dtype, shape, format, num_chunks, rows, bytes; a sparse (csr) field also dim, nnz,
    density}], bytes: {edges, node_data, edge_data, metadata, total}}``. ``shape`` is per
    row (``[]`` for 1-D; a sparse field's ``[dim]``); dtypes and shapes come from the first
    chunk's header. Holds metadata.json, one size per chunk file and a sparse field's
    chunk footers.
    """
    graph = load_chunked_graph(root)
    node_fields, node_bytes = [], {}
    for t in graph.node_types:
        node_bytes[t] = 0
        for name, files in graph.node_data.get(t, {}).items():
            field = _describe_field(graph, t, name, files, graph.num_nodes[t])
            node_bytes[t] += field["bytes"]
            node_fields.append(field)
    edge_fields, edge_rows = [], []
    for et in graph.edge_types:
        for name, files in graph.edge_data.get(et, {}).items():
            edge_fields.append(_describe_field(graph, str(et), name, files,
                                               graph.num_edges[et]))
        edge_rows.append({"name": str(et), "num_edges": graph.num_edges[et],
                          "num_chunks": len(graph.edge_chunks[et]),
                          "format": graph.edges[et].format,
                          "bytes": sum(size(graph.path(f)) for f in graph.edges[et].files)})
    meta_bytes = sum(size(join(root, f)) for f in (METADATA, MANIFEST) if exists(join(root, f)))
    sections = {"edges": sum(e["bytes"] for e in edge_rows),
                "node_data": sum(f["bytes"] for f in node_fields),
                "edge_data": sum(f["bytes"] for f in edge_fields), "metadata": meta_bytes}
    return {
        "kind": "chunked", "path": _abs(root), "graph_name": graph.graph_name,
        "format_version": graph.format_version, "manifest": _manifest_summary(root),
        "num_nodes": sum(graph.num_nodes.values()), "num_edges": sum(graph.num_edges.values()),
        "node_types": [{"name": t, "num_nodes": graph.num_nodes[t],
                        "num_chunks": len(graph.node_chunks[t]),
                        "data_fields": list(graph.node_data.get(t, {})),
                        "bytes": node_bytes[t]} for t in graph.node_types],
        "edge_types": edge_rows, "node_data": node_fields, "edge_data": edge_fields,
        "bytes": {**sections, "total": sum(sections.values())},
        "keys": [{"type": t, "kind": m.kind, "keys": sum(m.rows), "buckets": len(m.by_key),
                  "first": _first_key(graph, t)} for t, m in graph.keys.items()],
        "vocab": [{"owner": o, "field": f, "values": _rows(graph.path(rel))}
                  for o, d in graph.vocab.items() for f, rel in d.items()],
    }


def _first_key(graph, ntype: str):
    """ID 0's key, as an example of the type's keys (None for an empty type)."""
    if not graph.num_nodes[ntype]:
        return None
    from graphprep.pipeline.keys.lookup import keys_of
    return keys_of(graph, ntype, [0])[0].as_py()


def _rows(path: str) -> int:
    import pyarrow.parquet as pq
    return pq.ParquetFile(path).metadata.num_rows


def _describe_field(graph, owner: str, name: str, files: ChunkFiles, rows: int) -> dict:
    """A data field's row: dtype, per-row shape, format, chunks, rows, bytes; a sparse field
    also its stored entries (``nnz``, from the chunks' footers) and ``density`` (nnz over
    rows x width)."""
    dtype, shape = field_layout(graph.path(files.files[0]), files)
    out = {"type": owner, "name": name, "dtype": dtype, "shape": shape,
           "format": files.format, "num_chunks": len(files.files), "rows": rows,
           "bytes": sum(size(graph.path(f)) for f in files.files)}
    if files.format == "csr":
        nnz = csr_nnz([graph.path(f) for f in files.files])
        cells = rows * files.dim
        out.update(dim=files.dim, nnz=nnz,
                   density=None if nnz is None or not cells else nnz / cells)
    return out


# ---------------------------------------------------------------- assignment

def describe_assignment(root: str) -> dict:
    """A partition assignment folder (``graphprep.formats.assignment.load_assignment`` without a graph:
    the metadata is checked, the ``<ntype>.npy`` arrays are not read, only their headers).

    Returns ``{"kind": "assignment", path, algo_name, num_parts, graph_name, seed,
    input_fingerprint, format_version, options, manifest, files: [{node_type, file, dtype,
    length, bytes}], stats}``; ``stats`` is None when partition_meta.json has none (DGL's
    files), else ``{num_edges, edge_cut, cut_ratio, imbalance, parts: [{part, nodes {ntype: n},
    edges, train, val, test, halo {ntype: n}}], metis_edge_cut, kaminpar_edge_cut, csr_bytes,
    multilevel, auto, warnings}`` (``multilevel``: ``levels``, ``coarse_edge_budget``, ``budget``, the coarsest
    graph's size and METIS cut; None for other methods; ``warnings``: unbalanced edges or
    training nodes, ``graphprep.pipeline.workload``). Holds partition_meta.json only.
    """
    if is_url(root):
        raise FormatError("assignments are read from local folders only", file=root)
    meta = load_assignment(root).meta
    files = []
    node_types = list(meta.node_types) or sorted(
        os.path.splitext(n)[0] for n in os.listdir(root)
        if n.endswith((".npy", ".txt")) and not n.startswith("."))
    for t in dict.fromkeys(node_types):
        npy, txt = os.path.join(root, f"{t}.npy"), os.path.join(root, f"{t}.txt")
        if os.path.exists(npy):
            dtype, shape = _npy_header(npy)
            files.append({"node_type": t, "file": f"{t}.npy", "dtype": dtype,
                          "length": shape[0] if shape else None,
                          "bytes": os.path.getsize(npy)})
        elif os.path.exists(txt):   # DGL's text file: its length would need a full read
            files.append({"node_type": t, "file": f"{t}.txt", "dtype": None, "length": None,
                          "bytes": os.path.getsize(txt)})
        else:
            files.append({"node_type": t, "file": None, "dtype": None, "length": None,
                          "bytes": 0})
    return _clean({
        "kind": "assignment", "path": _abs(root), "algo_name": meta.method_name,
        "num_parts": meta.num_parts, "graph_name": meta.graph_name, "seed": meta.seed,
        "input_fingerprint": meta.input_fingerprint, "format_version": meta.format_version,
        "options": meta.options, "manifest": _manifest_summary(root), "files": files,
        "stats": _assignment_stats(meta, os.path.join(root, ASSIGNMENT_META)),
    })


def _assignment_stats(meta, meta_path: str) -> dict | None:
    stats, num_parts = meta.stats, meta.num_parts
    if not stats:
        return None
    try:
        p = int(stats.get("num_parts", num_parts))
        nodes = stats.get("nodes_per_part", {})
        halo = stats.get("halo_per_part", {})
        splits = {k: stats.get(f"{k}_per_part") for k in ("train", "val", "test")}
        edges = stats.get("edges_per_part")
        parts = [{"part": i, "nodes": {t: v[i] for t, v in nodes.items()},
                  "edges": edges[i] if edges else None,
                  **{k: (v[i] if v else None) for k, v in splits.items()},
                  "halo": {t: v[i] for t, v in halo.items()}} for i in range(p)]
    except (TypeError, IndexError, AttributeError, ValueError) as err:
        raise FormatError(f"malformed statistics ({err})", file=meta_path,
                          field="stats") from None
    multilevel = None
    if "levels" in stats:
        multilevel = {k: stats.get(k) for k in ("levels", "coarse_edge_budget", "budget",
                                                "coarse_nodes", "coarse_edges",
                                                "coarse_metis_edge_cut", "coarse_csr_bytes",
                                                "sparsified")}
    return {"num_edges": stats.get("num_edges"), "edge_cut": stats.get("edge_cut"),
            "cut_ratio": stats.get("cut_ratio"), "imbalance": stats.get("imbalance", {}),
            "parts": parts, "metis_edge_cut": stats.get("metis_edge_cut"),
            "kaminpar_edge_cut": stats.get("kaminpar_edge_cut"),
            "csr_bytes": stats.get("csr_bytes"), "multilevel": multilevel,
            "auto": stats.get("auto"), "warnings": _work_warnings(meta, stats)}


def _work_warnings(meta, stats: dict) -> list[str]:
    """The statistics' warnings; for statistics written before they were stored, derived
    from the same figures (``pipeline.workload``)."""
    if "warnings" in stats:
        return list(stats["warnings"] or [])
    return work_warnings(stats, *made_with(meta))


# ---------------------------------------------------------------- partitioned graph

def describe_partitioned(path: str) -> dict:
    """A partitioned graph: ``graph.json`` (or its folder) through
    ``graphprep.formats.partitioned.load_partitioned``, plus a listing of each part folder found here.

    Returns ``{"kind": "partitioned", path, graph_name, num_parts, part_method, seed, halo_hops,
    format_version, dispatch_id, manifest, integrity: {manifests, stamps_ok}, source,
    num_classes, num_nodes, num_edges, node_types: [{name, num_nodes}], edge_types: [{name,
    num_edges}], node_feats: [{type, name, dtype, shape, format ("dense" or "csr")}],
    edge_feats: [{type, name, dtype, shape}], parts: [{part, path, machine, present,
    owned_nodes {ntype: n}, halo_nodes {ntype: n or None}, edges {etype: n}, num_edges,
    feature_fields, files, bytes, stamp}], bytes}``. ``present`` is whether the part
    folder is reachable from here (parts delivered with ``--machines`` live on their machines);
    when it is not, halo counts and bytes come from graph.json's integrity manifest. ``stamp``:
    ``ok``, ``missing``, ``mismatch: ...`` or ``absent`` (folder not here), from part.json.
    Holds graph.json and one size per part file.
    """
    g = load_partitioned(path)
    parts = [_describe_part(g, p) for p in range(g.num_parts)]
    manifests = sum(1 for info in g.parts if info.manifest)
    return _clean({
        "kind": "partitioned", "path": _abs(join(g.root, GRAPH_JSON) if not path.endswith(
            ".json") else path),
        "graph_name": g.graph_name, "num_parts": g.num_parts, "part_method": g.part_method,
        "seed": g.seed, "halo_hops": g.halo_hops, "format_version": g.format_version,
        "dispatch_id": g.dispatch_id or None, "manifest": _manifest_summary(g.root),
        "integrity": {"manifests": manifests,
                      "stamps_ok": sum(1 for r in parts if r["stamp"] == "ok")},
        "source": g.source, "num_classes": g.num_classes,
        "num_nodes": sum(g.num_nodes.values()), "num_edges": sum(g.num_edges.values()),
        "node_types": [{"name": t, "num_nodes": g.num_nodes[t]} for t in g.node_types],
        "edge_types": [{"name": str(e), "num_edges": g.num_edges[e]} for e in g.edge_types],
        "node_feats": [{"type": t, "name": n, "dtype": f.get("dtype"), "shape": f.get("shape"),
                        "format": f.get("format", "dense")}
                       for t, fields in g.node_feats.items() for n, f in fields.items()],
        "edge_feats": [{"type": str(e), "name": n, "dtype": f.get("dtype"),
                        "shape": f.get("shape")}
                       for e, fields in g.edge_feats.items() for n, f in fields.items()],
        "parts": parts, "bytes": sum(r["bytes"] or 0 for r in parts),
    })


def _part_listing(folder: str) -> dict[str, int] | None:
    """``{relative path: size}`` of every file under a part folder; None when it is not here."""
    if is_url(folder):
        import fsspec
        fs, root = fsspec.core.url_to_fs(folder)
        if not fs.exists(root):
            return None
        found = fs.find(root, detail=True)
        return {k[len(root):].lstrip("/"): int(v.get("size") or 0) for k, v in found.items()}
    if not os.path.isdir(folder):
        return None
    out = {}
    for d, _, names in os.walk(folder):
        for n in names:
            full = os.path.join(d, n)
            out[os.path.relpath(full, folder).replace(os.sep, "/")] = os.path.getsize(full)
    return out


def _describe_part(g, p: int) -> dict:
    info, folder = g.parts[p], g.part_path(p)
    listing = _part_listing(folder)
    present = listing is not None
    files = listing if present else {rel: r.size for rel, r in info.manifest.items()}
    halo = {}
    for t in g.node_types:
        rel = f"nodes/{t}/halo_ids.npy"
        record = info.manifest.get(rel)
        if record is not None and record.shape is not None:
            halo[t] = record.shape[0]
        elif present and rel in files:
            halo[t] = _npy_header(join(folder, rel))[1][0]
        else:
            halo[t] = None
    feats = [rel for rel in files if rel.startswith(("node_feats/", "edge_feats/"))
             and rel.endswith(".npy")]
    edges = {str(e): r[p][1] - r[p][0] for e, r in g.edge_map.items()}
    return {"part": p, "path": info.path, "machine": info.machine or None, "present": present,
            "owned_nodes": {t: g.node_map[t][p][1] - g.node_map[t][p][0] for t in g.node_types},
            "halo_nodes": halo, "edges": edges, "num_edges": sum(edges.values()),
            "feature_fields": len(feats), "files": len(files),
            "bytes": sum(files.values()) if files else None,
            "stamp": _stamp(g, p, folder) if present else "absent"}


def _stamp(g, p: int, folder: str) -> str:
    """part.json against graph.json: ``ok``, ``missing`` or ``mismatch: ...``."""
    path = join(folder, PART_JSON)
    if not exists(path):
        return "missing"
    try:
        obj = json.loads(read_text(path))
        part, did = int(obj["part"]), str(obj["dispatch_id"])
    except (json.JSONDecodeError, KeyError, TypeError, ValueError):
        return "mismatch: malformed part.json"
    wrong = []
    if part != p:
        wrong.append(f"says part {part}")
    if g.dispatch_id and did != g.dispatch_id:
        wrong.append(f"dispatch {did[:12]}")
    return f"mismatch: {', '.join(wrong)}" if wrong else "ok"


# ---------------------------------------------------------------- metrics JSON

def describe_metrics(path: str) -> dict:
    """A trainer metrics file (``python -m graphprep.trainer --metrics-out``; FORMATS.md §4:
    ``{config, epochs: [record...], summary}``).

    Returns ``{"kind": "metrics", path, task, graph, target, epochs, epochs_planned, complete,
    best_epoch, best {metric: value}, final {metric: value}, summary, time_per_rank_s {phase:
    {mean, total}}, peak_rss_mb_max_rank, rpc {requests, bytes_sent, bytes_received}, config}``.
    Metrics are a record's loss/accuracy/AUC/MRR/Hits values; ``time_per_rank_s`` is the
    trainer's per-phase mean over ranks, here averaged and summed over epochs. NaN (no nodes
    in a split) becomes None. Holds the metrics file.
    """
    obj = _read_json(path)
    config, epochs, summary = obj.get("config") or {}, obj.get("epochs"), obj.get("summary")
    if not isinstance(epochs, list) or not all(isinstance(r, dict) and "epoch" in r
                                               for r in epochs):
        raise FormatError("must be a list of epoch records (each with 'epoch')", file=path,
                          field="epochs")
    if not isinstance(summary, dict) or not isinstance(config, dict):
        raise FormatError("must be a JSON object", file=path,
                          field="summary" if not isinstance(summary, dict) else "config")
    by_epoch = {r["epoch"]: r for r in epochs}
    best_epoch = summary.get("best_epoch")
    names = {k for r in epochs for k in _metrics_of(r)} | set(summary)
    task = obj.get("task") or config.get("task") or (
        "link_prediction" if any(re.search(r"auc|mrr|hits", k) for k in names)
        else "node_classification")
    phases: dict[str, list[float]] = {}
    for r in epochs:
        for phase, seconds in (r.get("time_per_rank_s") or {}).items():
            phases.setdefault(phase, []).append(float(seconds))
    rss = [r["peak_rss_mb_max_rank"] for r in epochs if "peak_rss_mb_max_rank" in r]
    rpc = {k: sum(int(r.get(f"rpc_{k}", 0)) for r in epochs)
           for k in ("requests", "bytes_sent", "bytes_received")}
    planned = config.get("epochs")
    keep = ("fanouts", "batch_size", "lr", "hidden", "dropout", "device", "placement",
            "ranks_per_part", "seed")
    return _clean({
        "kind": "metrics", "path": _abs(path), "task": task, "graph": config.get("graph"),
        "target": config.get("target"), "epochs": len(epochs), "epochs_planned": planned,
        "complete": planned is None or len(epochs) >= planned, "best_epoch": best_epoch,
        "best": _metrics_of(by_epoch.get(best_epoch, {})),
        "final": _metrics_of(epochs[-1]) if epochs else {}, "summary": summary,
        "time_per_rank_s": {ph: {"mean": round(sum(v) / len(v), 6), "total": round(sum(v), 6)}
                            for ph, v in phases.items()},
        "peak_rss_mb_max_rank": max(rss) if rss else None, "rpc": rpc,
        "config": {k: config[k] for k in keep if k in config},
    })


def _metrics_of(record: dict) -> dict:
    """The metric values of an epoch record (loss, accuracies, AUC, MRR, Hits@k)."""
    return {k: v for k, v in record.items() if METRIC_KEY.search(k)
            and isinstance(v, (int, float)) and not isinstance(v, bool)}


# ---------------------------------------------------------------- text

def render_json(info: dict) -> str:
    """The description as one JSON object (strict JSON: no NaN)."""
    return json.dumps(_clean(info), indent=2, allow_nan=False)


def render_text(info: dict) -> str:
    """The description as a readable summary: ``key  value`` lines, then aligned tables."""
    return {"chunked": _text_chunked, "assignment": _text_assignment,
            "partitioned": _text_partitioned, "metrics": _text_metrics}[info["kind"]](info)


def human_bytes(n: int | None) -> str:
    """``1536`` -> ``1.5 KiB``; None -> ``-``."""
    if n is None:
        return "-"
    value, unit = float(n), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if value < 1024 or unit == "PiB":
            break
        value /= 1024
    return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"


def _cell(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:.4f}"
    return str(v)


def table(headers: list[str], rows: list[list], size_cols: set[int] = frozenset()
          ) -> list[str]:
    """Aligned plain-text table lines (indented two spaces). Numeric columns (every cell an
    int, float or None) are right-aligned, the rest left-aligned; the columns in ``size_cols``
    hold byte counts, shown with :func:`human_bytes` and right-aligned."""
    numeric = [i in size_cols or all(r[i] is None or (isinstance(r[i], (int, float)) and
                                                      not isinstance(r[i], bool)) for r in rows)
               for i in range(len(headers))]
    cells = [[human_bytes(v) if i in size_cols else _cell(v) for i, v in enumerate(r)]
             for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]

    def line(values):
        out = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)]
        return ("  " + "  ".join(out)).rstrip()
    return [line(headers)] + [line(r) for r in cells]


def _fields(pairs: list[tuple[str, object]]) -> list[str]:
    width = max(len(k) for k, _ in pairs)
    return [f"  {k.ljust(width)}  {_cell(v)}" for k, v in pairs if v is not None]


def _shape(shape) -> str:
    if shape is None:
        return "?"
    return "[" + ", ".join("?" if s is None else str(s) for s in shape) + "]"


def _format_cell(field: dict) -> str:
    """A field's format; a sparse one's with its stored entries and density."""
    if field["format"] != "csr" or field.get("nnz") is None:
        return field["format"]
    density = field.get("density")
    return (f"csr, {field['nnz']:,} nnz" +
            (f" (density {100 * density:.3g}%)" if density is not None else ""))


def _option(v) -> str:
    if isinstance(v, (list, tuple)):
        return ",".join(map(str, v)) or "-"
    return _cell(v) if isinstance(v, bool) else str(v)


def _types(types: list) -> str:
    return f"{len(types)} type" + ("" if len(types) == 1 else "s")


def _made_by(manifest: dict | None) -> str | None:
    if not manifest:
        return None
    out = f"prep {manifest.get('step')}"
    if manifest.get("graphprep_version"):
        out += f", graphprep {manifest['graphprep_version']}"
    if manifest.get("seed") is not None:
        out += f", seed {manifest['seed']}"
    return out


def _text_chunked(d: dict) -> str:
    b = d["bytes"]
    lines = [f"chunked graph {d['path']}"]
    lines += _fields([("graph_name", d["graph_name"]), ("format_version", d["format_version"]),
                      ("made by", _made_by(d["manifest"])),
                      ("nodes", f"{d['num_nodes']:,} in {_types(d['node_types'])}"),
                      ("edges", f"{d['num_edges']:,} in {_types(d['edge_types'])}"),
                      ("on disk", f"{human_bytes(b['total'])} (edges {human_bytes(b['edges'])}, "
                                  f"node data {human_bytes(b['node_data'])}, edge data "
                                  f"{human_bytes(b['edge_data'])})")])
    lines += ["", *table(["node type", "nodes", "chunks", "data fields", "bytes"],
                               [[t["name"], t["num_nodes"], t["num_chunks"],
                                 ", ".join(t["data_fields"]) or "-", t["bytes"]]
                                for t in d["node_types"]], {4})]
    lines += ["", *table(["edge type", "edges", "chunks", "format", "bytes"],
                               [[e["name"], e["num_edges"], e["num_chunks"], e["format"],
                                 e["bytes"]] for e in d["edge_types"]], {4})]
    for section, owner in (("node_data", "node type"), ("edge_data", "edge type")):
        if d[section]:
            lines += ["", *table(
                [owner, section.replace("_", " "), "dtype", "shape", "format", "chunks",
                 "bytes"],
                [[f["type"], f["name"], f["dtype"] or "?", _shape(f["shape"]),
                  _format_cell(f), f["num_chunks"], f["bytes"]] for f in d[section]], {6})]
    if d.get("keys"):
        lines += ["", *table(["node type", "keys", "kind", "buckets", "ID 0's key"],
                             [[k["type"], k["keys"], k["kind"], k["buckets"], str(k["first"])]
                              for k in d["keys"]])]
    if d.get("vocab"):
        lines += ["", *table(["type", "vocabulary of", "values"],
                             [[v["owner"], v["field"], v["values"]] for v in d["vocab"]])]
    return "\n".join(lines)


def _text_assignment(d: dict) -> str:
    opts = d["options"] or {}
    shown = "; ".join(f"{k} {_option(v)}" for k, v in opts.items()
                      if k not in ("num_parts", "method") and v is not None)
    lines = [f"assignment {d['path']}"]
    lines += _fields([("method", d["algo_name"]), ("parts", d["num_parts"]),
                      ("graph_name", d["graph_name"] or None), ("seed", d["seed"]),
                      ("options", shown or None), ("made by", _made_by(d["manifest"]))])
    lines += ["", *table(["node type", "file", "dtype", "length", "bytes"],
                               [[f["node_type"], f["file"] or "missing", f["dtype"] or "-",
                                 f["length"], f["bytes"]] for f in d["files"]], {4})]
    s = d["stats"]
    if s is None:
        lines += ["", "  no statistics (compute them with: prep partition CHUNKED --stats "
                      "ASSIGNMENT)"]
        return "\n".join(lines)
    ratio = f" ({100 * s['cut_ratio']:.2f}%)" if s["cut_ratio"] is not None else ""
    pairs = [("edge cut", f"{_cell(s['edge_cut'])} of {_cell(s['num_edges'])} edges{ratio}"),
             ("imbalance", ", ".join(f"{k} {v:.3f}" for k, v in s["imbalance"].items())
              + " (max/mean)" if s["imbalance"] else None),
             ("METIS cut", s["metis_edge_cut"]
              if s["metis_edge_cut"] is not None else None)]
    if s["kaminpar_edge_cut"] is not None:
        pairs.append(("KaMinPar cut", s["kaminpar_edge_cut"]))
    ml = s["multilevel"]
    if ml:
        pairs.append(("coarse budget", f"{_cell(ml['coarse_edge_budget'])} edges"
                      + (f" ({ml['budget']})" if ml.get("budget") else "")))
        pairs.append(("coarsest graph", f"{_cell(ml['coarse_nodes'])} nodes, "
                      f"{_cell(ml['coarse_edges'])} edges, METIS cut "
                      f"{_cell(ml['coarse_metis_edge_cut'])}"
                      + (" (coarsening stopped above the budget: METIS got the heaviest "
                         "edges)" if ml.get("sparsified") else "")))
    if s["auto"]:
        pairs.append(("auto", f"chose {s['auto'].get('chosen')}: {s['auto'].get('reason')}"))
    lines += ["", *_fields(pairs)]
    lines += [f"  WARNING: {w}" for w in s["warnings"]]
    parts = s["parts"]
    ntypes = list(parts[0]["nodes"]) if parts else []
    htypes = [t for t in (parts[0]["halo"] if parts else {})
              if any(r["halo"][t] for r in parts)]
    splits = [k for k in ("train", "val", "test") if any(r[k] is not None for r in parts)]
    headers = (["part"] + [f"nodes[{t}]" for t in ntypes] + ["edges"] + splits
               + [f"halo[{t}]" for t in htypes])
    rows = [[r["part"]] + [r["nodes"][t] for t in ntypes] + [r["edges"]]
            + [r[k] for k in splits] + [r["halo"][t] for t in htypes] for r in parts]
    lines += ["", *table(headers, rows)]
    if ml and ml.get("levels"):
        lines += ["", *table(["level", "nodes", "edges"],
                             [[i, lv.get("nodes"), lv.get("edges")]
                              for i, lv in enumerate(ml["levels"])])]
    return "\n".join(lines)


def _text_partitioned(d: dict) -> str:
    integ = d["integrity"]
    lines = [f"partitioned graph {d['path']}"]
    method = f"{d['num_parts']} ({d['part_method']}" + (
        f", seed {d['seed']})" if d["seed"] is not None else ")")
    lines += _fields([
        ("graph_name", d["graph_name"]), ("format_version", d["format_version"]),
        ("parts", method), ("halo hops", d["halo_hops"]),
        ("nodes", f"{d['num_nodes']:,} in {_types(d['node_types'])}"),
        ("edges", f"{d['num_edges']:,} in {_types(d['edge_types'])}"),
        ("dispatch_id", d["dispatch_id"] or "none (dispatched before integrity manifests)"),
        ("integrity", f"manifest for {integ['manifests']} of {d['num_parts']} parts; "
                      f"part.json ok for {integ['stamps_ok']}"),
        ("made by", _made_by(d["manifest"])),
        ("parts on disk", human_bytes(d["bytes"]))])
    feats: dict[str, list[str]] = {}
    for f in d["node_feats"]:
        feats.setdefault(f["type"], []).append(f"{f['name']} {f['dtype']} {_shape(f['shape'])}"
                                               + (" csr" if f.get("format") == "csr" else ""))
    lines += ["", *table(["node type", "nodes", "classes", "node data"],
                         [[t["name"], t["num_nodes"], d["num_classes"].get(t["name"]),
                           ", ".join(feats.get(t["name"], [])) or "-"]
                          for t in d["node_types"]])]
    efeats: dict[str, list[str]] = {}
    for f in d["edge_feats"]:
        efeats.setdefault(f["type"], []).append(f"{f['name']} {f['dtype']} {_shape(f['shape'])}")
    lines += ["", *table(["edge type", "edges", "edge data"],
                         [[e["name"], e["num_edges"], ", ".join(efeats.get(e["name"], [])) or "-"]
                          for e in d["edge_types"]])]
    parts = d["parts"]
    ntypes = [t["name"] for t in d["node_types"]]
    htypes = [t for t in ntypes if any(r["halo_nodes"][t] for r in parts)]
    machines = any(r["machine"] for r in parts)
    headers = (["part"] + (["machine"] if machines else [])
               + [f"owned[{t}]" for t in ntypes] + [f"halo[{t}]" for t in htypes]
               + ["edges", "feats", "files", "bytes", "part.json", "path"])
    rows = [[r["part"]] + ([r["machine"] or "-"] if machines else [])
            + [r["owned_nodes"][t] for t in ntypes] + [r["halo_nodes"][t] for t in htypes]
            + [r["num_edges"], r["feature_fields"], r["files"], r["bytes"], r["stamp"],
               r["path"] + ("" if r["present"] else " (not on this machine: sizes from the "
                                                    "manifest)")]
            for r in parts]
    lines += ["", *table(headers, rows, {len(headers) - 3})]
    return "\n".join(lines)


def _text_metrics(d: dict) -> str:
    lines = [f"trainer metrics {d['path']}"]
    planned = d["epochs_planned"]
    done = f"{d['epochs']}" + (f" of {planned}" if planned is not None else "") + (
        "" if d["complete"] else " (stopped or still running)")
    summary = d["summary"]
    lines += _fields([("task", d["task"]), ("graph", d["graph"]), ("target", d["target"]),
                      ("epochs", done), ("best epoch", d["best_epoch"]),
                      ("mean epoch", f"{summary['mean_epoch_s']:.2f} s"
                       if isinstance(summary.get("mean_epoch_s"), (int, float)) else None),
                      ("peak RSS", f"{d['peak_rss_mb_max_rank']:,.1f} MB (largest rank)"
                       if d["peak_rss_mb_max_rank"] is not None else None),
                      ("RPC", f"{d['rpc']['requests']:,} requests, "
                              f"{human_bytes(d['rpc']['bytes_sent'])} sent, "
                              f"{human_bytes(d['rpc']['bytes_received'])} received"),
                      ("config", ", ".join(f"{k} {v}" for k, v in d["config"].items()) or None)])
    names = list(dict.fromkeys([*d["final"], *d["best"]]))
    if names:
        lines += ["", *table(["metric", f"best (epoch {_cell(d['best_epoch'])})", "final"],
                             [[n, d["best"].get(n), d["final"].get(n)] for n in names])]
    if d["time_per_rank_s"]:
        lines += ["", "  time per rank (s; mean over ranks, as the trainer records it)",
                  *table(["phase", "mean/epoch", "total"],
                         [[ph, v["mean"], v["total"]]
                          for ph, v in d["time_per_rank_s"].items()])]
    return "\n".join(lines)
