"""R-GCN (Schlichtkrull et al. 2018, "Modeling Relational Data with Graph Convolutional
Networks") on a :class:`graphprep.trainer.batch.Batch`, in plain torch.

Layer: ``h'[v] = W_self[type(v)] h[v] + b[type(v)] + sum_r 1/|N_r(v)| sum_{u in N_r(v)} W_r h[u]``
over the relations ``r`` (edge types) into ``v``'s type: mean normalisation per relation, a
self-loop weight and bias per node type. ``num_bases`` B > 0: basis decomposition,
``W_r = sum_b a_rb V_b``; relations whose sources have the same input width share one set of B
bases (in hidden layers that is every relation). With ``--edge-feat``, an edge's message is
``W_r h[u] + U_r e`` (``e`` its data row, flattened to float): a learned projection of the edge
data added to the message before the mean. A homogeneous graph is the one-relation case.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from graphprep.trainer.batch import Layer
from graphprep.trainer.models.common import LayerStack, MeanRelationConv, key, matmul

EdgeKey = tuple[str, str, str]


def _glorot(*shape: int) -> nn.Parameter:
    """A parameter initialised as Xavier-uniform over its last two dimensions."""
    bound = math.sqrt(6.0 / (shape[-2] + shape[-1]))
    return nn.Parameter(torch.empty(shape).uniform_(-bound, bound))


class RGCNConv(MeanRelationConv):
    """One R-GCN layer over the destinations of a :class:`Layer` (see the module docstring).
    ``in_dims[t]``: input width of node type ``t``; ``edge_dims[et]``: width of the edge data
    rows of the edge types that have them. Holds ``R x in x out`` weights (or ``B x in x out``
    bases per source width and ``R x B`` coefficients)."""

    def __init__(self, in_dims: dict[str, int], out_dim: int, edge_types: list[EdgeKey],
                 num_bases: int | None = None, edge_dims: dict[EdgeKey, int] | None = None):
        super().__init__()
        self.edge_types = [tuple(et) for et in edge_types]
        self.num_bases = num_bases or 0
        self.self_lin = nn.ModuleDict({key(t): nn.Linear(d, out_dim) for t, d in in_dims.items()})
        if self.num_bases:
            widths = sorted({in_dims[et[0]] for et in self.edge_types})
            self.bases = nn.ParameterDict({str(w): _glorot(self.num_bases, w, out_dim)
                                           for w in widths})
            self.coefficients = nn.ParameterDict({key(et): _glorot(1, self.num_bases)
                                                  for et in self.edge_types})
        else:
            self.weights = nn.ParameterDict({key(et): _glorot(in_dims[et[0]], out_dim)
                                             for et in self.edge_types})
        self.edge_lin = nn.ModuleDict({key(tuple(et)): nn.Linear(d, out_dim, bias=False)
                                       for et, d in (edge_dims or {}).items()})
        self.in_dims, self.out_dim = dict(in_dims), out_dim

    def weight(self, et: EdgeKey) -> torch.Tensor:
        """``W_r`` of edge type ``et``: ``[in, out]`` (``h @ W_r``)."""
        if not self.num_bases:
            return self.weights[key(et)]
        bases = self.bases[str(self.in_dims[et[0]])]
        return torch.einsum("b,bio->io", self.coefficients[key(et)][0], bases)

    def message(self, et: EdgeKey, h_src: torch.Tensor, edge_index: torch.Tensor,
                layer: Layer) -> torch.Tensor:
        # project the sources, then gather: edges carry out_dim values, not in_dim (a sparse
        # input: a sparse x dense product)
        msg = matmul(h_src, self.weight(et))[edge_index[0]]
        if key(et) in self.edge_lin:
            attr = layer.edge_attr_dict.get(et)
            if attr is None:
                raise ValueError(f"rgcn: edge type {et} was built with edge data, but this "
                                 "layer carries none (layer.edge_attr_dict)")
            msg = msg + self.edge_lin[key(et)](attr.flatten(1).to(msg.dtype))
        return msg


class RGCN(LayerStack):
    """``num_layers`` R-GCN layers, ReLU and dropout between; the last is ``out_dim`` wide
    (class logits, or embeddings for link prediction). ``forward(batch)`` returns the last
    layer's outputs of every type's destinations: a tensor on a graph with one node type,
    else a dict."""

    def __init__(self, in_dims: dict[str, int], hidden: int, out_dim: int,
                 edge_types: list[EdgeKey], num_layers: int, dropout: float = 0.5,
                 num_bases: int | None = None, edge_dims: dict[EdgeKey, int] | None = None):
        dims = [hidden] * (num_layers - 1) + [out_dim]
        convs = [RGCNConv(in_dims if i == 0 else {t: hidden for t in in_dims}, width,
                          edge_types, num_bases, edge_dims) for i, width in enumerate(dims)]
        # as R-GCN: dropout between layers, not on the input rows
        super().__init__(convs, in_dims, dropout, torch.relu, dropout_first=False)


def build(spec, num_bases: int | None = None) -> RGCN:
    """``--model rgcn``: R-GCN with the spec's widths; ``num_bases`` (``--model-args
    '{"num_bases": 4}'``): basis decomposition with that many bases, 0 or None for full
    per-relation weights. Edge data (``--edge-feat``) is used where the spec has it."""
    if num_bases is not None and (isinstance(num_bases, bool) or not isinstance(num_bases, int)
                                  or num_bases < 0):
        raise ValueError(f"num_bases must be a whole number >= 0 (0: full weights), got "
                         f"{num_bases!r}")
    return RGCN(spec.in_dims, spec.hidden, spec.out_dim, spec.edge_types, spec.num_layers,
                spec.dropout, num_bases, spec.edge_dims)
