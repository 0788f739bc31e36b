"""``prep export --to pyg``: the layout of ``torch_geometric.distributed.Partitioner``, and
labels and splits where PyG's distributed examples read them::

    OUT/<name>-partitions/            what LocalGraphStore/LocalFeatureStore.from_partition load
        META.json                     num_parts, node/edge types, node_offset, is_hetero, is_sorted
        node_map.pt, edge_map.pt      part of every node / edge by original ID (homogeneous)
        node_map/<ntype>.pt, edge_map/<src>__<rel>__<dst>.pt          (heterogeneous)
        part_<i>/graph.pt             COO row/col (original IDs), edge_id, size; sorted by col
        part_<i>/node_feats.pt        {global_id, feats} (heterogeneous: per type, also id)
        part_<i>/edge_feats.pt        {global_id, feats} where the graph has edge data
    OUT/<name>-label/label.pt         labels of the labelled node type, by original ID
    OUT/<name>-{train,val,test}-partitions/partition<i>.pt   part i's owned nodes in the split

Our parts already keep every edge with the owner of its destination, the same rule as PyG's
(CSC), so part i here is part i of ours: no edge moves. PyG's heterogeneous IDs are global
over all types (``node_offset``: types in ``node_types`` order); per-type IDs go to ``id`` and
``global_id`` of edge features, as PyG's Partitioner writes them. Our ``feat`` field is PyG's
``x`` (``edge_attr`` for edges); other fields keep their names. Dicts are saved as plain dicts:
PyG's own ``defaultdict`` fails to load under torch's weights-only loader.

One task per part holds that part's arrays; the maps and labels are built in memory-mapped
scratch files, one task per type (O(nodes) or O(edges) of one type on disk, not in memory).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import numpy as np

from graphprep.formats import EdgeType
from graphprep.formats.partitioned import PartitionedGraph

from graphprep.pipeline.export.parts import PartView
from graphprep.pipeline.core.requires import import_in_task, require

TORCH_MISSING = "--to pyg writes torch files and needs torch (pip install -c constraints.txt torch)"

NODE_NAMES = {"feat": "x"}
EDGE_NAMES = {"feat": "edge_attr"}
SPLITS = {"train": "train_mask", "val": "val_mask", "test": "test_mask"}


@dataclass(frozen=True)
class PygLayout:
    graph: PartitionedGraph
    out: str

    @property
    def hetero(self) -> bool:
        g = self.graph
        return len(g.node_types) > 1 or len(g.edge_types) > 1

    @property
    def root(self) -> str:
        return os.path.join(self.out, f"{self.graph.graph_name}-partitions")

    def node_offset(self) -> dict[str, int]:
        starts = np.cumsum([0] + [self.graph.num_nodes[t] for t in self.graph.node_types])
        return {t: int(s) for t, s in zip(self.graph.node_types, starts)}

    def edge_offset(self) -> dict[EdgeType, int]:
        starts = np.cumsum([0] + [self.graph.num_edges[e] for e in self.graph.edge_types])
        return {e: int(s) for e, s in zip(self.graph.edge_types, starts)}

    def labelled_type(self) -> str | None:
        """The node type whose labels and splits PyG's examples read: the one with a
        ``label`` field (None when no type or several have one)."""
        types = [t for t in self.graph.node_types if "label" in self.graph.node_feats.get(t, {})]
        return types[0] if len(types) == 1 else None

    def map_path(self, kind: str, name: str) -> str:
        """``node_map.pt`` / ``edge_map.pt``, or ``<kind>_map/<type>.pt`` when heterogeneous;
        ``label``: ``<graph>-label/label.pt``."""
        if kind == "label":
            return os.path.join(self.out, f"{self.graph.graph_name}-label", "label.pt")
        if not self.hetero:
            return os.path.join(self.root, f"{kind}_map.pt")
        return os.path.join(self.root, f"{kind}_map", f"{name}.pt")

    def split_folder(self, split: str) -> str:
        return os.path.join(self.out, f"{self.graph.graph_name}-{split}-partitions")

    def folders(self) -> list[str]:
        """Every folder the export's tasks write into. The client makes them and tasks never
        do: a task still running after a failed export was cancelled and its output removed
        would otherwise make it again."""
        t = self.labelled_type()
        fields = self.graph.node_feats.get(t, {}) if t else {}
        return ([os.path.join(self.root, f"part_{p}") for p in range(self.graph.num_parts)] +
                [self.split_folder(s) for s, mask in SPLITS.items() if mask in fields] +
                sorted({os.path.dirname(x.path) for x in map_tasks(self)}))


def _tensors(torch, arrays: dict[str, np.ndarray], names: dict[str, str]) -> dict:
    return {names.get(n, n): torch.from_numpy(np.array(a)) for n, a in arrays.items()}


def require_torch() -> None:
    """FormatError on ``--to`` unless torch is importable here (found without importing it)."""
    require(("torch",), TORCH_MISSING)


def write_part(task: tuple[PygLayout, int]) -> dict[str, int]:
    """Part ``p``'s ``graph.pt``, ``node_feats.pt``, ``edge_feats.pt`` and split index files.
    Holds the part's arrays. Returns its node and edge counts."""
    torch = import_in_task("torch", TORCH_MISSING)

    layout, p = task
    g, view = layout.graph, PartView(layout.graph, p)
    folder = os.path.join(layout.root, f"part_{p}")
    node_off, edge_off = layout.node_offset(), layout.edge_offset()
    graph, edge_feats, node_feats = {}, {}, {}
    for et in g.edge_types:
        e = view.edges(et)
        key = (et.src, et.rel, et.dst)
        graph[key] = {"edge_id": torch.from_numpy(e.ids + edge_off[et]),
                      "row": torch.from_numpy(e.src), "col": torch.from_numpy(e.dst),
                      "size": (g.num_nodes[et.src], g.num_nodes[et.dst])}
        data = view.edge_data(et)
        if data:
            edge_feats[key] = {"global_id": torch.from_numpy(e.ids.copy()),
                               "feats": _tensors(torch, data, EDGE_NAMES)}
    for t in g.node_types:
        ids = view.owned(t)
        node_feats[t] = {"global_id": torch.from_numpy(ids + node_off[t]),
                         "id": torch.from_numpy(ids.copy()),
                         "feats": _tensors(torch, view.node_data(t), NODE_NAMES)}
    if not layout.hetero:
        (graph,) = graph.values()
        edge_feats = next(iter(edge_feats.values()), {})
        (node_feats,) = node_feats.values()
        del node_feats["id"]
    torch.save(graph, os.path.join(folder, "graph.pt"))
    torch.save(node_feats, os.path.join(folder, "node_feats.pt"))
    torch.save(edge_feats, os.path.join(folder, "edge_feats.pt"))
    _write_splits(layout, view, torch)
    return {"nodes": sum(g.node_map[t][p][1] - g.node_map[t][p][0] for t in g.node_types),
            "edges": sum(g.edge_map[e][p][1] - g.edge_map[e][p][0] for e in g.edge_types)}


