"""One rank of distributed node classification: serve its part, train with DDP, evaluate.

A rank serves part ``rank // ranks_per_part``. Per epoch: the loader samples and fetches ahead,
the model trains under DDP ``Join`` (ranks with fewer batches shadow the others' all-reduces, so
nothing is dropped and nothing hangs), then val/test accuracy is computed exactly (correct and
total counts summed over ranks). Rank 0 logs, writes metrics and the checkpoint.
"""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import time
from dataclasses import asdict, dataclass

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.join import Join
from torch.nn.parallel import DistributedDataParallel
from tqdm.auto import tqdm

from formats.console import show_progress
from formats.memory import peak_rss_bytes
from formats.partitioned import load_partitioned

from . import rendezvous
from .checkpoint import CheckpointInfo, load_checkpoint, save_checkpoint
from .config import PLACEMENTS, TrainConfig, target_type  # noqa: F401  (re-exported)
from .dist_sampler import DistNeighborSampler, mix_seed
from .features import FeatureFetcher, HaloCache
from .loader import NodeLoader, rank_seeds
from .model import GraphSAGE
from .partition import LocalPart
from .service import PartServer, RpcTransport, serve
from .timing import PHASES, Breakdown

log = logging.getLogger("trainer")

@dataclass
class Rank:
    """What one rank holds: its part (memory-mapped) and server, the transport to the other
    ranks, the time breakdown, and where the model runs."""

    cfg: TrainConfig
    env: rendezvous.RankEnv
    part: LocalPart
    server: PartServer
    transport: RpcTransport
    breakdown: Breakdown
    device: torch.device
    ntype: str
    cache: HaloCache | None = None

    @property
    def local_index(self) -> int:
        return self.env.rank % self.cfg.ranks_per_part

    def loader(self, mask: str, fanouts: list[int], batch_size: int, shuffle: bool,
               timed: bool = True) -> NodeLoader:
        """Batches over this rank's share of the owned ``mask`` nodes; ``timed``: its sampling
        and fetch count in the epoch's breakdown (evaluation is timed as a whole)."""
        cfg = self.cfg
        breakdown = self.breakdown if timed else Breakdown()
        sampler = DistNeighborSampler(self.part, self.server, self.transport, fanouts,
                                      "cuda" if cfg.placement == "cuda" else "cpu", breakdown)
        fetcher = FeatureFetcher(self.part, self.server, self.transport, breakdown, self.cache)
        seeds = rank_seeds(self.part, self.ntype, mask, cfg.ranks_per_part, self.local_index)
        return NodeLoader(sampler, fetcher, self.ntype, seeds, batch_size, seed=cfg.seed,
                          rank=self.env.rank, shuffle=shuffle, prefetch=cfg.prefetch)


def join(cfg: TrainConfig, env: rendezvous.RankEnv) -> Rank:
    """Load and serve this rank's part, then join the process group and RPC."""
    graph = load_partitioned(cfg.graph)
    cfg.check(graph.num_parts, env.world_size)
    ntype = target_type(graph, cfg.target)
    device = torch.device(cfg.device)
    if device.type == "cuda":
        torch.cuda.set_device(env.local_rank % torch.cuda.device_count())
        device = torch.device("cuda", torch.cuda.current_device())
    p = env.rank // cfg.ranks_per_part
    server = PartServer(LocalPart.load(cfg.graph, p).place(cfg.placement))
    serve(server)  # before joining: no request can find this rank without a server
    rendezvous.start(env, "nccl" if device.type == "cuda" else "gloo", cfg.rpc_timeout)
    log.info("rank %d serves part %d of %d (%d ranks per part)", env.rank, p, graph.num_parts,
             cfg.ranks_per_part)
    transport = RpcTransport(cfg.ranks_per_part, env.rank % cfg.ranks_per_part, cfg.rpc_timeout)
    cache = None
    if cfg.cache_mb > 0 and graph.num_parts > 1:
        start = time.perf_counter()
        cache = HaloCache.build(FeatureFetcher(server.part, server, transport), "feat",
                                int(cfg.cache_mb * 2**20))
        log.info("halo cache: %s rows, %.1f MB, built in %.2f s",
                 {t: len(v) for t, v in cache.ids.items()}, cache.nbytes / 2**20,
                 time.perf_counter() - start)
        transport.take_counters()  # epochs count their own traffic
    return Rank(cfg, env, server.part, server, transport, Breakdown(), device, ntype, cache)


