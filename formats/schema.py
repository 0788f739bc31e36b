"""Chunked graph format (FORMATS.md §1): dataclasses and the one validating loader.

``load_chunked_graph`` checks everything that can be checked from ``metadata.json`` and the
file listing (types, counts, chunk lists, file presence); ``graphprep.formats.validate`` then checks the
chunk contents. Both raise :class:`FormatError` naming file, field and row.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from graphprep.formats.errors import FormatError
from graphprep.formats.storage import exists, join, read_text

FORMAT_VERSION = 1
METADATA = "metadata.json"
DATA_FORMATS = ("parquet", "numpy", "csv", "csr")
# A CSV entry without "delimiter" reads as DGL's pipeline reads it: edge chunks with " "
# (dataset_utils.py parses every CSV edge file so), data chunks with "," (its CSVArrayParser's
# default: the pipeline passes only the format name).
EDGE_DELIMITER = " "
DATA_DELIMITER = ","


@dataclass(frozen=True, order=True)
class EdgeType:
    """A canonical edge type ``src:rel:dst``."""

    src: str
    rel: str
    dst: str

    @classmethod
    def parse(cls, text: str, *, file: str = METADATA, field: str = "edge_type") -> "EdgeType":
        parts = text.split(":") if isinstance(text, str) else []
        if len(parts) != 3 or not all(parts):
            raise FormatError(f"edge type {text!r} is not canonical 'src:rel:dst'",
                              file=file, field=field)
        return cls(*parts)

    def __str__(self) -> str:
        return f"{self.src}:{self.rel}:{self.dst}"

    @property
    def dirname(self) -> str:
        """Folder name on disk: ``src__rel__dst``."""
        return f"{self.src}__{self.rel}__{self.dst}"

    def reverse(self) -> "EdgeType":
        """The ``dst:rev-rel:src`` type that holds this type's reversed edges."""
        return EdgeType(self.dst, f"rev-{self.rel}", self.src)


@dataclass(frozen=True)
class ChunkFiles:
    """One array split into chunk files: a ``{"format": ..., "data": [...]}`` entry."""

    format: str
    files: tuple[str, ...]
    delimiter: str = ","
    dim: int = 0            # "csr" (sparse rows, graphprep.formats.sparse): the row width

    def to_json(self) -> dict:
        fmt = {"name": self.format}
        if self.format == "csv":
            fmt["delimiter"] = self.delimiter
        if self.format == "csr":
            fmt["dim"] = self.dim
        return {"format": fmt, "data": list(self.files)}


@dataclass(frozen=True)
class KeyMap:
    """A node type's original keys (``keys`` in metadata.json): ``by_id`` Parquet files of one
    column ``key`` in ID order (``rows`` each), and ``by_key`` one Parquet file of
    ``(key, id)`` per bucket — the top ``bits`` bits of the key's hash
    (``graphprep.pipeline.keys.hashing``) — sorted by (hash, key). ``kind``: "integer" (int64) or
    "string" (binary; UTF-8 for text)."""

    kind: str
    bits: int
    by_id: tuple[str, ...]
    rows: tuple[int, ...]
    by_key: tuple[str, ...]

    def to_json(self) -> dict:
        return {"kind": self.kind, "bits": self.bits, "by_id": list(self.by_id),
                "rows_per_file": list(self.rows), "by_key": list(self.by_key)}

    def by_id_json(self) -> dict:
        """The keys in ID order only, as graph.json and exports carry them."""
        return {"kind": self.kind, "by_id": list(self.by_id), "rows_per_file": list(self.rows)}


DANGLING_MODES = ("error", "drop", "add")