def _write_splits(layout: PygLayout, view: PartView, torch) -> None:
    t = layout.labelled_type()
    fields = layout.graph.node_feats.get(t, {}) if t else {}
    for split, mask in SPLITS.items():
        if mask not in fields:
            continue
        ids = view.owned(t)[np.asarray(view.load("node_feats", t, f"{mask}.npy")).astype(bool)]
        torch.save(torch.from_numpy(ids),
                   os.path.join(layout.split_folder(split), f"partition{view.p}.pt"))


@dataclass(frozen=True)
class MapTask:
    layout: PygLayout
    kind: str                  # "node", "edge" or "label"
    name: str                  # node type, or edge type as text

    @property
    def path(self) -> str:
        name = EdgeType.parse(self.name).dirname if self.kind == "edge" else self.name
        return self.layout.map_path(self.kind, name)


def write_map(task: MapTask) -> None:
    """One per-ID file (part of every node/edge of a type, or labels by original ID): filled
    part by part in a memory-mapped scratch array beside it, then saved and removed."""
    torch = import_in_task("torch", TORCH_MISSING)

    layout, g = task.layout, task.layout.graph
    count = g.num_edges[EdgeType.parse(task.name)] if task.kind == "edge" else \
        g.num_nodes[task.name]
    path = task.path
    scratch = path + ".scratch.npy"
    values = _map_values(layout, task, count, scratch)
    try:
        torch.save(torch.from_numpy(values), path)
    finally:
        del values
        os.remove(scratch)


def _map_values(layout: PygLayout, task: MapTask, count: int, scratch: str) -> np.ndarray:
    g = layout.graph
    if task.kind == "label":
        spec = g.node_feats[task.name]["label"]
        shape, dtype = (count, *spec["shape"]), np.dtype(spec["dtype"])
    else:
        shape, dtype = (count,), np.dtype(np.int64)
    values = np.lib.format.open_memmap(scratch, mode="w+", dtype=dtype, shape=shape)
    for p in range(g.num_parts):
        view = PartView(g, p)
        if task.kind == "edge":
            et = EdgeType.parse(task.name)
            values[np.asarray(view.load("edges", et.dirname, "orig_ids.npy"))] = p
        elif task.kind == "node":
            values[view.owned(task.name)] = p
        else:
            values[view.owned(task.name)] = view.load("node_feats", task.name, "label.npy")
    return values


def map_tasks(layout: PygLayout) -> list[MapTask]:
    g = layout.graph
    tasks = [MapTask(layout, "node", t) for t in g.node_types]
    tasks += [MapTask(layout, "edge", str(e)) for e in g.edge_types]
    if layout.labelled_type():
        tasks.append(MapTask(layout, "label", layout.labelled_type()))
    return tasks


def write_meta(layout: PygLayout) -> None:
    g, hetero = layout.graph, layout.hetero
    meta = {"num_parts": g.num_parts,
            "node_types": list(g.node_types) if hetero else None,
            "edge_types": [[e.src, e.rel, e.dst] for e in g.edge_types] if hetero else None,
            "node_offset": list(layout.node_offset().values()) if hetero else None,
            "is_hetero": hetero, "is_sorted": True}
    with open(os.path.join(layout.root, "META.json"), "w") as f:
        json.dump(meta, f)


def export_pyg(graph: PartitionedGraph, out: str, runner) -> dict:
    """Write ``graph`` in PyG's layout under ``out`` (a fresh folder). Returns counts."""
    layout = PygLayout(graph, out)
    for folder in layout.folders():
        os.makedirs(folder, exist_ok=True)
    counts = runner(write_part, [(layout, p) for p in range(graph.num_parts)], "export pyg parts")
    runner(write_map, map_tasks(layout), "export pyg maps")
    write_meta(layout)
    return {"root": layout.root, "parts": counts, "labelled_type": layout.labelled_type()}
