"""``prep synth``: a synthetic graph written straight into the chunked format by Dask tasks.

Model: a degree-corrected stochastic block model in *rank space*. Node of rank ``r`` has weight
``(r+1)^-beta`` (power-law degrees, tail exponent ``gamma = 1 + 1/beta``) and community
``r mod K``. An edge draws its source rank from the power law, and with probability
``homophily`` a destination rank of the same community, else any rank. A seeded affine bijection
maps ranks to node IDs, so hubs and communities are spread over the ID space. Labels are the
communities, features are ``signal * class_mean[label] + N(0, 1)`` (weak per node, strong once
neighbours are averaged: a GNN beats an MLP), masks are random per node.

Everything is generated per fixed-size *block* of rows from ``default_rng([seed, ...,
block])``, and a chunk is the slice of the blocks it overlaps: the output is the same for any
number of workers and any chunk size, and a task holds one chunk. Nothing is O(N) in memory.

``generator="rmat"`` swaps the edges for Graph500's R-MAT (:mod:`graphprep.pipeline.rmat`) and the labels
for a function of each node's R-MAT index; blocks, chunks, features and masks are the same.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass

import numpy as np

from graphprep.formats import ChunkedGraph, ChunkFiles, EdgeType, even_chunks
from graphprep.formats.output import write_array_chunk, write_edge_chunk
from graphprep.pipeline import rmat
from graphprep.pipeline.core.costs import (CHUNK_EDGE, CLIENT_BASE, CLIENT_PER_CHUNK, MB,
                                           SYNTH_EDGE_EXTRA, SYNTH_NODE_FIXED,
                                           SYNTH_NODE_TASK_EXTRA, WORKER_BASE, size)

EDGE_BLOCK = 1 << 16
NODE_BLOCK = 1 << 14
SPLITS = ("train_mask", "val_mask", "test_mask")
GENERATORS = ("planted", "rmat")

MAX_TYPE_NODES = 1 << 34      # RankPermutation's multiplication stays within int64 below it
HOMO_NODE = "_N"
HOMO_EDGE = EdgeType("_N", "_E", "_N")
# ogbn-mag's node and edge counts: the shape of the heterogeneous mode.
MAG_NODES = {"paper": 736_389, "author": 1_134_649, "institution": 8_740,
             "field_of_study": 59_965}
MAG_EDGES = {EdgeType("paper", "cites", "paper"): 5_416_271,
             EdgeType("author", "writes", "paper"): 7_145_660,
             EdgeType("author", "affiliated_with", "institution"): 1_043_998,
             EdgeType("paper", "has_topic", "field_of_study"): 7_505_078}


@dataclass(frozen=True)
class SynthSpec:
    """What to generate. Total ``num_nodes``/``num_edges`` are split over types in ogbn-mag's
    proportions when ``hetero``."""

    num_nodes: int
    num_edges: int
    hetero: bool = False
    num_classes: int = 8
    feat_dim: int = 32
    seed: int = 0
    homophily: float = 0.8
    exponent: float = 2.5
    feat_signal: float = 0.35
    split: tuple[float, float, float] = (0.6, 0.2, 0.2)
    generator: str = "planted"
    rmat_abc: tuple[float, float, float] = rmat.GRAPH500_ABC

    @classmethod
    def from_scale(cls, scale: int, edge_factor: int, **kw) -> "SynthSpec":
        """An R-MAT spec: ``2^scale`` nodes, ``edge_factor * 2^scale`` edges."""
        if not 1 <= scale <= rmat.MAX_SCALE:
            raise ValueError(f"the scale must be in [1, {rmat.MAX_SCALE}]: --scale {scale}")
        if edge_factor < 1:
            raise ValueError(f"the edge factor must be >= 1: --edge-factor {edge_factor}")
        return cls(1 << scale, edge_factor << scale, generator="rmat", **kw)

    @property
    def scale(self) -> int:
        return self.num_nodes.bit_length() - 1

    @property
    def edge_factor(self) -> int:
        return self.num_edges // self.num_nodes

    def manifest_options(self) -> dict:
        """The options the manifest records (no seed: it has its own key). The planted
        generator's are what they were before R-MAT existed, so older outputs stay up to
        date; R-MAT's name the generator and its parameters, not the planted-only knobs."""
        options = dataclasses.asdict(self)
        del options["seed"], options["generator"], options["rmat_abc"]
        if self.generator == "planted":
            return options
        for planted_only in ("hetero", "homophily", "exponent"):
            del options[planted_only]
        return {"generator": "rmat", "scale": self.scale, "edge_factor": self.edge_factor,
                "rmat_abc": list(self.rmat_abc), **options}

    def __post_init__(self):
        if self.generator not in GENERATORS:
            raise ValueError(f"generator {self.generator!r}: expected one of {GENERATORS}")
        if self.generator == "rmat":
            self._check_rmat()
        if not 1 < self.exponent:
            raise ValueError("exponent must be > 1")
        if not 0 <= self.homophily <= 1:
            raise ValueError("homophily must be in [0, 1]")
        if self.num_classes < 1 or self.feat_dim < 1:
            raise ValueError("num_classes and feat_dim must be >= 1")
        if not (all(0 <= f <= 1 for f in self.split) and sum(self.split) <= 1 + 1e-9):
            raise ValueError(f"split fractions {self.split} must be in [0, 1] and sum to at "
                             "most 1")   # NaN fails the comparisons: refused too
        if not 0 <= self.feat_signal < float("inf"):
            raise ValueError(f"feat_signal {self.feat_signal} must be finite and >= 0")
        if self.generator == "planted" and self.num_edges < 1:
            raise ValueError(f"a graph needs at least one edge: --edges {self.num_edges}")
        if self.generator == "planted" and max(self.node_counts().values()) > MAX_TYPE_NODES:
            raise ValueError(f"the planted generator supports up to 2^34 "
                             f"({MAX_TYPE_NODES:,}) nodes per type: --nodes {self.num_nodes}")
        if min(self.node_counts().values()) < 2 * self.num_classes:
            smallest = min(self.node_counts().items(), key=lambda kv: kv[1])
            raise ValueError(
                f"every node type needs >= 2 * num_classes = {2 * self.num_classes} nodes"
                + (f" (type {smallest[0]} gets {smallest[1]:,})" if self.hetero else "")
                + "; raise it or lower --num-classes: "
                + (f"--scale {self.scale}" if self.generator == "rmat" else
                   f"--nodes {self.num_nodes}"))

    def _check_rmat(self) -> None:
        n = self.num_nodes
        if n < 2 or n & (n - 1) or self.num_edges % n or self.scale > rmat.MAX_SCALE:
            raise ValueError(f"R-MAT needs 2^scale nodes (scale <= {rmat.MAX_SCALE}) and "
                             "edge_factor * 2^scale edges")
        if self.hetero:
            raise ValueError("--hetero is for the planted generator; R-MAT is homogeneous")
        object.__setattr__(self, "rmat_abc", rmat.check_abc(self.rmat_abc))
        if self.num_classes.bit_length() + self.scale > 64:
            raise ValueError(f"num_classes must be below 2^{64 - self.scale} at scale "
                             f"{self.scale}")

    @property
    def node_types(self) -> tuple[str, ...]:
        return tuple(MAG_NODES) if self.hetero else (HOMO_NODE,)

    @property
    def edge_types(self) -> tuple[EdgeType, ...]:
        return tuple(MAG_EDGES) if self.hetero else (HOMO_EDGE,)

    @property
    def labeled_type(self) -> str:
        return "paper" if self.hetero else HOMO_NODE

    def node_counts(self) -> dict[str, int]:
        if not self.hetero:
            return {HOMO_NODE: self.num_nodes}
        return _shares(MAG_NODES, self.num_nodes)

    def edge_counts(self) -> dict[EdgeType, int]:
        if not self.hetero:
            return {HOMO_EDGE: self.num_edges}
        return _shares(MAG_EDGES, self.num_edges)


