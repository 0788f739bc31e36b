"""One rank of distributed training: join, build the task and the model, run the epochs.

The epoch loop is shared (:mod:`trainer.loop`); what a task trains on and how it scores is its
own: :class:`trainer.tasks.node.NodeTask` (``--task node``) or
:class:`trainer.tasks.link.LinkTask` (``--task link``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict

import torch
import torch.distributed as dist

from .config import TrainConfig
from .loop import build_model, epoch_record, join, report, summarize
from .runtime import rendezvous
from .runtime.checkpoint import CheckpointInfo, load_checkpoint, save_checkpoint
from .runtime.health import EVALUATION, where
from .sampling.dist_sampler import mix_seed
from .tasks.link import LinkTask
from .tasks.node import NodeTask

log = logging.getLogger("trainer")


def run_rank(cfg: TrainConfig, env: rendezvous.RankEnv) -> dict:
    """Train on this rank until ``cfg.epochs``; returns the final summary (same on all ranks)."""
    rank = join(cfg, env)
    task = LinkTask(rank) if cfg.task == "link" else NodeTask(rank)
    model, ddp, optimizer = build_model(rank, task.first_batch)
    state = load_checkpoint(cfg.checkpoint_dir, model, optimizer) if cfg.resume else None
    history: list[dict] = state["history"] if state else []
    if state:
        log.info("resumed from %s after epoch %d", cfg.checkpoint_dir, len(history) - 1)
    info = CheckpointInfo.of(cfg, rank.part.graph, task.target)
    for epoch in range(len(history), cfg.epochs):
        torch.manual_seed(mix_seed(cfg.seed, epoch, env.rank))  # dropout: resumable exactly
        start = time.perf_counter()
        where.at("the training", epoch)
        sums = task.train_epoch(ddp, optimizer, epoch)
        train_s = time.perf_counter() - start
        where.at(EVALUATION, epoch)
        with rank.breakdown.clock("eval"):
            evaluation = task.evaluate(model)
        where.at("the metrics all-reduce", epoch)
        record = epoch_record(epoch, env, train_s, time.perf_counter() - start, sums,
                               rank.breakdown.take(), rank.transport.take_counters(),
                               task.num_batches)
        record = {"epoch": epoch, **task.train_metrics(record.pop("sums")), **evaluation,
                  **record}
        history.append(record)
        if env.rank == 0:
            report(record, history, cfg, task)
            if cfg.checkpoint_dir:
                best = summarize(history, task.metric)["best_epoch"] == epoch
                save_checkpoint(cfg.checkpoint_dir, model, optimizer, history, asdict(cfg), info,
                                best=best)
    where.at("the final barrier")
    dist.barrier()
    rendezvous.stop()
    return summarize(history, task.metric)
