"""Inference over every owned node of a part, for ``trainer embed``: exact layer-wise when the
module defines ``layer(i, layer, h)`` (the built-ins do), otherwise sampled.

Layer-wise: layer ``i`` runs over all owned nodes of every type in batches; each batch takes
*all* in-neighbors (one hop), fetches their layer ``i - 1`` outputs (local rows, or one request
per owner part) and applies the module's ``layer(i, ...)``. A part's outputs of a layer are
registered as node data of its server before a barrier, so the next layer fetches them like
features. Exact (no sampling), and each node is computed once per layer.

Sampled: ``module(batch)`` on batches of every owned node of each type, sampled with the run's
evaluation fanouts, as training evaluates; the seeds' rows of each type the module returns.

Either way a part's outputs (owned nodes x width, float32: two layers for layer-wise) are
written batch by batch into memory-mapped files under a scratch folder (:class:`LayerFiles`):
file-backed pages the kernel writes back and drops, so a rank's anonymous memory is one
batch's neighborhoods whatever the part's size (at 10^9 edges a hidden layer of a part is
gigabytes). Without a scratch folder (tests) they are held in memory.
"""

from __future__ import annotations

import os
import shutil

import numpy as np
import torch
import torch.distributed as dist
from tqdm.auto import tqdm

from graphprep.trainer.data.batches import input_nodes, to_layer
from graphprep.trainer.data.sparse import densify
from graphprep.trainer.models.registry import ModelError

LAYER_WISE, SAMPLED = "layer-wise", "sampled"


class LayerFiles:
    """Output rows of one rank's owned nodes, per (output name, node type): a ``.npy`` under
    ``folder`` memory-mapped read-write (``folder`` None: a tensor in memory). Written in
    place, batch by batch; :meth:`close` removes the files (the tensors stay readable
    until dropped: unlinked mapped files live on)."""

    def __init__(self, folder: str | None):
        self.folder = folder
        if folder:
            os.makedirs(folder, exist_ok=True)

    def rows(self, name: str, ntype: str, n: int, shape: tuple[int, ...]) -> torch.Tensor:
        """A float32 ``[n, *shape]`` block for the rows of ``name`` of ``ntype``."""
        if self.folder is None:
            return torch.empty((n, *shape))
        path = os.path.join(self.folder, f"{name}.{ntype}.npy")
        return torch.from_numpy(np.lib.format.open_memmap(path, "w+", np.float32, (n, *shape)))

    def close(self) -> None:
        if self.folder:
            shutil.rmtree(self.folder, ignore_errors=True)


def owned_nodes(part) -> dict[str, torch.Tensor]:
    """New IDs of every owned node, per type."""
    return {t: torch.arange(len(part.orig_ids[t])) + part.start(t) for t in part.graph.node_types}


def register_outputs(part, name: str, outputs: dict[str, torch.Tensor]) -> None:
    """Register ``outputs`` (rows of owned nodes per type) as node data ``name`` of the part,
    for every type any rank has them for; the width is agreed over ranks (a rank without
    nodes of a type learns it from the others). Ends with a barrier: from then on every
    part's rows are served."""
    types = list(part.graph.node_types)
    widths = torch.tensor([outputs[t].shape[1] if t in outputs and outputs[t].dim() == 2 else -1
                           for t in types])
    dist.all_reduce(widths, op=dist.ReduceOp.MAX)
    for t, width in zip(types, widths.tolist()):
        if width < 0:
            continue
        rows = outputs.get(t)
        part.node_data[t][name] = rows if rows is not None and len(rows) else \
            torch.zeros(len(part.orig_ids[t]), width)
        part.graph.node_feats.setdefault(t, {})[name] = {"dtype": "float32", "shape": [width]}
    dist.barrier()


def layerwise(rank, module, num_layers: int, batch_size: int, progress: bool,
              files: LayerFiles | None = None) -> list[str]:
    """Run ``module.layer(i, layer, h)`` for every ``i`` over all owned nodes, one layer at
    a time; each layer's outputs (written into ``files``) become node data ``__layer<i>``
    of this part's server. Layer 0 reads the inputs as training does: a sparse feature as
    sparse rows (densified for a module without ``sparse_input = True``). Returns their
    names."""
    files = files or LayerFiles(None)
    part = rank.server.part
    graph = part.graph
    types, etypes = list(graph.node_types), list(graph.edge_types)
    sampler, fetcher = rank.sampling([-1], timed=False)
    owned = owned_nodes(part)
    total = num_layers * sum(-(-len(v) // batch_size) for v in owned.values())
    bar = tqdm(total=total, desc="embed", unit="batch", leave=False, disable=not progress)
    name, names = "feat", []
    sparse_ok = getattr(module, "sparse_input", False)   # else sparse features densified
    with torch.no_grad():
        for i in range(num_layers):
            outputs, out_name = {}, f"__layer{i + 1}"
            for t, ids in owned.items():
                rows = None
                for j, batch in enumerate(torch.split(ids, batch_size)):
                    blocks = sampler.sample_blocks({t: batch}, seed=j)
                    nodes = input_nodes(blocks, types)
                    x = fetcher.inputs(nodes) if i == 0 else fetcher.fetch(name, nodes)
                    x = {k: v.to(rank.device) for k, v in x.items()}
                    if not sparse_ok:
                        x = densify(x)
                    h = module.layer(i, to_layer(blocks[0], types, etypes).to(rank.device),
                                     x if len(types) > 1 else x[t])
                    h = h if isinstance(h, dict) else {t: h}
                    if t not in h:
                        raise ModelError(f"layer-wise inference: the model's layer({i}, ...) "
                                         f"returned no rows for node type {t!r}")
                    got = h[t][:len(batch)].float().cpu()
                    if rows is None:
                        rows = outputs[t] = files.rows(out_name, t, len(ids), got.shape[1:])
                    rows[j * batch_size:j * batch_size + len(batch)] = got
                    bar.update()
            name = out_name
            register_outputs(part, name, outputs)  # after the layer: its fetches read i - 1
            names.append(name)
    bar.close()
    return names


def sampled(rank, module, batch_size: int, progress: bool,
            files: LayerFiles | None = None) -> str:
    """``module(batch)`` over every owned node of each type, sampled with the run's
    evaluation fanouts; the seeds' output rows (written into ``files``) become node data
    ``__output`` of the types the module returns rows for (a tensor output: the seeds'
    type). Returns the name."""
    files = files or LayerFiles(None)
    cfg, part = rank.cfg, rank.server.part
    owned = owned_nodes(part)
    fanouts = cfg.eval_fanouts or cfg.fanouts
    total = sum(-(-len(v) // batch_size) for v in owned.values())
    bar = tqdm(total=total, desc="embed (sampled)", unit="batch", leave=False,
               disable=not progress)
    outputs = {}
    with torch.no_grad():
        for t, ids in owned.items():
            rows, done = None, 0
            loader = rank.node_loader(t, ids, fanouts, batch_size, label=None)
            for batch in loader.epoch(0):
                batch = batch.to(rank.device)
                out = module(batch)
                if isinstance(out, dict):
                    out = out.get(t)
                elif batch.is_hetero and t != rank.ntype:
                    out = None     # one tensor: the rows of the type the model predicts
                bar.update()
                if out is None:
                    break
                got = out[:batch.batch_size].float().cpu()
                if rows is None:
                    rows = outputs[t] = files.rows("__output", t, len(ids), got.shape[1:])
                rows[done:done + len(got)] = got
                done += len(got)
    bar.close()
    register_outputs(part, "__output", outputs)
    return "__output"
