"""Planetoid raw ``ind.<name>.*`` files (Cora, CiteSeer, PubMed) read the standard way.

As in Kipf & Welling's GCN code (and PyG/DGL): features = vstack(allx, tx) with the test rows
put at their sorted test indices (CiteSeer's missing test indices get zero rows); labels =
argmax of the one-hot rows; train = the first len(y) nodes, val = the next 500, test = the
sorted test indices; edges from the adjacency dict, both directions, deduplicated, no
self-loops. The files are Python pickles: load only files you trust. Tiny graphs: read whole.
"""

from __future__ import annotations

import os
import pickle
import warnings

import numpy as np

from graphprep.formats import EdgeType, FormatError
from graphprep.pipeline.core.arrayops import unique_ints
from graphprep.pipeline.convert.arrays_in import edge_index_parts, stage
from graphprep.pipeline.convert.sources import EdgeSource, SourceGraph

PARTS = ("x", "y", "tx", "ty", "allx", "ally", "graph")


def find_name(folder: str, name: str | None) -> str:
    names = sorted({f.split(".")[1] for f in os.listdir(folder)
                    if f.startswith("ind.") and f.endswith(".graph")})
    if name:
        if name.lower() not in names:
            raise FormatError(f"no Planetoid dataset {name!r} here (found {names})", file=folder)
        return name.lower()
    if len(names) != 1:
        raise FormatError(f"several Planetoid datasets here ({names}): pick one with --name",
                          file=folder)
    return names[0]


def _load(folder: str, name: str, part: str):
    path = os.path.join(folder, f"ind.{name}.{part}")
    try:
        with open(path, "rb") as f, warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # old scipy module paths
            return pickle.load(f, encoding="latin1")
    except FileNotFoundError:
        raise FormatError("Planetoid file missing", file=path) from None
    except Exception as err:  # a broken pickle can raise almost anything
        raise FormatError(f"unreadable Planetoid pickle ({type(err).__name__}: {err})",
                          file=path) from None


def read_planetoid(folder: str, name: str):
    """``(edge_index [2,E], feat, label, masks dict)`` of one dataset, as numpy arrays."""
    x, y, tx, ty, allx, ally, graph = (_load(folder, name, p) for p in PARTS)
    index_path = os.path.join(folder, f"ind.{name}.test.index")
    try:
        test_index = np.loadtxt(index_path, dtype=np.int64).reshape(-1)
    except (OSError, ValueError) as err:
        raise FormatError(f"bad test index file ({err})", file=index_path) from None
    test_sorted = np.sort(test_index)
    tx, ty = _dense(tx), np.asarray(ty)
    if name == "citeseer":  # isolated test nodes have no rows: pad with zeros
        full = test_sorted[-1] - test_sorted[0] + 1
        tx_ext = np.zeros((full, tx.shape[1]), dtype=tx.dtype)
        ty_ext = np.zeros((full, ty.shape[1]), dtype=ty.dtype)
        tx_ext[test_sorted - test_sorted[0]] = tx
        ty_ext[test_sorted - test_sorted[0]] = ty
        tx, ty = tx_ext, ty_ext
    feat = np.vstack([_dense(allx), tx]).astype(np.float32)
    onehot = np.vstack([np.asarray(ally), ty])
    feat[test_index] = feat[test_sorted]
    onehot[test_index] = onehot[test_sorted]
    n = feat.shape[0]
    label = onehot.argmax(axis=1).astype(np.int64)
    masks = {k: np.zeros(n, dtype=bool) for k in ("train_mask", "val_mask", "test_mask")}
    masks["train_mask"][: len(y)] = True
    masks["val_mask"][len(y): len(y) + 500] = True
    masks["test_mask"][test_sorted] = True
    src = np.concatenate([np.full(len(v), k, dtype=np.int64) for k, v in graph.items()])
    dst = np.concatenate([np.asarray(v, dtype=np.int64) for v in graph.values()])
    keys = unique_ints(np.concatenate([src * n + dst, dst * n + src]), inplace=True)
    src, dst = keys // n, keys % n
    keep = src != dst
    return np.stack([src[keep], dst[keep]]), feat, label, masks


def _dense(m) -> np.ndarray:
    return np.asarray(m.todense()) if hasattr(m, "todense") else np.asarray(m)


def from_planetoid(folder: str, staging: str, chunk_size: int, name: str | None) -> SourceGraph:
    name = find_name(folder, name)
    edge_index, feat, label, masks = read_planetoid(folder, name)
    src, dst = stage(staging, "src", edge_index[0]), stage(staging, "dst", edge_index[1])
    node_data = {"feat": stage(staging, "feat", feat), "label": stage(staging, "label", label)}
    node_data.update({k: stage(staging, k, v) for k, v in masks.items()})
    et = EdgeType("_N", "_E", "_N")
    parts = edge_index_parts(folder, src, dst, {}, chunk_size)
    return SourceGraph(name, ("_N",), {"_N": len(feat)}, (EdgeSource(et, parts),),
                       {"_N": node_data},
                       inputs=tuple(os.path.join(folder, f"ind.{name}.{p}")
                                    for p in (*PARTS, "test.index")))
