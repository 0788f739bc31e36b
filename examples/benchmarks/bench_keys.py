"""Benchmark of tables in (issue 33): ``prep chunk CONFIG`` on tables keyed by UUID-like
strings, beside pandas ``factorize`` of the same keys in one process, in the same run; prints
one JSON object.

Tables: a node table of N keys (rows in a shuffled order) with two float columns and a
categorical column, and Parquet edge files of E rows (source keys skewed like a power law,
destinations uniform) with a float and a categorical column. ``prep chunk`` runs on 2 fresh
workers (time, per-worker peak RSS, anonymous and file-backed peaks); the baseline reads the
two key columns into pandas (Arrow strings) and factorizes them together: the script every
user writes first, holding every key in one process. ``--edges`` (default 10^7, N = E/10);
``--large``: also 10x (the worker peak must stay flat); ``--quick``: 10^4 edges, seconds.

``--graphstorm-python PATH``: also GraphStorm's ``gconstruct`` (AWS; the peer tool for this
step: tables -> graph with an ID mapping, features and categorical transforms) on the same
tables in the same run, as ``"graphstorm_gconstruct"`` per size: wall time, peak RSS and PSS
of its process tree (psutil polling) and of its largest process (``wait4``'s ru_maxrss), and
what it wrote (nodes, edges, feature shapes) beside what ``prep chunk`` wrote. PATH is a
Python with graphstorm installed, e.g. a venv made by ``pip install graphstorm`` plus the
DGL that imports with our torch; graphstorm is not a dependency of this project and is never
imported here (``gconstruct_peer.py`` runs it as a subprocess). Default: skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(__file__))
from common import (fresh_cluster, run_baseline, sampled_peaks_mb,  # noqa: E402
                    start_memory_sampler, timer, worker_peak_rss_mb)

from gconstruct_peer import run_gconstruct  # noqa: E402

from graphprep.pipeline.core.arrayops import mix  # noqa: E402

BLOCK = 1 << 20
HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
COUNTRIES = np.array([f"c{i:02d}" for i in range(20)])
CHANNELS = np.array(["web", "app", "store", "phone", "partner"])


def uuid_keys(ids: np.ndarray, seed: int = 0) -> pa.Array:
    """A UUID-shaped string per ID (36 characters, 128 hashed bits), vectorized."""
    words = np.stack([mix(seed, ids), mix(seed + 1, ids)], axis=1).astype(">u8")
    raw = words.view(np.uint8).reshape(len(ids), 16)
    hexed = np.empty((len(ids), 32), dtype=np.uint8)
    hexed[:, 0::2], hexed[:, 1::2] = HEX[raw >> 4], HEX[raw & 15]
    text = np.full((len(ids), 36), ord("-"), dtype=np.uint8)
    for a, b, at in ((0, 8, 0), (8, 12, 9), (12, 16, 14), (16, 20, 19), (20, 32, 24)):
        text[:, at:at + b - a] = hexed[:, a:b]
    return pa.FixedSizeBinaryArray.from_buffers(pa.binary(36), len(ids),
                                                [None, pa.py_buffer(text.tobytes())]
                                                ).cast(pa.binary()).cast(pa.string())


def make_tables(folder: str, nodes: int, edges: int, seed: int = 0) -> None:
    """Write nodes.parquet and edges/part-*.parquet, a block of rows at a time."""
    rng = np.random.default_rng(seed)
    os.makedirs(os.path.join(folder, "edges"), exist_ok=True)
    order = rng.permutation(nodes)
    with pq.ParquetWriter(os.path.join(folder, "nodes.parquet"), pa.schema([
            ("key", pa.string()), ("f0", pa.float32()), ("f1", pa.float32()),
            ("country", pa.string())])) as w:
        for a in range(0, nodes, BLOCK):
            ids = order[a:a + BLOCK]
            w.write_table(pa.table({
                "key": uuid_keys(ids), "f0": rng.normal(size=len(ids)).astype(np.float32),
                "f1": rng.normal(size=len(ids)).astype(np.float32),
                "country": COUNTRIES[rng.integers(0, len(COUNTRIES), len(ids))]}))
    per_file = 8 * BLOCK
    for f, a in enumerate(range(0, edges, per_file)):
        with pq.ParquetWriter(os.path.join(folder, "edges", f"part-{f:04d}.parquet"),
                              pa.schema([("src", pa.string()), ("dst", pa.string()),
                                         ("amount", pa.float32()),
                                         ("channel", pa.string())])) as w:
            for b in range(a, min(a + per_file, edges), BLOCK):
                n = min(BLOCK, edges - b, a + per_file - b)
                src = np.minimum((nodes * rng.random(n) ** 3).astype(np.int64), nodes - 1)
                dst = rng.integers(0, nodes, n)
                w.write_table(pa.table({
                    "src": uuid_keys(src), "dst": uuid_keys(dst),
                    "amount": rng.gamma(2.0, 10.0, n).astype(np.float32),
                    "channel": CHANNELS[rng.integers(0, len(CHANNELS), n)]}))


CONFIG = {
    "name": "keys-bench",
    "nodes": [{"type": "user", "files": "nodes.parquet", "key": "key",
               "features": {"feat": ["f0", "f1"]}, "categorical": {"country": "country"}}],
    "edges": [{"type": ["user", "pays", "user"], "files": "edges/*.parquet", "src": "src",
               "dst": "dst", "features": {"amount": "amount"},
               "categorical": {"channel": "channel"}}],
}

PANDAS = """
import glob, time, pandas as pd, pyarrow as pa, pyarrow.parquet as pq
t = time.perf_counter()
files = sorted(glob.glob({folder!r} + "/edges/*.parquet"))
cols = [pq.read_table(f, columns=["src", "dst"]) for f in files]
keys = pd.concat([pd.Series(c.column(n), dtype=pd.ArrowDtype(pa.string()))
                  for c in cols for n in ("src", "dst")], ignore_index=True)
