"""What every task shares on a rank: joining the job (:func:`join`), the model and its DDP
wrapper (:func:`build_model`), the training batches under DDP ``Join``, the guarded optimizer
step, and the epoch's records.

A rank serves part ``rank // ranks_per_part``. Per epoch: the loader samples and fetches ahead,
the model trains under DDP ``Join`` (ranks with fewer batches shadow the others' all-reduces, so
nothing is dropped and nothing hangs), then the task evaluates exactly over all ranks. Rank 0
logs, writes metrics and the checkpoints.
"""

from __future__ import annotations

import logging
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

from graphprep.pipeline.core.console import show_progress
from graphprep.pipeline.core.memory import peak_rss_bytes
from graphprep.formats.partitioned import load_partitioned

from graphprep.trainer.batch import DenseInputs
from graphprep.trainer.config import TrainConfig, target_etype, target_type
from graphprep.trainer.data.embeddings import (EmbeddingTable, SparseEmbeddings, featureless_types,
                                               register_meta)
from graphprep.trainer.data.features import (INPUT_FEATURE, LOG_DEGREE, FeatureFetcher,
                                             HaloCache, TableRoute, add_log_degree)
from graphprep.trainer.data.link_data import without_held_out
from graphprep.trainer.data.loader import NodeLoader, rank_seeds
from graphprep.trainer.data.remote_store import RemoteStore
from graphprep.trainer.data.sparse import SparseRows
from graphprep.trainer.models import registry
from graphprep.trainer.models.contract import LinkModel
from graphprep.trainer.models.scorer import make_scorer
from graphprep.trainer.models.spec import ModelSpec, model_spec
from graphprep.trainer.runtime import rendezvous
from graphprep.trainer.runtime.health import where
from graphprep.trainer.runtime.outputs import write_json_atomic
from graphprep.trainer.sampling.dist_sampler import DistNeighborSampler, Relabeler
from graphprep.trainer.sampling.partition import ORIG_ID, LocalPart
from graphprep.trainer.sampling.service import PartServer, RpcTransport, serve
from graphprep.trainer.sampling.timing import PHASES, Breakdown

log = logging.getLogger("graphprep.trainer")


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
    ntype: str                 # node task: the type classified; link: the target's dst type
    cache: HaloCache | None = None
    store: RemoteStore | None = None       # --remote-store: remote rows kept once fetched
    extra_inputs: tuple[str, ...] = ()     # node data appended to the features (degree)
    table_route: TableRoute | None = None  # learnable rows, ranks per part > 1: where they live
    embeddings: SparseEmbeddings | None = None   # --featureless embed: pulls and pushes
    first_batch_at: float | None = None    # time.time() the first training batch was ready
    relabeler: Relabeler | None = None     # the stamp arrays every sampler of the rank shares

    @property
    def table(self) -> EmbeddingTable | None:
        """This part's learnable rows, on the part's first rank (else None)."""
        return getattr(self.server, "embeddings", None)

    @property
    def local_index(self) -> int:
        return self.env.rank % self.cfg.ranks_per_part

    def loader(self, mask: str, fanouts: list[int], batch_size: int, shuffle: bool,
               timed: bool = True, max_batches: int | None = None) -> NodeLoader:
        """Batches over this rank's share of the owned ``mask`` nodes; ``timed``: its sampling
        and fetch count in the epoch's breakdown (evaluation is timed as a whole)."""
        seeds = rank_seeds(self.part, self.ntype, mask, self.cfg.ranks_per_part,
                           self.local_index)
        return self.node_loader(self.ntype, seeds, fanouts, batch_size, shuffle, timed,
                                max_batches=max_batches)

    def node_loader(self, ntype: str, seeds: torch.Tensor, fanouts: list[int],
                    batch_size: int, shuffle: bool = False, timed: bool = False,
                    label: str | None = "label", max_batches: int | None = None) -> NodeLoader:
        """Batches over the given ``ntype`` seeds (new IDs, any owner), at most
        ``max_batches`` of them per epoch."""
        sampler, fetcher = self.sampling(fanouts, timed)
        return NodeLoader(sampler, fetcher, ntype, seeds, batch_size, seed=self.cfg.seed,
                          rank=self.env.rank, shuffle=shuffle, prefetch=self.cfg.prefetch,
                          label=label, max_batches=max_batches)

    def sampling(self, fanouts: list[int], timed: bool = True
                 ) -> tuple[DistNeighborSampler, FeatureFetcher]:
        """A sampler and a feature fetcher over all parts, timed into the epoch's breakdown
        or not; the sampler brings ``--edge-feat`` rows with each sample. Timed ones (training)
        leave learnable rows to the step's pull."""
        breakdown = self.breakdown if timed else Breakdown()
        # Where the served CSC lives (pinned memory is on "cpu"); on a GPU it names its index
        # ("cuda:1"): plain "cuda" would mean GPU 0 on the loader's thread, where this rank's
        # torch.cuda.set_device does not apply.
        if self.relabeler is None:     # 4 B per node of the graph: one per rank
            self.relabeler = Relabeler(self.part.graph.num_nodes)
        sampler = DistNeighborSampler(self.part, self.server, self.transport, fanouts,
                                      self.server.device, breakdown,
                                      edge_feat=self.cfg.edge_feat, relabeler=self.relabeler)
        fetcher = FeatureFetcher(self.part, self.server, self.transport, breakdown, self.cache,
                                 self.extra_inputs, self.table_route,
                                 defer_embeddings=timed and self.embeddings is not None,
                                 store=self.store)
        return sampler, fetcher


