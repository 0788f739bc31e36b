"""graphprep's Python API: one function per ``prep`` step, the CLI being a thin layer over it.

    from graphprep.pipeline import api
    g = api.synth("work/g", nodes=20_000, edges=200_000)
    a = api.partition(g.path, "work/a", num_parts=2, method="metis")
    d = api.dispatch(g.path, a.path, "work/d")
    api.verify(g.path, d.path)
    api.export(d.path, "work/pyg", to="pyg")

Every function takes the CLI's options as keywords, with the same defaults, and
``client=``: a ``distributed.Client`` to run on (neither started nor closed here). Without
one, each call starts an embedded local cluster of ``workers`` processes, as the CLI does.
Each returns a typed result. A step whose output already holds the same work (same inputs,
options and seed) does nothing and returns that output with ``reused=True``; different work
there is refused unless ``overwrite``. Bad input raises :class:`graphprep.formats.FormatError` naming
file, field and row; nothing half-written is ever left at the output path.

Nothing here imports torch; ``export`` imports it inside its Dask tasks.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from graphprep.formats import ChunkedGraph, EdgeType, FormatError, load_chunked_graph
from graphprep.formats.assignment import load_assignment
from graphprep.formats.partitioned import PartitionedGraph, load_partitioned

from graphprep.pipeline.core.cluster import ClusterOptions

DEFAULT_CHUNK = 1 << 20


@dataclass(frozen=True)
class GraphResult:
    """A chunked graph (``synth``, ``chunk``, ``split_edges``)."""

    path: str
    graph: ChunkedGraph
    reused: bool = False
    split_counts: dict = field(default_factory=dict)   # split_edges: {etype: [train, val, test]}


@dataclass(frozen=True)
class AssignmentResult:
    path: str
    method: str              # the method that ran (auto resolves to metis or multilevel)
    num_parts: int
    stats: dict              # edge cut, per-part counts, imbalance (as `prep partition` prints)
    reused: bool = False


@dataclass(frozen=True)
class PartitionedResult:
    path: str
    graph: PartitionedGraph
    reused: bool = False


@dataclass(frozen=True)
class VerifyResult:
    edges: int
    nodes: int
    tables: dict | None = None     # with tables=: {"rows": node table rows, "edges": ...}


@dataclass(frozen=True)
class ExportResult:
    path: str
    to: str
    root: str                # the folder the peer's loader opens
    reused: bool = False


def cluster_options(client=None, workers: int = 2, memory_limit: str = "auto",
                    progress: bool = False, scheduler: str | None = None,
                    security=None) -> ClusterOptions:
    """How a step gets its workers: ``client`` as is, else ``scheduler``'s cluster (with
    ``security``, a ``distributed.Security``, for tls://), else an embedded one of
    ``workers`` processes."""
    return ClusterOptions(scheduler, workers, memory_limit, progress, client, security)


def _abs(path: str) -> str:
    return path if "://" in str(path) else os.path.abspath(path)


def synth(out: str, *, generator: str = "planted", nodes: int | None = None,
          edges: int | None = None, hetero: bool = False, num_classes: int = 8,
          feat_dim: int = 32, homophily: float | None = None, exponent: float | None = None,
          scale: int | None = None, edge_factor: int | None = None, rmat_abc=None,
          feat_signal: float = 0.35, split: tuple[float, float, float] = (0.6, 0.2, 0.2),
          seed: int = 0, chunk_size: int = DEFAULT_CHUNK, overwrite: bool = False, client=None,
          **cluster) -> GraphResult:
    """A synthetic graph at ``out`` (see ``prep synth --help``); a task holds one chunk.

    ``generator="planted"``: degree-corrected block model of ``nodes`` (default 20,000) and
    ``edges`` (200,000), ``homophily`` 0.8, ``exponent`` 2.5. ``generator="rmat"``: Graph500
    R-MAT of ``2**scale`` nodes (``scale`` 14) and ``edge_factor * 2**scale`` edges (16),
    initiator ``rmat_abc`` (0.57, 0.19, 0.19). None means that default; giving an option of
    the other generator raises ``FormatError``."""
    from graphprep.pipeline.synth import make_spec
    from graphprep.pipeline.synth_job import run_synth

    if len(split) != 3:
        raise FormatError("split needs three fractions (train, val, test)", field="--split")
    spec = make_spec(generator, nodes=nodes, edges=edges, hetero=hetero,
                     num_classes=num_classes, feat_dim=feat_dim, homophily=homophily,
                     exponent=exponent, scale=scale, edge_factor=edge_factor,
                     rmat_abc=rmat_abc, feat_signal=feat_signal,
                     split=tuple(float(x) for x in split), seed=seed)
    out = _abs(out)
    graph = run_synth(spec, out, chunk_size, cluster_options(client, **cluster), overwrite)
    return _graph_result(out, graph)


def chunk(input: str | dict, out: str, *, kind: str = "auto", chunk_size: int = DEFAULT_CHUNK,
          add_reverse_edges: bool = False, dedupe: bool = False, drop_self_loops: bool = False,
          delimiter: str | None = None, header: bool | None = None, src_col=None, dst_col=None,
          num_nodes: dict | None = None, node_data: dict | None = None, name: str | None = None,
          split_name: str | None = None, map_keys: bool = False, dangling: str = "error",
          nan_policy: str = "error", overwrite: bool = False, client=None,
          **cluster) -> GraphResult:
    """Raw ``input`` (see ``prep chunk --help`` for the kinds) into the chunked format at
    ``out``. ``input`` may also be a tables config as a dict (as the YAML file would parse;
    relative paths relative to the working folder). ``num_nodes``: ``{ntype or "": count}``;
    ``node_data``: ``{"[type/]name": file}``; ``map_keys``/``dangling``: as
    ``--map-keys``/``--dangling``."""
    from graphprep.pipeline.convert import run_chunk
    from graphprep.pipeline.convert.options import ChunkOptions
    from graphprep.pipeline.convert.writer import Transforms

    opts = ChunkOptions(chunk_size, delimiter, header, src_col, dst_col, dict(num_nodes or {}),
                        {k: _abs(v) for k, v in (node_data or {}).items()}, name, split_name,
                        map_keys, dangling)
    out = _abs(out)
    config = input if isinstance(input, dict) else None
    path = os.path.join(os.getcwd(), "config (dict)") if config is not None else _abs(input)
    graph = run_chunk(path, out, kind, opts, Transforms(add_reverse_edges, drop_self_loops,
                                                        dedupe),
                      cluster_options(client, **cluster), nan_policy, overwrite, config)
    return _graph_result(out, graph)


def node_keys(chunked: str, ntype: str, ids):
    """The original keys of node IDs ``ids`` of type ``ntype`` of a keyed chunked graph
    (``prep chunk`` of tables or keyed edge lists) as a pyarrow Array; reads only the map
    files they are in."""
    from graphprep.pipeline.keys.lookup import keys_of
    return keys_of(load_chunked_graph(_abs(chunked)), ntype, ids)


def node_ids(chunked: str, ntype: str, keys):
    """The node IDs (int64 numpy array) of original ``keys`` (-1 where the graph has no such
    key); reads one map bucket per distinct bucket of the keys."""
    from graphprep.pipeline.keys.lookup import ids_of
    return ids_of(load_chunked_graph(_abs(chunked)), ntype, keys)


def _graph_result(out: str, graph, **extra) -> GraphResult:
    if graph is None:
        return GraphResult(out, load_chunked_graph(out), reused=True, **extra)
    return GraphResult(out, graph, **extra)


def balance_constraints(balance: str | tuple[str, ...] | None, method: str
                        ) -> tuple[str, ...] | None:
    """``--balance`` (comma-separated, or a tuple) as a tuple of constraints for ``method``,
    each a known key or keys joined by ``+`` (one combined weight, ``partition/weights.py``),
    keys in ``BALANCE_KEYS`` order within a constraint; None (not given) stays None: the
    method's default, resolved against the graph by the partition step (``ntypes,edges`` plus
    ``train`` where there are training nodes for metis, multilevel, kaminpar and auto; none
    for random). Raises ``FormatError`` naming the option for an unknown key, a key named
    twice, or any constraint with ``random``."""
    from graphprep.pipeline.partition.base import BALANCE_KEYS

    if balance is None:
        return None
    items = balance.split(",") if isinstance(balance, str) else balance
    constraints, seen = [], set()
    for item in (i.strip() for i in items):
        if not item:
            continue
        keys = [k.strip() for k in item.split("+")]
        unknown = [k for k in keys if k not in BALANCE_KEYS]
        if unknown:
            raise FormatError(f"{unknown[0]!r} is not a balance constraint (choose from "
                              f"{', '.join(BALANCE_KEYS)}, or join them with '+' into one "
                              "combined weight)", field="--balance")
        twice = sorted(seen.intersection(keys)) or sorted(k for k in keys if keys.count(k) > 1)
        if twice:
            raise FormatError(f"{twice[0]!r} is named twice in {','.join(items)!r}: a key "
                              "belongs to one constraint", field="--balance")
        seen.update(keys)
        constraints.append("+".join(k for k in BALANCE_KEYS if k in keys))
    if constraints and method == "random":
        raise FormatError("balance constraints apply to --method metis, multilevel and "
                          "kaminpar (random is exactly balanced per node type)",
                          field="--balance")
    return tuple(constraints)


def partition(chunked: str, out: str, *, num_parts: int, method: str = "random",
              coarse_edges: int | None = None, balance: tuple[str, ...] | None = None,
              objective: str = "cut", imbalance: float = 0.03, seed: int = 0,
              dgl_compat: bool = False, overwrite: bool = False, client=None,
              **cluster) -> AssignmentResult:
    """A partition id per node of every type of ``chunked`` into the assignment folder ``out``
    (see ``prep partition --help`` for the methods and what each holds in memory).
    ``balance`` None: the method's default (metis, multilevel, kaminpar, auto: node counts per
    type, edges, and training nodes where there are any; ``("ntypes",)``: node counts only). The
    statistics' ``warnings`` name an edge or train imbalance over 1.5 (also logged)."""
    from graphprep.pipeline.partition import PartitionOptions, run_partition

    balance = balance_constraints(balance, method)
    out = _abs(out)
    meta = run_partition(_abs(chunked), out, method,
                         PartitionOptions(num_parts, seed, balance, objective, imbalance,
                                          coarse_edges),
                         cluster_options(client, **cluster), overwrite, dgl_compat)
    reused = meta is None
    if reused:
        meta = load_assignment(out).meta
    return AssignmentResult(out, meta.method_name, meta.num_parts, meta.stats, reused)


