"""``prep chunk``: raw input of any supported kind -> the chunked graph format."""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import shutil

from graphprep.formats import FormatError
from graphprep.pipeline.core.cluster import ClusterOptions
from graphprep.pipeline.core.step import Work, finish_chunked, run_step
from graphprep.pipeline.convert.options import ChunkOptions
from graphprep.pipeline.convert.writer import Transforms, convert_source

log = logging.getLogger(__name__)

KINDS = ("auto", "tables", "csv", "parquet", "npy", "ogb", "planetoid", "pyg", "dgl")


def detect_kind(path: str) -> str:
    """Guess the input kind from what ``path`` holds."""
    from graphprep.pipeline.convert.edgefiles import is_edge_file
    from graphprep.pipeline.convert.ogb import is_ogb
    from graphprep.pipeline.convert.pyg import processed_file

    if not os.path.exists(path):
        raise FormatError("input not found", file=path)
    if os.path.isdir(path):
        names = os.listdir(path)
        if "metadata.json" in names:
            return "dgl"
        if is_ogb(path):
            return "ogb"
        if any(n.startswith("ind.") and n.endswith(".graph") for n in names):
            return "planetoid"
        if processed_file(path) is not None:       # a PyG InMemoryDataset's folder
            return "pyg"
        if os.path.isdir(os.path.join(path, "edges")):
            return "csv"
        if any(n.endswith(".npy") for n in names):
            return "npy"
        if any(is_edge_file(n) for n in names):
            return "csv"
    else:
        lower = path.lower()
        if lower.endswith((".yaml", ".yml", ".json")):
            return "tables"
        if lower.endswith(".npz") or lower.endswith(".npy"):
            return "npy"
        if lower.endswith((".pt", ".pth")):
            return "pyg"
        if is_edge_file(path):
            return "parquet" if ".parquet" in lower or lower.endswith(".pq") else "csv"
    raise FormatError("cannot tell the input kind; pass --from", file=path)


def build_source(path: str, kind: str, opts: ChunkOptions, out: str, staging: str, runner,
                 nan_policy: str):
    """The :class:`SourceGraph` of an input of ``kind`` (keyed edge lists are mapped here,
    their maps written under ``out``)."""
    from graphprep.pipeline.convert import arrays_in, dgl, edgelist, ogb, planetoid, pyg

    if kind in ("csv", "parquet"):
        folder = os.path.isdir(path) and os.path.isdir(os.path.join(path, "edges"))
        keyed = edgelist.keyed_source(path, folder, opts, out, staging, runner)
        if keyed is not None:
            return keyed
        if folder:
            return edgelist.from_edge_folder(path, opts)
        return edgelist.from_edge_file(path, opts)
    if opts.map_keys and kind != "tables":
        raise FormatError(f"--map-keys maps the endpoint keys of CSV/Parquet edge lists; {kind} "
                          "input holds node IDs 0..N-1 already", file=path, field="--map-keys")
    if kind == "npy":
        n = opts.num_nodes.get("") or opts.num_nodes.get("_N")
        return arrays_in.from_numpy(path, staging, opts.chunk_size, n, opts.name)
    if kind == "ogb":
        return ogb.from_ogb(path, opts.split_name, opts.name)
    if kind == "planetoid":
        return planetoid.from_planetoid(path, staging, opts.chunk_size, opts.name)
    if kind == "pyg":
        return pyg.from_pyg(path, staging, opts.chunk_size, opts.name)
    if kind == "dgl":
        return dgl.from_chunked(path, opts.chunk_size, runner, nan_policy)
    raise ValueError(f"unknown input kind {kind!r}")


def run_chunk(path: str, out: str, kind: str, opts: ChunkOptions, transforms: Transforms,
              cluster: ClusterOptions, nan_policy: str = "error", overwrite: bool = False,
              config: dict | None = None):
    """Convert ``path`` into a chunked graph at ``out``; returns it (None when up to date).
    ``config``: a tables config given as a dict (the Python API), ``path`` then naming it
    in errors, relative table paths relative to the working folder.

    The client holds metadata only, except for in-memory inputs (PyG, Planetoid, ``.npz``),
    which are loaded by the client to be staged as ``.npy`` (see those modules).
    """
    kind = "tables" if config is not None else detect_kind(path) if kind == "auto" else kind
    options = {"from": kind, **opts.manifest(), **dataclasses.asdict(transforms)}
    inputs = [path, *opts.node_data.values()] if config is None else []
    tables = None
    if kind == "tables":
        from graphprep.pipeline.tables.config import load_config
        from graphprep.pipeline.tables.parts import input_files
        tables = load_config(path, config)
        inputs += input_files([f for s in tables.nodes + tables.edges for f in s.files])
        if config is not None:
            options["config"] = config
    fingerprinted = inputs if kind == "tables" else [path]   # a config names its tables

    def body(work: Work):
        staging = os.path.join(work.tmp, "_staging")
        log.info("reading %s as %s", path, kind)
        if tables is not None:
            from graphprep.pipeline.convert.tables_in import from_config
            source = from_config(tables, opts, work.tmp, staging, work.run, nan_policy)
        else:
            source = build_source(path, kind, opts, work.tmp, staging, work.run, nan_policy)
        graph = convert_source(source, work.tmp, opts.chunk_size, transforms, work.run)
        if kind == "ogb":
            from graphprep.pipeline.convert.ogb import check_edge_count
            check_edge_count(path, sum(graph.num_edges.values()))
        shutil.rmtree(staging, ignore_errors=True)
        return graph

    return run_step("chunk", out, cluster, body, options=options, inputs=inputs,
                    fingerprinted=fingerprinted, overwrite=overwrite,
                    finish=functools.partial(finish_chunked, nan_policy=nan_policy))