@dataclass(frozen=True)
class ChunkRecord:
    """How ``prep chunk`` made the graph (``"chunked"`` in metadata.json), so that ``prep
    verify --tables`` can account for it; graphs written before it (and DGL's) have none.

    ``reverse``: input edge type -> the type holding its reversed edges (itself for an
    undirected type); every edge that is not a self loop is reversed, a self loop is its own
    reverse. ``dangling``: the ``--dangling`` mode of a keyed input (None: not keyed), with
    per node type the keys added as nodes (``added_nodes``) and per input edge type the edges
    dropped (``dropped_edges``). ``drop_self_loops``/``dedupe``: those options were given."""

    reverse: dict[EdgeType, EdgeType] = field(default_factory=dict)
    dangling: str | None = None
    added_nodes: dict[str, int] = field(default_factory=dict)
    dropped_edges: dict[EdgeType, int] = field(default_factory=dict)
    drop_self_loops: bool = False
    dedupe: bool = False

    def to_json(self) -> dict:
        return {"reverse": {str(a): str(b) for a, b in self.reverse.items()},
                "dangling": self.dangling,
                "added_nodes": dict(self.added_nodes),
                "dropped_edges": {str(et): n for et, n in self.dropped_edges.items()},
                "drop_self_loops": self.drop_self_loops, "dedupe": self.dedupe}


@dataclass(frozen=True)
class ChunkedGraph:
    """A chunked graph on disk. Paths in ``ChunkFiles`` are relative to ``root`` (or URLs).

    Holds only metadata: a few integers per chunk.
    """

    root: str
    graph_name: str
    node_types: tuple[str, ...]
    num_nodes: dict[str, int]
    node_chunks: dict[str, tuple[int, ...]]
    edge_types: tuple[EdgeType, ...]
    edge_chunks: dict[EdgeType, tuple[int, ...]]
    edges: dict[EdgeType, ChunkFiles]
    node_data: dict[str, dict[str, ChunkFiles]] = field(default_factory=dict)
    edge_data: dict[EdgeType, dict[str, ChunkFiles]] = field(default_factory=dict)
    keys: dict[str, KeyMap] = field(default_factory=dict)
    vocab: dict[str, dict[str, str]] = field(default_factory=dict)   # owner -> field -> file
    format_version: int = FORMAT_VERSION
    made: ChunkRecord | None = None       # how prep chunk made it; None: not recorded

    @property
    def num_edges(self) -> dict[EdgeType, int]:
        return {et: sum(c) for et, c in self.edge_chunks.items()}

    def path(self, relpath: str) -> str:
        """Absolute path (or URL) of a file named in the metadata."""
        return join(self.root, relpath)

    def file_lists(self) -> list[tuple[str, ChunkFiles]]:
        """Every file list the metadata names, with its field: edges, node and edge data,
        key maps and vocabularies."""
        entries = [(f"edges.{et}", cf) for et, cf in self.edges.items()]
        entries += [(f"node_data.{t}.{k}", cf) for t, d in self.node_data.items()
                    for k, cf in d.items()]
        entries += [(f"edge_data.{et}.{k}", cf) for et, d in self.edge_data.items()
                    for k, cf in d.items()]
        entries += [(f"keys.{t}", ChunkFiles("parquet", m.by_id + m.by_key))
                    for t, m in self.keys.items()]
        entries += [(f"vocab.{o}", ChunkFiles("parquet", tuple(d.values())))
                    for o, d in self.vocab.items()]
        return entries

    def to_json(self) -> dict:
        """``metadata.json`` content, with both DGL node-count keys."""
        return {
            "format_version": self.format_version,
            "graph_name": self.graph_name,
            "node_type": list(self.node_types),
            "num_nodes_per_type": [self.num_nodes[t] for t in self.node_types],
            "num_nodes_per_chunk": [list(self.node_chunks[t]) for t in self.node_types],
            "edge_type": [str(et) for et in self.edge_types],
            "num_edges_per_type": [sum(self.edge_chunks[et]) for et in self.edge_types],
            "num_edges_per_chunk": [list(self.edge_chunks[et]) for et in self.edge_types],
            "edges": {str(et): self.edges[et].to_json() for et in self.edge_types},
            "node_data": {t: {k: v.to_json() for k, v in d.items()}
                          for t, d in self.node_data.items()},
            "edge_data": {str(et): {k: v.to_json() for k, v in d.items()}
                          for et, d in self.edge_data.items()},
            **({"keys": {t: m.to_json() for t, m in self.keys.items()}} if self.keys else {}),
            **({"vocab": {o: dict(d) for o, d in self.vocab.items()}} if self.vocab else {}),
            **({"chunked": self.made.to_json()} if self.made is not None else {}),
        }


