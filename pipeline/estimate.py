"""``--dry-run`` of ``prep partition`` and ``prep dispatch``: the peak memory of one worker
and the disk they need, from metadata alone (no cluster, no data read).

A memory model per step, calibrated on fresh 2-worker clusters (``examples/benchmarks``,
RESULTS.md "--dry-run estimates": synth graphs of 2x10^6, 10^7 and 10^8 edges; the estimates
below came within 0.96-1.19x of the measured worker peak RSS there). A worker's peak is its
baseline (Python, numpy, pyarrow, Dask and our modules: ~170 MB) plus its largest task, plus the
pages of the memory-mapped per-node arrays the task touches (they count in RSS, though the
kernel can drop them). Disk is the scratch a step needs while it runs (removed at the end) and
what it leaves.
"""

from __future__ import annotations

from dataclasses import dataclass

from graphprep.formats import ChunkedGraph

MB = 1 << 20
WORKER_BASE = 170 * MB          # an idle worker after the step's imports (measured 170-195)
WORKER_IDLE = 94 * MB           # before them (metis's one task is measured from here)
# --method metis holds the whole graph in one task. One calibration, at 10^7 edges, where
# bench_partition.py measured a 2,658 MB worker peak (RESULTS.md "bench_partition.py"), taken
# as 2.7 GB: METIS_BYTES_PER_EDGE is that peak per input edge, the idle worker included (the
# --method auto choice and the multilevel coarse budget use it); --dry-run adds WORKER_IDLE
# itself, so its per-edge cost is the same peak less the idle worker (260). The bench's MB are
# MiB (2.79e9 B), so both read 3-4% low at 10^7 (RESULTS: metis estimated/measured 0.96).
METIS_CALIBRATION_EDGES = 10**7
METIS_BYTES_PER_EDGE = 270
METIS_PER_EDGE = METIS_BYTES_PER_EDGE - round(WORKER_IDLE / METIS_CALIBRATION_EDGES)   # 260
# Each balance constraint beyond the first (the calibration balanced node counts only) adds a
# vertex-weight column: 8 B per node in our [n, ncon] weights, plus METIS's copies of it on its
# coarse levels (and for "edges" our in-degree array). Measured on one METIS task at 10^6 and
# 2x10^6 nodes (10^6 edges; ru_maxrss with 1-3 columns): 20-40 B per node per column.
METIS_PER_NODE_CONSTRAINT = 32
# --method kaminpar holds the whole graph in one task as well: the CSR build (the same sorted
# keys as metis's: ~48 B per input edge while they are concatenated and deduplicated), then
# KaMinPar's own copy of the graph (64-bit IDs in the pip build: 16 B per input edge) and its
# coarse levels, our offsets and weights beside it (our adjacency is dropped, read back from
# the ParHIP file memory-mapped). Calibrated on planted synth graphs, 4 parts, node counts
# balanced (bench_partition.py --methods metis,prep_kaminpar --balance ntypes --parts 4,
# RESULTS.md): worker peak 324.6 MB at 2x10^6 edges and 709.7 MB at 10^7 (metis: 647.4 and
# 2,684.2 MB), a line of 50 B per edge above 140 MB over the idle worker (KaMinPar's and TBB's
# libraries and arenas; at 10^5 edges the peak is ~175 MB, so below 2x10^6 the line is high).
KAMINPAR_FIXED = 140 * MB
KAMINPAR_PER_EDGE = 50
# Each further balance constraint: a column of our int64 [n, ncon] weights, 8 B per node
# (measured: the default three constraints added 11.5 MB at 10^6 nodes, 6 B per node each).
KAMINPAR_PER_NODE_CONSTRAINT = 8
RANDOM_SLICE = 4 << 20          # --method random: node IDs per task
LEVEL_ENTRY = 90                # multilevel: bytes per stored edge entry of a range task
COARSE_EDGE = 300               # multilevel: bytes per edge of the coarsest graph's task
MAPPED_PER_NODE = 16            # multilevel: per-node mapped pages a range task touches
MAPPED_PER_CONSTRAINT = 8       # ... per extra constraint: its cluster weights (read at random)
CHUNK_EDGE = 60                 # a task holding one edge chunk: bytes per row
PART_NODE = 6                   # dispatch build: bytes per owned node (IDs, halo flags)
SUBRANGE_EDGE = 70              # dispatch build: bytes per edge into one destination sub-range
BUILD_BUFFERS = 40 * MB         # dispatch build: one destination sub-range's other buffers


@dataclass(frozen=True)
class Estimate:
    """What a step needs: the peak of one worker, the scratch disk while it runs, the output
    left; ``basis`` says which task sets the peak and how it was derived."""

    step: str
    method: str
    peak_worker_bytes: int
    scratch_bytes: int
    output_bytes: int
    basis: str

    def describe(self) -> str:
        gb = lambda b: f"{b / 1e9:.2f} GB"     # noqa: E731
        return (f"{self.step} ({self.method}) dry run, from metadata: peak per worker "
                f"~{self.peak_worker_bytes / MB:,.0f} MB ({self.basis}); scratch disk "
                f"~{gb(self.scratch_bytes)} while running; output ~{gb(self.output_bytes)}")


