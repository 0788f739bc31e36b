"""``prep dispatch --dry-run``: the peak memory of one worker and the disk the step needs,
from metadata alone (no cluster, no data read), by the memory model of ``core/costs.py``.
"""

from __future__ import annotations

from graphprep.formats import ChunkedGraph
from graphprep.pipeline.core.costs import (BUILD_BUFFERS, CHUNK_EDGE, MB, PART_NODE, SUBRANGE_EDGE,
                                           WORKER_BASE, Estimate, graph_sizes)


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
    nodes, edges, chunk = graph_sizes(graph)
    node_rows = _row_bytes(graph, "node")
    edge_rows = _row_bytes(graph, "edge")
    data_bytes = sum(graph.num_nodes[t] * node_rows.get(t, 0) for t in graph.node_types)
    edge_data = sum(graph.num_edges[e] * edge_rows.get(e, 0) for e in graph.edge_types)
    part_nodes = nodes // max(num_parts, 1)
    widest = max(node_rows.values(), default=0)
    # A worker runs shuffle tasks, then build tasks: their high-water marks add up (the
    # allocator keeps the first's arenas). A build holds one destination sub-range's edges
    # and feature rows, and a few bytes per owned node. Fitted to measured worker peaks at
    # 2x10^6, 10^7 and 10^9 edges: examples/benchmarks/RESULTS.md, "`--dry-run` dispatch
    # estimate refitted".
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
