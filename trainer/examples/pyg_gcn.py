"""PyG's GCN on the whole sampled subgraph; in_channels=-1: sized on the first batch.

    python -m graphprep.trainer --graph parts/graph.json --model graphprep.trainer.examples.pyg_gcn:build

It takes dense inputs: on a sparse (CSR) feature the trainer densifies every batch for it
(and warns once what that costs); see ``sparse_sage`` for a model that keeps them sparse.
"""
import torch
from torch_geometric.nn.models import GCN


class SubgraphGCN(torch.nn.Module):
    def __init__(self, spec):
        super().__init__()
        self.gcn = GCN(-1, spec.hidden, spec.num_layers, spec.out_dim, dropout=spec.dropout)

    def forward(self, batch):  # the seeds are the first batch_size rows
        return self.gcn(batch.x, batch.edge_index)[:batch.batch_size]


build = SubgraphGCN  # --model graphprep.trainer.examples.pyg_gcn:build calls build(spec)
