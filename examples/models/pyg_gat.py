"""GAT written as a PyG user writes it, run layer by layer on the sampled layers of a batch.

    python -m trainer --graph parts/graph.json --model examples.models.pyg_gat:build \
        --model-args '{"heads": 8}'
"""
import torch
from torch_geometric.nn import GATConv


class GAT(torch.nn.Module):
    def __init__(self, spec, heads: int):
        super().__init__()
        widths = [spec.in_dim] + [spec.hidden // heads * heads] * (spec.num_layers - 1)
        self.convs = torch.nn.ModuleList(GATConv(w, spec.hidden // heads, heads,
                                                 dropout=spec.dropout) for w in widths[:-1])
        self.convs.append(GATConv(widths[-1], spec.out_dim, heads=1, dropout=spec.dropout))
        self.dropout = spec.dropout

    def forward(self, batch):
        h = batch.x
        for i, (conv, layer) in enumerate(zip(self.convs, batch.layers)):
            h = torch.nn.functional.dropout(h, self.dropout, self.training)
            # bipartite: the layer's destinations are the first rows of its sources
            h = conv((h, h[:layer.num_dst]), layer.edge_index)
            h = torch.nn.functional.elu(h) if i < len(self.convs) - 1 else h
        return h                                    # [batch_size, classes]: the seeds


def build(spec, heads: int = 8) -> GAT:
    """``--model examples.models.pyg_gat:build``: ``heads`` attention heads per hidden layer."""
    if heads < 1 or spec.hidden < heads:
        raise ValueError(f"heads must be between 1 and --hidden ({spec.hidden}), got {heads}")
    return GAT(spec, heads)
