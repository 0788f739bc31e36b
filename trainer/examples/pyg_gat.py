"""GAT as a PyG user writes it, one GATConv per sampled layer of the batch:

    python -m graphprep.trainer --graph parts/graph.json --model graphprep.trainer.examples.pyg_gat:build \
        --model-args '{"heads": 8}'
"""
import torch
import torch.nn.functional as F
from torch_geometric.nn import GATConv


class GAT(torch.nn.Module):
    def __init__(self, spec, heads: int):
        super().__init__()
        width = spec.hidden // heads                 # per head; the heads are concatenated
        dims = [spec.in_dim] + [width * heads] * (spec.num_layers - 1)
        self.convs = torch.nn.ModuleList(GATConv(d, width, heads, dropout=spec.dropout)
                                         for d in dims[:-1])
        self.convs.append(GATConv(dims[-1], spec.out_dim, dropout=spec.dropout))
        self.dropout = spec.dropout

    def forward(self, batch):
        h = batch.x
        for i, (conv, layer) in enumerate(zip(self.convs, batch.layers)):
            h = F.dropout(h, self.dropout, self.training)
            # bipartite: the layer's destinations are the first rows of its sources
            h = conv((h, h[:layer.num_dst]), layer.edge_index)
            h = F.elu(h) if i < len(self.convs) - 1 else h
        return h                                     # the seeds' logits


def build(spec, heads: int = 8) -> GAT:
    """``heads`` attention heads per hidden layer (1 to --hidden)."""
    if not 1 <= heads <= spec.hidden:
        raise ValueError(f"heads must be between 1 and --hidden ({spec.hidden}), got {heads}")
    return GAT(spec, heads)
