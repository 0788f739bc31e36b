"""DGL's chunked graph format (and graphprep's own) in: validated, then re-chunked.

The whole input is validated first (one task per chunk). Each input edge chunk becomes a part
(with the matching rows of its edge data); node data is read by row range across the input's
data files, so output chunks follow ``--chunk-size`` whatever the input's chunking.
"""

from __future__ import annotations

import logging

import numpy as np

from graphprep.formats import load_chunked_graph, validate_chunked_graph
from graphprep.formats.fields import ChunkedArray
from graphprep.pipeline.convert.sources import ChunkFileEdges, EdgeSource, SourceGraph

log = logging.getLogger(__name__)


def from_chunked(folder: str, chunk_size: int, runner, nan_policy: str) -> SourceGraph:
    """Validate a chunked graph, then describe it as parts of about ``chunk_size`` edges."""
    graph = load_chunked_graph(folder)
    validate_chunked_graph(graph, nan_policy=nan_policy,
                           runner=lambda fn, items: runner(fn, items, "validate input"))
    edges = []
    for et in graph.edge_types:
        fields = graph.edge_data.get(et, {})
        if fields and not graph.num_edges[et]:
            # DGL writes 0-row files for them; a field with no rows has no chunk to carry it.
            log.warning("edge type '%s' has 0 edges: its edge data (%s) is not carried", et,
                        ", ".join(sorted(fields)))
            fields = {}
        data = tuple((name, ChunkedArray.of(graph, files)) for name, files in fields.items())
        bounds = np.cumsum((0,) + graph.edge_chunks[et])
        paths = [graph.path(rel) for rel in graph.edges[et].files]
        parts = []
        for start in range(0, int(bounds[-1]), chunk_size):
            stop = min(start + chunk_size, int(bounds[-1]))
            hit = [i for i in range(len(paths)) if bounds[i] < stop and bounds[i + 1] > start]
            parts.append(ChunkFileEdges(paths[hit[0]], tuple(paths[i] for i in hit),
                                        tuple(int(bounds[i]) for i in hit), graph.edges[et],
                                        data, start, stop))
        edges.append(EdgeSource(et, tuple(parts), tuple(name for name, _ in data)))
    node_data = {t: {name: ChunkedArray.of(graph, files) for name, files in fields.items()}
                 for t, fields in graph.node_data.items()}
    return SourceGraph(graph.graph_name, graph.node_types, dict(graph.num_nodes), tuple(edges),
                       node_data, inputs=(folder,))
