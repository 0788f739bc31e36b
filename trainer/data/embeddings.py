"""Learnable input rows for node types without features (``--featureless embed``), sharded
with their owner parts, as DistDGL's ``DistEmbedding``.

Each part's first rank holds an :class:`EmbeddingTable`: one row per owned node of every
featureless type, registered as node data :data:`~graphprep.trainer.data.features.EMBEDDING`, so any
rank reads them through the server's ``rows`` request like features. A training step
(:class:`SparseEmbeddings`) pulls its batch's rows as leaf tensors with grad just before the
forward, and after the backward pushes each touched row's gradient to its owner, one
``update_embeddings`` request per owner part; the owner applies a sparse Adam step to those
rows only (``torch.optim.SparseAdam``'s lazy Adam, by index ops: other rows, and their
moments, stay bit-identical).

Updates are asynchronous like DistDGL's: no barrier per step, so another rank may read a row
before, after or (Hogwild-style) during an update of it; runs of several ranks repeat only up
to that interleaving. A rank waits for its own updates before its next pull (it reads its own
writes; the rows are pulled on the training thread, not prefetched), and all ranks settle
theirs before evaluation, so one rank alone repeats a run exactly, and resumes it exactly.
Initial rows are keyed by (``--seed``, node type, original node ID): the same under any
partitioning.

Memory, per part: ``owned rows x --embedding-dim x 4 B x 3`` (the rows and Adam's two
moments); a step holds its batch's rows and gradients.
"""

from __future__ import annotations

import math
import threading
import time
import zlib

import numpy as np
import torch

from graphprep.trainer.sampling.dist_sampler import split_by_owner
from graphprep.trainer.sampling.partition import LocalPart, PartitionBook
from graphprep.trainer.sampling.service import Transport
from graphprep.trainer.data.features import EMBEDDING, FeatureFetcher

INIT_CHUNK = 1 << 16     # rows hashed at once at init: holds chunk x dim x 8 B
BETAS, EPS = (0.9, 0.999), 1e-8     # Adam's defaults (torch.optim.SparseAdam's)


def featureless_types(graph, feature: str = "feat") -> list[str]:
    """The node types of ``graph`` (graph.json) without ``feature``, in graph order."""
    return [t for t in graph.node_types if feature not in graph.node_feats.get(t, {})]


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer on uint64 (wrapping arithmetic): a counter-based hash."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def initial_rows(seed: int, ntype: str, orig_ids: torch.Tensor, dim: int) -> torch.Tensor:
    """Initial rows of nodes ``orig_ids`` of ``ntype``: float32 ``[n, dim]``, uniform in
    ``[-1/sqrt(dim), 1/sqrt(dim))`` (rows of norm about 0.58 at any width), each value a hash
    of (seed, type, original ID, column), so a node starts the same whatever part holds it.
    Holds ``INIT_CHUNK x dim x 8 B`` beyond the result.

    Small, as DGL's and OGB's R-GCN examples start theirs (Xavier over the whole table): rows
    of unit scale are noise the model must first learn to ignore (measured on a 6000-node
    featureless graph, 4 epochs: test accuracy 0.88 from [-1, 1), 0.93 from [-0.1, 0.1))."""
    scale = 1.0 / math.sqrt(dim)
    # arrays throughout: numpy wraps uint64 arrays silently, but warns on scalar overflow
    key = _mix(np.array([seed], np.uint64) ^ _mix(np.array([zlib.crc32(ntype.encode())],
                                                            np.uint64)))
    columns = np.arange(dim, dtype=np.uint64)
    out = torch.empty((len(orig_ids), dim), dtype=torch.float32)
    ids = orig_ids.numpy().astype(np.uint64)
    for start in range(0, len(ids), INIT_CHUNK):
        counter = ids[start:start + INIT_CHUNK, None] * np.uint64(dim) + columns  # one per value
        bits = _mix(_mix(counter ^ key))
        unit = (bits >> np.uint64(40)).astype(np.float32) / np.float32(1 << 24)   # [0, 1)
        out[start:start + len(unit)] = torch.from_numpy((2 * unit - 1) * np.float32(scale))
    return out