def _sizes(graph: ChunkedGraph) -> tuple[int, int, int]:
    nodes = sum(graph.num_nodes.values())
    edges = sum(graph.num_edges.values())
    chunk = max((max(c) for c in graph.edge_chunks.values() if c), default=0)
    return nodes, edges, chunk


def metis_peak_bytes(edges: int, nodes: int = 0, ncon: int = 1) -> int:
    """``--method metis``'s peak per worker, its idle worker included (``--method auto``'s
    estimate): ``METIS_BYTES_PER_EDGE`` per input edge, plus ``METIS_PER_NODE_CONSTRAINT`` per
    node for each vertex-weight column beyond the first."""
    return (METIS_BYTES_PER_EDGE * int(edges) +
            METIS_PER_NODE_CONSTRAINT * int(nodes) * max(int(ncon) - 1, 0))


def kaminpar_peak_bytes(edges: int, nodes: int = 0, ncon: int = 1) -> int:
    """``--method kaminpar``'s peak per worker, its idle worker included (as
    :func:`metis_peak_bytes` is for metis): ``KAMINPAR_FIXED`` plus ``KAMINPAR_PER_EDGE`` per
    input edge, plus ``KAMINPAR_PER_NODE_CONSTRAINT`` per node for each vertex-weight column
    beyond the first."""
    return (WORKER_IDLE + KAMINPAR_FIXED + KAMINPAR_PER_EDGE * int(edges) +
            KAMINPAR_PER_NODE_CONSTRAINT * int(nodes) * max(int(ncon) - 1, 0))


def _whole_graph(label: str, name: str, fixed: int, per_edge: int, per_constraint: int,
                 nodes: int, edges: int, ncon: int, scratch: int, output: int) -> Estimate:
    """The estimate of a method holding the whole graph in one task (metis, kaminpar):
    ``fixed`` bytes plus ``per_edge`` per input edge above the idle worker, plus
    ``per_constraint`` per node for each balance constraint beyond the first."""
    per_node = per_constraint * (ncon - 1)
    return Estimate("partition", label,
                    WORKER_IDLE + fixed + per_edge * edges + per_node * nodes, scratch, output,
                    f"the whole graph in one task ({name}), "
                    + (f"{fixed / MB:,.0f} MB + " if fixed else "") + f"{per_edge} B per edge"
                    + (f" + {per_node} B per node for {ncon} balance constraints"
                       if per_node else ""))


