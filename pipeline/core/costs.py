"""The memory model behind every ``--dry-run`` and memory-based choice (``--method auto``, the
multilevel coarse budget, ``prep synth``'s refusals): the calibrated costs of each step and
method, in one place that the steps import (``partition/estimate.py``, ``dispatch/estimate.py``,
``synth.py``, ``partition/auto.py``, ``partition/multilevel/budget.py``).

Calibrated on fresh 2-worker clusters (``examples/benchmarks``, RESULTS.md "--dry-run
estimates": synth graphs of 2x10^6, 10^7 and 10^8 edges; the estimates came within 0.96-1.19x
of the measured worker peak RSS there). A worker's peak is its baseline (Python, numpy,
pyarrow, Dask and our modules: ~170 MB) plus its largest task, plus the pages of the
memory-mapped per-node arrays the task touches (they count in RSS, though the kernel can drop
them). Disk is the scratch a step needs while it runs (removed at the end) and what it leaves.
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


def graph_sizes(graph: ChunkedGraph) -> tuple[int, int, int]:
    """``(nodes, edges, rows of the largest edge chunk)`` of a chunked graph, from its
    metadata."""
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


def size(nbytes: float) -> str:
    """``nbytes`` in decimal units with 3 significant digits (1.2 TB, 512 GB, 3.4 MB)."""
    for unit, scale in (("PB", 1e15), ("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{int(nbytes)} B"