PLANTED_DEFAULTS = {"nodes": 20_000, "edges": 200_000, "homophily": 0.8, "exponent": 2.5}
RMAT_DEFAULTS = {"scale": 14, "edge_factor": 16, "rmat_abc": rmat.GRAPH500_ABC}


def make_spec(generator: str = "planted", *, hetero: bool = False, **options) -> SynthSpec:
    """The spec of ``prep synth``'s options. ``nodes``, ``edges``, ``homophily``, ``exponent``
    (planted) and ``scale``, ``edge_factor``, ``rmat_abc`` (rmat): None means the generator's
    default; one of the other generator's given is refused (``FormatError`` naming it), as is
    anything ``SynthSpec`` refuses. The rest (``num_classes``, ...) go to ``SynthSpec``."""
    from graphprep.formats import FormatError

    if generator not in GENERATORS:
        raise FormatError(f"{generator!r}: expected one of {', '.join(GENERATORS)}",
                          field="--generator")
    own, other = ((PLANTED_DEFAULTS, RMAT_DEFAULTS) if generator == "planted" else
                  (RMAT_DEFAULTS, PLANTED_DEFAULTS))
    mixed = [k for k in other if options.get(k) is not None]
    mixed += ["hetero"] if hetero and generator == "rmat" else []
    if mixed:
        names = ", ".join("--" + k.replace("_", "-") for k in mixed)
        owner, sizes = (("rmat", "--nodes and --edges") if generator == "planted" else
                        ("planted", "--scale and --edge-factor"))
        raise FormatError(f"{names} {'is' if len(mixed) == 1 else 'are'} for --generator "
                          f"{owner} only; --generator {generator} is sized by {sizes}")
    given = {k: options.pop(k, None) for k in (*own, *other)}
    sized = {k: default if given[k] is None else given[k] for k, default in own.items()}
    if generator == "rmat":
        try:
            sized["rmat_abc"] = rmat.check_abc(_floats(sized["rmat_abc"]))
        except ValueError as err:
            raise FormatError(str(err), field="--rmat-abc") from None
    try:
        if generator == "rmat":
            return SynthSpec.from_scale(sized["scale"], sized["edge_factor"],
                                        rmat_abc=sized["rmat_abc"], **options)
        return SynthSpec(sized["nodes"], sized["edges"], hetero, homophily=sized["homophily"],
                         exponent=sized["exponent"], **options)
    except ValueError as err:
        # A message that ends naming its option needs no field before it.
        named = " --" in str(err)
        raise FormatError(str(err), field=None if named else "synth options") from None


