"""What the built-in models share: per-type input and output forms, ModuleDict keys, and
the products that take a sparse input (:class:`graphprep.trainer.data.sparse.SparseRows`, a CSR
feature) as it is: :func:`project` and :func:`matmul`."""

from __future__ import annotations

import torch

from graphprep.trainer.data.sparse import is_sparse, sparse_matmul

EdgeKey = tuple[str, str, str]


def key(name) -> str:
    """A ModuleDict key for a node type or an edge type tuple (keys cannot hold dots)."""
    text = ":".join(name) if isinstance(name, tuple) else name
    return text.replace(".", "_")


def as_dict(h, types) -> dict[str, torch.Tensor]:
    """``h`` per node type: a dict as is, a tensor (or sparse rows) as the one type of
    ``types``."""
    if isinstance(h, dict):
        return h
    (only,) = types
    return {only: h}


def like(out: dict[str, torch.Tensor], h):
    """``out`` in the form of ``h``: a tensor when ``h`` was one, else the dict."""
    return out if isinstance(h, dict) else next(iter(out.values()))


def matmul(h, weight: torch.Tensor) -> torch.Tensor:
    """``h @ weight`` (``weight`` ``[in, out]``): dense, or for :class:`SparseRows` one
    sparse x dense product (no ``[n, in]`` block is ever made)."""
    return sparse_matmul(h, weight) if is_sparse(h) else h @ weight


def project(lin: torch.nn.Linear, h) -> torch.Tensor:
    """``lin(h)`` for a dense ``h``, and the same product for :class:`SparseRows` (the
    first layer of a sparse feature): ``h @ lin.weight.T + lin.bias``."""
    if not is_sparse(h):
        return lin(h)
    out = sparse_matmul(h, lin.weight.t())
    return out if lin.bias is None else out + lin.bias


def fast_dropout(h: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """Dropout of a dense tensor ``h``: each entry kept with probability ``1 - p`` and scaled
    by ``1 / (1 - p)``, the distribution of ``torch.nn.functional.dropout``, with the mask
    drawn by ``torch.rand``. On CPU torch's kernel draws one Bernoulli per entry, about twice
    as slow (63 against 29 ms a call on Cora's 2,708 x 1,433 inputs, one thread:
    ``bench_models.py``'s ``timing.dropout``), and it took a third of a Cora link-prediction
    rank's time. Holds one mask the size of ``h``."""
    if not training or p == 0:
        return h
    if p >= 1:
        return h * 0
    return h * torch.rand_like(h).ge_(p).mul_(1 / (1 - p))


class Dropout(torch.nn.Dropout):
    """``torch.nn.Dropout`` through :func:`fast_dropout`: the same module to a state dict, a
    checkpoint and a reader of ``p``."""

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return fast_dropout(h, self.p, self.training)


def dropout(drop: torch.nn.Dropout, h):
    """``drop(h)``; on :class:`SparseRows` it drops stored values (scaling the kept ones as
    dense dropout does): the zeros dense dropout would also zero are not stored."""
    return drop(h) if not is_sparse(h) else h.with_values(drop(h.values))


def aggregate_mean(msg: torch.Tensor, dst: torch.Tensor, n_dst: int) -> torch.Tensor:
    """Mean of ``msg`` rows per destination in ``[0, n_dst)`` (0 where none)."""
    total = msg.new_zeros((n_dst, msg.shape[1])).index_add_(0, dst, msg)
    deg = torch.bincount(dst, minlength=n_dst).clamp(min=1).unsqueeze(1)
    return total / deg


class LayerStack(torch.nn.Module):
    """Per-type convolutions run layer by layer on a :class:`graphprep.trainer.batch.Batch`, what the
    built-in models share. ``forward(batch)`` returns the last layer's outputs of every type's
    destinations (a tensor on a graph with one node type, else a dict); ``layer(i, layer, h)``
    runs layer ``i`` alone (dropout of its input, the convolution, ``activation`` but after
    the last layer), ``h`` a tensor or a dict per type, returned in the same form: what
    layer-wise inference runs over all nodes. ``dropout_first=False`` leaves the input
    features undropped (dropout only between layers).

    The input ``h`` of layer 0 may hold :class:`SparseRows` (a sparse feature: its
    convolutions take it through :func:`project` / :func:`matmul`), hence
    ``sparse_input = True``: the trainer hands these models sparse inputs as they are."""

    sparse_input = True

    def __init__(self, convs: list[torch.nn.Module], types, dropout: float, activation,
                 dropout_first: bool = True):
        super().__init__()
        self.layers = torch.nn.ModuleList(convs)
        self.dropout = Dropout(dropout)
        self.types = list(types)
        self.activation, self.dropout_first = activation, dropout_first

    def forward(self, batch):
        h = batch.x_dict
        for i, layer in enumerate(batch.layers):
            h = self.layer(i, layer, h)
        return like(h, batch.x_dict if len(self.types) > 1 else batch.x)

    def layer(self, i: int, layer, h):
        hd = as_dict(h, self.types)
        if i > 0 or self.dropout_first:
            hd = {t: dropout(self.dropout, v) for t, v in hd.items()}
        out = self.layers[i](layer, hd)
        if i < len(self.layers) - 1:
            out = {t: self.activation(v) for t, v in out.items()}
        return like(out, h)


class MeanRelationConv(torch.nn.Module):
    """``h'[v] = self_lin[type](h[v]) + sum over edge types of the mean of message(...)`` over
    the in-edges of each destination ``v`` of a layer: the shape sage and rgcn share. A
    subclass holds ``self_lin`` (a ModuleDict per node type) and defines ``message(et,
    h_src, edge_index, layer)``: one row per edge of ``et``, in edge order."""

    def forward(self, layer, h: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        out = {t: project(self.self_lin[key(t)], h[t][:n])
               for t, n in layer.num_dst_dict.items() if n}
        for et, ei in layer.edge_index_dict.items():
            n_dst = layer.num_dst_dict.get(et[2], 0)
            if not n_dst or not ei.shape[1]:
                continue
            msg = self.message(et, h[et[0]], ei, layer)
            out[et[2]] = out[et[2]] + aggregate_mean(msg, ei[1], n_dst)
        return out
