"""Rows of node data (features, labels) for any nodes: owned rows straight from the
memory-mapped part, remote rows by one request per owner part (all node types together).

Callers pass unique IDs (a block's source nodes are), so nothing is fetched twice. An optional
:class:`HaloCache` keeps the rows of the most referenced halo nodes, fetched once at start; an
optional :class:`RemoteStore` keeps every other remote row of those arrays on disk once fetched.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from graphprep.trainer.sampling.dist_sampler import split_by_owner
from graphprep.trainer.sampling.partition import LocalPart, PartitionBook, is_sparse_spec
from graphprep.trainer.sampling.service import PartServer, Transport, take_rows
from graphprep.trainer.models.spec import CONSTANT_INPUT, data_width
from graphprep.trainer.sampling.timing import Breakdown
from graphprep.trainer.data.remote_store import RemoteStore
from graphprep.trainer.data.sparse import SparseRows, is_sparse


LOG_DEGREE = "__log_degree"     # node data added at load by add_log_degree
EMBEDDING = "__embedding"       # learnable input rows of a featureless type (data.embeddings)
INPUT_FEATURE = "feat"          # the input array whose halo rows are counted (and cached)
SCAN_EDGES = 1 << 24            # edges per type the halo cache's pick reads, at most


def add_log_degree(part: LocalPart) -> None:
    """Register node data ``LOG_DEGREE`` in ``part``: ``log(1 + in-degree)`` of each owned
    node over every edge type of the part's CSC as served (float32 ``[n, 1]``; for link
    prediction the training graph, so held-out edges do not leak). Mean aggregation is blind
    to degree, and on power-law graphs the degrees of an edge's ends say much about whether
    it exists. Every rank registers it, so remote rows come through the usual requests."""
    for t in part.graph.node_types:
        degree = torch.zeros(len(part.orig_ids[t]))
        for et, csc in part.csc.items():
            if et.dst == t:
                degree += csc.degrees.cpu().float()
        part.node_data[t][LOG_DEGREE] = torch.log1p(degree).unsqueeze(1)
        part.graph.node_feats.setdefault(t, {})[LOG_DEGREE] = {"dtype": "float32",
                                                               "shape": [1]}


class HaloCache:
    """Rows of some data arrays for the halo nodes this part's edges reference most, fetched
    once: ``ids[t]`` sorted new IDs, ``rows[name][t]`` their rows of each array in
    ``names`` (the features, and the original IDs that every batch also carries): tensors,
    or :class:`SparseRows` for a sparse field (whose rows it counts by their stored values).
    Holds at most its byte budget."""

    def __init__(self, names: tuple[str, ...], ids: dict[str, torch.Tensor],
                 rows: dict[str, dict[str, "torch.Tensor | SparseRows"]]):
        self.names, self.ids, self.rows = names, ids, rows

    @property
    def nbytes(self) -> int:
        return sum(_nbytes(r) for by_type in self.rows.values() for r in by_type.values())

    @classmethod
    def build(cls, fetcher: "FeatureFetcher", names: tuple[str, ...], budget_bytes: int,
              scan_edges: int = SCAN_EDGES) -> "HaloCache":
        """Pick, per node type with ``names[0]``, the halo nodes with the most in-part edges
        within an equal share of the budget, and fetch their rows of every array of
        ``names`` the type has (one request per owner). References are counted over at most
        ``scan_edges`` edges per edge type (:func:`halo_references`), so the pick takes the
        same time whatever the part's size. A sparse field's rows differ in size: the pick
        assumes this part's own mean row, and the most referenced of the fetched rows that
        fit the share are kept. Holds one int32 count per halo node of a type while it
        picks."""
        part, meta = fetcher.part, fetcher.meta
        types = [t for t in part.graph.node_types if names[0] in meta.get(t, {})]
        share = budget_bytes // max(len(types), 1)
        chosen, refs_of = {}, {}
        for t in types:
            halo = part.halo_ids[t].cpu()
            row_bytes = sum(_mean_row_bytes(part, meta, t, n) for n in names if n in meta[t])
            k = min(len(halo), int(share // max(row_bytes, 1e-9)))
            if k <= 0:
                continue
            refs = torch.zeros(len(halo), dtype=torch.int32)
            for et, csc in part.csc.items():
                if et.src == t:
                    halo_references(csc.indices, len(part.orig_ids[t]), refs, scan_edges)
            top = torch.topk(refs, k).indices
            ids, order = torch.sort(halo[top])
            chosen[t], refs_of[t] = ids, refs[top][order]
        # every array's rows for every chosen type: a hit must find all of them
        types_ok = {t: ids for t, ids in chosen.items() if all(n in meta[t] for n in names)}
        asks = {n: types_ok for n in names}
        rows = fetcher.fetch_many(asks) if types_ok else {n: {} for n in names}
        ids, rows = _fit(types_ok, rows, refs_of, share)
        return cls(tuple(names), ids, rows)

    def hits(self, ntype: str, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(hit, pos)``: which of ``ids`` are cached (bool), and their rows' positions."""
        cached = self.ids.get(ntype)
        if cached is None or not len(cached):
            return torch.zeros(len(ids), dtype=torch.bool), ids[:0]
        pos = torch.searchsorted(cached, ids).clamp(max=len(cached) - 1)
        hit = cached[pos] == ids
        return hit, pos[hit]


