"""GraphSAGE (PyG's ``SAGEConv`` per sampled layer) whose input layer takes a wide sparse
feature (a bag of words, a multi-hot: CSR in graph.json) as it is:

    python -m graphprep.trainer --graph parts/graph.json --model graphprep.trainer.examples.sparse_sage:build

``sparse_input = True`` tells the trainer to hand ``batch.x`` over as it travels: a
:class:`graphprep.trainer.SparseRows` (CSR rows) for a sparse feature, a dense tensor otherwise. The
first thing the model does with it is a linear projection, ``x @ W``, which
:func:`graphprep.trainer.sparse_matmul` computes as one ``embedding_bag`` over the stored values: no
``[nodes, columns]`` block is ever made (a 4,714-column multi-hot row with a few dozen ones
is ~19 KB dense, ~0.3 KB stored). After it every row is ``hidden`` wide and dense, and the
convolutions are plain PyG.
"""
import math

import torch
import torch.nn.functional as F
from torch_geometric.nn import SAGEConv

from graphprep.trainer import SparseRows, sparse_matmul


class SparseSAGE(torch.nn.Module):
    sparse_input = True          # batch.x may be SparseRows: projected below as it is

    def __init__(self, spec):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(spec.in_dim, spec.hidden))
        self.bias = torch.nn.Parameter(torch.zeros(spec.hidden))
        bound = 1 / math.sqrt(spec.in_dim)         # nn.Linear's initialization
        torch.nn.init.uniform_(self.weight, -bound, bound)
        dims = [spec.hidden] * spec.num_layers + [spec.out_dim]
        self.convs = torch.nn.ModuleList(SAGEConv(a, b) for a, b in zip(dims, dims[1:]))
        self.dropout = spec.dropout

    def project(self, x) -> torch.Tensor:
        """``x @ weight + bias`` for sparse rows (one sparse x dense product) or dense ones."""
        h = sparse_matmul(x, self.weight) if isinstance(x, SparseRows) else x @ self.weight
        return h + self.bias

    def forward(self, batch):
        h = F.relu(self.project(batch.x))
        for i, (conv, layer) in enumerate(zip(self.convs, batch.layers)):
            h = F.dropout(h, self.dropout, self.training)
            # bipartite: the layer's destinations are the first rows of its sources
            h = conv((h, h[:layer.num_dst]), layer.edge_index)
            h = F.relu(h) if i < len(self.convs) - 1 else h
        return h                                     # the seeds' logits


def build(spec) -> SparseSAGE:
    """A homogeneous graph's model (``spec.in_dim``: the feature's columns)."""
    return SparseSAGE(spec)
