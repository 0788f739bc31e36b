"""Example models for ``--model``, installed with the trainer so that they import from any
folder: ``--model graphprep.trainer.examples.pyg_gcn:build`` (PyG's GCN on the whole sampled subgraph),
``graphprep.trainer.examples.pyg_gat:build`` (one ``GATConv`` per sampled layer) and
``graphprep.trainer.examples.sparse_sage:build`` (GraphSAGE whose first layer takes a sparse input
feature as it is). They need PyG (``pip install torch_geometric``); docs/models.md walks
through writing one. Copy one as the start of your own: ``--model path/to/my_model.py:build``.
"""
