"""PyG ``Data`` / ``HeteroData`` saved with ``torch.save``.

Needs torch and torch_geometric to unpickle (only loaded for this input). The file is loaded
whole, as PyG itself does; each array is then staged to ``.npy`` one at a time and chunked by
tasks. ``x`` -> ``feat``, ``y`` -> ``label``, ``edge_attr`` -> edge data ``feat``; other
node-level tensors (masks, ...) keep their names. Load only files you trust (pickle).
"""

from __future__ import annotations

import os

from formats import EdgeType, FormatError
from .arrays_in import FIELD_ALIASES, edge_index_parts, split_edge_index, stage
from .sources import EdgeSource, SourceGraph

HOMO_NODE, HOMO_EDGE = "_N", EdgeType("_N", "_E", "_N")


def load_pyg(path: str):
    try:
        import torch
        import torch_geometric  # noqa: F401  (registers the classes torch.load unpickles)
    except ImportError as err:
        raise FormatError(f"reading PyG files needs torch_geometric ({err}); "
                          "pip install torch_geometric", file=path) from None
    try:
        return torch.load(path, weights_only=False, map_location="cpu")
    except Exception as err:
        raise FormatError(f"torch.load failed ({type(err).__name__}: {err})", file=path) from None


def _node_fields(store, num_nodes: int, staging: str, prefix: str) -> dict:
    out = {}
    for key, value in store.items():
        if key in ("edge_index", "num_nodes") or not hasattr(value, "numpy"):
            continue
        if value.dim() >= 1 and value.shape[0] == num_nodes:
            out[FIELD_ALIASES.get(key, key)] = stage(staging, f"{prefix}.{key}",
                                                     value.detach().cpu().numpy())
    return out


def from_pyg(path: str, staging: str, chunk_size: int, name: str | None) -> SourceGraph:
    data = load_pyg(path)
    cls = type(data).__name__
    graph_name = name or os.path.splitext(os.path.basename(path))[0]
    if cls == "Data":
        n = int(data.num_nodes)
        src, dst = split_edge_index(path, data.edge_index.numpy(), staging, "edge_index")
        edata = {}
        if getattr(data, "edge_attr", None) is not None:
            edata["feat"] = stage(staging, "edge_attr", data.edge_attr.numpy())
        parts = edge_index_parts(path, src, dst, edata, chunk_size)
        nodes = _node_fields(data, n, staging, "node")
        return SourceGraph(graph_name, (HOMO_NODE,), {HOMO_NODE: n},
                           (EdgeSource(HOMO_EDGE, parts, tuple(edata)),),
                           {HOMO_NODE: nodes} if nodes else {}, inputs=(path,))
    if cls == "HeteroData":
        node_types = tuple(data.node_types)
        counts = {t: int(data[t].num_nodes) for t in node_types}
        node_data = {t: f for t in node_types
                     if (f := _node_fields(data[t], counts[t], staging, f"node.{t}"))}
        edges = []
        for s, r, d in data.edge_types:
            et, store = EdgeType(s, r, d), data[s, r, d]
            src, dst = split_edge_index(path, store.edge_index.numpy(), staging, str(et))
            edata = {}
            if getattr(store, "edge_attr", None) is not None:
                edata["feat"] = stage(staging, f"{et}.edge_attr", store.edge_attr.numpy())
            edges.append(EdgeSource(et, edge_index_parts(path, src, dst, edata, chunk_size),
                                    tuple(edata)))
        return SourceGraph(graph_name, node_types, counts, tuple(edges), node_data,
                           inputs=(path,))
    raise FormatError(f"expected a torch_geometric Data or HeteroData, found {cls}", file=path)
