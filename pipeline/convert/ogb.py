"""OGB node-property datasets in their raw layout (``ogbn-*`` after download and unzip).

``raw/edge.csv.gz`` (src,dst per line), ``raw/num-node-list.csv.gz``,
``raw/num-edge-list.csv.gz``, optional ``raw/node-feat.csv.gz``, ``raw/node-label.csv.gz``
(NaN -> -1: unlabeled), ``raw/node_year.csv.gz``, and ``split/<name>/{train,valid,test}.csv.gz``
(node IDs -> boolean masks). Compressed CSVs are streamed; a task holds one block.
"""

from __future__ import annotations

import os

import numpy as np

from graphprep.formats import EdgeType, FormatError
from graphprep.pipeline.convert.sources import (CsvArray, CsvColumns, CsvStream, EdgeSource,
                                                MaskFromIds, SourceGraph)

SPLITS = {"train": "train_mask", "valid": "val_mask", "test": "test_mask"}
NODE_FILES = {"node-feat": ("feat", "float32"), "node-label": ("label", "int64"),
              "node_year": ("year", "int64")}


def is_ogb(folder: str) -> bool:
    return os.path.exists(os.path.join(folder, "raw", "num-node-list.csv.gz"))


def _find(folder: str, stem: str) -> str | None:
    for ext in (".csv.gz", ".csv"):
        path = os.path.join(folder, "raw", stem + ext)
        if os.path.exists(path):
            return path
    return None


def read_count(path: str) -> int:
    """The single integer of a ``num-*-list.csv.gz`` (homogeneous graphs: one row)."""
    values = np.concatenate([b.reshape(-1) for b in CsvArray(path).blocks()])
    if len(values) != 1 or values[0] < 0 or values[0] != int(values[0]):
        raise FormatError(f"expected one non-negative count, found {values[:5].tolist()}",
                          file=path, row=0)
    return int(values[0])


def from_ogb(folder: str, split_name: str | None, name: str | None) -> SourceGraph:
    num_nodes = read_count(os.path.join(folder, "raw", "num-node-list.csv.gz"))
    edge_file = _find(folder, "edge")
    if edge_file is None:
        raise FormatError("OGB edge file missing", file=os.path.join(folder, "raw", "edge.csv.gz"))
    node_data = {}
    for stem, (field, dtype) in NODE_FILES.items():
        path = _find(folder, stem)
        if path:
            node_data[field] = CsvArray(path, ",", dtype)
    split_dir = os.path.join(folder, "split")
    if os.path.isdir(split_dir):
        names = sorted(os.listdir(split_dir))
        chosen = split_name or (names[0] if len(names) == 1 else None)
        if chosen is None or chosen not in names:
            raise FormatError(f"choose a split with --split-name (found {names})", file=split_dir)
        for stem, field in SPLITS.items():
            path = os.path.join(split_dir, chosen, f"{stem}.csv.gz")
            if os.path.exists(path):
                node_data[field] = MaskFromIds(path, num_nodes)
    et = EdgeType("_N", "_E", "_N")
    edges = EdgeSource(et, (CsvStream(edge_file, CsvColumns(",", False, 0, 1, 2)),))
    return SourceGraph(name or os.path.basename(os.path.abspath(folder)), ("_N",),
                       {"_N": num_nodes}, (edges,), {"_N": node_data}, inputs=(folder,))


def check_edge_count(folder: str, found: int) -> None:
    """Compare the converted edge count with ``raw/num-edge-list.csv.gz``."""
    path = os.path.join(folder, "raw", "num-edge-list.csv.gz")
    if os.path.exists(path):
        declared = read_count(path)
        if declared != found:
            raise FormatError(f"declares {declared} edges, raw/edge file has {found}", file=path)