def join(cfg: TrainConfig, env: rendezvous.RankEnv) -> Rank:
    """Load and serve this rank's part, then join the process group and RPC."""
    graph = load_partitioned(cfg.graph)
    cfg.check(graph.num_parts, env.world_size)
    ntype = target_etype(graph, cfg.target_etype).dst if cfg.task == "link" else \
        target_type(graph, cfg.target)
    device = torch.device(cfg.device)
    if device.type == "cuda" or cfg.placement == "cuda":   # ranks spread over the GPUs
        torch.cuda.set_device(env.local_rank % torch.cuda.device_count())
    if device.type == "cuda":
        device = torch.device("cuda", torch.cuda.current_device())
    p = env.rank // cfg.ranks_per_part
    part = LocalPart.load(cfg.graph, p)
    if cfg.task == "link":
        part = without_held_out(part)     # held-out edges never carry messages
    if cfg.uses_degree_input:
        add_log_degree(part)
    table = _embedding_table(cfg, part, env)
    server = PartServer(part.place(cfg.placement))
    server.embeddings = table    # before serving: other ranks update it from the start
    serve(server)  # before joining: no request can find this rank without a server
    rendezvous.start(env, device, cfg.rpc_timeout)
    log.info("rank %d serves part %d of %d (%d ranks per part)", env.rank, p, graph.num_parts,
             cfg.ranks_per_part)
    transport = RpcTransport(cfg.ranks_per_part, env.rank % cfg.ranks_per_part, cfg.rpc_timeout)
    cache = None
    if cfg.cache_mb > 0 and graph.num_parts > 1:
        where.at("the halo cache fetch")
        start = time.perf_counter()
        cache = HaloCache.build(FeatureFetcher(server.part, server, transport),
                                (INPUT_FEATURE, ORIG_ID), int(cfg.cache_mb * 2**20))
        log.info("halo cache: %s rows, %.1f MB, built in %.2f s",
                 {t: len(v) for t, v in cache.ids.items()}, cache.nbytes / 2**20,
                 time.perf_counter() - start)
        transport.take_counters()  # epochs count their own traffic
    store = RemoteStore(server.part, (INPUT_FEATURE, ORIG_ID), cfg.remote_store) \
        if cfg.remote_store and graph.num_parts > 1 else None
    if store is not None and cfg.remote_store_fill:
        where.at("the remote store fill")
        start = time.perf_counter()
        rows = store.fill(FeatureFetcher(server.part, server, transport, cache=cache,
                                         store=store))
        log.info("remote store: %d halo rows fetched in %.2f s", rows,
                 time.perf_counter() - start)
        transport.take_counters()  # epochs count their own traffic
    rank = Rank(cfg, env, server.part, server, transport, Breakdown(), device, ntype, cache,
                store, (LOG_DEGREE,) if cfg.uses_degree_input else ())
    types = featureless_types(graph) if cfg.learns_embeddings else []
    if types:
        # learnable rows live on each part's first rank: with several ranks per part, reach
        # those through a transport of local index 0
        first = transport if cfg.ranks_per_part == 1 else \
            RpcTransport(cfg.ranks_per_part, 0, cfg.rpc_timeout)
        rank.table_route = TableRoute(first, table is not None) if cfg.ranks_per_part > 1 else None
        fetcher = FeatureFetcher(rank.part, server, transport, rank.breakdown, None, (),
                                 rank.table_route)
        rank.embeddings = SparseEmbeddings(fetcher, table, first, types, cfg.embedding_dim)
    return rank


