"""PyG graphs: a ``torch.save``d ``Data`` / ``HeteroData``, or the processed file of a
single-graph ``InMemoryDataset`` (``<root>/<Name>/processed/data.pt``).

Needs torch and torch_geometric to unpickle (only loaded for this input). The file is loaded
whole, as PyG itself does; each array is then staged to ``.npy`` one at a time and chunked by
tasks. Which tensors are node-level and which edge-level is PyG's own call
(``store.is_node_attr`` / ``store.is_edge_attr``), and a tensor is carried only when it also
has one row per node (edge) of its type. Node-level ``x`` -> ``feat``, ``y`` -> ``label``,
edge-level ``edge_attr`` -> ``feat``; every other tensor keeps its name. Whatever is not
carried (graph-level attributes, ``edge_label_index``, lists, ...) is named in one log line.
Load only files you trust (pickle).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

import numpy as np

from graphprep.formats import EdgeType, FormatError
from graphprep.formats.sparse import CsrRows, index_dtype
from graphprep.pipeline.convert.arrays_in import edge_index_parts, split_edge_index, stage
from graphprep.pipeline.convert.sources import EdgeSource, SourceGraph

log = logging.getLogger(__name__)

HOMO_NODE, HOMO_EDGE = "_N", EdgeType("_N", "_E", "_N")
NODE_ALIASES = {"x": "feat", "y": "label"}
EDGE_ALIASES = {"edge_attr": "feat"}
STRUCTURE = frozenset({"edge_index", "num_nodes", "adj", "adj_t"})   # the graph, not data
PROCESSED_SIDE_FILES = frozenset({"pre_transform.pt", "pre_filter.pt"})


# ----------------------------------------------------------------------------- finding the file

def processed_file(folder: str) -> str | None:
    """The processed dataset file of an ``InMemoryDataset`` folder, or None when ``folder``
    is not one. ``folder`` is the dataset's folder (holding ``processed/``) or ``processed/``
    itself; ``data.pt`` is PyG's name, else the one ``.pt`` there (OGB's wrappers write
    ``geometric_data_processed.pt``) besides ``pre_transform.pt``/``pre_filter.pt``."""
    inner = os.path.join(folder, "processed")
    where = inner if os.path.isdir(inner) else folder
    if where == folder and os.path.basename(os.path.normpath(folder)) != "processed":
        return None
    names = sorted(os.listdir(where))
    if "data.pt" in names:
        return os.path.join(where, "data.pt")
    candidates = [n for n in names if n.endswith(".pt") and n not in PROCESSED_SIDE_FILES]
    if len(candidates) > 1:
        raise FormatError(f"several processed files ({', '.join(candidates)}): pass one of them",
                          file=where)
    return os.path.join(where, candidates[0]) if candidates else None


def resolve_input(path: str) -> str:
    """``path`` itself for a file; the processed file of a dataset folder."""
    if not os.path.isdir(path):
        return path
    found = processed_file(path)
    if found is None:
        raise FormatError("a folder read as PyG must hold processed/data.pt (an "
                          "InMemoryDataset's folder) or be that processed/ folder", file=path)
    return found


def dataset_name(path: str) -> str:
    """``<Name>`` for ``<root>/<Name>/processed/<file>``, else the file's stem."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.basename(folder) == "processed":
        return os.path.basename(os.path.dirname(folder))
    return os.path.splitext(os.path.basename(path))[0]


# ----------------------------------------------------------------------------- loading

def load_pyg(path: str):
    """Unpickle ``path`` (torch and torch_geometric imported here only)."""
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


def _type_name(obj) -> str:
    """What a loaded object is, for messages: ``tuple of (dict, NoneType)``, ``Tensor``."""
    if isinstance(obj, tuple):
        return f"tuple of ({', '.join(type(o).__name__ for o in obj)})"
    return type(obj).__name__


def _not_a_graph(obj, path: str) -> FormatError:
    """The error for a file holding something else than a graph or a processed dataset."""
    return FormatError(f"expected a PyG Data or HeteroData, or an InMemoryDataset's processed "
                       f"file, found {_type_name(obj)}", file=path)


def graph_count(slices) -> int:
    """Graphs in an ``InMemoryDataset``, as PyG's ``len()`` counts them: one without slices,
    else the length of the first slice vector (nested per type for ``HeteroData``) minus 1."""
    if slices is None:
        return 1
    stack = [slices]
    while stack:
        node = stack.pop(0)
        if isinstance(node, Mapping):
            stack.extend(node.values())
        elif hasattr(node, "__len__"):
            return len(node) - 1
    return 0


def _modernized(data):
    """A ``Data`` pickled by PyG 1.x (attributes in ``__dict__``, no ``_store``) rebuilt with
    ``from_dict``; any other object as it is."""
    if "_store" in vars(data) or "_global_store" in vars(data):
        return data
    fields = {k: v for k, v in vars(data).items() if v is not None and not k.startswith("__")}
    if "__num_nodes__" in vars(data) and vars(data)["__num_nodes__"] is not None:
        fields["num_nodes"] = vars(data)["__num_nodes__"]
    return type(data).from_dict(fields)