class EmbeddingTable:
    """The learnable rows of one part: ``weights[t]`` (float32 ``[owned nodes of t, dim]``)
    per featureless type, and their Adam moments and step counts. Updates come from any
    thread (the RPC server's and the training loop's): a lock serialises them. Holds the rows
    and two moments of the same size (see the module docstring)."""

    def __init__(self, part: LocalPart, types: list[str], dim: int, lr: float, seed: int):
        self.p, self.dim, self.lr = part.p, dim, lr
        self.starts = {t: part.start(t) for t in types}
        self.weights = {t: initial_rows(seed, t, part.orig_ids[t], dim) for t in types}
        self.exp_avg = {t: torch.zeros_like(w) for t, w in self.weights.items()}
        self.exp_avg_sq = {t: torch.zeros_like(w) for t, w in self.weights.items()}
        self.steps = {t: 0 for t in types}
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        """Bytes of the rows and their Adam moments."""
        return 3 * sum(w.numel() * 4 for w in self.weights.values())

    def register(self, part: LocalPart) -> None:
        """Serve the rows as node data ``EMBEDDING`` of ``part`` (the same storage: reads see
        every update)."""
        for t, w in self.weights.items():
            part.node_data[t][EMBEDDING] = w
        register_meta(part, list(self.weights), self.dim)

    def apply(self, grads: dict[str, tuple[torch.Tensor, torch.Tensor]]) -> None:
        """One sparse Adam step per type on the rows of ``grads[t] = (owned new IDs, gradient
        rows [k, dim])``; repeated IDs have their gradients summed. Rows not named, and their
        moments, are untouched. A request naming a node another part owns changes nothing."""
        with self._lock:
            local = {}
            for t, (ids, _) in grads.items():
                local[t] = ids.long() - self.starts[t]
                if len(local[t]) and (int(local[t].min()) < 0 or
                                      int(local[t].max()) >= len(self.weights[t])):
                    raise ValueError(f"embedding update for node type {t!r} names nodes that "
                                     f"part {self.p} does not own")
            for t, (_, rows) in grads.items():
                if len(local[t]):
                    self._adam(t, local[t], rows)

    def _adam(self, t: str, local: torch.Tensor, rows: torch.Tensor) -> None:
        """``torch.optim.SparseAdam``'s step (lazy Adam: moments and rows move where the
        gradient has rows, bias corrections by the type's step count), the same arithmetic by
        gathers and scatters of the touched rows instead of sparse tensors: 22 -> 13 ms for
        16,000 rows of 64 on one core. Holds the touched rows' gradient and moments."""
        beta1, beta2 = BETAS
        ids, inverse = torch.unique(local, return_inverse=True)
        grad = rows.new_zeros((len(ids), rows.shape[1]), dtype=torch.float32).index_add_(
            0, inverse, rows.float())
        m = self.exp_avg[t].index_select(0, ids)
        v = self.exp_avg_sq[t].index_select(0, ids)
        m.add_(grad.sub(m).mul_(1 - beta1))              # m += (1 - b1) (g - m), as SparseAdam
        v.add_(grad.pow_(2).sub_(v).mul_(1 - beta2))
        self.exp_avg[t].index_copy_(0, ids, m)
        self.exp_avg_sq[t].index_copy_(0, ids, v)
        self.steps[t] += 1
        step = self.steps[t]
        step_size = self.lr * math.sqrt(1 - beta2 ** step) / (1 - beta1 ** step)
        self.weights[t].index_add_(0, ids, -step_size * m.div_(v.sqrt_().add_(EPS)))

    def state_dict(self) -> dict:
        """The rows and the Adam state: the live tensors, not copies (a checkpoint is written
        between epochs, when every rank has settled its updates)."""
        return {"rows": self.weights, "exp_avg": self.exp_avg, "exp_avg_sq": self.exp_avg_sq,
                "steps": dict(self.steps)}

    def load_state_dict(self, state: dict, where: str) -> None:
        """Restore rows (in place: the served storage stays) and Adam state; raises
        ValueError naming ``where`` when the types or shapes differ."""
        rows = state["rows"]
        if set(rows) != set(self.weights) or any(rows[t].shape != w.shape
                                                 for t, w in self.weights.items()):
            have = {t: list(r.shape) for t, r in rows.items()}
            want = {t: list(w.shape) for t, w in self.weights.items()}
            raise ValueError(f"{where}: its embedding rows {have} do not fit this part "
                             f"({want})")
        with self._lock:
            for t in self.weights:
                self.weights[t].copy_(rows[t])
                self.exp_avg[t].copy_(state["exp_avg"][t])
                self.exp_avg_sq[t].copy_(state["exp_avg_sq"][t])
                self.steps[t] = int(state["steps"][t])


