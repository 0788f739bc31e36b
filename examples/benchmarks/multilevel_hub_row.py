"""Memory of coarsening's propose on a range holding a hub cluster's coarse row; prints JSON.

A diagnostic, like ``multilevel_task_peaks.py``: one propose task in this process under
``tracemalloc``. The range has ``--rows`` ordinary rows (1-39 entries) over ``--nodes`` nodes,
plus two rows of ``--hub`` and 3/4 of it entries (level 1 of the planted 10^9 graph has rows of
4.1M entries against blocks of 2^21), and most clusters full, so that the room of every
candidate is checked. It runs the task three ways, on the same files: with the row read whole
(``BLOCK_ENTRIES`` above the range) and candidates decided at once (the code before the row
was read in pieces), with the row whole but candidates in chunks, and with the defaults. The
proposals must be the same bytes each way.

    python examples/benchmarks/multilevel_hub_row.py [--hub 4000000] [--no-hub]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import tracemalloc

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from graphprep.pipeline.partition.multilevel import coarsen, layout  # noqa: E402
from graphprep.pipeline.partition.multilevel.layout import Level, write_csr  # noqa: E402


def build(folder: str, nodes: int, rows: int, hub: int, seed: int) -> coarsen.RoundTask:
    """Round 0 of a level of one range under ``folder``: the CSR, vertex weights, labels
    (every node its own cluster) and cluster weights (70% of clusters full)."""
    rng = np.random.default_rng(seed)
    lv = Level(folder, nodes, rows, 3, 1)
    deg = rng.integers(1, 40, rows)
    if hub:
        deg[7], deg[rows // 2] = hub, 3 * hub // 4
    row = np.repeat(np.arange(rows), deg)
    col = np.concatenate([np.sort(rng.choice(nodes, d, replace=False)) for d in deg])
    write_csr(lv, 0, row, col, rng.integers(1, 20, len(row)))
    del row, col
    vw = np.ones((nodes, 3), dtype=np.int64)
    vw[:, 1] = rng.integers(1, 100, nodes)
    vw[:, 2] = rng.integers(0, 2, nodes)
    np.save(lv.path("vwgt.npy"), vw)
    os.makedirs(lv.path("coarsen"))
    files = coarsen.RoundFiles(lv.path("coarsen"), 0)
    np.save(files.state("labels", False), np.arange(nodes))
    vw[rng.random(nodes) < 0.7, 1] = 10**6
    np.save(files.state("cw", False), vw)
    return coarsen.RoundTask(lv, 0, files, seed, (10.0, 1000.0, 10.0))


def traced_propose(task: coarsen.RoundTask, block: int, candidates: int) -> tuple[float, str]:
    """(peak MB the task allocated, digest of its proposals file)."""
    layout.BLOCK_ENTRIES, coarsen.CANDIDATES = block, candidates
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        coarsen.propose(task)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    with open(task.files.scratch("p00000.bin"), "rb") as f:
        return round(peak / 2**20, 1), hashlib.sha1(f.read()).hexdigest()[:12]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=11_000_000, help="nodes of the level")
    ap.add_argument("--rows", type=int, default=90_000, help="rows of the range")
    ap.add_argument("--hub", type=int, default=4_000_000, help="entries of the largest row")
    ap.add_argument("--no-hub", action="store_true", help="the range without its two hub rows")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    block, candidates = layout.BLOCK_ENTRIES, coarsen.CANDIDATES
    folder = tempfile.mkdtemp(prefix="hub_row_", dir=os.getcwd())
    try:
        task = build(folder, args.nodes, args.rows, 0 if args.no_hub else args.hub, args.seed)
        runs = {"row whole, candidates at once": (1 << 40, 1 << 40),
                "row whole, candidates in chunks": (1 << 40, candidates),
                "default": (block, candidates)}
        out = {name: traced_propose(task, *limits) for name, limits in runs.items()}
    finally:
        shutil.rmtree(folder)
    print(json.dumps({"hub_entries": 0 if args.no_hub else args.hub,
                      "peak_mb": {k: v[0] for k, v in out.items()},
                      "same_proposals": len({v[1] for v in out.values()}) == 1}))


if __name__ == "__main__":
    main()
