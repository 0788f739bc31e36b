"""A stock PyG model on the whole sampled subgraph, as with PyG's NeighborLoader; its input
width is found on the first batch (``in_channels=-1``).

    python -m trainer --graph parts/graph.json --model examples.models.pyg_gcn:build
"""
import torch
from torch_geometric.nn.models import GCN


class Model(torch.nn.Module):
    def __init__(self, spec):
        super().__init__()
        self.gcn = GCN(-1, spec.hidden, spec.num_layers, spec.out_dim, dropout=spec.dropout)

    def forward(self, batch):
        return self.gcn(batch.x, batch.edge_index)[:batch.batch_size]


def build(spec):
    return Model(spec)
