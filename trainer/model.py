"""GraphSAGE with mean aggregation on blocks, in plain torch; heterogeneous graphs get one
neighbor projection per edge type, summed (a homogeneous graph is the one-type case)."""

from __future__ import annotations

import torch
from torch import nn

from formats import EdgeType

from .dist_sampler import Block


def _key(name: str) -> str:
    return name.replace(".", "_")  # ModuleDict keys cannot hold dots


class SAGEConv(nn.Module):
    """``h'[v] = W_self h[v] + sum_etype W_etype mean_{u in N_etype(v)} h[u]`` for the
    destination nodes of a block. Projects before aggregating (``W`` has no bias, so the mean
    commutes) so edges carry ``out_dim`` values, not ``in_dim``."""

    def __init__(self, in_dims: dict[str, int], out_dim: int, edge_types: list[EdgeType]):
        super().__init__()
        self.self_lin = nn.ModuleDict({_key(t): nn.Linear(d, out_dim) for t, d in in_dims.items()})
        self.neigh_lin = nn.ModuleDict({_key(str(et)): nn.Linear(in_dims[et.src], out_dim,
                                                                 bias=False)
                                        for et in edge_types})
        self.out_dim = out_dim

    def forward(self, block: Block, h: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        out = {t: self.self_lin[_key(t)](h[t][:n]) for t, n in block.num_dst.items() if n}
        for et, (src, dst) in block.edges.items():
            n_dst = block.num_dst[et.dst]
            if not n_dst:
                continue
            msg = self.neigh_lin[_key(str(et))](h[et.src])[src]
            total = msg.new_zeros((n_dst, self.out_dim)).index_add_(0, dst, msg)
            deg = torch.bincount(dst, minlength=n_dst).clamp(min=1).unsqueeze(1)
            out[et.dst] = out[et.dst] + total / deg
        return out


class GraphSAGE(nn.Module):
    """``num_layers`` SAGE layers, ReLU and dropout between; the last layer is ``out_dim`` wide
    (class logits for node classification, embeddings for link prediction)."""

    def __init__(self, in_dims: dict[str, int], hidden: int, out_dim: int,
                 edge_types: list[EdgeType], num_layers: int, dropout: float = 0.5):
        super().__init__()
        dims = [hidden] * (num_layers - 1) + [out_dim]
        self.layers = nn.ModuleList()
        for i, out_dim in enumerate(dims):
            layer_in = in_dims if i == 0 else {t: hidden for t in in_dims}
            self.layers.append(SAGEConv(layer_in, out_dim, edge_types))
        self.dropout = nn.Dropout(dropout)

    def forward(self, blocks: list[Block], x: dict[str, torch.Tensor], ntype: str | None = None
                ):
        """Outputs for the last block's destinations: of ``ntype``, or per type (a dict)."""
        h = x
        for i, block in enumerate(blocks):
            h = self.layer(i, block, h)
        return h if ntype is None else h[ntype]

    def layer(self, i: int, block: Block, h: dict[str, torch.Tensor]
              ) -> dict[str, torch.Tensor]:
        """Layer ``i`` alone (dropout, convolution, ReLU but after the last): what layer-wise
        inference runs over all nodes, one layer at a time."""
        h = self.layers[i](block, {t: self.dropout(v) for t, v in h.items()})
        if i < len(self.layers) - 1:
            h = {t: torch.relu(v) for t, v in h.items()}
        return h


class LinkModel(nn.Module):
    """An encoder (GraphSAGE embeddings per node type) and an edge scorer: logits of the
    positive and negative pairs of a batch, given as positions into the last block's
    destinations of ``etype.src`` / ``etype.dst``."""

    def __init__(self, encoder: GraphSAGE, scorer: nn.Module):
        super().__init__()
        self.encoder, self.scorer = encoder, scorer

    def forward(self, blocks: list[Block], x: dict[str, torch.Tensor], etype: EdgeType,
                pos: tuple[torch.Tensor, torch.Tensor], neg: tuple[torch.Tensor, torch.Tensor]
                ) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.encoder(blocks, x)
        h_src, h_dst = h[etype.src], h[etype.dst]
        return (self.scorer(h_src[pos[0]], h_dst[pos[1]]),
                self.scorer(h_src[neg[0]], h_dst[neg[1]]))
