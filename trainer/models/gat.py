"""Graph attention (GAT, Veličković et al. 2018) on a :class:`graphprep.trainer.batch.Batch`, in plain
torch, with the semantics of PyG's ``GATConv``.

Per layer and head: ``Wh = W h``; each edge ``u -> v`` gets the logit
``LeakyReLU(a_src . Wh_u + a_dst . Wh_v [+ a_edge . W_edge e_uv])``, softmax-normalised over
``v``'s incoming edges (dropped out in training), and ``v`` receives ``sum_u alpha_uv Wh_u``.
Hidden layers concatenate their heads then apply ELU; the last layer averages its heads.
Dropout on every layer's input (the paper's 0.6).

A graph with one node type and one edge type is GATConv exactly: every destination also
attends to itself (``add_self_loops=True``; position ``v`` among the sources, since the
destinations are the sources' prefix; a self-loop in the data is replaced by it), and with edge
features its self-loop carries the mean of its incoming edges' features (``fill_value='mean'``).
Heterogeneous graphs: one attention per edge type (no self-loops: sources and destinations may
be of different types) plus a linear self term per destination type, summed, so every
destination type gets an output (PyG's ``GATConv((-1, -1), add_self_loops=False) + Linear``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from graphprep.trainer.batch import Layer
from graphprep.trainer.models.common import LayerStack, aggregate_mean, fast_dropout, key, project


def _glorot(t: torch.Tensor) -> None:
    """PyG's ``glorot``: uniform in ``±sqrt(6 / (rows + cols))`` of the last two dims."""
    bound = math.sqrt(6.0 / (t.size(-2) + t.size(-1)))
    with torch.no_grad():
        t.uniform_(-bound, bound)


def edge_softmax(logits: torch.Tensor, dst: torch.Tensor, n_dst: int) -> torch.Tensor:
    """Softmax of ``logits`` ``[E, H]`` over the edges of each destination (``dst`` ``[E]`` in
    ``[0, n_dst)``), vectorised: a per-destination max (not differentiated: it cancels),
    exp, per-destination sums. Returns ``[E, H]``; holds three ``[E, H]`` and two
    ``[n_dst, H]`` tensors."""
    index = dst.unsqueeze(1).expand_as(logits)
    top = logits.new_full((n_dst, logits.shape[1]), -math.inf)
    top.scatter_reduce_(0, index, logits.detach(), "amax", include_self=True)
    e = (logits - top.index_select(0, dst)).exp()
    total = logits.new_zeros((n_dst, logits.shape[1])).index_add_(0, dst, e)
    return e / (total.index_select(0, dst) + 1e-16)   # as PyG's: a zero sum stays finite