def halo_references(indices: torch.Tensor, owned: int, refs: torch.Tensor,
                    scan_edges: int = SCAN_EDGES, slices: int = 16) -> None:
    """Add to ``refs[h]`` how many of the edges in ``indices`` (local sources: owned first,
    then halo positions) come from halo node ``h``: all of them when there are at most
    ``scan_edges``, else ``slices`` runs of ``scan_edges / slices`` edges spread evenly over
    the array (a sample: the CSC's destination order is unrelated to a source's degree, so
    the most referenced halo nodes stay the most referenced). Reads at most ``scan_edges``
    edges; holds a run's temporaries."""
    n = len(indices)
    if n <= scan_edges:
        runs = [(0, n)]
    else:
        step = scan_edges // slices
        runs = [(int(s), int(s) + step) for s in torch.linspace(0, n - step, slices).long()]
    for start, stop in runs:
        chunk = indices[start:stop].cpu()
        chunk = chunk[chunk >= owned].long() - owned
        refs.scatter_add_(0, chunk, torch.ones(len(chunk), dtype=refs.dtype))


def _nbytes(rows) -> int:
    """Bytes of a row block (a sparse one's three arrays)."""
    return rows.nbytes if is_sparse(rows) else rows.numel() * rows.element_size()


def _mean_row_bytes(part: LocalPart, meta: dict, ntype: str, name: str) -> float:
    """Bytes of a row of ``name``: exact for a dense field; for a sparse field, the mean over
    this part's own rows (indptr entry plus the stored indices and values)."""
    spec = meta[ntype][name]
    if not is_sparse_spec(spec):
        return math.prod(spec["shape"]) * torch.empty((), dtype=getattr(
            torch, spec["dtype"])).element_size()
    own = part.node_data[ntype][name]
    per_value = own.indices.element_size() + own.values.element_size()
    return 8 + per_value * own.nnz / max(len(own), 1)


def _fit(ids: dict[str, torch.Tensor], rows: dict[str, dict], refs: dict[str, torch.Tensor],
         share: int) -> tuple[dict, dict]:
    """The cached ``(ids, rows)`` cut, per type, to the most referenced rows whose bytes (over
    every array) fit ``share``: only sparse fields can overshoot the estimate the pick made."""
    for t in list(ids):
        blocks = [rows[n][t] for n in rows]
        if not any(is_sparse(b) for b in blocks) or sum(map(_nbytes, blocks)) <= share:
            continue
        size = sum((b.row_counts() * (b.indices.element_size() + b.values.element_size()) + 8
                    if is_sparse(b) else torch.full((len(b),), _nbytes(b[:1])))
                   for b in blocks)
        order = torch.argsort(refs[t], descending=True, stable=True)
        keep = torch.sort(order[torch.cumsum(size[order], 0) <= share]).values
        ids[t] = ids[t][keep]
        for n in rows:
            rows[n][t] = take_rows(rows[n][t], keep)
    return ids, rows


