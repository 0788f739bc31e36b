"""GraphSAGE with mean aggregation on a :class:`graphprep.trainer.batch.Batch`, in plain torch;
heterogeneous graphs get one neighbor projection per edge type, summed (a homogeneous graph is
the one-type case)."""

from __future__ import annotations

import torch
from torch import nn

from graphprep.trainer.batch import Layer
from graphprep.trainer.models.common import LayerStack, MeanRelationConv, key, project


class SAGEConv(MeanRelationConv):
    """``h'[v] = W_self h[v] + sum_etype W_etype mean_{u in N_etype(v)} h[u]`` for the
    destination nodes of a layer. Projects before aggregating (``W`` has no bias, so the mean
    commutes) so edges carry ``out_dim`` values, not ``in_dim``; a sparse input (layer 0 of a
    CSR feature) is projected as a sparse x dense product (:func:`project`)."""

    def __init__(self, in_dims: dict[str, int], out_dim: int, edge_types: list):
        super().__init__()
        self.self_lin = nn.ModuleDict({key(t): nn.Linear(d, out_dim) for t, d in in_dims.items()})
        self.neigh_lin = nn.ModuleDict({key(tuple(et)): nn.Linear(in_dims[et[0]], out_dim,
                                                                  bias=False)
                                        for et in edge_types})
        self.out_dim = out_dim

    def message(self, et, h_src: torch.Tensor, edge_index: torch.Tensor, layer: Layer
                ) -> torch.Tensor:
        return project(self.neigh_lin[key(et)], h_src)[edge_index[0]]


class GraphSAGE(LayerStack):
    """``num_layers`` SAGE layers, ReLU and dropout between; the last layer is ``out_dim`` wide
    (class logits for node classification, embeddings for link prediction)."""

    def __init__(self, in_dims: dict[str, int], hidden: int, out_dim: int, edge_types: list,
                 num_layers: int, dropout: float = 0.5):
        dims = [hidden] * (num_layers - 1) + [out_dim]
        convs = [SAGEConv(in_dims if i == 0 else {t: hidden for t in in_dims}, width, edge_types)
                 for i, width in enumerate(dims)]
        super().__init__(convs, in_dims, dropout, torch.relu)


def build(spec, **args) -> GraphSAGE:
    """``--model sage``: GraphSAGE-mean with the spec's widths (no extra arguments)."""
    if args:
        raise TypeError(f"sage takes no --model-args, got {sorted(args)}")
    return GraphSAGE(spec.in_dims, spec.hidden, spec.out_dim, spec.edge_types, spec.num_layers,
                     spec.dropout)