def _embedding_table(cfg: TrainConfig, part: LocalPart, env) -> EmbeddingTable | None:
    """``--featureless embed``: register the featureless types' learnable rows in ``part``
    (held by the part's first rank; the others only learn their width). None otherwise."""
    types = featureless_types(part.graph) if cfg.learns_embeddings else []
    if not types:
        return None
    if env.rank % cfg.ranks_per_part:
        register_meta(part, types, cfg.embedding_dim)
        return None
    start = time.perf_counter()
    table = EmbeddingTable(part, types, cfg.embedding_dim, cfg.embedding_lr, cfg.seed)
    table.register(part)
    log.info("learnable embeddings of %s: %s rows, %.1f MB with Adam state, made in %.2f s",
             ", ".join(types), sum(len(w) for w in table.weights.values()),
             table.nbytes / 2**20, time.perf_counter() - start)
    return table


def rank_model_spec(rank: Rank) -> ModelSpec:
    """The graph's metadata for the model factory (the same on every rank)."""
    cfg = rank.cfg
    out_dim = cfg.hidden if cfg.task == "link" else num_classes(rank.part, rank.ntype)
    return model_spec(rank.part.graph, cfg, rank.ntype, out_dim)


def build_model(rank: Rank, first_batch=None):
    """The model (same initial weights on every rank: seeded, then DDP broadcasts rank 0's),
    its DDP wrapper and Adam: ``--model``'s module, with class logits (node task), or its
    embeddings and a scorer (link task). ``first_batch()`` gives a batch to run once before
    DDP wraps the model when it has lazily sized parameters (PyG's ``in_channels=-1``);
    without one such a model comes back alone, ``(model, None, None)``, for inference. A
    module without ``sparse_input = True`` gets sparse inputs densified per batch (a
    forward pre-hook: its state dict is unchanged; rank 0 warns once what it costs). DDP's
    ``find_unused_parameters``: :func:`find_unused`."""
    cfg = rank.cfg
    spec = rank_model_spec(rank)
    torch.manual_seed(cfg.seed)
    user = registry.build(cfg.model, cfg.model_args, spec)
    model = user
    if not getattr(model, "sparse_input", False):
        # sparse (CSR) inputs travel and reach the device sparse; a model that does not say
        # it takes them gets them densified per batch there, and rank 0 says what it costs
        model.register_forward_pre_hook(DenseInputs(cfg.model, rank.env.rank == 0))
    if cfg.task == "link":
        model = LinkModel(model, make_scorer(cfg.scorer, cfg.hidden), cfg.hidden)
    model = model.to(rank.device)
    batch = None
    if first_batch is not None and _has_lazy(model):
        batch = first_batch().to(rank.device)
        with torch.no_grad():
            model.eval()
            model(batch)
    if _has_lazy(model):
        # no batch to size them (trainer embed): DDP refuses unsized parameters, and inference
        # needs neither DDP nor an optimizer; load_state_dict sizes them from the checkpoint
        return model, None, None
    where.at("the unused-parameter check")
    unused = find_unused(model, user, spec, cfg.model,
                         batch if batch is not None else first_batch)
    if first_batch is not None:
        rpc_counters(rank)          # epoch 0 counts its own traffic and time, not the probe's
        rank.breakdown.take()
    where.at("the model broadcast")
    ddp = DistributedDataParallel(
        model, device_ids=[rank.device.index] if rank.device.type == "cuda" else None,
        find_unused_parameters=unused)
    ddp.register_comm_hook(None, _timed_allreduce(rank.breakdown))
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    return model, ddp, optimizer