@dataclass
class TableRoute:
    """Where learnable rows (:mod:`graphprep.trainer.data.embeddings`) are served:
    ``transport`` reaches the first rank of any part (who holds its table); ``local``: this
    rank is its part's first rank."""

    transport: Transport
    local: bool


class FeatureFetcher:
    """Gathers rows of node data arrays by new ID across parts, several arrays in one request
    per owner part. Holds the partition book, the optional :class:`HaloCache`, and the optional
    :class:`RemoteStore` (remote rows of the cached arrays kept on disk once fetched); each
    call holds the requested rows.

    A model's input for a node type is its ``feat`` rows, else (a type without features) its
    learnable embedding rows where the part registered them (:data:`EMBEDDING`), else a
    constant ``[1.0]`` per node; the ``extra_inputs`` columns (log-degree) are appended.

    Learnable rows live on each part's first rank (:mod:`graphprep.trainer.data.embeddings`):
    ``table_route`` reaches those ranks and says whether this rank is its part's (``None``: the
    ranks ``transport`` reaches hold them, one rank per part). ``defer_embeddings``: training
    batches get zeros in place of those rows, which the training step pulls just before its
    forward (fresh rows, read after this rank's own last update)."""

    def __init__(self, part: LocalPart, server: PartServer, transport: Transport,
                 breakdown: Breakdown | None = None, cache: HaloCache | None = None,
                 extra_inputs: tuple[str, ...] = (), table_route: TableRoute | None = None,
                 defer_embeddings: bool = False, store: RemoteStore | None = None):
        self.part, self.p, self.num_parts = part, part.p, part.graph.num_parts
        self.extra_inputs = extra_inputs
        self.table_route, self.defer_embeddings = table_route, defer_embeddings
        self.meta = part.graph.node_feats
        self.server, self.transport = server, transport
        self.book = PartitionBook(part.graph)
        self.breakdown = breakdown or Breakdown()
        self.cache, self.store = cache, store

    def dim(self, ntype: str, name: str) -> int:
        """Row width of ``name`` for ``ntype`` (1 for a type without it: a constant)."""
        return data_width(self.meta.get(ntype, {}).get(name)) or CONSTANT_INPUT

    def input_name(self, ntype: str, name: str = "feat") -> str | None:
        """The array a node type's input comes from: ``name``, else its learnable embedding,
        else None (a constant input)."""
        have = self.meta.get(ntype, {})
        return name if name in have else EMBEDDING if EMBEDDING in have else None

    def inputs(self, nodes: dict[str, torch.Tensor], name: str = "feat"
               ) -> dict[str, torch.Tensor]:
        """Model inputs of ``nodes`` (float32 where columns are appended), in the given order,
        on CPU: every array they come from fetched in the same requests. A sparse feature
        gives :class:`SparseRows`, with appended columns (log-degree) as extra stored columns
        past its width (see :meth:`SparseRows.with_dense_columns`)."""
        names = {t: self.input_name(t, name) for t in nodes}
        deferred = {t for t, n in names.items() if n == EMBEDDING and self.defer_embeddings}
        asks: dict[str, dict[str, torch.Tensor]] = {}
        for t, ids in nodes.items():
            own = [names[t]] if names[t] and t not in deferred else []
            for n in own + list(self.extra_inputs):
                asks.setdefault(n, {})[t] = ids
        got = self.fetch_many(asks)
        x = {t: torch.zeros((len(ids), self.dim(t, EMBEDDING))) if t in deferred else
             got[names[t]][t] if names[t] else torch.ones((len(ids), CONSTANT_INPUT))
             for t, ids in nodes.items()}
        if self.extra_inputs:
            x = {t: _append(x[t], [got[e][t] for e in self.extra_inputs]) for t in x}
        return x

    def fetch(self, name: str, nodes: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Rows of ``name`` for ``nodes`` (per-type new IDs), in the given order, on CPU; a
        constant ``[1.0]`` per node of a type without ``name``."""
        have = {t: ids for t, ids in nodes.items() if name in self.meta.get(t, {})}
        out = self.fetch_many({name: have})[name] if have else {}
        return {t: out[t] if t in out else torch.ones((len(ids), CONSTANT_INPUT))
                for t, ids in nodes.items()}

    def fetch_many(self, asks: dict[str, dict[str, torch.Tensor]]
                   ) -> dict[str, dict[str, "torch.Tensor | SparseRows"]]:
        """``out[name][ntype]``: rows of node data ``name`` for ``asks[name][ntype]`` (per-type
        new IDs of nodes that have it), in the given order, on CPU; one request per owner part
        for all of them. Arrays asked for the same ID tensors (and equally held by the halo
        cache) share one ID list on the wire; cached rows are not asked for. A sparse field's
        rows come back as :class:`SparseRows` (local, remote and cached pieces joined in the
        asked order); a dense field's as a tensor filled in place."""
        with self.breakdown.clock("feature_fetch"):
            out = {name: {t: self._sink(t, name, len(ids)) for t, ids in nodes.items()}
                   for name, nodes in asks.items()}
            groups: dict[tuple, list[str]] = {}
            for name, nodes in asks.items():
                cached = self.cache is not None and name in self.cache.names
                stored = self.store is not None and name in self.store.names
                table = self.table_route is not None and name == EMBEDDING
                same = tuple((t, id(ids)) for t, ids in nodes.items())
                groups.setdefault((same, cached, stored, table), []).append(name)
            # (owner part, whose rows) -> [(names, {type: ids})]: learnable rows may live on
            # another rank of the part
            requests: dict[tuple[int, bool], list] = {}
            plans, fills = [], []   # fills: rows asked now that the store keeps once here
            for (_, cached, stored, table), names in groups.items():
                todo = {}
                for t, ids in asks[names[0]].items():
                    ids = ids.cpu()
                    missing = torch.arange(len(ids))
                    if cached:
                        hit, pos = self.cache.hits(t, ids)
                        if len(pos):
                            where = torch.nonzero(hit).flatten()
                            for name in names:
                                out[name][t].put(where, take_rows(self.cache.rows[name][t],
                                                                  pos))
                        missing = torch.nonzero(~hit).flatten()
                    if stored and self.store.holds(names, t):
                        missing = self._from_store(names, t, ids, missing, out)
                        fills.append((names, t, ids[missing], missing))
                    todo[t] = (ids[missing], missing)
                owners = split_by_owner(self.book, {t: ids for t, (ids, _) in todo.items()},
                                        self.num_parts)
                if INPUT_FEATURE in names:
                    self._count_halo(asks[names[0]], owners)
                for q, where in enumerate(owners):
                    if where:
                        requests.setdefault((q, table), []).append(
                            (names, {t: todo[t][0][pos] for t, pos in where.items()}))
                        plans.append(((q, table), names, {t: todo[t][1][pos]
                                                          for t, pos in where.items()}))
            local = {key for key in requests
                     if key[0] == self.p and (not key[1] or self.table_route.local)}
            remote = {key: self._via(key).call(key[0], "rows", ask)
                      for key, ask in requests.items() if key not in local}
            answers = {key: self.server.rows(requests[key]) for key in local}
            answers.update({key: self._via(key).wait(key[0], fut, "feature fetch")
                            for key, fut in remote.items()})
            seen: dict[tuple[int, bool], int] = {}
            for key, names, where in plans:        # in the order each request listed them
                i = seen[key] = seen.get(key, -1) + 1
                for name in names:
                    for t, rows in answers[key][i][name].items():
                        out[name][t].put(where[t], rows)
            for names, t, ids, where in fills:
                if len(ids):
                    self.store.put(t, ids, {n: out[n][t].out[where] for n in names})
            return {name: {t: sink.result() for t, sink in by_type.items()}
                    for name, by_type in out.items()}

    def _from_store(self, names: list[str], t: str, ids: torch.Tensor, missing: torch.Tensor,
                    out: dict) -> torch.Tensor:
        """Put the rows of ``ids[missing]`` the store holds into ``out``; the rest of
        ``missing``, still to ask for."""
        have, slot = self.store.lookup(t, ids[missing])
        if len(slot):
            for name in names:
                out[name][t].put(missing[have], self.store.take(name, t, slot))
            self.breakdown.count("halo_store_hits", len(slot))
        return missing[~have]

    def _count_halo(self, asked: dict[str, torch.Tensor],
                    owners: list[dict[str, torch.Tensor]]) -> None:
        """Count the input rows asked that other parts own (``halo_rows``) and how many of
        them the cache served (``halo_cache_hits``): those asked and left to ask no owner
        for (the cache holds only halo rows)."""
        missing = [sum(len(pos) for pos in where.values()) for where in owners]
        hits = sum(len(ids) for ids in asked.values()) - sum(missing)
        self.breakdown.count("halo_rows", hits + sum(missing) - missing[self.p])
        self.breakdown.count("halo_cache_hits", hits)

    def _sink(self, ntype: str, name: str, n: int) -> "_DenseSink | _SparseSink":
        """Where the ``n`` asked rows of ``name`` gather: a preallocated dense block, or the
        pieces of a sparse field (joined once all have come)."""
        spec = self.meta[ntype][name]
        if is_sparse_spec(spec):
            return _SparseSink(n, data_width(spec))
        return _DenseSink(torch.empty((n, *spec["shape"]), dtype=getattr(torch, spec["dtype"])))

    def _via(self, key: tuple[int, bool]) -> Transport:
        """The transport of a request ``(owner part, for learnable rows)``."""
        return self.table_route.transport if key[1] else self.transport


def _append(x, extras: list[torch.Tensor]):
    """Input rows ``x`` (dense or sparse) with the dense ``extras`` columns appended, float32."""
    # flatten(1), not reshape(n, -1): a batch may have no node of a type (n = 0)
    extra = torch.cat([e.float().flatten(1) if e.dim() > 1 else e.float()[:, None]
                       for e in extras], 1)
    if is_sparse(x):
        return x.float().with_dense_columns(extra)
    return torch.cat([x.float().flatten(1), extra], 1)


class _DenseSink:
    """The asked rows of a dense field: ``out[where] = rows`` as pieces arrive."""

    def __init__(self, out: torch.Tensor):
        self.out = out

    def put(self, where: torch.Tensor, rows: torch.Tensor) -> None:
        self.out[where] = rows

    def result(self) -> torch.Tensor:
        return self.out


class _SparseSink:
    """The ``n`` asked rows of a sparse field: pieces ``(positions, SparseRows)`` as they
    arrive (cache hits, local rows, each owner's answer), joined in the asked order by one
    concatenation and one gather. Holds the pieces, then the result."""

    def __init__(self, n: int, dim: int):
        self.n, self.dim = n, dim
        self.where: list[torch.Tensor] = []
        self.rows: list[SparseRows] = []

    def put(self, where: torch.Tensor, rows: SparseRows) -> None:
        self.where.append(where)
        self.rows.append(rows)

    def result(self) -> SparseRows:
        if not self.rows:
            return SparseRows.empty(self.dim)
        where = torch.cat(self.where)
        if len(where) != self.n:
            raise RuntimeError(f"sparse fetch assembled {len(where)} of {self.n} rows")
        joined = SparseRows.cat(self.rows)
        # joined row k belongs at position where[k]: asked row i is joined row argsort(...)[i]
        return joined.take(torch.argsort(where))