def from_processed(obj: tuple, path: str):
    """An ``InMemoryDataset`` processed tuple -> its one graph, as ``InMemoryDataset.load``
    does: ``(data dict, slices, data class)`` (PyG >= 2.4; a ``sizes`` entry before the
    class is skipped) or ``(Data, slices)`` (older PyG, OGB's wrappers)."""
    from torch_geometric.data import Data

    if len(obj) not in (2, 3, 4):
        raise _not_a_graph(obj, path)
    data, slices = obj[0], obj[1]
    cls = obj[-1] if len(obj) > 2 and isinstance(obj[-1], type) else Data
    if slices is not None and not isinstance(slices, Mapping):
        raise FormatError(f"not an InMemoryDataset file: its slices are a "
                          f"{type(slices).__name__} (found {_type_name(obj)})", file=path)
    count = graph_count(slices)
    if count != 1:
        raise FormatError(f"an InMemoryDataset of {count} graphs; prep chunk reads one graph "
                          "(save the one to convert with torch.save(dataset[i], 'g.pt'))",
                          file=path)
    if not isinstance(data, Mapping):
        return data                      # (Data, slices): PyG < 2.4 and OGB's wrappers
    try:
        return cls.from_dict(dict(data))
    except Exception as err:
        raise FormatError(f"rebuilding {cls.__name__} with from_dict failed "
                          f"({type(err).__name__}: {err})", file=path) from None


def read_graph(path: str):
    """The ``Data`` or ``HeteroData`` held by ``path`` (a saved graph or a processed file)."""
    obj = load_pyg(path)                 # first: it says what to install if PyG is missing
    from torch_geometric.data import Data, HeteroData

    if isinstance(obj, tuple):
        obj = from_processed(obj, path)
    if isinstance(obj, (Data, HeteroData)):
        return _modernized(obj)
    raise _not_a_graph(obj, path)


# ----------------------------------------------------------------------------- tensors

def _as_numpy(value):
    """A tensor or array as a NumPy array; None for anything else (lists, strings, ...).
    Sparse tensors are made dense; ``bfloat16`` (no NumPy dtype) is refused by the caller."""
    if isinstance(value, np.ndarray):
        return value
    import torch

    if not isinstance(value, torch.Tensor):
        return None
    t = value.detach().as_subclass(torch.Tensor).cpu()
    if t.layout != torch.strided:
        t = t.to_dense()
    return t.numpy()


def _as_csr(value) -> CsrRows | None:
    """A 2-D sparse torch tensor (COO, CSR, ...) as :class:`CsrRows`, kept sparse (node data:
    bag-of-words and multi-hot features); None for anything else."""
    import torch

    if not isinstance(value, torch.Tensor) or value.layout == torch.strided or value.dim() != 2:
        return None
    t = value.detach().cpu()
    csr = t.coalesce().to_sparse_csr() if t.layout == torch.sparse_coo else t.to_sparse_csr()
    dim = int(csr.shape[1])
    return CsrRows(csr.crow_indices().numpy().astype(np.int64),
                   csr.col_indices().numpy().astype(index_dtype(dim)),
                   csr.values().numpy().astype(np.float32, copy=False), dim)


def _describe(value) -> str:
    """``Tensor [2, 300] int64``, ``int``: how an attribute is shown in the log line."""
    shape = getattr(value, "shape", None)
    if shape is not None and hasattr(value, "dtype"):
        dtype = str(value.dtype).replace("torch.", "")
        return f"{type(value).__name__} [{', '.join(map(str, shape))}] {dtype}"
    return type(value).__name__


def _level(store, key: str, levels: dict) -> str | None:
    """The level ("node"/"edge", among ``levels``) PyG gives ``store[key]``, or None."""
    for level in levels:
        if store.is_node_attr(key) if level == "node" else store.is_edge_attr(key):
            return level
    return None


def _carried(store, key: str, levels: dict, skipped: list, where: str):
    """``(level, array)`` for ``store[key]`` when PyG calls it node- or edge-level (one of
    ``levels``: level -> row count) and it has one row per node (edge); else None, with the
    attribute and the reason appended to ``skipped``."""
    value = store[key]
    level, name = _level(store, key, levels), f"{where}{key}"
    if level is None:
        what = "graph-level" if len(levels) > 1 else f"not {next(iter(levels))}-level"
        skipped.append(f"{name} ({what} {_describe(value)})")
        return None
    if str(getattr(value, "dtype", "")) == "torch.bfloat16":
        skipped.append(f"{name} ({level}-level bfloat16, no NumPy dtype: cast it to float32)")
        return None
    array = _as_csr(value) if level == "node" else None
    array = _as_numpy(value) if array is None else array
    if array is None:
        skipped.append(f"{name} ({level}-level {_describe(value)}, not a tensor)")
        return None
    if array.ndim == 0 or levels[level] is None or array.shape[0] != levels[level]:
        skipped.append(f"{name} ({level}-level {_describe(value)}, not one row per {level})")
        return None
    return level, array