def find_unused(model: torch.nn.Module, user: torch.nn.Module, spec: ModelSpec, name: str,
                batch) -> bool:
    """DDP's ``find_unused_parameters`` for ``model`` (``user``: the factory's module): the
    module's own ``find_unused_parameters`` attribute where it sets one; True on a
    heterogeneous graph (a batch may miss an edge type); else, for a user's module, whether
    a forward and backward on the first training batch (``batch``, or a function giving it)
    leaves a parameter without a gradient on any rank. Where every parameter is used the
    flag would only cost a traversal of the autograd graph per step, and DDP warns about it
    on every rank; a module whose later batches leave parameters unused says so with the
    attribute (the error DDP then raises names it, :data:`UNUSED_HINT`)."""
    own = getattr(user, "find_unused_parameters", None)
    if isinstance(own, bool):
        return own
    if spec.is_hetero:
        return True
    if name in ("sage", "gat"):
        return False
    if batch is None:
        return True
    if callable(batch):
        batch = batch().to(next(model.parameters()).device)
    mode = model.training
    model.eval()      # no dropout draw, no batch-norm statistics: the run stays as it was
    try:
        outputs = [t for t in _tensors(model(batch)) if t.requires_grad and t.is_floating_point()]
        if outputs:
            sum(t.sum() for t in outputs).backward()
        missing = not outputs or any(p.requires_grad and p.grad is None
                                     for p in model.parameters())
    finally:
        model.zero_grad(set_to_none=True)
        model.train(mode)
    flag = torch.tensor([int(missing)])
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)     # every rank's reducer must agree
    return bool(flag)


UNUSED_HINT = ("the model left parameters without gradients on a batch after every parameter "
               "had one on the first: set find_unused_parameters = True on the module")


def _tensors(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _tensors(o)]
    return []


def _has_lazy(model: torch.nn.Module) -> bool:
    return any(isinstance(p, torch.nn.parameter.UninitializedParameter)
               for p in model.parameters())


def num_classes(part: LocalPart, ntype: str) -> int:
    """From graph.json (recorded at dispatch), else the largest label over all ranks + 1."""
    if ntype in part.graph.num_classes:
        return part.graph.num_classes[ntype]
    top = torch.tensor([int(part.node_data[ntype]["label"].max()) if
                        len(part.node_data[ntype]["label"]) else -1])
    dist.all_reduce(top, op=dist.ReduceOp.MAX)
    return int(top) + 1


def _timed_allreduce(breakdown: Breakdown):
    """DDP's default all-reduce hook, timed from launch to completion (overlaps backward);
    a failure in backward from here on is the all-reduce's (the wait is at its end)."""
    def hook(process_group, bucket):
        where.step = "the gradient all-reduce"
        start = time.perf_counter()
        fut = default_hooks.allreduce_hook(process_group, bucket)

        def done(f):
            breakdown.add("allreduce", time.perf_counter() - start)
            return f.value()
        return fut.then(done)
    return hook


