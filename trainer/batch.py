"""The batch a model receives: plain torch dataclasses with PyG's field names.

A :class:`Batch` is one sampled mini-batch, ready for a ``torch.nn.Module``:

- ``layers``: one bipartite :class:`Layer` per message-passing layer, input layer first. In
  layer ``i`` the destinations are the prefix of the sources (``h[:layer.num_dst]``), and the
  sources of layer ``i + 1`` are the destinations of layer ``i``, so
  ``h = conv((h, h[:layer.num_dst]), layer.edge_index)`` runs PyG's bipartite convolutions
  (``SAGEConv``, ``GATConv``, ``GraphConv``, ...) layer by layer, as DGL's blocks do.
- the whole sampled subgraph in PyG ``NeighborLoader``'s layout: ``edge_index`` over every
  sampled node (seeds first, then each hop's new nodes), each node's in-edges those of the hop
  that reached it, with ``num_sampled_nodes`` / ``num_sampled_edges`` per hop (for
  ``model(batch.x, batch.edge_index)``, ``to_hetero`` models and ``trim_to_layer``).
- ``x``, ``n_id`` (node IDs of the partitioned graph), ``orig_id`` (the input's original IDs),
  ``batch_size`` (the seeds are the first rows), ``y`` (the seeds' labels, node task),
  ``edge_label_index`` / ``edge_label`` (link task: positive and negative pairs as positions
  into the seeds).

A node type whose feature is sparse (CSR in graph.json) has its ``x`` as
:class:`graphprep.trainer.data.sparse.SparseRows` (``indptr``/``indices``/``values``, ``to_dense()``) for
models that declare ``sparse_input = True`` (the built-ins); any other model receives it
densified per batch, after the batch reached its device (:func:`dense_inputs_hook`).

Heterogeneous graphs: every field has a ``*_dict`` form keyed by node type ``str`` or edge type
``(src, rel, dst)``, holding every type of the graph (empty where a batch has none). The
``*_dict`` forms are always present; the plain forms (``x``, ``edge_index``, ...) exist on
homogeneous graphs only. Nothing here imports PyG except :meth:`Batch.to_pyg`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch

from graphprep.trainer.data.sparse import SparseRows, densify

EdgeKey = tuple[str, str, str]
log = logging.getLogger("graphprep.trainer")


def _only(d: dict, what: str):
    if len(d) != 1:
        raise AttributeError(f"{what}: this graph is heterogeneous ({len(d)} types); use "
                             f"{what}_dict")
    return next(iter(d.values()))


def _move(value, device):
    if isinstance(value, (torch.Tensor, SparseRows)):
        return value.to(device, non_blocking=True)
    if isinstance(value, dict):
        return {k: _move(v, device) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_move(v, device) for v in value)
    return value


@dataclass
class Layer:
    """One layer's bipartite graph. ``edge_index_dict[(src, rel, dst)]`` is ``[2, E]`` int64:
    row 0 the source's position among the ``num_src_dict[src]`` sources of its type, row 1 the
    destination's among the ``num_dst_dict[dst]`` destinations (the sources' prefix).
    ``edge_attr_dict`` holds the sampled edges' data rows (``--edge-feat``), in edge order,
    for the edge types that have it."""

    edge_index_dict: dict[EdgeKey, torch.Tensor]
    num_src_dict: dict[str, int]
    num_dst_dict: dict[str, int]
    edge_attr_dict: dict[EdgeKey, torch.Tensor] = field(default_factory=dict)

    @property
    def edge_index(self) -> torch.Tensor:
        return _only(self.edge_index_dict, "edge_index")

    @property
    def num_src(self) -> int:
        return _only(self.num_src_dict, "num_src")

    @property
    def num_dst(self) -> int:
        return _only(self.num_dst_dict, "num_dst")

    @property
    def edge_attr(self) -> torch.Tensor | None:
        _only(self.edge_index_dict, "edge_attr")
        return next(iter(self.edge_attr_dict.values()), None)

    def to(self, device) -> "Layer":
        return Layer(_move(self.edge_index_dict, device), dict(self.num_src_dict),
                     dict(self.num_dst_dict), _move(self.edge_attr_dict, device))


@dataclass
class Batch:
    """One mini-batch (see the module docstring). ``target`` is the node type whose first
    ``batch_size`` rows are the seeds (node task: the classified type; link task: the
    predicted edge type's destination type); ``batch_size_dict`` counts the seeds of every
    type (a link batch has seeds of both end types)."""

    layers: list[Layer]
    x_dict: dict[str, torch.Tensor]
    n_id_dict: dict[str, torch.Tensor]
    # the original IDs, or a function fetching them: most models never read them, so the
    # trainer's batches fetch them at first use (one request per owner part, then kept)
    orig_id_source: dict[str, torch.Tensor] | Callable[[], dict[str, torch.Tensor]]
    batch_size_dict: dict[str, int]
    target: str
    y: torch.Tensor | None = None
    edge_label_index: torch.Tensor | None = None
    edge_label: torch.Tensor | None = None
    edge_label_type: EdgeKey | None = None

    # --- the homogeneous forms -------------------------------------------------------------
    @property
    def x(self) -> torch.Tensor:
        return _only(self.x_dict, "x")

    @x.setter
    def x(self, value: torch.Tensor) -> None:
        _only(self.x_dict, "x")
        self.x_dict = {next(iter(self.x_dict)): value}

    @property
    def n_id(self) -> torch.Tensor:
        return _only(self.n_id_dict, "n_id")

    @property
    def orig_id_dict(self) -> dict[str, torch.Tensor]:
        if callable(self.orig_id_source):
            device = next(iter(self.n_id_dict.values())).device if self.n_id_dict else "cpu"
            self.orig_id_source = _move(self.orig_id_source(), device)
        return self.orig_id_source

    @property
    def orig_id(self) -> torch.Tensor:
        return _only(self.orig_id_dict, "orig_id")

    @property
    def batch_size(self) -> int:
        return self.batch_size_dict.get(self.target, 0)

    @property
    def is_hetero(self) -> bool:
        return len(self.x_dict) > 1 or len(self.layers[0].edge_index_dict) > 1

    @property
    def edge_index(self) -> torch.Tensor:
        return _only(self.edge_index_dict, "edge_index")

    @property
    def edge_attr(self) -> torch.Tensor | None:
        _only(self.edge_index_dict, "edge_attr")
        return next(iter(self.edge_attr_dict.values()), None)

    @property
    def num_sampled_nodes(self) -> list[int]:
        return _only(self.num_sampled_nodes_dict, "num_sampled_nodes")

    @property
    def num_sampled_edges(self) -> list[int]:
        return _only(self.num_sampled_edges_dict, "num_sampled_edges")

    # --- the whole sampled subgraph (PyG NeighborLoader layout), built on first use ---------
    @property
    def edge_index_dict(self) -> dict[EdgeKey, torch.Tensor]:
        return self._subgraph[0]

    @property
    def edge_attr_dict(self) -> dict[EdgeKey, torch.Tensor]:
        return self._subgraph[1]

    @property
    def num_sampled_nodes_dict(self) -> dict[str, list[int]]:
        return self._subgraph[2]

    @property
    def num_sampled_edges_dict(self) -> dict[EdgeKey, list[int]]:
        return self._subgraph[3]

    @functools.cached_property
    def _subgraph(self):
        return whole_subgraph(self.layers)

    def to(self, device) -> "Batch":
        """This batch with every tensor on ``device`` (non-blocking from pinned memory)."""
        return replace(self, layers=[layer.to(device) for layer in self.layers],
                       x_dict=_move(self.x_dict, device), n_id_dict=_move(self.n_id_dict, device),
                       orig_id_source=_move(self.orig_id_source, device),
                       y=_move(self.y, device), edge_label_index=_move(self.edge_label_index, device),
                       edge_label=_move(self.edge_label, device))

    def to_pyg(self):
        """A ``torch_geometric.data.Data`` (homogeneous) or ``HeteroData`` with the whole
        sampled subgraph, as PyG's ``NeighborLoader`` yields it (imports PyG here only);
        sparse inputs densified."""
        from torch_geometric.data import Data, HeteroData
        if not self.is_hetero:
            data = Data(x=densify(self.x), edge_index=self.edge_index, n_id=self.orig_id,
                        batch_size=self.batch_size, num_sampled_nodes=self.num_sampled_nodes,
                        num_sampled_edges=self.num_sampled_edges)
            if self.edge_attr is not None:
                data.edge_attr = self.edge_attr
            if self.y is not None:
                data.y = self.y
            if self.edge_label_index is not None:
                data.edge_label_index, data.edge_label = self.edge_label_index, self.edge_label
            return data
        data = HeteroData()
        for t, x in self.x_dict.items():
            data[t].x, data[t].n_id = densify(x), self.orig_id_dict[t]
            data[t].num_sampled_nodes = self.num_sampled_nodes_dict[t]
            data[t].batch_size = self.batch_size_dict.get(t, 0)
        for et, ei in self.edge_index_dict.items():
            data[et].edge_index = ei
            data[et].num_sampled_edges = self.num_sampled_edges_dict[et]
            if et in self.edge_attr_dict:
                data[et].edge_attr = self.edge_attr_dict[et]
        if self.y is not None:
            data[self.target].y = self.y
        if self.edge_label_index is not None:
            data[self.edge_label_type].edge_label_index = self.edge_label_index
            data[self.edge_label_type].edge_label = self.edge_label
        return data


def dense_inputs(batch: Batch) -> Batch:
    """``batch`` with sparse inputs densified (the batch itself when it has none)."""
    if not any(isinstance(v, SparseRows) for v in batch.x_dict.values()):
        return batch
    return replace(batch, x_dict=densify(batch.x_dict))


def dense_inputs_hook(module, args):
    """A forward pre-hook for a model that takes dense inputs only (no ``sparse_input =
    True``): its batch argument's sparse inputs are densified per batch, on the batch's
    device (the RPC and the host-to-device copy stayed sparse)."""
    if args and isinstance(args[0], Batch):
        return (dense_inputs(args[0]), *args[1:])
    return None


class DenseInputs:
    """:func:`dense_inputs_hook` that also says, once (``warn``), what the densifying costs:
    the bytes of the first batch's sparse inputs densified, against their stored bytes, and
    what to do instead. ``model`` names the model in the warning."""

    def __init__(self, model: str, warn: bool):
        self.model, self.warn = model, warn

    def __call__(self, module, args):
        if not args or not isinstance(args[0], Batch):
            return None
        sparse = {t: v for t, v in args[0].x_dict.items() if isinstance(v, SparseRows)}
        if not sparse:
            return None
        if self.warn:
            self.warn = False
            dense, stored = densified_bytes(sparse)
            if dense > stored:       # a CSR field that is not sparse costs nothing densified
                log.warning("%s", densify_warning(self.model, sparse))
        return (dense_inputs(args[0]), *args[1:])


def densify_warning(model: str, sparse: dict[str, SparseRows]) -> str:
    """The one-line warning for a model without ``sparse_input = True`` given the sparse
    inputs ``sparse`` (per node type) of a batch."""
    dense, stored = densified_bytes(sparse)
    widths = ", ".join(f"{t}: {v.dim} columns" for t, v in sparse.items())
    return (f"sparse input features ({widths}) are densified on every batch for this model: "
            f"{_size(dense)} per batch instead of {_size(stored)} stored, and "
            "a dense first-layer product; to keep them sparse, set sparse_input = True on the "
            "module and take batch.x with graphprep.trainer.sparse_matmul (the example "
            "graphprep.trainer.examples.sparse_sage, docs/models.md): --model " + model)


def densified_bytes(sparse: dict[str, SparseRows]) -> tuple[int, int]:
    """``(dense, stored)``: the bytes of ``sparse``'s rows densified, and as they are."""
    dense = sum(len(v) * v.dim * v.values.element_size() for v in sparse.values())
    stored = sum(v.indptr.nbytes + v.indices.nbytes + v.values.nbytes for v in sparse.values())
    return dense, stored


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MB" if n >= 2**20 else f"{n / 2**10:.1f} KB"


def whole_subgraph(layers: list[Layer]):
    """``(edge_index_dict, edge_attr_dict, num_sampled_nodes_dict, num_sampled_edges_dict)``
    of the sampled subgraph in PyG ``NeighborLoader`` layout: nodes are the input layer's
    sources (seeds, then each hop's new nodes: the layers' destination prefixes nest), and a
    node's in-edges are those sampled in the hop after the one that reached it, hop by hop.
    Layers re-sample nodes reached earlier (a seed is a destination in every layer); those
    repeated edges are left out here, as PyG samples each node once."""
    hops = len(layers)
    # sizes[h][t]: nodes of type t reached within h hops (h = 0: the seeds)
    sizes = [layers[-1].num_dst_dict] + [layers[hops - h].num_src_dict for h in range(1, hops + 1)]
    types = list(layers[0].num_src_dict)
    nodes = {t: [sizes[h].get(t, 0) - (sizes[h - 1].get(t, 0) if h else 0)
                 for h in range(hops + 1)] for t in types}
    edges, attrs, counts = {}, {}, {}
    for et in layers[0].edge_index_dict:
        chunks, attr_chunks, n = [], [], []
        for h in range(hops):              # hop h + 1 samples the in-edges of hop h's new nodes
            layer = layers[hops - 1 - h]
            ei = layer.edge_index_dict[et]
            first = sizes[h - 1].get(et[2], 0) if h else 0
            keep = ei[1] >= first if first else None
            chunks.append(ei if keep is None else ei[:, keep])
            n.append(chunks[-1].shape[1])
            if et in layer.edge_attr_dict:
                a = layer.edge_attr_dict[et]
                attr_chunks.append(a if keep is None else a[keep])
        edges[et] = torch.cat(chunks, 1)
        counts[et] = n
        if attr_chunks:
            attrs[et] = torch.cat(attr_chunks)
    return edges, attrs, nodes, counts


def full_graph_batch(x_dict: dict[str, torch.Tensor], edge_index_dict: dict[EdgeKey, torch.Tensor],
                     num_layers: int) -> Batch:
    """A batch of a whole graph held in memory: every node is a seed, and every layer is the
    whole graph (``num_src == num_dst ==`` the type's node count). For full-graph inference
    and tests of a model against a reference; holds the given tensors only."""
    counts = {t: len(x) for t, x in x_dict.items()}
    layer = Layer(dict(edge_index_dict), dict(counts), dict(counts))
    ids = {t: torch.arange(n) for t, n in counts.items()}
    target = next(iter(x_dict))
    return Batch([layer] * num_layers, dict(x_dict), ids, ids, dict(counts), target)
