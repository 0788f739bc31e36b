"""What a dispatch run works on, and where its resumable intermediate files live.

The work folder holds, per step, one folder per finished task (written under ``*.tmp`` and
renamed when complete), so a rerun after a kill skips what is done and redoes the rest.

The plan also carries what the tasks check while they read (``graphprep.formats.validate``): node and
edge data fields whose every chunk was checked against the first one's dtype and row shape
from the headers (on the client, once), the NaN/inf policy the tasks apply to the rows they
read, and node counts that bound every edge endpoint.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from graphprep.formats import ChunkedGraph, EdgeType
from graphprep.formats.assignment import Assignment
from graphprep.formats.finite import NAN_POLICIES
from graphprep.formats.fields import data_fields

RANGE_SIZE = 1 << 17  # nodes per relabel task and per destination sub-range of a part


def with_chunk_per_edge_type(graph: ChunkedGraph) -> ChunkedGraph:
    """``graph`` where an edge type without any chunk (0 edges) has one empty chunk with no
    file (path ``""``): every step then has one bucket per type to build from, so a graph of
    isolated nodes goes through like any other."""
    empty = [et for et in graph.edge_types if not graph.edge_chunks[et]]
    if not empty:
        return graph
    edge_chunks = {**graph.edge_chunks, **{et: (0,) for et in empty}}
    edges = {**graph.edges, **{et: dataclasses.replace(graph.edges[et], files=("",))
                               for et in empty}}
    return dataclasses.replace(graph, edge_chunks=edge_chunks, edges=edges)


@dataclass(frozen=True)
class DispatchPlan:
    """Everything a dispatch task needs (pickled into each task: metadata only).

    ``nan_policy`` ("error", "warn", "ignore") applies to float node/edge data rows as they are
    read. ``node_fields``/``edge_fields`` are opened from the chunk headers when not given.
    """

    graph: ChunkedGraph
    assignment: Assignment | None
    work: str
    range_size: int = RANGE_SIZE
    nan_policy: str = "error"
    node_fields: dict | None = None
    edge_fields: dict | None = None

    def __post_init__(self):
        if self.nan_policy not in NAN_POLICIES:
            raise ValueError(f"nan_policy must be one of {NAN_POLICIES}")
        if self.node_fields is None or self.edge_fields is None:
            nodes, edges = data_fields(self.graph, self.nan_policy)
            object.__setattr__(self, "node_fields", nodes)
            object.__setattr__(self, "edge_fields", edges)
        object.__setattr__(self, "graph", with_chunk_per_edge_type(self.graph))

    @property
    def num_parts(self) -> int:
        return self.assignment.meta.num_parts

    def ranges(self, ntype: str) -> list[tuple[int, int]]:
        n = self.graph.num_nodes[ntype]
        return [(s, min(s + self.range_size, n)) for s in range(0, n, self.range_size)]

    def edge_chunks(self, et: EdgeType) -> list[tuple[str, int, int]]:
        """``(path, first edge ID, stop)`` of each input chunk of ``et`` (path ``""``: an empty
        chunk with no file, see :func:`with_chunk_per_edge_type`)."""
        bounds = np.cumsum((0,) + self.graph.edge_chunks[et])
        return [(self.graph.path(f) if f else "", int(bounds[i]), int(bounds[i + 1]))
                for i, f in enumerate(self.graph.edges[et].files)]

    def map_path(self, ntype: str) -> str:
        return os.path.join(self.work, "relabel", f"{ntype}.npy")

    def node_piece(self, ntype: str, k: int) -> str:
        return os.path.join(self.work, "nodes", ntype, f"r{k:05d}")

    def edge_bucket(self, et: EdgeType, k: int) -> str:
        return os.path.join(self.work, "edges", et.dirname, f"c{k:05d}")


@contextmanager
def atomic_folder(final: str):
    """Yield a temporary folder that becomes ``final`` only if the block completes."""
    tmp = final + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    yield tmp
    os.replace(tmp, final) if not os.path.exists(final) else shutil.rmtree(tmp)
