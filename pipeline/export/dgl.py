"""``prep export --to dgl``: DGL 1.1.3's partition layout, as ``dgl.distributed.partition_graph``
writes it and ``dgl.distributed.load_partition`` / ``load_partition_book`` read it::

    OUT/<name>.json                  graph_name, num_nodes, num_edges, part_method, num_parts,
                                     halo_hops (1), node_map, edge_map, ntypes, etypes, part-<i>
    OUT/part<i>/graph.dgl            the part's local graph (COO): inner nodes, then halo nodes
    OUT/part<i>/node_feat.dgl        {"<ntype>/<name>": rows of the part's inner nodes}
    OUT/part<i>/edge_feat.dgl        {"<src>:<rel>:<dst>/<name>": rows of its inner edges}
    OUT/part<i>/orig_nids.dgl        {ntype: original per-type IDs of the inner nodes}
    OUT/part<i>/orig_eids.dgl        {"<src>:<rel>:<dst>": original IDs of its inner edges}

Part i here is part i of ours: DGL also keeps an edge with the owner of its destination.

IDs. DGL numbers nodes in one *homogeneous* space ordered by (part, node type, per-type ID),
types in DGL's order (sorted names, as ``dgl.heterograph`` orders them; type IDs in
``ntypes``/``etypes`` follow it). The homogeneous ID of the node of type t owned by part p
with our per-type new ID n is ``H(p, t) + n - node_map[t][p][0]``, where ``H(p, t)`` counts
all nodes of parts before p plus part p's nodes of types before t; the json's
``node_map[t][p]`` is ``[H(p, t), H(p, t) + count]``. DGL's *per-type* IDs (what
``RangePartitionBook.map_to_per_ntype`` returns, ``nid2partid(ids, ntype)`` takes) are then
exactly our per-type new IDs. Edges alike, with canonical edge types sorted as tuples and our
new edge IDs (a part's CSC order). Original IDs never appear in ``graph.dgl``: they are in
``orig_nids.dgl``/``orig_eids.dgl``, DGL's own per-part convention (``tools/dispatch_data.py
--save-orig-nids --save-orig-eids``); concatenated over parts in part order, they are the
maps ``partition_graph(return_mapping=True)`` returns.

graph.dgl holds what partition_graph saves: ``dgl.NID``/``dgl.EID`` (homogeneous IDs, int64),
``inner_node``/``inner_edge`` (uint8), ``part_id`` (owner of each node, int64) and, when there
are several types, ``dgl.NTYPE``/``dgl.ETYPE`` (type IDs, int32: partition_graph's save casts
both to int32 since they share the name ``_TYPE``). Inner nodes come first in homogeneous ID
order, then halo nodes (inner_node 0) in homogeneous ID order; inner edges (the part's own,
in homogeneous ID order) come first, so local ID = global ID - the part's first ID, as the
partition book assumes. Like partition_graph with halo_hops 1, a part also holds its inner
nodes' *out*-edges that other parts own (inner_edge 0, their own EIDs, after the inner edges
in EID order) with their destinations as halo nodes: DistGraph's ``out_degrees`` and
``sample_neighbors(edge_dir="out")`` read them from the source's part. (DGL's pipeline for
pre-partitioned graphs, ``tools/distpartitioning``, omits them; those two calls then miss
cross-part edges.) Halo nodes are thus the sources of the part's edges owned elsewhere (our
halo lists) and the destinations of its outer edges.

Two passes of one task per part: each part writes its edges with a halo source to scratch
files ``OUT/.outer-edges/from<q>-to<p>.npy`` by the source's owner (O(cut edges) in all),
then each part reads the files addressed to it and writes its files. A task holds one part's
arrays (owned nodes, halo, edges, outer edges, features, its DGL graph); the halo lookup is a
search in the part's sorted halo, with no per-node map. DGL (and torch) are imported inside
the tasks: ``prep`` itself never imports them.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass

import numpy as np

from graphprep.formats import EdgeType
from graphprep.formats.partitioned import PartitionedGraph

from graphprep.pipeline.export.parts import PartView
from graphprep.pipeline.core.requires import import_in_task, require

# DGL 1.1.3 imports `packaging`, falling back to setuptools<70's vendored copy: installing
# packaging avoids that downgrade, which conflicts with torch 2.13 (setuptools>=77.0.3).
DGL_MISSING = "--to dgl needs dgl (pip install 'dgl==1.1.3' packaging)"


def require_dgl() -> None:
    """FormatError on ``--to`` unless DGL (and torch) are importable here; found without
    importing them."""
    require(("dgl", "torch"), DGL_MISSING)


def _import_dgl():
    """``(dgl, torch)`` inside a task; a worker without DGL fails with the same message."""
    # Without a backend named, DGL writes ~/.dgl/config.json and prints a notice on import.
    os.environ.setdefault("DGLBACKEND", "pytorch")
    return import_in_task("dgl", DGL_MISSING), import_in_task("torch", DGL_MISSING)


@dataclass(frozen=True)
class DglLayout:
    """Where the files go and DGL's type order and homogeneous ID offsets; holds no arrays."""

    graph: PartitionedGraph
    out: str

    @property
    def ntypes(self) -> list[str]:
        return sorted(self.graph.node_types)

    @property
    def etypes(self) -> list[EdgeType]:
        return sorted(self.graph.edge_types, key=lambda e: (e.src, e.rel, e.dst))

    @property
    def hetero(self) -> bool:
        return len(self.ntypes) > 1 or len(self.etypes) > 1

    @property
    def config(self) -> str:
        return os.path.join(self.out, f"{self.graph.graph_name}.json")

    @property
    def scratch(self) -> str:
        """Outer-edge scratch files, removed once the parts are written."""
        return os.path.join(self.out, ".outer-edges")

    def etype_dst(self) -> np.ndarray:
        """DGL node type ID of each edge type's destination (by DGL edge type ID)."""
        return np.array([self.ntypes.index(e.dst) for e in self.etypes], dtype=np.int64)

    def part_files(self, p: int) -> dict[str, str]:
        """The ``part-<p>`` entry of the config: paths relative to it, as DGL writes them."""
        return {"node_feats": f"part{p}/node_feat.dgl", "edge_feats": f"part{p}/edge_feat.dgl",
                "part_graph": f"part{p}/graph.dgl"}

    def node_start(self) -> np.ndarray:
        """[P, T] homogeneous ID of the first node of each (part, type), types in
        :attr:`ntypes` order."""
        return _starts(self.graph.node_map, self.ntypes)

    def edge_start(self) -> np.ndarray:
        """[P, E] homogeneous ID of the first edge of each (part, type), :attr:`etypes` order."""
        return _starts(self.graph.edge_map, self.etypes)