def _floats(values) -> tuple:
    """A sequence of numbers, or a comma-separated string of them, as a tuple of floats."""
    try:
        return tuple(float(x) for x in (values.split(",") if isinstance(values, str) else values))
    except (TypeError, ValueError):
        raise ValueError(f"{values!r}: expected three numbers a,b,c") from None


def _shares(weights: dict, total: int) -> dict:
    """Split ``total`` in proportion to ``weights`` (largest-remainder, sums exactly)."""
    s = sum(weights.values())
    raw = {k: total * w / s for k, w in weights.items()}
    out = {k: int(v) for k, v in raw.items()}
    for k in sorted(raw, key=lambda k: out[k] - raw[k])[: total - sum(out.values())]:
        out[k] += 1
    return out


# ------------------------------------------------------------------ rank space

def _mulmod(x: np.ndarray, c: int, n: int) -> np.ndarray:
    """``x * c mod n`` without int64 overflow for ``x, c < n <= 2**34``."""
    hi, lo = c >> 17, c & 0x1FFFF
    return ((x * hi) % n * (1 << 17) + x * lo) % n


@dataclass(frozen=True)
class RankPermutation:
    """Seeded affine bijection ``id = (a*rank + b) mod n`` and its inverse."""

    n: int
    a: int
    b: int

    @classmethod
    def for_type(cls, n: int, seed: int, type_index: int) -> "RankPermutation":
        if n > MAX_TYPE_NODES:
            raise ValueError("synth supports up to 2**34 nodes per type")
        rng = np.random.default_rng([seed, 0, type_index])
        a = int(n * 0.6180339887) + int(rng.integers(0, max(n // 16, 1))) | 1
        while math.gcd(a, n) != 1:
            a += 2 if n % 2 == 0 else 1
        return cls(n, a % n if n > 1 else 0, int(rng.integers(0, n)))

    def to_id(self, rank: np.ndarray) -> np.ndarray:
        return (_mulmod(rank, self.a, self.n) + self.b) % self.n

    def to_rank(self, ids: np.ndarray) -> np.ndarray:
        a_inv = pow(self.a, -1, self.n) if self.n > 1 else 0
        return _mulmod((ids - self.b) % self.n, a_inv, self.n)


def powerlaw_ranks(u: np.ndarray, n: int, beta: float) -> np.ndarray:
    """Ranks in ``[0, n)`` drawn with probability ~ ``(r+1)^-beta`` by inverting the continuous
    CDF at uniforms ``u``."""
    e = 1.0 - beta
    top = (n + 1.0) ** e - 1.0
    r = np.floor((1.0 + u * top) ** (1.0 / e) - 1.0).astype(np.int64)
    return np.clip(r, 0, n - 1)


def _same_community(rank: np.ndarray, community: np.ndarray, n: int, k: int) -> np.ndarray:
    """The rank nearest below-or-at ``rank`` whose community (``rank mod k``) is ``community``."""
    r = rank - rank % k + community
    return np.where(r >= n, r - k, r)


# ------------------------------------------------------------------ blocks

def _rmat_edge_block(spec: SynthSpec, block: int) -> tuple[np.ndarray, np.ndarray]:
    start = block * EDGE_BLOCK
    size = min(EDGE_BLOCK, spec.num_edges - start)
    rng = np.random.default_rng([spec.seed, 4, block])
    src, dst = rmat.rmat_indices(rng, size, spec.scale, spec.rmat_abc)
    perm = rmat.permutation(spec.scale, spec.seed)
    return perm(src), perm(dst)


def _edge_block(spec: SynthSpec, e: int, block: int) -> tuple[np.ndarray, np.ndarray]:
    if spec.generator == "rmat":
        return _rmat_edge_block(spec, block)
    et = spec.edge_types[e]
    counts = spec.node_counts()
    ns, nd, k = counts[et.src], counts[et.dst], spec.num_classes
    start = block * EDGE_BLOCK
    size = min(EDGE_BLOCK, spec.edge_counts()[et] - start)
    beta = 1.0 / (spec.exponent - 1.0)
    u = np.random.default_rng([spec.seed, 2, e, block]).random((3, size))
    rs, rd = powerlaw_ranks(u[0], ns, beta), powerlaw_ranks(u[1], nd, beta)
    rd = np.where(u[2] < spec.homophily, _same_community(rd, rs % k, nd, k), rd)
    if et.src == et.dst:  # no self-loops: move to the next node of the same community
        loop = rs == rd
        rd[loop] = np.where(rd[loop] + k < nd, rd[loop] + k, rd[loop] - k)
    ps = RankPermutation.for_type(ns, spec.seed, spec.node_types.index(et.src))
    pd = RankPermutation.for_type(nd, spec.seed, spec.node_types.index(et.dst))
    return ps.to_id(rs), pd.to_id(rd)


def generate_edges(spec: SynthSpec, e: int, start: int, stop: int):
    """Edges ``[start, stop)`` of edge type ``spec.edge_types[e]`` as ``(src, dst)`` int64."""
    first, last = start // EDGE_BLOCK, (stop - 1) // EDGE_BLOCK
    parts = [_edge_block(spec, e, b) for b in range(first, last + 1)]
    src = np.concatenate([p[0] for p in parts])
    dst = np.concatenate([p[1] for p in parts])
    lo = start - first * EDGE_BLOCK
    return src[lo:lo + stop - start], dst[lo:lo + stop - start]


def class_means(spec: SynthSpec) -> np.ndarray:
    return np.random.default_rng([spec.seed, 3]).standard_normal(
        (spec.num_classes, spec.feat_dim)).astype(np.float32)


def _fill_node_block(spec: SynthSpec, block: int, means: np.ndarray, out: dict, lo: int,
                     start: int, stop: int) -> None:
    """Generate node block ``block`` and copy its rows within ``[start, stop)`` into ``out``
    (arrays for those rows, filled from row ``lo``). Temporaries are one block."""
    t = spec.node_types.index(spec.labeled_type)
    n = spec.node_counts()[spec.labeled_type]
    b0, b1 = block * NODE_BLOCK, min((block + 1) * NODE_BLOCK, n)
    ids = np.arange(b0, b1, dtype=np.int64)
    if spec.generator == "rmat":
        label = rmat.rmat_labels(ids, spec.scale, spec.seed, spec.num_classes)
    else:
        label = RankPermutation.for_type(n, spec.seed, t).to_rank(ids) % spec.num_classes
    rng = np.random.default_rng([spec.seed, 1, t, block])
    feat = rng.standard_normal((len(ids), spec.feat_dim), dtype=np.float32)
    feat += np.float32(spec.feat_signal) * means[label]
    u = rng.random(len(ids))
    cuts = np.cumsum(spec.split)
    a, z = max(start, b0) - b0, min(stop, b1) - b0
    rows = slice(lo, lo + z - a)
    out["feat"][rows], out["label"][rows] = feat[a:z], label[a:z]
    for name, lo_cut, hi_cut in zip(SPLITS, (0, *cuts[:2]), cuts):
        out[name][rows] = (u[a:z] >= lo_cut) & (u[a:z] < hi_cut)


def generate_node_data(spec: SynthSpec, start: int, stop: int) -> dict[str, np.ndarray]:
    """Rows ``[start, stop)`` of the labeled node type: ``feat``, ``label`` and split masks."""
    means = class_means(spec)
    n = stop - start
    out = {"feat": np.empty((n, spec.feat_dim), np.float32), "label": np.empty(n, np.int64),
           **{name: np.empty(n, bool) for name in SPLITS}}
    lo = 0
    for b in range(start // NODE_BLOCK, (stop - 1) // NODE_BLOCK + 1):
        _fill_node_block(spec, b, means, out, lo, start, stop)
        lo = min((b + 1) * NODE_BLOCK, stop) - start
    return out


# ------------------------------------------------------------------ the job

@dataclass(frozen=True)
class EdgeChunkTask:
    spec: SynthSpec
    edge_type_index: int
    chunk: int
    start: int
    stop: int
    out: str


@dataclass(frozen=True)
class NodeChunkTask:
    spec: SynthSpec
    chunk: int
    start: int
    stop: int
    out: str


def edge_path(et: EdgeType, chunk: int) -> str:
    return f"edges/{et.dirname}/part-{chunk:05d}.parquet"


def node_data_path(ntype: str, name: str, chunk: int) -> str:
    return f"node_data/{ntype}/{name}/part-{chunk:05d}.npy"


def write_edge_chunk_task(task: EdgeChunkTask) -> int:
    """Generate and write one edge chunk; holds that chunk only. Returns its row count."""
    et = task.spec.edge_types[task.edge_type_index]
    src, dst = generate_edges(task.spec, task.edge_type_index, task.start, task.stop)
    write_edge_chunk(os.path.join(task.out, edge_path(et, task.chunk)), src, dst)
    return len(src)


def write_node_chunk_task(task: NodeChunkTask) -> int:
    """Generate and write one chunk of node data; holds that chunk only."""
    data = generate_node_data(task.spec, task.start, task.stop)
    for name, values in data.items():
        write_array_chunk(os.path.join(task.out, node_data_path(task.spec.labeled_type, name,
                                                                task.chunk)), values)
    return task.stop - task.start


def write_synth_chunk(task: EdgeChunkTask | NodeChunkTask) -> int:
    """One task of the job: node and edge chunks run together, so no phase idles a core."""
    if isinstance(task, NodeChunkTask):
        return write_node_chunk_task(task)
    return write_edge_chunk_task(task)


def graph_name(spec: SynthSpec) -> str:
    if spec.generator == "rmat":
        return "synth-rmat"
    return "synth-mag" if spec.hetero else "synth"


def plan(spec: SynthSpec, out: str, chunk_size: int):
    """The tasks and the resulting :class:`ChunkedGraph` metadata of a synth run."""
    edge_counts, node_counts = spec.edge_counts(), spec.node_counts()
    edge_tasks, edge_chunks = [], {}
    for e, et in enumerate(spec.edge_types):
        sizes = even_chunks(edge_counts[et], chunk_size)
        edge_chunks[et] = sizes
        bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
        edge_tasks += [EdgeChunkTask(spec, e, i, int(bounds[i]), int(bounds[i + 1]), out)
                       for i in range(len(sizes))]
    node_chunks = {t: even_chunks(n, chunk_size) for t, n in node_counts.items()}
    lt = spec.labeled_type
    bounds = np.concatenate([[0], np.cumsum(node_chunks[lt])]).astype(int)
    node_tasks = [NodeChunkTask(spec, i, int(bounds[i]), int(bounds[i + 1]), out)
                  for i in range(len(node_chunks[lt]))]
    names = ("feat", "label", *SPLITS)
    graph = ChunkedGraph(
        root=out, graph_name=graph_name(spec),
        node_types=spec.node_types, num_nodes=node_counts, node_chunks=node_chunks,
        edge_types=spec.edge_types, edge_chunks=edge_chunks,
        edges={et: ChunkFiles("parquet", tuple(edge_path(et, i) for i in range(len(c))))
               for et, c in edge_chunks.items()},
        node_data={lt: {name: ChunkFiles("numpy", tuple(node_data_path(lt, name, i)
                                                        for i in range(len(node_tasks))))
                        for name in names}})
    return edge_tasks, node_tasks, graph


# prep synth --dry-run and its refusals (synth_job.check_fits): the footprint of a spec from its
# arguments alone, by the memory model of core/costs.py.
@dataclass(frozen=True)
class SynthFootprint:
    """What ``prep synth`` of a spec needs, from its arguments alone: bytes on disk (edges,
    node data), the peak of one worker (its largest task), the client's memory, and the
    counts they come from."""

    edges: int
    nodes: int
    chunks: int
    edge_disk: int
    node_disk: int
    edge_task_rows: int
    node_task_rows: int
    peak_worker_bytes: int
    client_bytes: int

    @property
    def disk_bytes(self) -> int:
        return self.edge_disk + self.node_disk

    def describe(self, generator: str) -> str:
        """One line, as ``--dry-run`` prints it."""
        return (f"synth ({generator}) dry run, from the arguments: {self.edges:,} edges and "
                f"{self.nodes:,} nodes in {self.chunks:,} chunks; disk ~{size(self.disk_bytes)}"
                f" (edges {size(self.edge_disk)}, node data {size(self.node_disk)}); peak per "
                f"worker ~{self.peak_worker_bytes / MB:,.0f} MB (a task of "
                f"{max(self.edge_task_rows, self.node_task_rows):,} rows); client "
                f"~{self.client_bytes / MB:,.0f} MB")


def estimate_synth(spec, chunk_size: int) -> SynthFootprint:
    """The footprint of ``prep synth`` of ``spec`` (a ``SynthSpec``) in chunks of
    ``chunk_size`` rows, computed without building its plan (which is itself O(chunks))."""
    node_counts, edge_counts = spec.node_counts(), spec.edge_counts()
    nodes, edges = sum(node_counts.values()), sum(edge_counts.values())
    labeled = node_counts[spec.labeled_type]
    chunks = sum(-(-n // chunk_size) for n in edge_counts.values()) + -(-labeled // chunk_size)
    edge_disk = sum(n * (2 * -(-max(node_counts[et.src], node_counts[et.dst], 2).bit_length()
                                // 8) + SYNTH_EDGE_EXTRA)
                    for et, n in edge_counts.items())
    node_row = 4 * spec.feat_dim + SYNTH_NODE_FIXED
    node_disk = labeled * node_row
    edge_rows = min(chunk_size, max(edge_counts.values()))
    node_rows = min(chunk_size, labeled)
    task = max(edge_rows * CHUNK_EDGE, node_rows * (node_row + SYNTH_NODE_TASK_EXTRA))
    return SynthFootprint(edges, nodes, chunks, edge_disk, node_disk, edge_rows, node_rows,
                          WORKER_BASE + task, CLIENT_BASE + chunks * CLIENT_PER_CHUNK)
