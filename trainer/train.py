"""One rank of distributed training: join, build the task and the model, run the epochs.

The epoch loop is shared (:mod:`graphprep.trainer.loop`); what a task trains on and how it scores is its
own: :class:`graphprep.trainer.tasks.node.NodeTask` (``--task node``) or
:class:`graphprep.trainer.tasks.link.LinkTask` (``--task link``).
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import asdict

import torch
import torch.distributed as dist

from graphprep.trainer.config import TrainConfig
from graphprep.trainer.loop import (UNUSED_HINT, build_model, epoch_record, join, report,
                                    rpc_counters, startup_seconds, summarize)
from graphprep.trainer.models.registry import ModelError, model_frame
from graphprep.trainer.runtime import rendezvous
from graphprep.trainer.runtime.checkpoint import (BEST, NAME, CheckpointInfo, load_checkpoint,
                                 load_embedding_shard, save_checkpoint, save_embedding_shard)
from graphprep.trainer.runtime.health import EVALUATION, where
from graphprep.trainer.sampling.dist_sampler import mix_seed
from graphprep.trainer.tasks.link import LinkTask
from graphprep.trainer.tasks.node import NodeTask

log = logging.getLogger("graphprep.trainer")


def run_rank(cfg: TrainConfig, env: rendezvous.RankEnv) -> dict:
    """Train on this rank until ``cfg.epochs``; returns the final summary (same on all ranks).
    A failure the model causes (its output's shape, its parameters left unused) is a
    ModelError whose line ends naming ``--model``."""
    try:
        return _run_rank(cfg, env)
    except ModelError as err:
        if f"--model {cfg.model}" in str(err):
            raise
        raise ModelError(f"{err}: --model {cfg.model}") from None
    except Exception as err:  # noqa: BLE001 - only what the model's own code raised is kept
        if isinstance(err, RuntimeError) and "Expected to have finished reduction" in str(err):
            raise ModelError(f"{UNUSED_HINT}: --model {cfg.model}") from None
        at = model_frame(cfg.model, err)
        if at is None:
            raise
        # the user's bug, in the user's file: its line and the error, not the trainer's stack
        first = (str(err).strip().splitlines() or [""])[0]
        raise ModelError(f"the model raised {type(err).__name__}: {first} (at {at}): "
                         f"--model {cfg.model}") from None


def _run_rank(cfg: TrainConfig, env: rendezvous.RankEnv) -> dict:
    rank = join(cfg, env)
    task = LinkTask(rank) if cfg.task == "link" else NodeTask(rank)
    model, ddp, optimizer = build_model(rank, task.first_batch)
    state = load_checkpoint(cfg.checkpoint_dir, model, optimizer) if cfg.resume else None
    history: list[dict] = state["history"] if state else []
    if state:
        log.info("resumed from %s after epoch %d", cfg.checkpoint_dir, len(history) - 1)
        restore_tables(rank, os.path.join(cfg.checkpoint_dir, NAME), len(history) - 1,
                       "--resume")
    info = CheckpointInfo.of(cfg, rank.part.graph, task.target)
    if env.rank == 0 and cfg.checkpoint_dir:
        log.info("checkpoints go to %s: %s after every epoch, %s after the best validation "
                 "epoch", os.path.abspath(cfg.checkpoint_dir), NAME, BEST)
    first_epoch = len(history)          # this process's first: a resumed run's later one
    for epoch in range(first_epoch, cfg.epochs):
        torch.manual_seed(mix_seed(cfg.seed, epoch, env.rank))  # dropout: resumable exactly
        start = time.perf_counter()
        where.at("the training", epoch)
        sums = task.train_epoch(ddp, optimizer, epoch)
        train_s = time.perf_counter() - start
        train_rpc = rpc_counters(rank)
        where.at(EVALUATION, epoch)
        with rank.breakdown.clock("eval"):
            evaluation = task.evaluate(model)
        where.at("the metrics all-reduce", epoch)
        rpc = {k: v + train_rpc[k] for k, v in rpc_counters(rank).items()}
        counts = {**rank.breakdown.take_counts(), "train_rpc_bytes":
                  train_rpc["rpc_bytes_sent"] + train_rpc["rpc_bytes_received"]}
        record = epoch_record(epoch, env, train_s, time.perf_counter() - start, sums,
                               rank.breakdown.take(), rpc, task.num_batches, counts)
        record = {"epoch": epoch, **task.train_metrics(record.pop("sums")), **evaluation,
                  **record}
        if epoch == first_epoch:
            record["launch_to_first_batch_s"] = startup_seconds(rank)
            if env.rank == 0:
                log.info("launch -> first training batch: %.2f s",
                         record["launch_to_first_batch_s"])
        if rank.embeddings:
            record.update(rank.embeddings.epoch_counters())
        history.append(record)
        if cfg.checkpoint_dir and rank.embeddings:
            where.at("the embedding checkpoint", epoch)
            save_tables(rank, cfg.checkpoint_dir, epoch,
                        summarize(history, task.metric)["best_epoch"] == epoch)
        if env.rank == 0:
            report(record, history, cfg, task)
            if cfg.checkpoint_dir:
                best = summarize(history, task.metric)["best_epoch"] == epoch
                save_checkpoint(cfg.checkpoint_dir, model, optimizer, history, asdict(cfg), info,
                                best=best, embedding_parts=rank.part.graph.num_parts
                                if rank.embeddings else 0)
    where.at("the final barrier")
    dist.barrier()
    rendezvous.stop()
    return summarize(history, task.metric)


def save_tables(rank, folder: str, epoch: int, best: bool) -> None:
    """Each part's first rank writes its learnable rows after ``epoch`` (also as the best
    epoch's when ``best``); the barrier puts every shard on disk before rank 0's
    checkpoint names the epoch."""
    if rank.table is not None:
        save_embedding_shard(os.path.join(folder, NAME), rank.part.p, epoch,
                             rank.table.state_dict(),
                             os.path.join(folder, BEST) if best else None)
    dist.barrier()


def restore_tables(rank, checkpoint: str, epoch: int, flag: str) -> None:
    """Load each part's learnable rows saved with ``checkpoint`` after ``epoch`` (on the
    part's first rank), then a barrier: no rank reads a row before every part has restored
    them. Raises CheckpointRefused when a shard is missing or of another epoch."""
    if rank.embeddings is None:
        return
    if rank.table is not None:
        state = load_embedding_shard(checkpoint, rank.part.p, epoch, flag)
        rank.table.load_state_dict(state, checkpoint)
    dist.barrier()
