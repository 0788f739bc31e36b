"""Sampled blocks and fetched rows into the :class:`graphprep.trainer.batch.Batch` a model receives.

Every node type and edge type of the graph is present in every layer and dict (empty where a
batch has none), so ``to_hetero`` models and per-type modules never miss a key. Building it
moves no data: ``edge_index`` is the block's two index vectors stacked.
"""

from __future__ import annotations

import torch

from graphprep.trainer.batch import Batch, Layer
from graphprep.trainer.sampling.dist_sampler import Block
from graphprep.trainer.sampling.partition import ORIG_ID



def edge_key(et) -> tuple[str, str, str]:
    """An edge type as PyG's ``(src, rel, dst)`` tuple."""
    return (et.src, et.rel, et.dst)


def to_layer(block: Block, node_types: list[str], edge_types: list) -> Layer:
    """A block as a :class:`Layer` over all of the graph's types; edge data rows become
    float32 ``[E, D]`` (PyG's ``edge_attr``; ``D`` = ``spec.edge_dims``, the row flattened)."""
    edges, attrs = {}, {}
    for et in edge_types:
        pair = block.edges.get(et)
        if pair is None:
            device = next(iter(block.src_nodes.values())).device if block.src_nodes else None
            edges[edge_key(et)] = torch.zeros((2, 0), dtype=torch.long, device=device)
            continue
        src, dst = pair
        edges[edge_key(et)] = torch.stack([src.long(), dst.long()])
        if block.edge_attr and et in block.edge_attr:
            rows = block.edge_attr[et]      # as stored: any numeric dtype, any row shape
            attrs[edge_key(et)] = rows.float().reshape(len(rows), -1)
    return Layer(edges, {t: len(block.src_nodes[t]) if t in block.src_nodes else 0
                         for t in node_types},
                 {t: block.num_dst.get(t, 0) for t in node_types}, attrs)


def input_nodes(blocks: list[Block], node_types: list[str]) -> dict[str, torch.Tensor]:
    """The input layer's sources of every node type (empty for a type not reached)."""
    src = blocks[0].src_nodes
    empty = torch.zeros(0, dtype=torch.long, device=next(iter(src.values())).device)
    return {t: src.get(t, empty) for t in node_types}


def make_batch(blocks: list[Block], fetcher, graph, target: str,
               seeds: dict[str, torch.Tensor], feature: str = "feat") -> Batch:
    """The batch of ``blocks`` (input layer first, last destinations ``seeds``): the inputs
    of every sampled node fetched in one request per owner part; their original IDs are
    fetched only if the model reads them (``Batch.orig_id_dict``)."""
    types = list(graph.node_types)
    nodes = input_nodes(blocks, types)
    return Batch([to_layer(b, types, list(graph.edge_types)) for b in blocks],
                 fetcher.inputs(nodes, feature), nodes, lambda: fetcher.fetch(ORIG_ID, nodes),
                 {t: len(v) for t, v in seeds.items()}, target)