class GATConv(nn.Module):
    """One attention over one edge type (or a homogeneous graph): ``heads`` heads of
    ``channels`` each, concatenated (``concat``) or averaged. ``in_src``/``in_dst``: input
    widths of the source and destination types; equal types share one projection (GATConv's
    ``lin``), else the destinations get their own (``lin_dst``, used for ``a_dst`` only).
    Parameter names and shapes are GATConv's (``lin``, ``att_src``, ``att_dst``, ``lin_edge``,
    ``att_edge``, ``bias``), so its weights copy over."""

    def __init__(self, in_src: int, in_dst: int | None, channels: int, heads: int = 1,
                 concat: bool = True, negative_slope: float = 0.2, dropout: float = 0.0,
                 self_loops: bool = True, edge_dim: int | None = None, bias: bool = True):
        super().__init__()
        self.heads, self.channels, self.concat = heads, channels, concat
        self.negative_slope, self.dropout, self.self_loops = negative_slope, dropout, self_loops
        width = heads * channels
        self.lin = nn.Linear(in_src, width, bias=False)
        self.lin_dst = None if in_dst is None else nn.Linear(in_dst, width, bias=False)
        self.att_src = nn.Parameter(torch.empty(1, heads, channels))
        self.att_dst = nn.Parameter(torch.empty(1, heads, channels))
        self.lin_edge = self.att_edge = None
        if edge_dim is not None:
            self.lin_edge = nn.Linear(edge_dim, width, bias=False)
            self.att_edge = nn.Parameter(torch.empty(1, heads, channels))
        self.bias = nn.Parameter(torch.zeros(width if concat else channels)) if bias else None
        for p in (self.lin.weight, self.att_src, self.att_dst,
                  *((self.lin_dst.weight,) if self.lin_dst is not None else ()),
                  *((self.lin_edge.weight, self.att_edge) if edge_dim is not None else ())):
            _glorot(p)

    def attention(self, h_src: torch.Tensor, n_dst: int, edge_index: torch.Tensor,
                  edge_attr: torch.Tensor | None = None, h_dst: torch.Tensor | None = None):
        """``(wh, edge_index, alpha)``: the sources' projection ``[S, H, C]``, the edges
        attended over (self-loops ``(v, v)`` appended for ``v < n_dst`` when on, data
        self-loops dropped) and their attention ``[E', H]`` (each destination's sums to 1;
        dropped out in training). ``h_dst`` is only for a separate destination type (default:
        the sources' prefix). Raises ValueError when the conv has edge features and
        ``edge_attr`` is missing for a layer with edges. Holds ``[E', H]`` logits and the
        ``[S, H*C]`` projection."""
        H, C = self.heads, self.channels
        wh = project(self.lin, h_src).view(-1, H, C)     # h_src may be sparse (layer 0)
        if self.lin_dst is None:
            wh_dst = wh[:n_dst]
        else:
            wh_dst = project(self.lin_dst, h_src[:n_dst] if h_dst is None else h_dst
                             ).view(-1, H, C)
        a_src = (wh * self.att_src).sum(-1)                       # [S, H]
        a_dst = (wh_dst * self.att_dst).sum(-1)                   # [n_dst, H]
        a_edge = None
        if self.lin_edge is not None:
            if edge_attr is None and edge_index.shape[1]:
                raise ValueError("gat: the model was built with edge features (--edge-feat) "
                                 "but a batch's layer has none for its edges")
            if edge_attr is None:      # no edges: an empty input keeps lin_edge in the graph
                edge_attr = wh.new_zeros((0, self.lin_edge.in_features))
            e = edge_attr.reshape(len(edge_attr), self.lin_edge.in_features).to(wh.dtype)
            a_edge = (self.lin_edge(e).view(-1, H, C) * self.att_edge).sum(-1)   # [E, H]
        if self.self_loops:
            keep = edge_index[0] != edge_index[1]
            edge_index = edge_index[:, keep]
            loops = torch.arange(n_dst, device=edge_index.device)
            if a_edge is not None:
                a_edge = a_edge[keep]
                # lin_edge and att_edge are linear: the logit of the mean attribute is the
                # mean of the logits, so H values are averaged instead of edge_dim
                a_edge = torch.cat([a_edge, aggregate_mean(a_edge, edge_index[1], n_dst)])
            edge_index = torch.cat([edge_index, torch.stack([loops, loops])], 1)
        src, dst = edge_index
        logits = a_src.index_select(0, src) + a_dst.index_select(0, dst)
        if a_edge is not None:
            logits = logits + a_edge
        alpha = edge_softmax(F.leaky_relu(logits, self.negative_slope), dst, n_dst)
        return wh, edge_index, fast_dropout(alpha, self.dropout, self.training)

    def forward(self, h_src: torch.Tensor, n_dst: int, edge_index: torch.Tensor,
                edge_attr: torch.Tensor | None = None,
                h_dst: torch.Tensor | None = None) -> torch.Tensor:
        """The ``n_dst`` destinations' outputs ``[n_dst, H*C]`` (concat) or ``[n_dst, C]``
        (mean of heads), bias added. Holds the ``[E', H*C]`` weighted messages."""
        wh, edge_index, alpha = self.attention(h_src, n_dst, edge_index, edge_attr, h_dst)
        src, dst = edge_index
        # index_select, not wh[src]: its backward is an index_add, not a slower index_put
        msg = (wh.index_select(0, src) * alpha.unsqueeze(-1)).view(len(src), -1)
        out = msg.new_zeros((n_dst, msg.shape[1])).index_add_(0, dst, msg)
        out = out.view(n_dst, self.heads, self.channels)
        out = out.reshape(n_dst, -1) if self.concat else out.mean(1)
        return out if self.bias is None else out + self.bias


