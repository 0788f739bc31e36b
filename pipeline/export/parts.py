"""One part of a partitioned graph (FORMATS.md §3) read back in original IDs, for exporters.

Owned nodes come in the part's order (ascending original ID); a part's edges come in its CSC
order: by destination, and in input order within one destination. Halo sources are mapped
to original IDs through their owners' ``orig_ids.npy`` (memory-mapped). Everything is numpy:
``prep`` never imports torch; the exporters that need torch import it inside their tasks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from graphprep.formats import EdgeType, FormatError
from graphprep.formats.partitioned import PartitionedGraph
from graphprep.formats.sparse import CSR, load_csr
from graphprep.pipeline.core.arrayops import unique_ints


@dataclass(frozen=True)
class PartEdges:
    src: np.ndarray        # original source IDs
    dst: np.ndarray        # original destination IDs (non-decreasing)
    ids: np.ndarray        # original edge IDs of the type


@dataclass(frozen=True)
class PartView:
    """Part ``p`` of ``graph``; holds nothing until asked, then one type's arrays."""

    graph: PartitionedGraph
    p: int

    def load(self, *rel: str, part: int | None = None) -> np.ndarray:
        """A part file memory-mapped; missing or damaged is a FormatError naming it."""
        path = self.graph.part_path(self.p if part is None else part, *rel)
        try:
            return np.load(path, mmap_mode="r", allow_pickle=False)
        except FileNotFoundError:
            raise FormatError("part file is missing", file=path) from None
        except (ValueError, OSError, EOFError) as err:
            raise FormatError(f"unreadable or truncated .npy ({err})", file=path) from None

    def owned(self, ntype: str) -> np.ndarray:
        """Original IDs of the nodes of ``ntype`` this part owns (ascending)."""
        return np.asarray(self.load("nodes", ntype, "orig_ids.npy"))

    def orig_of(self, ntype: str, new_ids: np.ndarray) -> np.ndarray:
        """Original IDs of per-type new IDs owned by any part."""
        out = np.empty(len(new_ids), np.int64)
        owners = self.graph.owner(ntype, new_ids)
        for q in unique_ints(owners):
            sel = owners == q
            out[sel] = np.asarray(self.load("nodes", ntype, "orig_ids.npy", part=int(q)))[
                new_ids[sel] - self.graph.node_map[ntype][q][0]]
        return out

    def edges(self, et: EdgeType) -> PartEdges:
        """The part's edges of ``et`` (those whose destination it owns) in CSC order."""
        base = ("edges", et.dirname)
        indptr = np.asarray(self.load(*base, "indptr.npy"))
        indices = np.asarray(self.load(*base, "indices.npy")).astype(np.int64)
        owned_src = self.owned(et.src)
        src = np.empty(len(indices), np.int64)
        local = indices < len(owned_src)
        src[local] = owned_src[indices[local]]
        halo = np.asarray(self.load("nodes", et.src, "halo_ids.npy"))
        src[~local] = self.orig_of(et.src, halo[indices[~local] - len(owned_src)])
        dst = np.repeat(self.owned(et.dst), np.diff(indptr))
        return PartEdges(src, dst, np.asarray(self.load(*base, "orig_ids.npy")))

    def node_data(self, ntype: str) -> dict[str, np.ndarray]:
        """Every node data field of ``ntype``, rows in :meth:`owned` order. Sparse fields are
        densified (PyG's and DGL's part layouts hold dense tensors): the part's field dense in
        memory, rows x width x 4 B."""
        out = {}
        for name, spec in self.graph.node_feats.get(ntype, {}).items():
            if spec.get("format") == CSR:
                base = self.graph.part_path(self.p, "node_feats", ntype, name)
                out[name] = load_csr(base, int(spec["shape"][0])).to_dense()
            else:
                out[name] = np.asarray(self.load("node_feats", ntype, f"{name}.npy"))
        return out

    def edge_data(self, et: EdgeType) -> dict[str, np.ndarray]:
        """Every edge data field of ``et``, rows in :meth:`edges` order."""
        return {name: np.asarray(self.load("edge_feats", et.dirname, f"{name}.npy"))
                for name in self.graph.edge_feats.get(et, {})}
