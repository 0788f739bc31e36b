"""What a model factory is told about the graph: :class:`ModelSpec`, built from graph.json and
the run's options alone (no torch, no data read), so the launcher and every rank build the
same spec."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

EdgeKey = tuple[str, str, str]

CONSTANT_INPUT = 1      # width of the constant input of a node type without features


@dataclass(frozen=True)
class ModelSpec:
    """The graph's metadata a model needs, nothing of its data.

    ``in_dims[t]``: input width of node type ``t`` (its features, or its learnable embedding,
    or 1 for a constant input; plus appended columns such as log-degree); ``out_dim``: class
    count (node task) or embedding width (link task); ``hidden``, ``num_layers`` (= the number
    of fanouts), ``dropout``: the run's options; ``node_types`` / ``edge_types`` (``(src, rel,
    dst)`` tuples): the graph's, in graph.json order; ``edge_dims``: width of the ``--edge-feat``
    rows per edge type that has them; ``target``: the node type classified (node task) or the
    predicted edge type's destination type (link task); ``task``: ``"node"`` or ``"link"``."""

    in_dims: dict[str, int]
    out_dim: int
    hidden: int
    num_layers: int
    dropout: float
    node_types: list[str]
    edge_types: list[EdgeKey]
    target: str
    task: str
    edge_dims: dict[EdgeKey, int] = field(default_factory=dict)

    @property
    def metadata(self) -> tuple[list[str], list[EdgeKey]]:
        """PyG's ``(node_types, edge_types)``, for ``to_hetero`` and ``HGTConv``."""
        return list(self.node_types), list(self.edge_types)

    @property
    def is_hetero(self) -> bool:
        return len(self.node_types) > 1 or len(self.edge_types) > 1

    @property
    def in_dim(self) -> int:
        """The input width of a graph with one node type (raises on several)."""
        if len(self.in_dims) != 1:
            raise AttributeError("in_dim: the graph has several node types; use in_dims")
        return next(iter(self.in_dims.values()))

    @property
    def edge_dim(self) -> int | None:
        """The ``--edge-feat`` width of a graph with one edge type (None without one)."""
        if len(self.edge_types) != 1:
            raise AttributeError("edge_dim: the graph has several edge types; use edge_dims")
        return next(iter(self.edge_dims.values()), None)


def data_width(spec: dict | None) -> int:
    """Row width of a node or edge data array described in graph.json (``shape`` per row)."""
    return math.prod(spec["shape"]) if spec else 0


def input_width(node_feats: dict, cfg, feature: str = "feat") -> int:
    """Model input width of a node type whose graph.json data arrays are ``node_feats``:
    its ``feature`` rows (flattened), else its learnable embedding (``--featureless embed``:
    ``--embedding-dim``) or a constant; plus log-degree when on."""
    featureless = cfg.embedding_dim if cfg.learns_embeddings else CONSTANT_INPUT
    width = data_width(node_feats.get(feature)) or featureless
    return width + (1 if cfg.uses_degree_input else 0)


def model_spec(graph, cfg, target: str, out_dim: int) -> ModelSpec:
    """The spec of ``cfg``'s run on the partitioned ``graph`` (graph.json only): ``target``
    the node type of the seeds, ``out_dim`` the class count (node task) or ``--hidden``."""
    edge_dims = {}
    if cfg.edge_feat:
        edge_dims = {(et.src, et.rel, et.dst): data_width(graph.edge_feats[et][cfg.edge_feat])
                     for et in graph.edge_types
                     if cfg.edge_feat in graph.edge_feats.get(et, {})}
    return ModelSpec({t: input_width(graph.node_feats.get(t, {}), cfg)
                      for t in graph.node_types}, out_dim, cfg.hidden, len(cfg.fanouts),
                     cfg.dropout, list(graph.node_types),
                     [(et.src, et.rel, et.dst) for et in graph.edge_types], target, cfg.task,
                     edge_dims)