def train_batches(rank: Rank, ddp, loader, epoch: int):
    """The epoch's batches on the model's device, under DDP ``Join`` (ranks with fewer batches
    shadow the others' all-reduces), with the progress bar and the testing failure hook."""
    cfg, env = rank.cfg, rank.env
    ddp.train()
    bar = tqdm(total=len(loader), desc=f"epoch {epoch}", unit="batch", leave=False,
               disable=env.rank != 0 or not show_progress(cfg.progress))
    emb = rank.embeddings
    with Join([ddp]):
        for i, batch in enumerate(loader.epoch(epoch)):
            where.at("the forward/backward", epoch, i)
            if cfg.fail_rank == env.rank and epoch == cfg.fail_epoch and i == 0:
                batch = _inject_failure(cfg.fail_mode, env.rank, batch)
            batch = batch.to(rank.device)
            if rank.first_batch_at is None:
                rank.first_batch_at = time.time()
            # learnable rows: pulled as leaves now, their gradients pushed once the task's
            # step (run between this yield and the next) has done the backward
            leaves = emb.pull(batch, rank.device) if emb else None
            yield i, batch
            if leaves:
                emb.push(batch, leaves)
            bar.update()
        where.at("the DDP join", epoch)   # Join's exit: shadowing the others' all-reduces
    if emb:
        where.at("the embedding updates", epoch)
        emb.settle()
    bar.close()


def step(loss, optimizer, where: str, output=None, batch=None) -> None:
    """Backward and optimizer step, refused (NonFiniteLoss, naming ``where``) before a NaN or
    inf loss spreads to the weights. With the model's ``output`` and ``batch``: an output
    that is not finite before any step was taken, on finite inputs, is the model's doing
    (ModelError), not a divergence."""
    if not torch.isfinite(loss.detach()):
        if output is not None and not optimizer.state and _finite(batch) and \
                not all(bool(torch.isfinite(t).all()) for t in _tensors(output)):
            raise registry.ModelError(f"the model's output holds NaN or inf at {where}, before "
                                      "any training step and on finite inputs: its forward "
                                      "makes them")
        raise NonFiniteLoss(f"loss is {loss.item()} at {where}: training diverged or an input "
                            "is not finite; lower --lr or check the data")
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def _finite(batch) -> bool:
    """Whether every input feature of ``batch`` is finite (sparse ones: their stored values)."""
    if batch is None:
        return False
    values = [x.values if isinstance(x, SparseRows) else x for x in batch.x_dict.values()]
    return all(bool(torch.isfinite(v).all()) for v in values if isinstance(v, torch.Tensor))


class NonFiniteLoss(ValueError):
    """The training loss became NaN or inf (a ValueError: reported without a traceback)."""


def _inject_failure(mode: str, rank: int, batch):
    """Testing (--fail-rank): SIGKILL, hang, NaN inputs (returns the poisoned batch), or raise."""
    if mode == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "hang":
        time.sleep(10**6)
    if mode == "nan":
        batch.x_dict = {t: v * float("nan") for t, v in batch.x_dict.items()}
        return batch
    raise RuntimeError(f"injected failure on rank {rank} (--fail-rank)")


def rpc_counters(rank: Rank) -> dict:
    """The epoch's RPC counters of every transport the rank sends through (with several
    ranks per part, learnable rows travel to the parts' first ranks on their own)."""
    out = rank.transport.take_counters()
    route = rank.table_route
    if route is not None and route.transport is not rank.transport:
        for name, value in route.transport.take_counters().items():
            out[name] += value
    return out


def startup_seconds(rank: Rank) -> float:
    """Seconds from the job's launch to the first training batch, the slowest rank's (a
    collective: every rank calls it once its first epoch has run)."""
    from graphprep.trainer.runtime.launch import launched_at
    ready = rank.first_batch_at or time.time()       # a rank without training batches
    mine = torch.tensor([ready - launched_at()], dtype=torch.float64)
    dist.all_reduce(mine, op=dist.ReduceOp.MAX)
    return round(float(mine), 2)