def _starts(id_map: dict, types: list) -> np.ndarray:
    """Exclusive prefix sums of the (part, type) counts of ``id_map`` in row-major order:
    DGL's homogeneous space is ordered by part, then type."""
    counts = np.array([[id_map[t][p][1] - id_map[t][p][0] for t in types]
                       for p in range(len(id_map[types[0]]))], dtype=np.int64)
    return (np.cumsum(counts.ravel()) - counts.ravel()).reshape(counts.shape)


def homogeneous(graph: PartitionedGraph, starts: np.ndarray, ntype: str, ti: int,
                new_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(homogeneous IDs, owner parts)`` of per-type new IDs of type ``ntype`` (index ``ti``
    in DGL's order); arrays the size of ``new_ids``."""
    owner = graph.owner(ntype, new_ids)
    first = np.array([r[0] for r in graph.node_map[ntype]], dtype=np.int64)
    return starts[owner, ti] + (new_ids - first[owner]), owner


def _writable(a: np.ndarray) -> np.ndarray:
    # torch.from_numpy warns on read-only (memory-mapped) arrays: copy those only.
    return np.require(a, requirements=["C", "W"])


OUTER_ROWS = ("etype", "src", "dst", "dst_part", "eid")   # rows of an outer-edge scratch file


@dataclass(frozen=True)
class OuterEdges:
    """Edges another part stores (its inner edges) whose source this part owns: what
    partition_graph also puts in this part's graph.dgl, as ``inner_edge`` 0 out-edges."""

    etype: np.ndarray      # DGL edge type ID
    src: np.ndarray        # per-type new ID of the source (owned by this part)
    dst: np.ndarray        # homogeneous ID of the destination (owned by dst_part)
    dst_part: np.ndarray
    eid: np.ndarray        # homogeneous edge ID

    @classmethod
    def empty(cls) -> "OuterEdges":
        return cls(*(np.empty(0, np.int64) for _ in OUTER_ROWS))


def outer_path(layout: DglLayout, q: int, p: int) -> str:
    """Scratch file of the outer edges part ``q`` stores for part ``p``."""
    return os.path.join(layout.scratch, f"from{q}-to{p}.npy")


def write_outer(task: tuple[DglLayout, int]) -> int:
    """Part ``q``'s edges with a halo source, as one scratch file per source owner (an int64
    [5, n] array, rows :data:`OUTER_ROWS`). Holds one edge type's indices and the part's
    cut edges. Returns how many it wrote."""
    layout, q = task
    g, view = layout.graph, PartView(layout.graph, q)
    nstart, estart = layout.node_start(), layout.edge_start()
    rows = []
    for ei, et in enumerate(layout.etypes):
        base = ("edges", et.dirname)
        indptr = np.asarray(view.load(*base, "indptr.npy"))
        indices = np.asarray(view.load(*base, "indices.npy"))
        owned = g.node_map[et.src][q][1] - g.node_map[et.src][q][0]
        pos = np.flatnonzero(indices >= owned)
        halo = np.asarray(view.load("nodes", et.src, "halo_ids.npy"))
        src = halo[indices[pos].astype(np.int64) - owned].astype(np.int64)
        # An edge's destination is the CSC row whose range holds its position.
        dst_row = np.searchsorted(indptr, pos, side="right") - 1
        rows.append(np.stack([np.full(len(pos), ei), src,
                              nstart[q, layout.ntypes.index(et.dst)] + dst_row,
                              np.full(len(pos), q), estart[q, ei] + pos,
                              g.owner(et.src, src)]).astype(np.int64))
    cut = np.concatenate(rows, axis=1)
    order = np.argsort(cut[-1], kind="stable")
    cut = cut[:, order]
    bounds = np.searchsorted(cut[-1], np.arange(g.num_parts + 1))
    for p in range(g.num_parts):
        if bounds[p + 1] > bounds[p]:
            np.save(outer_path(layout, q, p), cut[:-1, bounds[p]:bounds[p + 1]])
    return cut.shape[1]


def read_outer(layout: DglLayout, p: int) -> OuterEdges:
    """Part ``p``'s outer edges from every other part's scratch file, in edge ID order (as
    partition_graph orders them)."""
    parts = [np.load(path) for q in range(layout.graph.num_parts)
             if q != p and os.path.exists(path := outer_path(layout, q, p))]
    if not parts:
        return OuterEdges.empty()
    cut = np.concatenate(parts, axis=1)
    cut = cut[:, np.argsort(cut[OUTER_ROWS.index("eid")], kind="stable")]
    return OuterEdges(*cut)


@dataclass
class LocalNodes:
    """Part ``p``'s local node numbering: inner nodes, then halo nodes (sources of its edges
    and destinations of its outer edges owned elsewhere), each in homogeneous ID order.
    Holds O(owned + halo) arrays of the part."""

    inner_start: np.ndarray            # [T] local ID of each type's first inner node
    halo_nid: np.ndarray               # homogeneous IDs of the halo nodes (ascending)
    halo_type: np.ndarray
    halo_part: np.ndarray
    num_inner: int
    inner_nid0: int                    # homogeneous ID of the first inner node

    def halo_local(self, nid: np.ndarray) -> np.ndarray:
        """Local IDs of halo nodes given by homogeneous ID."""
        return self.num_inner + np.searchsorted(self.halo_nid, nid)

    def fields(self, p: int) -> dict[str, np.ndarray]:
        """NID, NTYPE, part_id and inner_node of every local node."""
        counts = np.diff(np.append(self.inner_start, self.num_inner))
        n = self.num_inner + len(self.halo_nid)
        return {
            "nid": np.concatenate([np.arange(self.num_inner, dtype=np.int64) + self.inner_nid0,
                                   self.halo_nid]),
            "ntype": np.concatenate([np.repeat(np.arange(len(counts), dtype=np.int32), counts),
                                     self.halo_type.astype(np.int32)]),
            "part": np.concatenate([np.full(self.num_inner, p, np.int64), self.halo_part]),
            "inner": (np.arange(n) < self.num_inner).astype(np.uint8)}


def local_nodes(layout: DglLayout, view: PartView, outer: OuterEdges) -> LocalNodes:
    """Number part ``view.p``'s nodes as DGL's graph.dgl does (see :class:`LocalNodes`)."""
    g, p, starts = layout.graph, view.p, layout.node_start()
    counts = [g.node_map[t][p][1] - g.node_map[t][p][0] for t in layout.ntypes]
    nid, ntype, part = [outer.dst], [layout.etype_dst()[outer.etype]], [outer.dst_part]
    for ti, t in enumerate(layout.ntypes):
        halo = np.asarray(view.load("nodes", t, "halo_ids.npy")).astype(np.int64)
        h, owner = homogeneous(g, starts, t, ti, halo)
        nid.append(h)
        ntype.append(np.full(len(h), ti, np.int64))
        part.append(owner.astype(np.int64))
    nid, ntype, part = (np.concatenate(a) for a in (nid, ntype, part))
    # Types' ranges interleave by part, and an outer edge's destination may also be a
    # source here: one sort, then the first of each run of equal IDs.
    order = np.argsort(nid, kind="stable")
    nid = nid[order]
    first = np.ones(len(nid), bool)
    np.not_equal(nid[1:], nid[:-1], out=first[1:])
    keep = order[first]
    return LocalNodes(np.cumsum([0] + counts[:-1]).astype(np.int64), nid[first], ntype[keep],
                      part[keep], int(sum(counts)), int(starts[p, 0]))


@dataclass(frozen=True)
class LocalEdges:
    src: np.ndarray      # local source IDs
    dst: np.ndarray      # local destination IDs
    ids: np.ndarray      # original per-type edge IDs


def local_edges(layout: DglLayout, view: PartView, nodes: LocalNodes,
                et: EdgeType) -> LocalEdges:
    """The part's edges of ``et`` in its CSC order, endpoints as local node IDs. Holds the
    type's indptr/indices and three arrays of its edge count."""
    g, p = layout.graph, view.p
    base = ("edges", et.dirname)
    indptr = np.asarray(view.load(*base, "indptr.npy"))
    indices = np.asarray(view.load(*base, "indices.npy")).astype(np.int64)
    si, di = layout.ntypes.index(et.src), layout.ntypes.index(et.dst)
    owned_src = g.node_map[et.src][p][1] - g.node_map[et.src][p][0]
    inner = indices < owned_src
    src = np.where(inner, indices + nodes.inner_start[si], 0)
    halo = np.asarray(view.load("nodes", et.src, "halo_ids.npy")).astype(np.int64)
    src[~inner] = nodes.halo_local(homogeneous(
        g, layout.node_start(), et.src, si, halo[indices[~inner] - owned_src])[0])
    dst = np.repeat(np.arange(len(indptr) - 1, dtype=np.int64) + nodes.inner_start[di],
                    np.diff(indptr))
    return LocalEdges(src, dst, np.asarray(view.load(*base, "orig_ids.npy")))


def outer_local(layout: DglLayout, p: int, nodes: LocalNodes,
                outer: OuterEdges) -> tuple[np.ndarray, np.ndarray]:
    """``(src, dst)`` local IDs of the outer edges."""
    g = layout.graph
    src_type = np.array([layout.ntypes.index(e.src) for e in layout.etypes] or [0])
    first = np.array([g.node_map[t][p][0] for t in layout.ntypes], dtype=np.int64)
    st = src_type[outer.etype]
    return nodes.inner_start[st] + outer.src - first[st], nodes.halo_local(outer.dst)


def write_part(task: tuple[DglLayout, int]) -> dict[str, int]:
    """Part ``p``'s ``graph.dgl``, ``node_feat.dgl``, ``edge_feat.dgl``, ``orig_nids.dgl`` and
    ``orig_eids.dgl``. Holds the part's arrays and its DGL graph. Returns its counts."""
    dgl, torch = _import_dgl()
    from dgl.data.utils import save_tensors

    layout, p = task
    view = PartView(layout.graph, p)
    folder = os.path.join(layout.out, f"part{p}")
    outer = read_outer(layout, p)
    nodes = local_nodes(layout, view, outer)
    src, dst, etype, orig_eids, edge_feats = [], [], [], {}, {}
    for ei, et in enumerate(layout.etypes):
        e = local_edges(layout, view, nodes, et)
        src.append(e.src)
        dst.append(e.dst)
        etype.append(np.full(len(e.src), ei, np.int32))
        orig_eids[str(et)] = torch.from_numpy(_writable(e.ids))
        for name, rows in view.edge_data(et).items():
            edge_feats[f"{et}/{name}"] = torch.from_numpy(_writable(rows))
    num_inner = sum(len(s) for s in src)
    out_src, out_dst = outer_local(layout, p, nodes, outer)
    first_eid = layout.edge_start()[p, 0]
    edges = {"src": np.concatenate(src + [out_src]), "dst": np.concatenate(dst + [out_dst]),
             "etype": np.concatenate(etype + [outer.etype.astype(np.int32)]),
             "eid": np.concatenate([np.arange(first_eid, first_eid + num_inner), outer.eid]),
             "inner": (np.arange(num_inner + len(outer.eid)) < num_inner).astype(np.uint8)}
    del src, dst, etype, out_src, out_dst
    graph = dgl.graph((torch.from_numpy(edges.pop("src")), torch.from_numpy(edges.pop("dst"))),
                      num_nodes=nodes.num_inner + len(nodes.halo_nid), idtype=torch.int64)
    _set_fields(graph, torch, dgl, layout.hetero, nodes.fields(p), edges)
    dgl.save_graphs(os.path.join(folder, "graph.dgl"), [graph])
    del graph, edges
    node_feats, orig_nids = {}, {}
    for t in layout.ntypes:
        orig_nids[t] = torch.from_numpy(_writable(view.owned(t)))
        for name, rows in view.node_data(t).items():
            node_feats[f"{t}/{name}"] = torch.from_numpy(_writable(rows))
    save_tensors(os.path.join(folder, "node_feat.dgl"), node_feats)
    save_tensors(os.path.join(folder, "edge_feat.dgl"), edge_feats)
    save_tensors(os.path.join(folder, "orig_nids.dgl"), orig_nids)
    save_tensors(os.path.join(folder, "orig_eids.dgl"), orig_eids)
    return {"nodes": nodes.num_inner, "edges": num_inner, "halo": len(nodes.halo_nid),
            "outer_edges": len(outer.eid)}


def _set_fields(graph, torch, dgl, hetero: bool, nodes: dict[str, np.ndarray],
                edges: dict[str, np.ndarray]) -> None:
    """graph.dgl's node and edge fields, in the dtypes partition_graph saves them with."""
    graph.ndata[dgl.NID] = torch.from_numpy(nodes["nid"])
    graph.ndata["inner_node"] = torch.from_numpy(nodes["inner"])
    graph.ndata["part_id"] = torch.from_numpy(nodes["part"])
    graph.edata[dgl.EID] = torch.from_numpy(edges["eid"])
    graph.edata["inner_edge"] = torch.from_numpy(edges["inner"])
    if hetero:
        graph.ndata[dgl.NTYPE] = torch.from_numpy(nodes["ntype"])
        graph.edata[dgl.ETYPE] = torch.from_numpy(edges["etype"])


def _ranges(starts: np.ndarray, id_map: dict, types: list) -> dict[str, list[list[int]]]:
    """``{type: [[start, end] per part]}`` in homogeneous IDs (the json's node/edge_map)."""
    return {str(t): [[int(starts[p, i]), int(starts[p, i] + id_map[t][p][1] - id_map[t][p][0])]
                     for p in range(starts.shape[0])] for i, t in enumerate(types)}


def write_config(layout: DglLayout) -> None:
    """``<name>.json`` with partition_graph's keys, in its order; etypes as "src:rel:dst"."""
    g = layout.graph
    config = {
        "graph_name": g.graph_name,
        "num_nodes": int(sum(g.num_nodes.values())),
        "num_edges": int(sum(g.num_edges.values())),
        "part_method": g.part_method,
        "num_parts": g.num_parts,
        "halo_hops": 1,
        "node_map": _ranges(layout.node_start(), g.node_map, layout.ntypes),
        "edge_map": _ranges(layout.edge_start(), g.edge_map, layout.etypes),
        "ntypes": {t: i for i, t in enumerate(layout.ntypes)},
        "etypes": {str(e): i for i, e in enumerate(layout.etypes)},
    }
    for p in range(g.num_parts):
        config[f"part-{p}"] = layout.part_files(p)
    with open(layout.config, "w") as f:
        json.dump(config, f, sort_keys=False, indent=4)


def export_dgl(graph: PartitionedGraph, out: str, runner) -> dict:
    """Write ``graph`` in DGL's partition layout under ``out`` (a fresh folder). Returns
    ``{"root": out, "parts": [{nodes, edges, halo, outer_edges} per part]}``; the config is
    ``root/<graph_name>.json``."""
    require_dgl()
    layout = DglLayout(graph, out)
    # Folders are made here, never by a task (see export_pyg's PygLayout.folders).
    for folder in [layout.scratch] + [os.path.join(out, f"part{p}")
                                      for p in range(graph.num_parts)]:
        os.makedirs(folder, exist_ok=True)
    parts = [(layout, p) for p in range(graph.num_parts)]
    runner(write_outer, parts, "export dgl outer edges")
    counts = runner(write_part, parts, "export dgl parts")
    shutil.rmtree(layout.scratch)
    write_config(layout)
    return {"root": out, "parts": counts}
