"""``python -m graphprep.trainer embed``: inference over every node with a trained checkpoint,
distributed like training, written per node type by node ID (and by key on a keyed graph).

One rank per part. The checkpoint's model is rebuilt from its ``--model`` and
``--model-args``. A module with ``layer(i, layer, h)`` (the built-ins) gets exact layer-wise
full-neighbor inference, each node computed once per layer; any other module gets sampled
inference with the run's evaluation fanouts (:mod:`graphprep.trainer.tasks.inference`); ``embed.json``
says which (``"inference"``).

Output ``OUT/`` (written under ``.OUT.partial`` beside it and swapped into place at the end;
a failed run removes it, and OUT keeps what it held):
``<ntype>/embeddings.npy`` (float32 ``[num_nodes, D]``, row i = node ID i of the chunked graph:
the input's own ID, or on a keyed input the ID its key map gave, whose key is row i of
``keys/<ntype>/by_id/`` (docs/keys.md); layer-wise: the last
layer for link prediction, the last hidden layer for node classification; sampled: the model's
output, for the types it gives rows for), for node classification also ``<target>/logits.npy``
and ``<target>/predictions.npy`` (int64), with learnable embeddings (``--featureless embed``)
``<ntype>/input_embeddings.npy`` of each featureless type (float32 ``[num_nodes,
--embedding-dim]``: the trained input rows, loaded from the checkpoint's part shards, which
are also what the model reads); where the input had keys (tables, keyed edge lists), the same
by key, to be joined by key: ``<ntype>/embeddings.parquet`` (key, embedding[,
input_embedding]) and ``<target>/predictions.parquet`` (key, predicted class name, class
index); and ``embed.json``: the files, the inference mode, the checkpoint, and the metrics of
these outputs beside the sampled evaluation recorded in the checkpoint at the same epoch. A
rank writes its part's outputs of two layers (owned nodes x width, float32) into
memory-mapped files under ``.OUT.layers`` beside OUT (removed at the end), and holds one
batch's neighborhoods and ``ROWS_PER_WRITE`` rows of an output at a time.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
from dataclasses import replace

import click

from graphprep.pipeline.core.cli_types import FiniteFloat
from graphprep.pipeline.core.console import show_progress
from graphprep.formats.output import side_paths, swap_into_place

from graphprep.trainer.cli import (COMMAND_SETTINGS, IFACE, THREADS, VERBOSE, BadInput,
                                   OneLineErrors, run_as_rank, start_command)
from graphprep.trainer.config import TrainConfig
from graphprep.trainer.options import Opt, click_options, declared
from graphprep.trainer.runtime.launch import LAUNCHER_ENV
from graphprep.trainer.runtime.outputs import EMBED_JSON

log = logging.getLogger("graphprep.trainer")


_TRAIN = declared(TrainConfig)
OPTIONS = {
    "graph": replace(_TRAIN["graph"], help="graph.json written by `prep dispatch` (or its "
                     "folder): the graph trained on."),
    "checkpoint": Opt("A checkpoint file, or a checkpoint folder (its best.pt: the "
                      "best-validation epoch). Must be of this graph (the fingerprint --resume "
                      "compares).", path=True),
    "out": Opt("Output folder: built beside it and swapped in when complete. Never the "
               "graph's, a part's or the checkpoint's folder, nor inside or around one; an "
               "existing folder that is neither empty nor an earlier embed output is refused "
               "without --overwrite.", path=True),
    "overwrite": Opt("Replace --out even when it is not an earlier output of trainer embed.",
                     False, flag=True),
    "batch_size": Opt("Nodes per inference batch (all their in-neighbors are taken).", 1024,
                      type=click.IntRange(1)),
    "device": replace(_TRAIN["device"], help="Where the layers run (cuda: one GPU per rank, by "
                      "LOCAL_RANK)."),
    "rpc_timeout": Opt("Seconds before a request to a silent rank fails.", 60.0,
                       type=FiniteFloat(0, min_open=True)),
    "iface": IFACE,
    "threads": THREADS,
    "verify_data": _TRAIN["verify_data"],
    "progress": _TRAIN["progress"],
    "verbose": VERBOSE,
}


@click.command(cls=OneLineErrors, context_settings=COMMAND_SETTINGS)
@click_options(OPTIONS.items())
def main(graph, checkpoint, out, overwrite, batch_size, device, rpc_timeout, iface, threads,
         verify_data, progress, verbose):
    """Write node embeddings (and class predictions) of a trained checkpoint for every node,
    by node ID (row i: node i) and, on a keyed graph, by key (.parquet), with exact
    full-neighbor inference.

    Before any rank starts: the options, the checkpoint (readable, of this graph and of a
    task the graph has: every difference named), --out (see its help); each rank then checks
    its part as training does. Bad input exits 2 in one line, a damaged part 1.

    \b
    Example:
      python -m graphprep.trainer embed --graph parts/graph.json --checkpoint checkpoints/cora \\
          --out embeddings/cora
    """
    rank, meta = start_command(graph, verbose)
    if os.path.isdir(checkpoint):
        checkpoint = os.path.join(checkpoint, "best.pt")
    if rank is None or LAUNCHER_ENV not in os.environ:
        _check_before_start(meta, checkpoint, out, overwrite, device, rank)
    if rank is None:
        from graphprep.trainer.runtime.launch import launch_local
        log.info("launching %d ranks, one per part", meta.num_parts)
        code = launch_local(sys.argv[1:], meta.num_parts)
        for folder in (side_paths(out)[0], scratch_folder(out)):   # a failed run's leftovers
            shutil.rmtree(folder, ignore_errors=True)
        sys.exit(code)
    run_as_rank(lambda: run_embed(graph, checkpoint, out, batch_size, device, rpc_timeout,
                                  show_progress(progress)),
                meta, rank=int(rank), part=int(rank), device=device, iface=iface,
                threads=threads, verify_data=verify_data, rpc_timeout=rpc_timeout,
                verbose=verbose)


def scratch_folder(out: str) -> str:
    """``.OUT.layers`` beside ``out``: the ranks' memory-mapped layer outputs while they run
    (``graphprep.trainer.tasks.inference.LayerFiles``), removed at the end."""
    parent, name = os.path.split(os.path.abspath(out))
    return os.path.join(parent, f".{name}.layers")


def _check_before_start(meta, checkpoint: str, out: str, overwrite: bool, device: str,
                        rank: str | None) -> None:
    """Everything that can be refused before inference (exit 2, one line): the checkpoint
    and, where rank 0 writes, --out. Under torchrun each rank checks the checkpoint."""
    from graphprep.formats.errors import FormatError

    from graphprep.trainer.runtime.checkpoint import check_for_embed
    from graphprep.trainer.runtime.outputs import check_embed_out
    try:
        if not os.path.isfile(checkpoint):
            raise FormatError("no such checkpoint file", file=checkpoint)
        if rank in (None, "0"):
            check_embed_out(out, meta, checkpoint, overwrite)
        if device == "cuda":
            import torch
            if not torch.cuda.is_available():
                raise ValueError("--device cuda needs CUDA, and torch sees no GPU here")
        check_for_embed(checkpoint, meta)
    except ValueError as err:        # FormatError and CheckpointRefused are ValueErrors
        raise BadInput(str(err)) from None


def run_embed(graph: str, checkpoint: str, out: str, batch_size: int, device: str,
              rpc_timeout: float, progress: bool) -> dict:
    """This rank's share of ``trainer embed``; returns the metrics (the same on every rank).
    Rank 0 builds the output in ``.OUT.partial`` and swaps it in at the end; if this rank
    fails, it removes the partial folder."""
    import torch
    import torch.distributed as dist

    from graphprep.trainer.runtime import rendezvous
    from graphprep.trainer.runtime.checkpoint import embed_config
    from graphprep.trainer.runtime.health import where
    from graphprep.trainer.loop import build_model, join

    state = torch.load(checkpoint, map_location="cpu", weights_only=False)
    cfg = TrainConfig(**embed_config(state, graph, device=device, rpc_timeout=rpc_timeout,
                                     progress=progress))
    from graphprep.trainer.train import restore_tables
    env = rendezvous.RankEnv.from_env()
    rank = join(cfg, env)
    # the trained learnable rows are the featureless types' inputs
    restore_tables(rank, checkpoint, state["history"][-1]["epoch"], "--checkpoint")
    model, _, _ = build_model(rank)
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as err:   # the fingerprint matched, so the file itself is inconsistent
        first = str(err).strip().splitlines()[0]
        raise ValueError(f"--checkpoint {checkpoint}: its model does not fit this graph's "
                         f"features and classes ({first})") from None
    model.eval()
    from graphprep.trainer.tasks.inference import LayerFiles
    partial = side_paths(out)[0]
    files = LayerFiles(os.path.join(scratch_folder(out), f"rank-{env.rank}"))
    where.at("the inference")
    try:
        metrics, types, mode = _infer_and_write(rank, cfg, model, batch_size, state, checkpoint,
                                                partial, files)
        if env.rank == 0:
            swap_into_place(partial, os.path.abspath(out))
    except BaseException:
        if env.rank == 0:
            shutil.rmtree(partial, ignore_errors=True)
        raise
    finally:
        files.close()
    if env.rank == 0:
        key = "test_auc" if cfg.task == "link" else "test_acc"
        epoch = state["history"][-1]["epoch"]
        sampled = state["history"][-1].get(key, float("nan"))
        how = "full-neighbor" if mode == "layer-wise" else "sampled-inference"
        print(f"wrote {out}: {', '.join(sorted(types))}; {how} "
              f"{key} {metrics[key]:.4f} (sampled evaluation at epoch {epoch}: "
              f"{sampled:.4f})", flush=True)
    where.at("the final barrier")
    dist.barrier()
    if env.rank == 0:
        shutil.rmtree(scratch_folder(out), ignore_errors=True)
    rendezvous.stop()
    return metrics


def _infer_and_write(rank, cfg, model, batch_size: int, state: dict, checkpoint: str,
                     partial: str, files) -> tuple[dict, set[str]]:
    """Layer-wise inference (outputs in ``files``, a ``LayerFiles``), every rank's rows
    written into ``partial``, and (rank 0) ``embed.json``. Returns the metrics and the node
    types written."""
    import torch.distributed as dist

    from graphprep.trainer.tasks.inference import LAYER_WISE, SAMPLED, layerwise, sampled

    first = dist.get_rank() == 0
    encoder = model.encoder if cfg.task == "link" else model
    show = cfg.progress and first
    if callable(getattr(encoder, "layer", None)):
        mode, layers = LAYER_WISE, layerwise(rank, encoder, len(cfg.fanouts), batch_size, show,
                                             files)
    else:
        mode, layers = SAMPLED, [sampled(rank, encoder, batch_size, show, files)]
    final = layers[-1]
    embedding = final if cfg.task == "link" or len(layers) == 1 else layers[-2]
    files = _files(rank, cfg.task, embedding, final)
    if first:
        shutil.rmtree(partial, ignore_errors=True)
        _create(partial, files)
    dist.barrier()
    _write_rows(rank, partial, files)
    metrics = _metrics(rank, cfg, model, final)
    dist.barrier()
    if first:
        from graphprep.trainer.runtime.keyed_outputs import write_keyed_outputs
        keyed = write_keyed_outputs(rank.part.graph, partial)
        epoch = state["history"][-1]["epoch"]
        sampled = {k: v for k, v in state["history"][-1].items()
                   if k.startswith(("val_", "test_"))}
        with open(os.path.join(partial, EMBED_JSON), "w") as f:
            json.dump({"graph": os.path.abspath(cfg.graph),
                       "checkpoint": os.path.abspath(checkpoint), "epoch": epoch, "task": cfg.task,
                       "files": {f"{t}/{name}": [list(shape), dtype]
                                 for (t, name), (_, shape, dtype) in files.items()},
                       "keyed_files": keyed,
                       "inference": mode,
                       "full_neighbor" if mode == LAYER_WISE else "sampled_inference": metrics,
                       "sampled_at_training": sampled}, f, indent=1)
    return metrics, {t for t, _ in files}, mode


def _files(rank, task: str, embedding: str, final: str) -> dict:
    """``(type, file name) -> (layer name, shape, dtype)`` of the outputs."""
    from graphprep.trainer.data.features import EMBEDDING
    graph = rank.part.graph
    files = {}
    for t in graph.node_types:
        if embedding not in graph.node_feats.get(t, {}):
            continue          # a type the model gives no rows for
        width = graph.node_feats[t][embedding]["shape"][0]
        files[(t, "embeddings.npy")] = (embedding, (graph.num_nodes[t], width), "float32")
    for t in graph.node_types:     # the trained learnable input rows (--featureless embed)
        if EMBEDDING in graph.node_feats.get(t, {}):
            width = graph.node_feats[t][EMBEDDING]["shape"][0]
            files[(t, "input_embeddings.npy")] = (EMBEDDING, (graph.num_nodes[t], width),
                                                  "float32")
    if task == "node":
        classes = graph.node_feats[rank.ntype][final]["shape"][0]
        n = graph.num_nodes[rank.ntype]
        files[(rank.ntype, "logits.npy")] = (final, (n, classes), "float32")
        files[(rank.ntype, "predictions.npy")] = (final, (n,), "int64")
    return files


def _create(folder: str, files: dict) -> None:
    import numpy as np
    for (t, name), (_, shape, dtype) in files.items():
        os.makedirs(os.path.join(folder, t), exist_ok=True)
        np.lib.format.open_memmap(os.path.join(folder, t, name), "w+", dtype, shape).flush()


ROWS_PER_WRITE = 1 << 20     # rows of an output copied at a time: bounded temporaries


def _write_rows(rank, folder: str, files: dict) -> None:
    """This part's rows of every output, at their original IDs, ``ROWS_PER_WRITE`` rows at
    a time (the rows may be a memory-mapped layer file: nothing is held whole)."""
    import numpy as np
    part = rank.server.part
    for (t, name), (layer, _, _) in files.items():
        rows, ids = part.node_data[t][layer], part.orig_ids[t]
        out = np.load(os.path.join(folder, t, name), mmap_mode="r+")
        for start in range(0, len(ids), ROWS_PER_WRITE):
            block = rows[start:start + ROWS_PER_WRITE]
            if name == "predictions.npy":
                block = block.argmax(1)
            out[ids[start:start + ROWS_PER_WRITE].numpy()] = block.numpy()
        out.flush()


def _metrics(rank, cfg, model, final: str) -> dict:
    """The task's validation/test metrics of the full-neighbor outputs (exact over ranks)."""
    import torch

    from graphprep.trainer.tasks.node import exact_accuracy
    part = rank.server.part
    if cfg.task == "link":
        from graphprep.trainer.tasks.link import LinkTask
        _, fetcher = rank.sampling([-1], timed=False)

        def embeddings(nodes):
            out = {}
            for t, ids in nodes.items():
                uniq = torch.unique(ids)
                out[t] = (uniq, fetcher.fetch(final, {t: uniq})[t].to(rank.device))
            return out
        return LinkTask(rank).evaluate(model, embeddings)
    t = rank.ntype
    data = part.node_data[t]
    counts = [0.0] * 4        # val correct, val nodes, test correct, test nodes
    for start in range(0, len(part.orig_ids[t]), ROWS_PER_WRITE):
        rows = slice(start, start + ROWS_PER_WRITE)
        correct = data[final][rows].argmax(1) == data["label"][rows].long()
        for k, m in enumerate(("val", "test")):
            mask = data[f"{m}_mask"][rows].bool()
            counts[2 * k] += float((correct & mask).sum())
            counts[2 * k + 1] += float(mask.sum())
    return exact_accuracy(counts)