def even_chunks(total: int, chunk_size: int) -> tuple[int, ...]:
    """Rows per chunk when ``total`` rows are cut into chunks of ``chunk_size`` (last smaller)."""
    full, rest = divmod(total, chunk_size)
    return (chunk_size,) * full + ((rest,) if rest else ())


# ---------------------------------------------------------------- the validating loader

def check_version(meta: dict, supported: int, file: str) -> int:
    """``meta["format_version"]`` (absent: ``supported``, as in DGL's files) when it is the
    version this graphprep reads; else a :class:`FormatError` naming ``file`` and the field.
    A bool or a string "1" is refused too: a writer that puts one there is not ours."""
    version = meta.get("format_version", supported)
    if type(version) is not int or version != supported:
        raise FormatError(f"unsupported format_version {version!r} (this graphprep reads "
                          f"{supported})", file=file, field="format_version")
    return version


def load_chunked_graph(root: str, *, check_files: bool = True) -> ChunkedGraph:
    """Read and check ``root/metadata.json`` (graphprep's or DGL's chunked format).

    Takes the folder (local path or fsspec URL). Returns a :class:`ChunkedGraph`. Raises
    :class:`FormatError` naming file and field for any inconsistency that does not need the
    chunk contents; with ``check_files`` every named chunk file must exist. Holds the metadata only.
    """
    meta_path = join(root, METADATA)
    if not exists(meta_path):
        raise FormatError("metadata.json not found: not a chunked graph folder", file=meta_path)
    try:
        meta = json.loads(read_text(meta_path))
    except json.JSONDecodeError as err:
        raise FormatError(f"invalid JSON: {err.msg} (line {err.lineno}, column {err.colno})",
                          file=meta_path) from None
    if not isinstance(meta, dict):
        raise FormatError("top level must be a JSON object", file=meta_path)
    graph = _Loader(meta_path, meta).build(root)
    if check_files:
        _check_files_exist(graph, meta_path)
    return graph