def estimate_partition(graph: ChunkedGraph, method: str, num_parts: int, balance=None,
                       coarse_edges: int | None = None, worker_bytes: int | None = None,
                       range_size: int = 1 << 17) -> Estimate:
    """The estimate of ``prep partition`` with these options; ``auto`` is resolved as the
    step would resolve it for workers of ``worker_bytes``. ``balance`` None: the method's
    default (``default_balance``, from the metadata: a train_mask field counts)."""
    from graphprep.pipeline.partition.auto import choose
    from graphprep.pipeline.partition.auto import kaminpar_installed
    from graphprep.pipeline.partition.base import default_balance, num_constraints
    from graphprep.pipeline.partition.multilevel.budget import derive_budget
    from graphprep.pipeline.partition.multilevel.method import MAX_RANGES
    from graphprep.pipeline.partition.parhip import parhip_bytes

    nodes, edges, chunk = _sizes(graph)
    if balance is None:
        balance = default_balance(graph, method, read_masks=False)
    ncon = num_constraints(graph, tuple(balance))
    label = method
    if method == "auto":
        method = choose(edges, worker_bytes, nodes, ncon, kaminpar_installed()).method
        label = f"auto -> {method}"
    output = nodes * 4
    if method == "random":
        return Estimate("partition", label, WORKER_BASE + min(nodes, RANDOM_SLICE) * 24, 0,
                        output, f"a slice of up to {RANDOM_SLICE:,} node IDs")
    if method == "metis":
        return _whole_graph(label, "METIS", 0, METIS_PER_EDGE, METIS_PER_NODE_CONSTRAINT,
                            nodes, edges, ncon, 0, output)
    if method == "kaminpar":
        # scratch: the ParHIP file (at most both directions of every input edge)
        return _whole_graph(label, "KaMinPar", KAMINPAR_FIXED, KAMINPAR_PER_EDGE,
                            KAMINPAR_PER_NODE_CONSTRAINT, nodes, edges, ncon,
                            parhip_bytes(nodes, 2 * edges), output)
    ranges = -(-nodes // max(range_size, -(-nodes // MAX_RANGES)))
    per_range = 2 * edges // max(ranges, 1)
    coarse = derive_budget(edges, worker_bytes, coarse_edges).edges
    tasks = {"a range task": per_range * LEVEL_ENTRY,
             "the coarsest graph's task": coarse * COARSE_EDGE,
             "an input chunk's task": chunk * CHUNK_EDGE}
    biggest = max(tasks, key=tasks.get)
    scratch = edges * (16 + 8) + nodes * 8 * (ncon + 6)
    mapped = MAPPED_PER_NODE + MAPPED_PER_CONSTRAINT * (ncon - 1)
    return Estimate("partition", label,
                    WORKER_BASE + tasks[biggest] + nodes * mapped, scratch, output,
                    f"{biggest}: {per_range:,} entries per range, coarse budget {coarse:,} "
                    f"edges, plus mapped per-node pages")


def _row_bytes(graph: ChunkedGraph, kind: str) -> dict:
    """Bytes per row of all data fields, per node or edge type, from the header of each
    field's first chunk (as ``prep inspect`` reads it); a sparse field's from its stored
    entries (the chunks' footers)."""
    import numpy as np

    from graphprep.formats.sparse import index_dtype

    from graphprep.pipeline.inspect import csr_nnz, field_layout
    data = graph.node_data if kind == "node" else graph.edge_data
    counts = graph.num_nodes if kind == "node" else graph.num_edges
    out = {}
    for owner, fields in data.items():
        total = 0
        for files in fields.values():
            dtype, shape = field_layout(graph.path(files.files[0]), files)
            item = np.dtype(dtype or "float64").itemsize
            if files.format == "csr":
                # a sparse row weighs its stored entries (value and column) and its offset
                nnz = csr_nnz([graph.path(f) for f in files.files])
                rows = max(int(counts[owner]), 1)
                per_entry = item + index_dtype(files.dim).itemsize
                total += 8 + (per_entry * -(-nnz // rows) if nnz is not None else
                              item * files.dim)
            else:
                total += item * int(np.prod(shape or [1]))
        out[owner] = total
    return out


def estimate_dispatch(graph: ChunkedGraph, num_parts: int,
                      range_size: int = 1 << 17) -> Estimate:
    """The estimate of ``prep dispatch`` into ``num_parts`` parts (balanced parts assumed)."""
    nodes, edges, chunk = _sizes(graph)
    node_rows = _row_bytes(graph, "node")
    edge_rows = _row_bytes(graph, "edge")
    data_bytes = sum(graph.num_nodes[t] * node_rows.get(t, 0) for t in graph.node_types)
    edge_data = sum(graph.num_edges[e] * edge_rows.get(e, 0) for e in graph.edge_types)
    part_nodes = nodes // max(num_parts, 1)
    widest = max(node_rows.values(), default=0)
    # A worker runs shuffle tasks, then build tasks: their high-water marks add up (the
    # allocator keeps the first's arenas). A build holds one destination sub-range's edges
    # and feature rows, and a few bytes per owned node. Refitted on 2026-11-27 (RESULTS.md,
    # "--dry-run dispatch estimate refitted"): 277 / 395 / 1,041 MB measured at 2x10^6,
    # 10^7 and 10^9 edges, after the halo became flags (the old 30 B per owned node
    # overestimated 10^9 by 1.69x and a fixed buffer underestimated 10^7 by 0.77x).
    sub_range = min(part_nodes, range_size)
    build = (BUILD_BUFFERS + sub_range * edges // max(nodes, 1) * SUBRANGE_EDGE
             + part_nodes * PART_NODE + range_size * widest)
    shuffle = chunk * CHUNK_EDGE
    output = edges * 14 + nodes * 16 + data_bytes + edge_data
    scratch = edges * 24 + nodes * 8 + edge_data
    return Estimate("dispatch", f"{num_parts} parts",
                    WORKER_BASE + shuffle + build + nodes * 8, scratch, output,
                    f"an edge chunk's shuffle ({shuffle / MB:,.0f} MB) and a part build "
                    f"({build / MB:,.0f} MB) in one worker, plus the old->new map's pages")


# prep synth, from its arguments alone (measured on one task of 2^20 rows, planted and R-MAT,
# numpy's allocations traced: an edge task 32-41 B per row plus Arrow's copy of the two
# columns, CHUNK_EDGE; a node task its output rows plus 6 B; on disk the node data is exact,
# .npy, and Parquet packed the random IDs of a 2^20-node graph into 6.3-7.3 B per edge).
SYNTH_NODE_FIXED = 8 + 3        # per node on disk: the int64 label and three bool masks
SYNTH_NODE_TASK_EXTRA = 8       # per node row of a node task beyond its output rows
SYNTH_EDGE_EXTRA = 2            # per edge on disk beyond two IDs at their bit width
# The client holds, per chunk, its task in the plan (~340 B measured), its metadata, and a
# Dask future and the scheduler's state of its synth and its validate task (the embedded
# scheduler lives in the client's process): a few KB, taken as 8 KB.
CLIENT_PER_CHUNK = 8 << 10
CLIENT_BASE = 300 * MB          # the client process with Dask's scheduler, before any chunk


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


def size(nbytes: float) -> str:
    """``nbytes`` in decimal units with 3 significant digits (1.2 TB, 512 GB, 3.4 MB)."""
    for unit, scale in (("PB", 1e15), ("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{int(nbytes)} B"


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
