"""Link prediction on one rank: train on the part's training edges, evaluate exactly.

Training: :class:`graphprep.trainer.data.link_loader.LinkLoader` batches (positives, uniform negatives,
blocks without the batch's own edges), binary cross-entropy, DDP. Message passing never sees a
validation or test edge (their CSC entries are dropped at load, ``without_held_out``).

Evaluation, per split: each part ranks its held-out edges (by destination owner) against
``--eval-negatives`` K fixed negative destinations per edge, drawn from a generator keyed by
(seed, split, part), so they do not depend on the number of ranks. Embeddings of every node
the rank needs are computed by sampling (``--eval-fanouts``), then scored in chunks. MRR and
Hits@k are exact sums over all ranks; AUC is exact over all positives against the first of
each positive's negatives (an equal number), the scores gathered on every rank. A rank holds
``8 K`` bytes per held-out edge of its part and the embeddings of the nodes it needs.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

from graphprep.trainer.config import target_etype
from graphprep.trainer.data.link_data import LinkEdges, TrainPositives, split_edges
from graphprep.trainer.data.link_loader import LinkLoader
from graphprep.trainer.data.negatives import fixed_eval_negatives
from graphprep.trainer.loop import Rank, step, train_batches
from graphprep.trainer.models.contract import seed_embeddings
from graphprep.trainer.models.scorer import link_loss
from graphprep.trainer.sampling.dist_sampler import mix_seed
from graphprep.trainer.sampling.partition import LocalPart
from graphprep.trainer.tasks.link_metrics import auc, ranks

HITS = (20, 50, 100)
SCORE_CHUNK = 1024          # positives scored at once: holds chunk x K x hidden floats


class LinkTask:
    """What ``run_rank`` needs for ``--task link``: loaders, a training epoch, evaluation."""

    metric = "val_auc"

    def __init__(self, rank: Rank):
        cfg, env = rank.cfg, rank.env
        self.rank = rank
        self.etype = target_etype(rank.part.graph, cfg.target_etype)
        self.target = str(self.etype)
        # the masks index the part's stored CSC (the served one may be a filtered copy)
        stored = LocalPart.load(cfg.graph, rank.part.p)
        self.eval_edges = split_edges(stored, self.etype, ("val", "test"))
        train = TrainPositives(stored, self.etype, cfg.ranks_per_part, rank.local_index)
        sampler, fetcher = rank.sampling(cfg.fanouts)
        self.loader = LinkLoader(sampler, fetcher, rank.part, self.etype, train,
                                 cfg.batch_size, seed=cfg.seed, rank=env.rank,
                                 neg_ratio=cfg.neg_ratio, corrupt_src=cfg.corrupt_src,
                                 prefetch=cfg.prefetch, max_batches=cfg.max_batches)

    @property
    def num_batches(self) -> int:
        return len(self.loader)

    def first_batch(self):
        """A training batch of this rank (the model sizes lazy parameters on it)."""
        return self.loader.batch(0, 0, next(self.loader.seed_batches(0),
                                            torch.empty(0, dtype=torch.int64)))

    def train_epoch(self, ddp, optimizer, epoch: int) -> dict[str, float]:
        """One epoch over this rank's training edges; returns (loss sum, positives)."""
        loss_sum = torch.zeros((), dtype=torch.float64)
        seen = 0
        for i, batch in train_batches(self.rank, ddp, self.loader, epoch):
            with self.rank.breakdown.clock("forward_backward"):
                logits = ddp(batch)
                positive = batch.edge_label.bool()
                pos, neg = logits[positive], logits[~positive]
                loss = link_loss(pos, neg)
                step(loss, optimizer, f"epoch {epoch}, batch {i} (rank {self.rank.env.rank})",
                     logits, batch)
                # inside the clock: on a GPU, .cpu() waits for the step's kernels
                loss_sum += loss.detach().double().cpu() * len(pos)
            seen += len(pos)
        return {"loss_sum": float(loss_sum), "seen": seen}

    @staticmethod
    def train_metrics(sums: dict[str, float]) -> dict:
        return {"loss": sums["loss_sum"] / max(sums["seen"], 1),
                "train_edges": int(sums["seen"])}

    @torch.no_grad()
    def evaluate(self, model, embeddings=None) -> dict:
        """AUC, MRR and Hits@k of the validation and test edges, exact over all ranks.
        ``embeddings(nodes) -> {type: (ascending ids, rows)}`` gives the nodes' embeddings
        (default: sampled with ``--eval-fanouts``; ``trainer embed`` passes its full-neighbor
        ones)."""
        model = getattr(model, "module", model)
        model.eval()
        embeddings = embeddings or (lambda nodes: self.embeddings(model.encoder, nodes))
        out = {}
        for index, split in enumerate(("val", "test")):
            out.update(self._evaluate_split(model.scorer, embeddings, split, index))
        return out

    def _evaluate_split(self, scorer, embeddings, split: str, index: int) -> dict:
        cfg, part = self.rank.cfg, self.rank.part
        edges = self.eval_edges[split]
        negatives = fixed_eval_negatives(len(edges), cfg.eval_negatives,
                                         part.graph.num_nodes[self.etype.dst],
                                         mix_seed(cfg.seed, index, part.p))
        mine = edges.share(cfg.ranks_per_part, self.rank.local_index)
        negatives = torch.tensor_split(negatives, cfg.ranks_per_part)[self.rank.local_index]
        pos, neg = self.score(scorer, embeddings, mine, negatives)
        sums = torch.zeros(2 + len(HITS), dtype=torch.float64)
        if len(pos):
            r = ranks(pos, neg)
            sums[0], sums[1] = len(r), (1.0 / r).sum()
            sums[2:] = torch.tensor([float((r <= k).sum()) for k in HITS])
        dist.all_reduce(sums)
        gathered = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, (pos, neg[:, 0]))
        all_pos = torch.cat([p for p, _ in gathered])
        all_neg = torch.cat([n for _, n in gathered])
        n = int(sums[0])
        result = {f"{split}_auc": auc(all_pos, all_neg) if n else math.nan,
                  f"{split}_mrr": float(sums[1] / n) if n else math.nan}
        result.update({f"{split}_hits@{k}": float(sums[2 + i] / n) if n else math.nan
                       for i, k in enumerate(HITS)})
        result[f"{split}_edges"] = n
        return result

    def score(self, scorer, embeddings, edges: LinkEdges, negatives: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor]:
        """Scores of ``edges`` ``[P]`` and of each source against its negative destinations
        ``[P, K]`` (CPU float tensors)."""
        et, k = self.etype, negatives.shape[1]
        needed: dict[str, list[torch.Tensor]] = {et.src: [edges.src]}
        needed.setdefault(et.dst, []).extend([edges.dst, negatives.flatten()])
        emb = embeddings({t: torch.cat(v) for t, v in needed.items()})
        pos_out, neg_out = [], []
        for start in range(0, len(edges), SCORE_CHUNK):
            s = edges.src[start:start + SCORE_CHUNK]
            d = edges.dst[start:start + SCORE_CHUNK]
            negs = negatives[start:start + SCORE_CHUNK]
            h_src = lookup(emb[et.src], s)
            pos_out.append(scorer(h_src, lookup(emb[et.dst], d)).float().cpu())
            neg_out.append(scorer(h_src.repeat_interleave(k, 0),
                                        lookup(emb[et.dst], negs.flatten()))
                           .float().cpu().view(len(s), k))
        if not pos_out:
            return torch.zeros(0), torch.zeros(0, k)
        return torch.cat(pos_out), torch.cat(neg_out)

    def embeddings(self, encoder, nodes: dict[str, torch.Tensor]
                   ) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """Per type: (distinct IDs ascending, their embeddings), sampled like evaluation."""
        cfg, rank = self.rank.cfg, self.rank
        out = {}
        for t, ids in nodes.items():
            uniq = torch.unique(ids)
            loader = rank.node_loader(t, uniq, cfg.eval_fanouts or cfg.fanouts,
                                      cfg.eval_batch_size, label=None)
            rows = [seed_embeddings(encoder(b), b, cfg.hidden)[t] for b in
                    (batch.to(rank.device) for batch in loader.epoch(0))]
            out[t] = (uniq.to(rank.device),
                      torch.cat(rows) if rows else torch.zeros(0, cfg.hidden, device=rank.device))
        return out

    @staticmethod
    def describe(record: dict) -> str:
        return (f"loss {record['loss']:.4f} | val auc {record['val_auc']:.4f} mrr "
                f"{record['val_mrr']:.4f} | test auc {record['test_auc']:.4f} mrr "
                f"{record['test_mrr']:.4f} hits@50 {record['test_hits@50']:.4f}")


def lookup(table: tuple[torch.Tensor, torch.Tensor], ids: torch.Tensor) -> torch.Tensor:
    """Rows of ``ids`` in ``(ascending ids, rows)``; every id must be present."""
    keys, rows = table
    return rows.index_select(0, torch.searchsorted(keys, ids.to(keys.device)).to(rows.device))