def register_meta(part: LocalPart, types: list[str], dim: int) -> None:
    """Say in ``part``'s graph.json metadata that ``types`` have ``EMBEDDING`` rows (what the
    fetcher reads to ask for them), also on a rank that holds none of the rows."""
    for t in types:
        part.graph.node_feats.setdefault(t, {})[EMBEDDING] = {"dtype": "float32",
                                                             "shape": [dim]}


class SparseEmbeddings:
    """A training rank's side of the learnable rows: :meth:`pull` before the forward,
    :meth:`push` after the backward, :meth:`settle` at the end of the epoch. Holds the futures
    of its updates in flight and per-epoch counters."""

    def __init__(self, fetcher: FeatureFetcher, table: EmbeddingTable | None,
                 transport: Transport, types: list[str], dim: int):
        self.fetcher, self.table, self.transport = fetcher, table, transport
        self.types, self.dim = types, dim
        self.book: PartitionBook = fetcher.book
        self.pending: list[tuple[int, object]] = []
        self.counters = {"pull_s": 0.0, "push_s": 0.0, "rows": 0, "push_bytes": 0}

    def pull(self, batch, device) -> dict[str, torch.Tensor]:
        """Put the current rows of the batch's nodes of featureless types into
        ``batch.x_dict[t][:, :dim]`` as leaf tensors with grad (on ``device``); returns them
        by type. Waits for this rank's updates in flight first."""
        self.wait()
        start = time.perf_counter()
        ids = {t: batch.n_id_dict[t].cpu() for t in self.types
               if t in batch.n_id_dict and len(batch.n_id_dict[t])}
        rows = self.fetcher.fetch_many({EMBEDDING: ids})[EMBEDDING] if ids else {}
        leaves = {}
        for t, r in rows.items():
            leaf = r.to(device).requires_grad_()
            x = batch.x_dict[t]
            batch.x_dict[t] = torch.cat([leaf, x[:, self.dim:]], 1) if x.shape[1] > self.dim \
                else leaf
            leaves[t] = leaf
        self.counters["pull_s"] += time.perf_counter() - start
        return leaves

    def push(self, batch, leaves: dict[str, torch.Tensor]) -> None:
        """Send the gradients of ``leaves`` (after the backward) to the owners of their rows,
        one request per owner part; this rank's own part is updated in place. Does not wait
        for remote owners."""
        start = time.perf_counter()
        grads = {t: (batch.n_id_dict[t].cpu(), leaf.grad.detach().cpu())
                 for t, leaf in leaves.items() if leaf.grad is not None}
        owners = split_by_owner(self.book, {t: ids for t, (ids, _) in grads.items()},
                                self.fetcher.num_parts)
        for q, where in enumerate(owners):
            if not where:
                continue
            ask = {t: (grads[t][0][pos], grads[t][1][pos]) for t, pos in where.items()}
            self.counters["rows"] += sum(len(pos) for pos in where.values())
            if q == self.fetcher.p and self.table is not None:
                self.table.apply(ask)
            else:
                self.counters["push_bytes"] += sum(i.numel() * 8 + g.numel() * 4
                                                   for i, g in ask.values())
                self.pending.append((q, self.transport.call(q, "update_embeddings", ask)))
        self.counters["push_s"] += time.perf_counter() - start

    def wait(self) -> None:
        """Until this rank's updates in flight are applied (a failed one raises, naming the
        owner)."""
        start = time.perf_counter()
        pending, self.pending = self.pending, []
        for q, fut in pending:
            self.transport.wait(q, fut, "embedding update")
        self.counters["push_s"] += time.perf_counter() - start

    def settle(self) -> None:
        """End of an epoch's training: every rank's updates applied (this rank's waited for,
        then a barrier), so evaluation and checkpoints read final rows."""
        import torch.distributed as dist
        self.wait()
        dist.barrier()

    def epoch_counters(self) -> dict:
        """The epoch's figures over all ranks (a collective), counters reset:
        ``embedding_pull_s`` / ``embedding_push_s`` (per rank, mean: pulling rows, pushing
        and waiting for updates), ``embedding_rows`` (gradient rows pushed) and
        ``embedding_push_bytes`` (IDs and gradients sent to other parts), summed."""
        import torch.distributed as dist
        names = list(self.counters)
        total = torch.tensor([float(self.counters[n]) for n in names], dtype=torch.float64)
        dist.all_reduce(total)
        self.counters = {n: type(v)() for n, v in self.counters.items()}
        world = dist.get_world_size()
        return {f"embedding_{n}": round(v / world, 4) if n.endswith("_s") else int(v)
                for n, v in zip(names, total.tolist())}
