"""What the trainer takes from any model's output, checked: the seeds' logits (node task) and
the seeds' embeddings per type (link task). A wrong shape is a :class:`ModelError` naming the
expected and the actual shapes, raised at the first batch."""

from __future__ import annotations

import torch
from torch import nn

from graphprep.trainer.batch import Batch
from graphprep.trainer.models.registry import ModelError


def _rows_of(out, batch: Batch, ntype: str, what: str) -> torch.Tensor:
    if isinstance(out, dict):
        if ntype not in out:
            raise ModelError(f"the model's output has no {what} rows of node type {ntype!r} "
                             f"(its keys: {sorted(out)})")
        out = out[ntype]
    elif what == "embedding" and sum(1 for n in batch.batch_size_dict.values() if n) > 1:
        raise ModelError("the model returned one tensor, but link batches of this graph have "
                         "seeds of several node types: return a dict of embeddings per type")
    if not isinstance(out, torch.Tensor):
        raise ModelError(f"the model returned {type(out).__name__}, expected a tensor or a dict "
                         "of tensors per node type")
    return out


def seed_logits(out, batch: Batch, num_classes: int) -> torch.Tensor:
    """The seeds' rows of a node-task output: ``out`` (or ``out[target]``) must be
    ``[>= batch_size, num_classes]``; returns ``[batch_size, num_classes]``."""
    logits = _rows_of(out, batch, batch.target, "logit")
    n = batch.batch_size
    if logits.dim() != 2 or logits.shape[0] < n or logits.shape[1] != num_classes:
        raise ModelError(f"the model's output for node type {batch.target!r} has shape "
                         f"{list(logits.shape)}; expected [{n} (at least: the seeds' rows "
                         f"first), {num_classes} classes]")
    return logits[:n]


def seed_embeddings(out, batch: Batch, width: int | None = None) -> dict[str, torch.Tensor]:
    """The seeds' rows of a link-task output per node type with seeds: each ``[>= seeds,
    D]`` (``D == width`` when given)."""
    emb = {}
    for t, n in batch.batch_size_dict.items():
        if not n:
            continue
        rows = _rows_of(out, batch, t, "embedding")
        if rows.dim() != 2 or rows.shape[0] < n or (width is not None and rows.shape[1] != width):
            raise ModelError(f"the model's output for node type {t!r} has shape "
                             f"{list(rows.shape)}; expected [{n} (at least: the seeds' rows "
                             f"first), {width if width is not None else 'D'}]")
        emb[t] = rows[:n]
    return emb


class LinkModel(nn.Module):
    """An encoder (any module returning node embeddings) and an edge scorer: ``forward(batch)``
    gives the logits of the batch's ``edge_label_index`` pairs (positives then negatives),
    positions into the seeds of the edge type's source and destination types."""

    def __init__(self, encoder: nn.Module, scorer: nn.Module, width: int):
        super().__init__()
        self.encoder, self.scorer, self.width = encoder, scorer, width

    def forward(self, batch: Batch) -> torch.Tensor:
        emb = seed_embeddings(self.encoder(batch), batch, self.width)
        src_t, _, dst_t = batch.edge_label_type
        return self.scorer(emb[src_t][batch.edge_label_index[0]],
                           emb[dst_t][batch.edge_label_index[1]])