def build_model(rank: Rank):
    """GraphSAGE (same initial weights on every rank), its DDP wrapper and Adam."""
    cfg, graph = rank.cfg, rank.part.graph
    fetcher = FeatureFetcher(rank.part, rank.server, rank.transport)
    num_classes = _num_classes(rank.part, rank.ntype)
    torch.manual_seed(cfg.seed)
    model = GraphSAGE({t: fetcher.dim(t, "feat") for t in graph.node_types}, cfg.hidden,
                      num_classes, list(graph.edge_types), len(cfg.fanouts), cfg.dropout)
    model = model.to(rank.device)
    ddp = DistributedDataParallel(
        model, device_ids=[rank.device.index] if rank.device.type == "cuda" else None,
        find_unused_parameters=len(graph.edge_types) > 1)  # a batch may miss an edge type
    ddp.register_comm_hook(None, _timed_allreduce(rank.breakdown))
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    return model, ddp, optimizer


def run_rank(cfg: TrainConfig, env: rendezvous.RankEnv) -> dict:
    """Train on this rank until ``cfg.epochs``; returns the final summary (same on all ranks)."""
    rank = join(cfg, env)
    train_loader = rank.loader("train_mask", cfg.fanouts, cfg.batch_size, True)
    eval_loaders = {m: rank.loader(f"{m}_mask", cfg.eval_fanouts or cfg.fanouts,
                                   cfg.eval_batch_size, False, timed=False)
                    for m in ("val", "test")}
    model, ddp, optimizer = build_model(rank)
    state = load_checkpoint(cfg.checkpoint_dir, model, optimizer) if cfg.resume else None
    history: list[dict] = state["history"] if state else []
    if state:
        log.info("resumed from %s after epoch %d", cfg.checkpoint_dir, len(history) - 1)
    info = CheckpointInfo.of(cfg, rank.part.graph, rank.ntype)
    for epoch in range(len(history), cfg.epochs):
        torch.manual_seed(mix_seed(cfg.seed, epoch, env.rank))  # dropout: resumable exactly
        start = time.perf_counter()
        loss_sum, correct, seen = _train_epoch(rank, ddp, optimizer, train_loader, epoch)
        train_s = time.perf_counter() - start
        with rank.breakdown.clock("eval"):
            accuracy = {m: _evaluate(model, ld, rank.device) for m, ld in eval_loaders.items()}
        record = _epoch_record(epoch, env, train_s, time.perf_counter() - start,
                               [loss_sum, correct, seen, *accuracy["val"], *accuracy["test"]],
                               rank.breakdown.take(), rank.transport.take_counters(),
                               len(train_loader))
        history.append(record)
        if env.rank == 0:
            _report(record, history, cfg)
            if cfg.checkpoint_dir:
                save_checkpoint(cfg.checkpoint_dir, model, optimizer, history, asdict(cfg), info,
                                best=summarize(history)["best_epoch"] == epoch)
    dist.barrier()
    rendezvous.stop()
    return summarize(history)


def _num_classes(part: LocalPart, ntype: str) -> int:
    """From graph.json (recorded at dispatch), else the largest label over all ranks + 1."""
    if ntype in part.graph.num_classes:
        return part.graph.num_classes[ntype]
    top = torch.tensor([int(part.node_data[ntype]["label"].max()) if
                        len(part.node_data[ntype]["label"]) else -1])
    dist.all_reduce(top, op=dist.ReduceOp.MAX)
    return int(top) + 1


def _timed_allreduce(breakdown: Breakdown):
    """DDP's default all-reduce hook, timed from launch to completion (overlaps backward)."""
    def hook(process_group, bucket):
        start = time.perf_counter()
        fut = default_hooks.allreduce_hook(process_group, bucket)

        def done(f):
            breakdown.add("allreduce", time.perf_counter() - start)
            return f.value()
        return fut.then(done)
    return hook


def _train_epoch(rank: Rank, ddp, optimizer, loader: NodeLoader, epoch: int):
    cfg, env, device, breakdown = rank.cfg, rank.env, rank.device, rank.breakdown
    ddp.train()
    loss_sum = torch.zeros((), dtype=torch.float64)
    correct = seen = 0
    bar = tqdm(total=len(loader), desc=f"epoch {epoch}", unit="batch", leave=False,
               disable=env.rank != 0 or not show_progress(cfg.progress))
    with Join([ddp]):
        for i, batch in enumerate(loader.epoch(epoch)):
            if cfg.fail_rank == env.rank and epoch == cfg.fail_epoch and i == 0:
                batch = _inject_failure(cfg.fail_mode, env.rank, batch)
            batch = batch.to(device)
            with breakdown.clock("forward_backward"):
                logits = ddp(batch.blocks, batch.x, batch.ntype)
                loss = torch.nn.functional.cross_entropy(logits, batch.y)
                if not torch.isfinite(loss.detach()):  # before the step spreads it to weights
                    raise NonFiniteLoss(f"loss is {loss.item()} at epoch {epoch}, batch {i} "
                                        f"(rank {env.rank}): training diverged or an input is "
                                        "not finite; lower --lr or check the data")
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            loss_sum += loss.detach().double().cpu() * len(batch.y)
            correct += int((logits.argmax(1) == batch.y).sum())
            seen += len(batch.y)
            bar.update()
    bar.close()
    return float(loss_sum), correct, seen


