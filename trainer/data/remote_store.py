"""Remote input rows kept on this machine's disk once fetched, so no epoch asks for a row twice.

The halo cache (:class:`graphprep.trainer.data.features.HaloCache`) holds a fixed budget of
rows in memory; as the graph grows its share of the rows a batch needs falls (at 10^8 edges,
random parts: 0.42 of the planted graph's halo rows) and the rest crosses the network every
epoch. A :class:`RemoteStore` keeps every remote row it is given in a memory-mapped file: the
rows sit in the page cache, which the kernel can drop and reread, not in the rank's anonymous
memory, and the file only takes disk where rows were written (a sparse file).
"""

from __future__ import annotations

import os
import tempfile

import numpy as np
import torch

from graphprep.trainer.sampling.partition import LocalPart, is_sparse_spec


class RemoteStore:
    """Rows of the dense node data arrays ``names`` for the nodes other parts own, filled as
    they are fetched (:meth:`put`) and served from then on (:meth:`lookup`, :meth:`take`).

    A remote node's new ID ``i`` of type ``t`` (outside this part's ``[s0, s1)``) has slot
    ``i`` below ``s0``, ``i - (s1 - s0)`` above. Holds one flag byte per remote node in
    memory; each array's file (in ``folder``, unlinked at once: it goes with the process) is
    (nodes not owned) x row bytes, of which the disk holds only the written rows."""

    def __init__(self, part: LocalPart, names: tuple[str, ...], folder: str):
        graph = part.graph
        self.names = tuple(names)
        self.own = {t: tuple(graph.node_map[t][part.p]) for t in graph.node_types}
        self.files: dict[tuple[str, str], torch.Tensor] = {}
        self.filled: dict[str, torch.Tensor] = {}
        os.makedirs(folder, exist_ok=True)
        for t in graph.node_types:
            remote = graph.num_nodes[t] - (self.own[t][1] - self.own[t][0])
            for name in names:
                spec = graph.node_feats.get(t, {}).get(name)
                if spec is None or is_sparse_spec(spec) or remote <= 0:
                    continue
                fd, path = tempfile.mkstemp(prefix=f"{t}.{name}.", suffix=".npy", dir=folder)
                os.close(fd)
                rows = np.lib.format.open_memmap(path, mode="w+", dtype=spec["dtype"],
                                                 shape=(remote, *spec["shape"]))
                os.unlink(path)              # the mapping keeps it; nothing left behind
                self.files[(name, t)] = torch.from_numpy(rows)
                self.filled.setdefault(t, torch.zeros(remote, dtype=torch.bool))

    def holds(self, names, ntype: str) -> bool:
        """Whether every array of ``names`` is kept for ``ntype``."""
        return all((n, ntype) in self.files for n in names)

    def slots(self, ntype: str, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(remote, slot)``: which of ``ids`` (new IDs) other parts own, and their slots."""
        s0, s1 = self.own[ntype]
        remote = (ids < s0) | (ids >= s1)
        mine = ids[remote]
        return remote, mine - (mine >= s1).long() * (s1 - s0)

    def lookup(self, ntype: str, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(have, slot)``: which of ``ids`` the store can serve (bool per ID), and their
        slots in order."""
        remote, slot = self.slots(ntype, ids)
        have = torch.zeros(len(ids), dtype=torch.bool)
        have[remote] = self.filled[ntype][slot]
        return have, slot[self.filled[ntype][slot]]

    def take(self, name: str, ntype: str, slot: torch.Tensor) -> torch.Tensor:
        """The kept rows of ``name`` at ``slot`` (a copy)."""
        return self.files[(name, ntype)][slot]

    def put(self, ntype: str, ids: torch.Tensor, rows: dict[str, torch.Tensor]) -> None:
        """Keep ``rows[name]`` (one row per ID of ``ids``, every array the store has for the
        type) of the remote ones among ``ids``; owned IDs are skipped. Rows are written
        before their flags are set, so a reader on another thread never sees an unwritten
        row."""
        remote, slot = self.slots(ntype, ids)
        for name, block in rows.items():
            self.files[(name, ntype)][slot] = block[remote]
        self.filled[ntype][slot] = True

    def fill(self, fetcher, block: int = 1 << 14) -> int:
        """Fetch the rows of every halo node of the part (those its edges reference) into the
        store through ``fetcher`` (a :class:`FeatureFetcher` holding this store), ``block``
        nodes per request; returns how many rows it asked for. Holds one block's rows."""
        asked = 0
        for t in fetcher.part.graph.node_types:
            names = [n for n in self.names if (n, t) in self.files]
            halo = fetcher.part.halo_ids.get(t)
            if not names or halo is None:
                continue
            halo = halo.cpu()
            for lo in range(0, len(halo), block):
                ids = halo[lo:lo + block]
                fetcher.fetch_many({n: {t: ids} for n in names})
                asked += len(ids)
        return asked
