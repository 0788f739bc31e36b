"""Partitioned graph (FORMATS.md §3): ``graph.json`` and the per-part folders.

The trainer reads only this. :func:`load_partitioned` is the one validating loader of
``graph.json``; the partition book is ``node_map``/``edge_map`` (owner = one searchsorted).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from graphprep.formats.errors import FormatError
from graphprep.formats.integrity import FileRecord
from graphprep.formats.schema import EdgeType
from graphprep.formats.storage import join, read_text

GRAPH_JSON = "graph.json"
PARTITIONED_VERSION = 1
# Edge data of a link split (``prep split-edges``): a type carrying all three has its
# held-out (validation, test) in-edges stored last per destination, from MESSAGE_END on.
SPLIT_MASKS = ("train_mask", "val_mask", "test_mask")
HELD_OUT_MASKS = ("val_mask", "test_mask")
MESSAGE_END = "message_end.npy"


def has_split_masks(fields) -> bool:
    """Whether an edge type with edge data named ``fields`` carries a link split."""
    return set(SPLIT_MASKS) <= set(fields)


@dataclass(frozen=True)
class PartInfo:
    """Where a part lives, and its integrity manifest: ``{relative path: FileRecord}`` over
    every file of the part folder (empty in graph.json files written before manifests)."""

    path: str          # relative to the graph.json folder, or a URL
    machine: str = ""
    manifest: dict[str, FileRecord] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"path": self.path, "machine": self.machine,
                "manifest": {rel: r.to_json() for rel, r in sorted(self.manifest.items())}}

    @classmethod
    def from_json(cls, obj: dict, *, file: str, p: int) -> "PartInfo":
        manifest = {rel: FileRecord.from_json(r, file=file, field=f"parts[{p}].manifest.{rel}")
                    for rel, r in obj.get("manifest", {}).items()}
        return cls(obj["path"], obj.get("machine", ""), manifest)


@dataclass(frozen=True)
class PartitionedGraph:
    root: str
    graph_name: str
    num_parts: int
    part_method: str
    seed: int | None
    node_types: tuple[str, ...]
    edge_types: tuple[EdgeType, ...]
    num_nodes: dict[str, int]
    num_edges: dict[EdgeType, int]
    node_map: dict[str, list[list[int]]]
    edge_map: dict[EdgeType, list[list[int]]]
    node_feats: dict[str, dict[str, dict]]
    edge_feats: dict[EdgeType, dict[str, dict]]
    parts: tuple[PartInfo, ...]
    source: dict = field(default_factory=dict)
    halo_hops: int = 1
    format_version: int = PARTITIONED_VERSION
    dispatch_id: str = ""                 # also in each part's part.json ("" before manifests)
    num_classes: dict[str, int] = field(default_factory=dict)  # per type with an int `label`
    # Original keys, where the input had them: per node type {"kind", "by_id", "rows_per_file"}
    # (Parquet files of one column `key` in original-ID order), and vocabularies per owner.
    keys: dict[str, dict] = field(default_factory=dict)
    vocab: dict[str, dict[str, str]] = field(default_factory=dict)
    # Types whose parts store each destination's held-out in-edges last, where
    # edges/<etype>/message_end.npy says (dispatches before it: none).
    held_out_last: tuple[EdgeType, ...] = ()

    def part_path(self, p: int, *rel: str) -> str:
        return join(join(self.root, self.parts[p].path), "/".join(rel)) if rel else \
            join(self.root, self.parts[p].path)

    def owner(self, ntype: str, new_ids: np.ndarray) -> np.ndarray:
        """Part owning each per-type new node ID (searchsorted over the P range starts)."""
        starts = np.array([r[0] for r in self.node_map[ntype]])
        return np.searchsorted(starts, new_ids, side="right") - 1

    def to_json(self) -> dict:
        return {
            "format_version": self.format_version, "graph_name": self.graph_name,
            "num_parts": self.num_parts, "part_method": self.part_method, "seed": self.seed,
            "halo_hops": self.halo_hops, "node_types": list(self.node_types),
            "edge_types": [str(e) for e in self.edge_types],
            "num_nodes": self.num_nodes, "num_edges": {str(e): n for e, n in self.num_edges.items()},
            "node_map": self.node_map,
            "edge_map": {str(e): m for e, m in self.edge_map.items()},
            "node_feats": self.node_feats,
            "edge_feats": {str(e): f for e, f in self.edge_feats.items()},
            "parts": [p.to_json() for p in self.parts], "source": self.source,
            "dispatch_id": self.dispatch_id, "num_classes": self.num_classes,
            **({"held_out_last": [str(e) for e in self.held_out_last]}
               if self.held_out_last else {}),
            **({"keys": self.keys} if self.keys else {}),
            **({"vocab": self.vocab} if self.vocab else {})}


def load_partitioned(path: str) -> PartitionedGraph:
    """Read and check ``graph.json`` (a file path or its folder). Raises FormatError."""
    if not path.endswith(".json"):
        path = join(path, GRAPH_JSON)
    try:
        meta = json.loads(read_text(path))
    except FileNotFoundError:
        raise FormatError("graph.json not found", file=path) from None
    except json.JSONDecodeError as err:
        raise FormatError(f"invalid JSON: {err.msg} (line {err.lineno})", file=path) from None
    root = path.rsplit("/", 1)[0] if "/" in path else "."
    version = meta.get("format_version", 1) if isinstance(meta, dict) else None
    if version != PARTITIONED_VERSION:
        raise FormatError(f"format_version {version!r} is not one this graphprep reads "
                          f"({PARTITIONED_VERSION})", file=path, field="format_version")
    try:
        etypes = [EdgeType.parse(e, file=path) for e in meta["edge_types"]]
        g = PartitionedGraph(
            root=root, graph_name=meta["graph_name"], num_parts=int(meta["num_parts"]),
            part_method=meta["part_method"], seed=meta.get("seed"),
            node_types=tuple(meta["node_types"]), edge_types=tuple(etypes),
            num_nodes={t: int(n) for t, n in meta["num_nodes"].items()},
            num_edges={EdgeType.parse(e): int(n) for e, n in meta["num_edges"].items()},
            node_map=meta["node_map"],
            edge_map={EdgeType.parse(e): m for e, m in meta["edge_map"].items()},
            node_feats=meta.get("node_feats", {}),
            edge_feats={EdgeType.parse(e): f for e, f in meta.get("edge_feats", {}).items()},
            parts=tuple(PartInfo.from_json(p, file=path, p=i)
                        for i, p in enumerate(meta["parts"])),
            source=meta.get("source", {}), halo_hops=meta.get("halo_hops", 1),
            format_version=version, dispatch_id=str(meta.get("dispatch_id", "")),
            num_classes={t: int(c) for t, c in meta.get("num_classes", {}).items()},
            keys=meta.get("keys", {}), vocab=meta.get("vocab", {}),
            held_out_last=tuple(EdgeType.parse(e, file=path)
                                for e in meta.get("held_out_last", [])))
    except KeyError as err:
        raise FormatError("required field is missing", file=path, field=err.args[0]) from None
    _check_ranges(g, path)
    for et in g.held_out_last:
        if et not in g.edge_types or not has_split_masks(g.edge_feats.get(et, {})):
            raise FormatError(f"{et} is not an edge type with {'/'.join(SPLIT_MASKS)}",
                              file=path, field="held_out_last")
    return g


def _check_ranges(g: PartitionedGraph, path: str) -> None:
    """Partition book: per type, P contiguous ranges covering [0, count)."""
    books = [("node_map", t, g.node_map.get(t), g.num_nodes[t]) for t in g.node_types]
    books += [("edge_map", str(e), g.edge_map.get(e), g.num_edges[e]) for e in g.edge_types]
    for name, key, ranges, total in books:
        if ranges is None or len(ranges) != g.num_parts:
            raise FormatError(f"needs {g.num_parts} ranges", file=path, field=f"{name}.{key}")
        expect = 0
        for p, (start, end) in enumerate(ranges):
            if start != expect or end < start:
                raise FormatError(f"range of part {p} is [{start}, {end}), expected to start "
                                  f"at {expect}", file=path, field=f"{name}.{key}")
            expect = end
        if expect != total:
            raise FormatError(f"ranges end at {expect}, the type has {total}", file=path,
                              field=f"{name}.{key}")
    if len(g.parts) != g.num_parts:
        raise FormatError(f"lists {len(g.parts)} parts for num_parts {g.num_parts}", file=path,
                          field="parts")