def dispatch(chunked: str, assignment: str, out: str, *, machines: tuple[str, ...] = (),
             range_size: int = 1 << 17, nan_policy: str = "error", overwrite: bool = False,
             client=None, **cluster) -> PartitionedResult:
    """The partitioned graph at ``out`` (a folder or an fsspec URL) from ``chunked`` and its
    ``assignment``; with ``machines``, part p is built by the worker named
    ``machines[p % M]`` on its own machine."""
    from graphprep.dispatch.job import run_dispatch

    out = _abs(out)
    graph = run_dispatch(_abs(chunked), _abs(assignment), out,
                         cluster_options(client, **cluster), tuple(machines), overwrite,
                         range_size, nan_policy=nan_policy)
    if graph is None:
        return PartitionedResult(out, load_partitioned(out), reused=True)
    return PartitionedResult(out, graph)


def verify(chunked: str, partitioned: str, *, nan_policy: str = "error",
           tables: str | None = None, client=None, **cluster) -> VerifyResult:
    """Check that ``partitioned`` holds exactly ``chunked`` (and, with ``tables``, the path
    of the tables config ``chunked`` was made from, that ``chunked`` holds exactly those
    tables, row by row by key); raises ``graphprep.dispatch.verify.VerifyError`` naming the first
    difference."""
    from graphprep.dispatch.verify import run_verify

    counts = run_verify(_abs(chunked), _abs(partitioned), cluster_options(client, **cluster),
                        nan_policy, _abs(tables) if tables else None)
    return VerifyResult(counts["edges"], counts["nodes"], counts["tables"])


