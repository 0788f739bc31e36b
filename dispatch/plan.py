"""What a dispatch run works on, and where its resumable intermediate files live.

The work folder holds, per step, one folder per finished task (written under ``*.tmp`` and
renamed when complete), so a rerun after a kill skips what is done and redoes the rest.
"""

from __future__ import annotations

import os
import shutil
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from formats import ChunkedGraph, EdgeType
from formats.assignment import Assignment

RANGE_SIZE = 1 << 17  # nodes per relabel task and per destination sub-range of a part


@dataclass(frozen=True)
class DispatchPlan:
    graph: ChunkedGraph
    assignment: Assignment
    work: str
    range_size: int = RANGE_SIZE

    @property
    def num_parts(self) -> int:
        return self.assignment.meta.num_parts

    def ranges(self, ntype: str) -> list[tuple[int, int]]:
        n = self.graph.num_nodes[ntype]
        return [(s, min(s + self.range_size, n)) for s in range(0, n, self.range_size)]

    def edge_chunks(self, et: EdgeType) -> list[tuple[str, int, int]]:
        """``(path, first edge ID, stop)`` of each input chunk of ``et``."""
        bounds = np.cumsum((0,) + self.graph.edge_chunks[et])
        return [(self.graph.path(f), int(bounds[i]), int(bounds[i + 1]))
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