class _Loader:
    """Field-by-field checks of one parsed metadata.json."""

    def __init__(self, meta_path: str, meta: dict):
        self.file, self.meta = meta_path, meta

    def fail(self, message: str, field: str):
        raise FormatError(message, file=self.file, field=field)

    def require(self, key: str, kind: type):
        if key not in self.meta:
            self.fail("required field is missing", key)
        value = self.meta[key]
        if not isinstance(value, kind):
            self.fail(f"must be a JSON {'list' if kind is list else 'object'}", key)
        return value

    def count_list(self, value, field: str) -> tuple[int, ...]:
        if not isinstance(value, list) or not all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
            self.fail("must be a list of non-negative integers", field)
        return tuple(value)

    def unique_names(self, names: list, field: str) -> None:
        seen = set()
        for i, name in enumerate(names):
            if not isinstance(name, str) or not name:
                self.fail(f"entry {i} is not a non-empty string", field)
            if name in seen:
                self.fail(f"duplicate type name {name!r}", field)
            seen.add(name)

    def build(self, root: str) -> ChunkedGraph:
        version = check_version(self.meta, FORMAT_VERSION, self.file)
        node_types = self.require("node_type", list)
        self.unique_names(node_types, "node_type")
        num_nodes, node_chunks = self.node_counts(node_types)
        etype_names = self.require("edge_type", list)
        self.unique_names(etype_names, "edge_type")
        edge_types = tuple(EdgeType.parse(n, file=self.file) for n in etype_names)
        for i, et in enumerate(edge_types):
            for end in (et.src, et.dst):
                if end not in num_nodes:
                    self.fail(f"edge type '{et}' names undeclared node type {end!r}",
                              f"edge_type[{i}]")
        edge_chunks = self.edge_counts(edge_types)
        edges = self.edge_files(edge_types, edge_chunks)
        node_data = self.data_section("node_data", {t: t for t in node_types})
        edge_data = self.data_section("edge_data", {str(et): et for et in edge_types})
        name = self.meta.get("graph_name", "graph")
        return ChunkedGraph(root=root, graph_name=str(name), node_types=tuple(node_types),
                            num_nodes=num_nodes, node_chunks=node_chunks, edge_types=edge_types,
                            edge_chunks=edge_chunks, edges=edges, node_data=node_data,
                            edge_data=edge_data, keys=self.key_maps(num_nodes),
                            vocab=self.vocabularies(node_types, etype_names),
                            format_version=version,
                            made=self.record(num_nodes, {str(et): et for et in edge_types}))

    def node_counts(self, node_types: list[str]):
        per_type = self.meta.get("num_nodes_per_type")
        per_chunk = self.meta.get("num_nodes_per_chunk")
        if per_type is None and per_chunk is None:
            self.fail("one of num_nodes_per_type / num_nodes_per_chunk is required",
                      "num_nodes_per_type")
        if per_type is not None:
            per_type = self.count_list(per_type, "num_nodes_per_type")
            if len(per_type) != len(node_types):
                self.fail(f"has {len(per_type)} entries for {len(node_types)} node types",
                          "num_nodes_per_type")
        if per_chunk is not None:
            if not isinstance(per_chunk, list) or len(per_chunk) != len(node_types):
                self.fail(f"must be a list with one list per node type ({len(node_types)})",
                          "num_nodes_per_chunk")
            per_chunk = [self.count_list(c, f"num_nodes_per_chunk[{i}]")
                         for i, c in enumerate(per_chunk)]
        num_nodes, chunks = {}, {}
        for i, t in enumerate(node_types):
            total = per_type[i] if per_type is not None else sum(per_chunk[i])
            if per_chunk is not None and sum(per_chunk[i]) != total:
                self.fail(f"chunks of node type {t!r} sum to {sum(per_chunk[i])}, "
                          f"num_nodes_per_type says {total}", f"num_nodes_per_chunk[{i}]")
            if total == 0:
                self.fail(f"node type {t!r} is empty (0 nodes)", f"num_nodes_per_type[{i}]")
            num_nodes[t] = total
            chunks[t] = per_chunk[i] if per_chunk is not None else (total,)
        return num_nodes, chunks

    def edge_counts(self, edge_types):
        per_chunk = self.require("num_edges_per_chunk", list)
        if len(per_chunk) != len(edge_types):
            self.fail(f"has {len(per_chunk)} entries for {len(edge_types)} edge types",
                      "num_edges_per_chunk")
        chunks = {et: self.count_list(c, f"num_edges_per_chunk[{i}]")
                  for i, (et, c) in enumerate(zip(edge_types, per_chunk))}
        per_type = self.meta.get("num_edges_per_type")
        if per_type is not None:
            per_type = self.count_list(per_type, "num_edges_per_type")
            for i, et in enumerate(edge_types):
                if i < len(per_type) and per_type[i] != sum(chunks[et]):
                    self.fail(f"says {per_type[i]} edges for '{et}', its chunks sum to "
                              f"{sum(chunks[et])}", f"num_edges_per_type[{i}]")
        return chunks

    def chunk_files(self, entry, field: str, allow_empty: bool = False,
                    default_delimiter: str = DATA_DELIMITER) -> ChunkFiles:
        """One ``{"format": ..., "data": [...]}`` entry. A CSV entry without ``delimiter``
        gets DGL's: ``" "`` for edges (``EDGE_DELIMITER``), ``","`` for data."""
        if not isinstance(entry, dict) or not isinstance(entry.get("format"), dict):
            self.fail("must be an object with 'format' and 'data'", field)
        name = entry["format"].get("name")
        if name not in DATA_FORMATS:
            self.fail(f"unknown format name {name!r} (known: {', '.join(DATA_FORMATS)})",
                      f"{field}.format.name")
        files = entry.get("data")
        if not isinstance(files, list) or not (files or allow_empty) or \
                not all(isinstance(f, str) for f in files):
            self.fail("must be a non-empty list of file paths", f"{field}.data")
        delimiter = entry["format"].get("delimiter", default_delimiter)
        if name == "csv" and (not isinstance(delimiter, str) or len(delimiter) != 1):
            self.fail("csv delimiter must be one character", f"{field}.format.delimiter")
        dim = entry["format"].get("dim", 0)
        if name == "csr" and (type(dim) is not int or dim <= 0):
            self.fail("a csr field needs its row width: a positive integer 'dim'",
                      f"{field}.format.dim")
        return ChunkFiles(name, tuple(files), delimiter, dim if name == "csr" else 0)

    def edge_files(self, edge_types, edge_chunks):
        section = self.require("edges", dict)
        edges = {}
        for et in edge_types:
            key = str(et)
            if key not in section:
                self.fail(f"no entry for edge type '{key}'", "edges")
            files = self.chunk_files(section[key], f"edges.{key}",
                                     allow_empty=not edge_chunks[et],
                                     default_delimiter=EDGE_DELIMITER)
            if len(files.files) != len(edge_chunks[et]):
                self.fail(f"lists {len(files.files)} chunk files, num_edges_per_chunk lists "
                          f"{len(edge_chunks[et])} chunks", f"edges.{key}.data")
            edges[et] = files
        for key in section:
            if key not in {str(et) for et in edge_types}:
                self.fail(f"edge type '{key}' is not in edge_type", "edges")
        return edges

    def vocabularies(self, node_types, etype_names) -> dict[str, dict[str, str]]:
        section = self.meta.get("vocab", {}) or {}
        owners = set(node_types) | set(etype_names)
        if not isinstance(section, dict):
            self.fail("must be a JSON object", "vocab")
        for owner, fields in section.items():
            if owner not in owners:
                self.fail(f"type {owner!r} is not declared", "vocab")
            if not isinstance(fields, dict) or not all(isinstance(f, str) and f
                                                       for f in fields.values()):
                self.fail("must map field names to files", f"vocab.{owner}")
        return {o: dict(d) for o, d in section.items()}

    def record(self, num_nodes: dict[str, int], etypes: dict[str, EdgeType]
               ) -> ChunkRecord | None:
        """The optional ``chunked`` section (:class:`ChunkRecord`). Reversed types must be
        edge types of the graph; an input edge type may be absent (every edge dropped)."""
        section = self.meta.get("chunked")
        if section is None:
            return None
        if not isinstance(section, dict):
            self.fail("must be a JSON object", "chunked")
        known = ("reverse", "dangling", "added_nodes", "dropped_edges", "drop_self_loops",
                 "dedupe")
        for key in section:
            if key not in known:
                self.fail(f"unknown key {key!r} (known: {', '.join(known)})", "chunked")
        reverse = section.get("reverse", {})
        if not isinstance(reverse, dict):
            self.fail("must map edge types to the types holding their reversed edges",
                      "chunked.reverse")
        pairs = {}
        for a, b in reverse.items():
            where = f"chunked.reverse.{a}"
            fwd = EdgeType.parse(a, file=self.file, field=where)
            if not isinstance(b, str) or b not in etypes:
                self.fail(f"{b!r} is not an edge type of the graph", where)
            if (etypes[b].src, etypes[b].dst) != (fwd.dst, fwd.src):
                self.fail(f"'{b}' cannot hold the reversed edges of '{a}'", where)
            pairs[fwd] = etypes[b]
        dangling = section.get("dangling")
        if dangling is not None and dangling not in DANGLING_MODES:
            self.fail(f"must be one of {', '.join(DANGLING_MODES)} or null",
                      "chunked.dangling")
        added = self.counts(section.get("added_nodes", {}), "chunked.added_nodes")
        for t, n in added.items():
            if t not in num_nodes or n > num_nodes[t]:
                self.fail(f"{n} nodes added to {t!r}, which has "
                          f"{num_nodes.get(t, 'no')} nodes", f"chunked.added_nodes.{t}")
        dropped = {EdgeType.parse(k, file=self.file, field=f"chunked.dropped_edges.{k}"): n
                   for k, n in self.counts(section.get("dropped_edges", {}),
                                           "chunked.dropped_edges").items()}
        flags = {}
        for key in ("drop_self_loops", "dedupe"):
            flags[key] = section.get(key, False)
            if not isinstance(flags[key], bool):
                self.fail("must be true or false", f"chunked.{key}")
        return ChunkRecord(pairs, dangling, added, dropped, **flags)

    def counts(self, value, field: str) -> dict[str, int]:
        if not isinstance(value, dict) or not all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 0
                for v in value.values()):
            self.fail("must map names to non-negative integers", field)
        return dict(value)

    def key_maps(self, num_nodes: dict[str, int]) -> dict[str, KeyMap]:
        section = self.meta.get("keys", {}) or {}
        if not isinstance(section, dict):
            self.fail("must be a JSON object", "keys")
        out = {}
        for t, entry in section.items():
            where = f"keys.{t}"
            if t not in num_nodes:
                self.fail(f"node type {t!r} is not declared", "keys")
            if not isinstance(entry, dict) or entry.get("kind") not in ("integer", "string"):
                self.fail("must be an object whose kind is 'integer' or 'string'", where)
            bits = entry.get("bits")
            if not isinstance(bits, int) or isinstance(bits, bool) or not 0 <= bits <= 16:
                self.fail("must be an integer in [0, 16]", f"{where}.bits")
            by_id, by_key = entry.get("by_id"), entry.get("by_key")
            rows = self.count_list(entry.get("rows_per_file"), f"{where}.rows_per_file")
            if not isinstance(by_id, list) or not all(isinstance(f, str) for f in by_id) \
                    or len(by_id) != len(rows):
                self.fail("must list one file per rows_per_file entry", f"{where}.by_id")
            if sum(rows) != num_nodes[t]:
                self.fail(f"holds {sum(rows)} keys for {num_nodes[t]} nodes",
                          f"{where}.rows_per_file")
            if not isinstance(by_key, list) or len(by_key) != 1 << bits or \
                    not all(isinstance(f, str) for f in by_key):
                self.fail(f"must list 2^bits = {1 << bits} files", f"{where}.by_key")
            out[t] = KeyMap(entry["kind"], bits, tuple(by_id), rows, tuple(by_key))
        return out

    def data_section(self, name: str, owners: dict):
        section = self.meta.get(name, {}) or {}
        if not isinstance(section, dict):
            self.fail("must be a JSON object", name)
        out = {}
        for owner, fields in section.items():
            if owner not in owners:
                self.fail(f"type {owner!r} is not declared", name)
            if not isinstance(fields, dict):
                self.fail("must map field names to file lists", f"{name}.{owner}")
            out[owners[owner]] = {f: self.chunk_files(entry, f"{name}.{owner}.{f}")
                                  for f, entry in fields.items()}
        return out


def _check_files_exist(graph: ChunkedGraph, meta_path: str) -> None:
    for name, cf in graph.file_lists():
        for i, rel in enumerate(cf.files):
            if not exists(graph.path(rel)):
                raise FormatError(f"chunk file {rel!r} is missing", file=meta_path,
                                  field=f"{name}.data[{i}]")
