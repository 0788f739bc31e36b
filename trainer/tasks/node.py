"""Node classification on one rank: cross-entropy (or the module's own ``loss``) on the owned
training nodes, exact accuracy from correct and total counts summed over ranks."""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

from graphprep.trainer.data.loader import NodeLoader
from graphprep.trainer.loop import Rank, num_classes, step, train_batches
from graphprep.trainer.models.contract import seed_logits
from graphprep.trainer.runtime.health import EVALUATION, where


class NodeTask:
    """Node classification: cross-entropy on the owned training nodes (or the module's own
    ``loss(out, batch)``), exact accuracy."""

    metric = "val_acc"

    def __init__(self, rank: Rank):
        cfg = rank.cfg
        self.rank, self.target = rank, rank.ntype
        self.num_classes = num_classes(rank.part, rank.ntype)
        self.train_loader = rank.loader("train_mask", cfg.fanouts, cfg.batch_size, True,
                                        max_batches=cfg.max_batches)
        self.eval_loaders = {m: rank.loader(f"{m}_mask", cfg.eval_fanouts or cfg.fanouts,
                                            cfg.eval_batch_size, False, timed=False)
                             for m in ("val", "test")}

    @property
    def num_batches(self) -> int:
        return len(self.train_loader)

    def first_batch(self):
        """A training batch of this rank (the model sizes lazy parameters on it)."""
        return self.train_loader.batch(0, 0, self.train_loader.seeds[:self.rank.cfg.batch_size])

    def train_epoch(self, ddp, optimizer, epoch: int) -> dict[str, float]:
        """One epoch over this rank's seeds; returns its sums (loss, correct, seen)."""
        loss_sum = torch.zeros((), dtype=torch.float64)
        correct = seen = 0
        for i, batch in train_batches(self.rank, ddp, self.train_loader, epoch):
            with self.rank.breakdown.clock("forward_backward"):
                out = ddp(batch)
                logits = seed_logits(out, batch, self.num_classes)
                loss = self.loss(ddp.module, out, logits, batch)
                step(loss, optimizer, f"epoch {epoch}, batch {i} (rank {self.rank.env.rank})",
                     logits, batch)
                # inside the clock: on a GPU, .cpu() waits for the step's kernels
                loss_sum += loss.detach().double().cpu() * len(batch.y)
            correct += int((logits.argmax(1) == batch.y).sum())
            seen += len(batch.y)
        return {"loss_sum": float(loss_sum), "correct": correct, "seen": seen}

    @staticmethod
    def loss(module, out, logits: torch.Tensor, batch) -> torch.Tensor:
        """The module's ``loss(out, batch)`` where it defines one, else cross-entropy."""
        own = getattr(module, "loss", None)
        return own(out, batch) if callable(own) else \
            torch.nn.functional.cross_entropy(logits, batch.y)

    @staticmethod
    def train_metrics(sums: dict[str, float]) -> dict:
        seen = max(sums["seen"], 1)
        return {"loss": sums["loss_sum"] / seen, "train_acc": sums["correct"] / seen,
                "train_nodes": int(sums["seen"])}

    def evaluate(self, model) -> dict:
        """Exact validation and test accuracy over all ranks' nodes."""
        return exact_accuracy([c for ld in self.eval_loaders.values()
                               for c in _evaluate(model, ld, self.rank.device,
                                                  self.num_classes)])

    @staticmethod
    def describe(record: dict) -> str:
        return (f"loss {record['loss']:.4f} train {record['train_acc']:.4f} val "
                f"{record['val_acc']:.4f} test {record['test_acc']:.4f}")


def exact_accuracy(counts: list[float]) -> dict:
    """Validation and test accuracy from this rank's ``[val correct, val total, test correct,
    test total]``, summed over all ranks (NaN where a split is empty)."""
    total = torch.tensor(counts, dtype=torch.float64)
    where.step = f"{EVALUATION} all-reduce"
    dist.all_reduce(total)
    val_c, val_n, test_c, test_n = total.tolist()
    return {"val_acc": val_c / val_n if val_n else math.nan,
            "test_acc": test_c / test_n if test_n else math.nan,
            "val_nodes": int(val_n), "test_nodes": int(test_n)}


@torch.no_grad()
def _evaluate(model, loader: NodeLoader, device, classes: int) -> tuple[int, int]:
    """(correct, total) over this rank's share of the mask: sums across ranks are exact."""
    model.eval()
    correct = total = 0
    for batch in loader.epoch(0):
        batch = batch.to(device)
        logits = seed_logits(model(batch), batch, classes)
        correct += int((logits.argmax(1) == batch.y).sum())
        total += len(batch.y)
    return correct, total