class NonFiniteLoss(ValueError):
    """The training loss became NaN or inf (a ValueError: reported without a traceback)."""


def _inject_failure(mode: str, rank: int, batch):
    """Testing (--fail-rank): SIGKILL, hang, NaN inputs (returns the poisoned batch), or raise."""
    if mode == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "hang":
        time.sleep(10**6)
    if mode == "nan":
        batch.x = {t: v * float("nan") for t, v in batch.x.items()}
        return batch
    raise RuntimeError(f"injected failure on rank {rank} (--fail-rank)")


@torch.no_grad()
def _evaluate(model, loader: NodeLoader, device) -> tuple[int, int]:
    """(correct, total) over this rank's share of the mask: sums across ranks are exact."""
    model.eval()
    correct = total = 0
    for batch in loader.epoch(0):
        batch = batch.to(device)
        correct += int((model(batch.blocks, batch.x, batch.ntype).argmax(1) == batch.y).sum())
        total += len(batch.y)
    return correct, total


def _epoch_record(epoch, env, train_s, epoch_s, counts, times, rpc, batches) -> dict:
    """One epoch's figures, reduced over ranks (counts and bytes summed, times averaged)."""
    names = list(PHASES) + ["train_s", "epoch_s"]
    values = counts + [times[p] for p in PHASES] + [train_s, epoch_s] + list(rpc.values()) + \
        [batches]
    total = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(total)
    most = torch.tensor([train_s, epoch_s, batches, peak_rss_bytes() / 2**20],
                        dtype=torch.float64)
    dist.all_reduce(most, op=dist.ReduceOp.MAX)
    total, most = total.tolist(), most.tolist()
    loss_sum, correct, seen, val_c, val_n, test_c, test_n = total[:7]
    per_rank = {n: round(v / env.world_size, 4) for n, v in zip(names, total[7:7 + len(names)])}
    rpc_total = dict(zip(rpc, (int(v) for v in total[7 + len(names):-1])))
    return {"epoch": epoch, "loss": loss_sum / max(seen, 1), "train_acc": correct / max(seen, 1),
            "val_acc": val_c / val_n if val_n else math.nan,
            "test_acc": test_c / test_n if test_n else math.nan,
            "train_nodes": int(seen), "val_nodes": int(val_n), "test_nodes": int(test_n),
            "epoch_s": float(most[1]), "train_s": float(most[0]),
            "batches_total": int(total[-1]), "batches_max_rank": int(most[2]),
            "peak_rss_mb_max_rank": round(most[3], 1),
            "time_per_rank_s": per_rank, **rpc_total}


def summarize(history: list[dict]) -> dict:
    """Final figures: test accuracy at the best validation epoch, and at the last epoch."""
    best = max(history, key=lambda r: (r["val_acc"], -r["epoch"]))
    last = history[-1]
    return {"epochs": len(history), "best_epoch": best["epoch"], "val_acc": best["val_acc"],
            "test_acc": best["test_acc"], "final_test_acc": last["test_acc"],
            "mean_epoch_s": sum(r["epoch_s"] for r in history) / len(history)}


def _report(record: dict, history: list[dict], cfg: TrainConfig) -> None:
    t = record["time_per_rank_s"]
    log.info("epoch %d: loss %.4f train %.4f val %.4f test %.4f | %.2f s (train %.2f) | "
             "per rank: sample local %.2f remote %.2f, fetch %.2f, wait %.2f, fwd/bwd %.2f, "
             "allreduce %.2f, eval %.2f s | rpc %d req, %.1f MB",
             record["epoch"], record["loss"], record["train_acc"], record["val_acc"],
             record["test_acc"], record["epoch_s"], record["train_s"], t["sample_local"],
             t["sample_remote"], t["feature_fetch"], t["wait_batch"], t["forward_backward"],
             t["allreduce"], t["eval"], record["rpc_requests"],
             (record["rpc_bytes_sent"] + record["rpc_bytes_received"]) / 1e6)
    if cfg.metrics_out:
        write_json_atomic(cfg.metrics_out, {"config": asdict(cfg), "epochs": history,
                                            "summary": summarize(history)})


def write_json_atomic(path: str, obj) -> None:
    """Write JSON to ``path`` through a temporary file renamed into place."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{os.path.basename(path)}.partial")
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)