def split_edges(chunked: str, out: str, *, etype: str, val: float = 0.05, test: float = 0.1,
                twin: tuple[str, ...] = (), seed: int = 0, overwrite: bool = False,
                client=None, **cluster) -> GraphResult:
    """``chunked`` with train/val/test edge masks of ``etype`` (and its twins) at ``out``."""
    from graphprep.pipeline.split_edges import SplitSpec, run_split

    spec = SplitSpec(EdgeType.parse(etype, file="--etype", field="--etype"), val, test, seed)
    out = _abs(out)
    done = run_split(_abs(chunked), out, spec, cluster_options(client, **cluster), tuple(twin),
                     overwrite)
    if done is None:
        return _graph_result(out, None)
    graph, counts = done
    return _graph_result(out, graph, split_counts=counts)


def export(partitioned: str, out: str, *, to: str, overwrite: bool = False, client=None,
           **cluster) -> ExportResult:
    """``partitioned`` in a peer's partition layout at ``out``: ``to="pyg"`` (PyG's
    Partitioner layout) or ``"dgl"`` (DGL 1.1.3's ``partition_graph`` layout; needs dgl).
    ``to="dgl-chunked"`` takes a chunked graph instead (``synth``/``chunk`` output) and writes
    DGL's chunked graph format, the input of DGL's ``partition_algo``/``dispatch_data.py``
    (no dgl needed); ``root`` is ``out``. See ``formats/FORMATS.md`` §5."""
    from graphprep.pipeline.export import run_export

    out = _abs(out)
    result = run_export(_abs(partitioned), out, to, cluster_options(client, **cluster),
                        overwrite)
    if result is None:
        return ExportResult(out, to, _export_root(out, to), reused=True)
    return ExportResult(out, to, result["root"])


def _export_root(out: str, to: str) -> str:
    if to == "pyg":
        (root,) = [os.path.join(out, n) for n in os.listdir(out) if n.endswith("-partitions")
                   and os.path.exists(os.path.join(out, n, "META.json"))]
        return root
    return out