def _renamed(key: str, level: str, taken: dict, path: str, where: str) -> str:
    """Our name for PyG's ``key``; two keys landing on one name (``x`` and ``feat``) refused."""
    name = (NODE_ALIASES if level == "node" else EDGE_ALIASES).get(key, key)
    if (level, name) in taken:
        raise FormatError(f"both '{taken[level, name]}' and '{key}' would be {level} field "
                          f"'{name}'", file=path, field=f"{where}{key}")
    taken[level, name] = key
    return name


def store_fields(store, levels: dict, staging: str, prefix: str, path: str, skipped: list,
                 where: str = "") -> dict:
    """Every node- or edge-level tensor of one PyG store (``levels``: the levels it can hold,
    each with its row count), staged under our field names in PyG's key order:
    ``{level: {name: NpyArray}}``. Everything else but the structure goes to ``skipped``."""
    out: dict = {level: {} for level in levels}
    taken: dict = {}
    for key in store.keys():
        if key in STRUCTURE:
            continue
        found = _carried(store, key, levels, skipped, where)
        if found is not None:
            level, array = found
            name = _renamed(key, level, taken, path, where)
            out[level][name] = stage(staging, f"{prefix}.{level}.{key}", array)
    return out


def _edge_index(store, path: str, et: EdgeType, staging: str):
    """(src, dst) staged, and the edge count, of one edge store."""
    if "edge_index" not in store.keys() or store["edge_index"] is None:
        raise FormatError(f"edge type {et} has no edge_index (adj/adj_t layouts are not read)",
                          file=path, field="edge_index")
    ei = _as_numpy(store["edge_index"])
    src, dst = split_edge_index(path, ei, staging, f"edge.{et}")
    return src, dst, src.num_rows


def _count(store) -> int | None:
    """A node store's node count as PyG infers it (None when it cannot)."""
    n = store.num_nodes
    return None if n is None else int(n)


# ----------------------------------------------------------------------------- graphs

def _homogeneous(data, path: str, staging: str, chunk_size: int, skipped: list):
    """A ``Data``: its one node type, count, edges and node data."""
    n = _count(data)
    src, dst, num_edges = _edge_index(data, path, HOMO_EDGE, staging)
    fields = store_fields(data, {"edge": num_edges, "node": n}, staging, "g", path, skipped)
    edata, nodes = fields["edge"], fields["node"]
    edges = EdgeSource(HOMO_EDGE, edge_index_parts(path, src, dst, edata, chunk_size),
                       tuple(edata))
    return (HOMO_NODE,), {HOMO_NODE: n}, (edges,), ({HOMO_NODE: nodes} if nodes else {})


def _heterogeneous(data, path: str, staging: str, chunk_size: int, skipped: list):
    """A ``HeteroData``: per node type its count and node data, per edge type its edges and
    edge data, graph-level attributes (the global store) to ``skipped``."""
    node_types = tuple(data.node_types)
    counts = {t: _count(data[t]) for t in node_types}
    node_data = {}
    for t in node_types:
        fields = store_fields(data[t], {"node": counts[t]}, staging, f"n.{t}", path, skipped,
                              f"{t}.")["node"]
        if fields:
            node_data[t] = fields
    edges = []
    for s, r, d in data.edge_types:
        et, store = EdgeType(s, r, d), data[s, r, d]
        src, dst, num_edges = _edge_index(store, path, et, staging)
        edata = store_fields(store, {"edge": num_edges}, staging, f"e.{et}", path, skipped,
                             f"{et}.")["edge"]
        edges.append(EdgeSource(et, edge_index_parts(path, src, dst, edata, chunk_size),
                                tuple(edata)))
    for key, value in data.to_dict().get("_global_store", {}).items():
        skipped.append(f"{key} (graph-level {_describe(value)})")
    return node_types, counts, tuple(edges), node_data


def from_pyg(path: str, staging: str, chunk_size: int, name: str | None) -> SourceGraph:
    """A PyG graph file or processed dataset (file or folder) as a :class:`SourceGraph`."""
    file = resolve_input(path)
    data = read_graph(file)              # imports torch_geometric, or says what to install
    from torch_geometric.data import HeteroData
    skipped: list = []
    build = _heterogeneous if isinstance(data, HeteroData) else _homogeneous
    node_types, counts, edges, node_data = build(data, file, staging, chunk_size, skipped)
    if skipped:
        log.warning("%s: not carried: %s", file, ", ".join(skipped))
    return SourceGraph(name or dataset_name(file), node_types, counts, edges, node_data,
                       inputs=(file,))