def epoch_record(epoch, env, train_s, epoch_s, sums: dict[str, float], times, rpc,
                  batches, counts: dict[str, int] | None = None) -> dict:
    """One epoch's common figures, reduced over ranks (``sums``, bytes and ``counts``
    summed, times averaged in ``time_per_rank_s`` and listed rank by rank in
    ``time_by_rank_s``); the task's summed training counts are returned under ``"sums"``,
    ``counts`` (the training batches' work counts, :data:`COUNTS`) at the top level."""
    counts = counts or {}
    names = list(PHASES) + ["train_s", "epoch_s"]
    values = list(sums.values()) + [times[p] for p in PHASES] + [train_s, epoch_s] + \
        list(counts.values()) + list(rpc.values()) + [batches]
    total = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(total)
    most = torch.tensor([train_s, epoch_s, batches, peak_rss_bytes() / 2**20],
                        dtype=torch.float64)
    dist.all_reduce(most, op=dist.ReduceOp.MAX)
    mine = torch.tensor([times[p] for p in PHASES] + [train_s, epoch_s], dtype=torch.float64)
    each = [torch.empty_like(mine) for _ in range(env.world_size)]
    dist.all_gather(each, mine)          # stragglers show per rank, not in the mean
    total, most = total.tolist(), most.tolist()
    k = len(sums)
    per_rank = {n: round(v / env.world_size, 4) for n, v in zip(names, total[k:k + len(names)])}
    by_rank = {n: [round(float(t[i]), 4) for t in each] for i, n in enumerate(names)}
    k += len(names)
    counted = dict(zip(counts, (int(v) for v in total[k:k + len(counts)])))
    rpc_total = dict(zip(rpc, (int(v) for v in total[k + len(counts):-1])))
    return {"sums": dict(zip(sums, total[:k])),
            "epoch_s": float(most[1]), "train_s": float(most[0]),
            "batches_total": int(total[-1]), "batches_max_rank": int(most[2]),
            "peak_rss_mb_max_rank": round(most[3], 1),
            "time_per_rank_s": per_rank, "time_by_rank_s": by_rank, **counted, **rpc_total}


def summarize(history: list[dict], metric: str = "val_acc") -> dict:
    """Final figures: every validation and test metric at the epoch of best ``metric``
    (earliest on ties), and the last epoch's test value of that metric."""
    best = max(history, key=lambda r: (r[metric], -r["epoch"]))
    last = history[-1]
    test_metric = "test_" + metric.removeprefix("val_")
    out = {"epochs": len(history), "best_epoch": best["epoch"]}
    out.update({k: v for k, v in best.items()
                if k.startswith(("val_", "test_")) and isinstance(v, float)})
    out[f"final_{test_metric}"] = last[test_metric]
    out["mean_epoch_s"] = sum(r["epoch_s"] for r in history) / len(history)
    return out


def report(record: dict, history: list[dict], cfg: TrainConfig, task) -> None:
    t = record["time_per_rank_s"]
    log.info("epoch %d: %s | %.2f s (train %.2f) | "
             "per rank: sample local %.2f remote %.2f, fetch %.2f, wait %.2f, fwd/bwd %.2f, "
             "allreduce %.2f, eval %.2f s | rpc %d req, %.1f MB",
             record["epoch"], task.describe(record), record["epoch_s"], record["train_s"],
             t["sample_local"], t["sample_remote"], t["feature_fetch"], t["wait_batch"],
             t["forward_backward"], t["allreduce"], t["eval"], record["rpc_requests"],
             (record["rpc_bytes_sent"] + record["rpc_bytes_received"]) / 1e6)
    if cfg.metrics_out:
        write_json_atomic(cfg.metrics_out, {"config": asdict(cfg), "epochs": history,
                                            "summary": summarize(history, task.metric)})