class GATLayer(nn.Module):
    """One message-passing layer over every edge type of a graph. One node type and one edge
    type: a single :class:`GATConv` with self-loops. Otherwise: a :class:`GATConv` per edge
    type (no self-loops, no bias) and a linear self term (with the bias) per node type, summed
    per destination type."""

    def __init__(self, in_dims: dict[str, int], channels: int, heads: int, concat: bool,
                 edge_types: list, edge_dims: dict, negative_slope: float, attn_dropout: float):
        super().__init__()
        self.hetero = len(in_dims) > 1 or len(edge_types) > 1
        self.convs = nn.ModuleDict({
            key(tuple(et)): GATConv(in_dims[et[0]], in_dims[et[2]] if et[0] != et[2] else None,
                                    channels, heads, concat, negative_slope, attn_dropout,
                                    self_loops=not self.hetero,
                                    edge_dim=edge_dims.get(tuple(et)), bias=not self.hetero)
            for et in edge_types})
        width = heads * channels if concat else channels
        self.self_lin = nn.ModuleDict({key(t): nn.Linear(d, width) for t, d in in_dims.items()}
                                      if self.hetero else {})

    def forward(self, layer: Layer, h: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Outputs of every destination type with destinations in ``layer``."""
        if not self.hetero:
            ((et, ei),) = layer.edge_index_dict.items()
            t, n = et[2], layer.num_dst_dict.get(et[2], 0)
            return {t: self.convs[key(et)](h[t], n, ei, layer.edge_attr_dict.get(et))}
        out = {t: project(self.self_lin[key(t)], h[t][:n])
               for t, n in layer.num_dst_dict.items() if n}
        for et, ei in layer.edge_index_dict.items():
            n = layer.num_dst_dict.get(et[2], 0)
            if not n or not ei.shape[1]:
                continue          # softmax over no edges: nothing arrives
            out[et[2]] = out[et[2]] + self.convs[key(et)](
                h[et[0]], n, ei, layer.edge_attr_dict.get(et), h_dst=h[et[2]][:n])
        return out


class GAT(LayerStack):
    """``num_layers`` attention layers: hidden ones with ``heads`` heads of ``hidden //
    heads`` channels, concatenated, then ELU; the last ``out_dim`` wide, the mean of
    ``out_heads`` heads (class logits, or link embeddings). Dropout ``dropout`` on every
    layer's input, ``attn_dropout`` on the attention. ``forward(batch)`` returns the last
    layer's destinations' outputs: a tensor on a graph with one node type, else a dict."""

    def __init__(self, in_dims: dict[str, int], hidden: int, out_dim: int, edge_types: list,
                 num_layers: int, heads: int = 8, out_heads: int = 1, dropout: float = 0.6,
                 attn_dropout: float = 0.6, negative_slope: float = 0.2,
                 edge_dims: dict | None = None):
        edge_types = [tuple(et) for et in edge_types]
        edge_dims = {tuple(et): d for et, d in (edge_dims or {}).items()}
        convs = []
        for i in range(num_layers):
            last = i == num_layers - 1
            layer_in = in_dims if i == 0 else {t: hidden for t in in_dims}
            convs.append(GATLayer(layer_in, out_dim if last else hidden // heads,
                                  out_heads if last else heads, not last, edge_types,
                                  edge_dims, negative_slope, attn_dropout))
        super().__init__(convs, in_dims, dropout, F.elu)


def _count(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"gat: {name} must be an integer, got {value!r}")
    if value < 1:
        raise ValueError(f"gat: {name} must be at least 1, got {value}")
    return value


def _rate(name: str, value, upper: float | None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"gat: {name} must be a number, got {value!r}")
    if not (math.isfinite(value) and value >= 0 and (upper is None or value < upper)):
        raise ValueError(f"gat: {name} must be in [0, {upper or 'inf'}), got {value}")
    return float(value)


def build(spec, heads: int = 8, out_heads: int = 1, attn_dropout: float | None = None,
          negative_slope: float = 0.2) -> GAT:
    """``--model gat``: ``heads`` heads per hidden layer (``--hidden`` is their total width,
    so it must divide by ``heads``), ``out_heads`` averaged in the last layer, attention
    dropout ``attn_dropout`` (default ``--dropout``), LeakyReLU slope ``negative_slope``;
    edge features where the spec has them (``--edge-feat``). Raises TypeError/ValueError on
    bad arguments."""
    heads, out_heads = _count("heads", heads), _count("out_heads", out_heads)
    attn_dropout = spec.dropout if attn_dropout is None else _rate("attn_dropout",
                                                                   attn_dropout, 1.0)
    negative_slope = _rate("negative_slope", negative_slope, None)
    if spec.num_layers > 1 and spec.hidden % heads:
        raise ValueError(f"gat: --hidden {spec.hidden} must be a multiple of heads={heads} "
                         "(it is the width of all heads together)")
    return GAT(spec.in_dims, spec.hidden, spec.out_dim, spec.edge_types, spec.num_layers,
               heads, out_heads, spec.dropout, attn_dropout, negative_slope, spec.edge_dims)
