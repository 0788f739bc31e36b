"""GraphSAGE with mean aggregation on a :class:`trainer.batch.Batch`, in plain torch;
heterogeneous graphs get one neighbor projection per edge type, summed (a homogeneous graph is
the one-type case)."""

from __future__ import annotations

import torch
from torch import nn

from ..batch import Batch, Layer
from .common import aggregate_mean, as_dict, key, like


class SAGEConv(nn.Module):
    """``h'[v] = W_self h[v] + sum_etype W_etype mean_{u in N_etype(v)} h[u]`` for the
    destination nodes of a layer. Projects before aggregating (``W`` has no bias, so the mean
    commutes) so edges carry ``out_dim`` values, not ``in_dim``."""

    def __init__(self, in_dims: dict[str, int], out_dim: int, edge_types: list):
        super().__init__()
        self.self_lin = nn.ModuleDict({key(t): nn.Linear(d, out_dim) for t, d in in_dims.items()})
        self.neigh_lin = nn.ModuleDict({key(tuple(et)): nn.Linear(in_dims[et[0]], out_dim,
                                                                  bias=False)
                                        for et in edge_types})
        self.out_dim = out_dim

    def forward(self, layer: Layer, h: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        out = {t: self.self_lin[key(t)](h[t][:n]) for t, n in layer.num_dst_dict.items() if n}
        for et, ei in layer.edge_index_dict.items():
            n_dst = layer.num_dst_dict.get(et[2], 0)
            if not n_dst or not ei.shape[1]:
                continue
            msg = self.neigh_lin[key(et)](h[et[0]])[ei[0]]
            out[et[2]] = out[et[2]] + aggregate_mean(msg, ei[1], n_dst)
        return out


class GraphSAGE(nn.Module):
    """``num_layers`` SAGE layers, ReLU and dropout between; the last layer is ``out_dim`` wide
    (class logits for node classification, embeddings for link prediction). ``forward(batch)``
    returns the outputs of every type's destinations of the last layer: a tensor on a graph
    with one node type, else a dict."""

    def __init__(self, in_dims: dict[str, int], hidden: int, out_dim: int, edge_types: list,
                 num_layers: int, dropout: float = 0.5):
        super().__init__()
        dims = [hidden] * (num_layers - 1) + [out_dim]
        self.layers = nn.ModuleList()
        for i, width in enumerate(dims):
            layer_in = in_dims if i == 0 else {t: hidden for t in in_dims}
            self.layers.append(SAGEConv(layer_in, width, edge_types))
        self.dropout = nn.Dropout(dropout)
        self.types = list(in_dims)

    def forward(self, batch: Batch):
        h = batch.x_dict
        for i, layer in enumerate(batch.layers):
            h = self.layer(i, layer, h)
        return like(h, batch.x_dict if len(self.types) > 1 else batch.x)

    def layer(self, i: int, layer: Layer, h):
        """Layer ``i`` alone (dropout, convolution, ReLU but after the last), ``h`` a tensor
        or a dict per type, returned in the same form: what layer-wise inference runs over all
        nodes, one layer at a time."""
        hd = as_dict(h, self.types)
        out = self.layers[i](layer, {t: self.dropout(v) for t, v in hd.items()})
        if i < len(self.layers) - 1:
            out = {t: torch.relu(v) for t, v in out.items()}
        return like(out, h)


def build(spec, **args) -> GraphSAGE:
    """``--model sage``: GraphSAGE-mean with the spec's widths (no extra arguments)."""
    if args:
        raise TypeError(f"sage takes no --model-args, got {sorted(args)}")
    return GraphSAGE(spec.in_dims, spec.hidden, spec.out_dim, spec.edge_types, spec.num_layers,
                     spec.dropout)