del cols
codes, uniques = pd.factorize(keys)
RESULT = {{"seconds": round(time.perf_counter() - t, 2), "keys": int(len(uniques))}}
"""


def chunked_output(graph) -> dict:
    """What ``prep chunk`` wrote, in the words of ``gconstruct_peer``'s: counts and
    ``{owner/field: [shape, dtype]}`` (shapes from the .npy headers)."""
    def shapes(data: dict) -> dict:
        out = {}
        for owner, fields in data.items():
            owner = ":".join(owner) if isinstance(owner, tuple) else str(owner)
            for name, files in sorted(fields.items()):
                if files.format != "numpy":
                    out[f"{owner}/{name}"] = files.format
                    continue
                arrays = [np.load(graph.path(f), mmap_mode="r") for f in files.files]
                out[f"{owner}/{name}"] = [[sum(len(a) for a in arrays), *arrays[0].shape[1:]],
                                          str(arrays[0].dtype)]
        return out
    return {"nodes": sum(graph.num_nodes.values()), "edges": sum(graph.num_edges.values()),
            "node_features": shapes(graph.node_data), "edge_features": shapes(graph.edge_data)}


def run(folder: str, edges: int, nodes: int, chunk_size: int,
        graphstorm_python: str | None = None) -> dict:
    from graphprep.pipeline import api

    with timer() as t:
        make_tables(folder, nodes, edges)
    row = {"edges": edges, "nodes": nodes, "tables_s": round(t["s"], 2),
           "tables_mb": round(sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in
                                  os.walk(folder) for f in fs) / 2**20)}
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(CONFIG, f)
    with fresh_cluster() as (_, client):
        start_memory_sampler(client)
        with timer() as t:
            res = api.chunk(os.path.join(folder, "config.json"), os.path.join(folder, "g"),
                            chunk_size=chunk_size, client=client)
        sampled = sampled_peaks_mb(client)
        row["prep_chunk"] = {"seconds": round(t["s"], 2), "edges_per_s": round(edges / t["s"]),
                             "worker_peak_rss_mb": worker_peak_rss_mb(client),
                             "worker_peak_anon_mb": sampled["anon"],
                             "worker_peak_file_backed_mb": sampled["file_backed"]}
    base = run_baseline(PANDAS.format(folder=folder))
    row["pandas_factorize"] = {"seconds": base["seconds"],
                               "peak_rss_mb": round(base["peak_rss_mb"], 1)}
    # both number the same key set: the nodes of the table (every edge key is in it)
    assert res.graph.num_nodes["user"] == nodes and base["keys"] <= nodes, (res.graph.num_nodes,
                                                                           base["keys"])
    row["speedup_vs_pandas"] = round(base["seconds"] / row["prep_chunk"]["seconds"], 2)
    if graphstorm_python:
        gs = run_gconstruct(graphstorm_python, folder, os.path.join(folder, "gconstruct"))
        ours = chunked_output(res.graph)
        if "output" in gs:
            gs["same_counts_as_prep_chunk"] = (gs["output"]["nodes"] == ours["nodes"]
                                               and gs["output"]["edges"] == ours["edges"])
        gs["prep_chunk_output"] = ours
        row["graphstorm_gconstruct"] = gs
        shutil.rmtree(os.path.join(folder, "gconstruct"), ignore_errors=True)
    shutil.rmtree(os.path.join(folder, "g"))
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--edges", type=int, default=10**7)
    ap.add_argument("--nodes", type=int, default=None, help="default: edges / 10")
    ap.add_argument("--large", action="store_true", help="also 10 x --edges")
    ap.add_argument("--chunk-size", type=int, default=1 << 20)
    ap.add_argument("--quick", action="store_true", help="10^4 edges: seconds (test suite)")
    ap.add_argument("--graphstorm-python", metavar="PATH", default=None,
                    help="also run GraphStorm's gconstruct (the peer tool) on the same tables "
                         "with this Python: a Python with graphstorm installed, e.g. a venv "
                         "made by `pip install graphstorm` plus the DGL that imports with our "
                         "torch (default: skipped)")
    args = ap.parse_args()
    if args.quick:
        args.edges, args.chunk_size = 10**4, 4096
    sizes = [args.edges] + ([10 * args.edges] if args.large else [])
    out = {"runs": []}
    for edges in sizes:
        folder = tempfile.mkdtemp(prefix="bench_keys_", dir=os.getcwd())
        try:
            nodes = args.nodes or max(edges // 10, 10)
            out["runs"].append(run(folder, edges, nodes, args.chunk_size,
                                   args.graphstorm_python))
            print(json.dumps(out["runs"][-1]), file=sys.stderr, flush=True)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
