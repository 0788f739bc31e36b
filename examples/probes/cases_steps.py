"""Misuse of the steps' sizes and cluster options: ``prep synth`` sizes that cannot fit the disk,
the memory or a worker (and absurd ones), ``--memory-limit``, ``--workers``, ``--scheduler``
addresses that lead nowhere, ``prep inspect`` on a sparse field whose chunk is damaged, and
partition/dispatch given each other's folders. Each refusal names the argument or the file in
its last line, before any work.

The graphs are written here without a cluster (synth's own chunk writer), so that a case costs
one command."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from kit import Case

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))         # the project, for its chunk writers


def tiny_graph(folder: Path, name: str = "G", nodes: int = 600, edges: int = 3000) -> Path:
    """A planted synth graph at ``folder/name`` written in this process (one chunk)."""
    from graphprep.formats.output import write_json
    from graphprep.formats.schema import METADATA
    from graphprep.pipeline.synth import SynthSpec, plan, write_synth_chunk

    out = folder / name
    edge_tasks, node_tasks, graph = plan(SynthSpec(nodes, edges), str(out), 1 << 20)
    for task in node_tasks + edge_tasks:
        write_synth_chunk(task)
    write_json(str(out / METADATA), graph.to_json())
    return out


def sparse_graph(folder: Path, damaged: bool = True) -> Path:
    """``tiny_graph`` plus a sparse node field 'words' (width 500); its chunk cut short."""
    import numpy as np

    from graphprep.formats.output import write_csr_parquet
    from graphprep.formats.sparse import CsrRows
    out = tiny_graph(folder)
    rng = np.random.default_rng(0)
    dense = (rng.random((600, 500)) < 0.02).astype(np.float32)
    rel = "node_data/_N/words/part-00000.parquet"
    write_csr_parquet(str(out / rel), CsrRows.from_dense(dense))
    meta = json.loads((out / "metadata.json").read_text())
    meta["node_data"]["_N"]["words"] = {"format": {"name": "csr", "dim": 500}, "data": [rel]}
    (out / "metadata.json").write_text(json.dumps(meta))
    if damaged:
        data = (out / rel).read_bytes()
        (out / rel).write_bytes(data[:len(data) // 2])      # a copy that stopped half-way
    return out


def _synth(*args):
    return lambda folder: ["prep", "synth", folder / "G", *args, "--no-progress"]


def _partition_into_graph(folder: Path):
    tiny_graph(folder)
    return ["prep", "partition", folder / "G", folder / "G", "-p", 2, "--no-progress"]


def _dispatch_swapped(folder: Path):
    tiny_graph(folder)
    (folder / "A").mkdir()
    (folder / "A" / "partition_meta.json").write_text("{}")
    return ["prep", "dispatch", folder / "A", folder / "G", folder / "D", "--no-progress"]


def _partition_with(*args):
    def setup(folder: Path):
        tiny_graph(folder)
        return ["prep", "partition", folder / "G", folder / "A", "-p", 2, *args,
                "--no-progress"]
    return setup


def _inspect_damaged_sparse(folder: Path):
    sparse_graph(folder)
    return ["prep", "inspect", folder / "G"]


def _inspect_sparse_json(folder: Path):
    sparse_graph(folder, damaged=False)
    return ["prep", "inspect", folder / "G", "--json"]


def _sparse_json_has_width(folder: Path, output: str) -> None:
    info = json.loads(output)
    words = next(f for f in info["node_data"] if f["name"] == "words")
    assert words["shape"] == [500] and words["dim"] == 500 and words["nnz"] > 0, words


def _into_file(folder: Path):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "out.txt").write_text("notes\n")
    return ["prep", "synth", folder / "out.txt" / "G", "--no-progress"]


CASES: list[Case] = [
    # sizes the machine cannot hold: refused before any work, naming the argument
    Case("synth-rmat-scale-40", _synth("--generator", "rmat", "--scale", 40),
         names=("on disk", "--scale 40"), timeout=60),
    Case("synth-rmat-scale-36", _synth("--generator", "rmat", "--scale", 36),
         names=("TB on disk", "--scale 36"), timeout=60),
    Case("synth-rmat-huge-edge-factor",
         _synth("--generator", "rmat", "--scale", 20, "--edge-factor", 200000),
         names=("on disk", "--scale 20 --edge-factor 200000"), timeout=60),
    Case("synth-planted-edges-1e14", _synth("--nodes", 1000, "--edges", 10**14),
         names=("on disk", "--edges 100000000000000"), timeout=60),
    Case("synth-feat-dim-million", _synth("--nodes", 10**7, "--feat-dim", 10**6),
         names=("features need", "--feat-dim 1000000"), timeout=60),
    Case("synth-nodes-beyond-2^34", _synth("--nodes", 3 * 10**10, "--edges", 100),
         names=("2^34", "--nodes 30000000000"), timeout=60),
    Case("synth-chunk-size-1", _synth("--edges", 2 * 10**6, "--chunk-size", 1),
         names=("tasks", "--chunk-size 1"), timeout=60),
    Case("synth-chunk-over-worker-memory",
         _synth("--nodes", 10**6, "--edges", 10**6, "--chunk-size", 10**6, "--memory-limit",
                "256MiB"),
         names=("memory limit", "--chunk-size 1000000"), timeout=60),
    # absurd sizes
    Case("synth-rmat-scale-2", _synth("--generator", "rmat", "--scale", 2),
         names=("num_classes", "--scale 2"), timeout=60),
    Case("synth-fewer-nodes-than-classes", _synth("--nodes", 100, "--num-classes", 100),
         names=("--num-classes", "--nodes 100"), timeout=60),
    Case("synth-scale-without-rmat", _synth("--scale", 20),
         names=("--scale", "--generator rmat"), timeout=60),
    # cluster options
    Case("memory-limit-not-a-size", _synth("--memory-limit", "lots"),
         names=("not a memory size", "--memory-limit lots"), timeout=60),
    Case("memory-limit-2-meant-as-gb", _synth("--memory-limit", "2"),
         names=("256 MiB", "--memory-limit 2"), timeout=60),
    Case("memory-limit-tiny-fraction", _partition_with("--memory-limit", "0.0001"),
         names=("--memory-limit 0.0001",), timeout=60),
    Case("workers-100000", _synth("--workers", 100000),
         names=("workers need", "--workers 100000"), timeout=60),
    Case("scheduler-without-port", _synth("--scheduler", "127.0.0.1"),
         names=("port", "--scheduler 127.0.0.1"), timeout=60),
    Case("scheduler-http-url", _partition_with("--scheduler", "http://127.0.0.1:8787"),
         names=("tcp://", "--scheduler http://127.0.0.1:8787"), timeout=60),
    Case("scheduler-dead-address", _synth("--scheduler", "tcp://127.0.0.1:1"),
         code=1, names=("connection refused", "--scheduler tcp://127.0.0.1:1"), timeout=60),
    Case("scheduler-unknown-host", _synth("--scheduler", "tcp://no-such-host.invalid:8786"),
         names=("unknown host", "--scheduler tcp://no-such-host.invalid:8786"), timeout=60),
    Case("lost-worker-timeout-zero", _synth("--lost-worker-timeout", 0),
         names=("--lost-worker-timeout",), timeout=60),
    # inspect of a sparse field: a damaged chunk named; a sound one shows its width
    Case("inspect-damaged-sparse-chunk", _inspect_damaged_sparse,
         names=("part-00000.parquet",), timeout=60),
    Case("inspect-sparse-json-width", _inspect_sparse_json, code=0,
         check=_sparse_json_has_width, timeout=60),
    # partition and dispatch given the wrong folders
    Case("partition-into-its-input", _partition_into_graph, names=("G",), timeout=60),
    Case("dispatch-folders-swapped", _dispatch_swapped, names=("metadata.json",), timeout=60),
    Case("synth-out-under-a-file", _into_file, names=("out.txt",), timeout=60),
]
