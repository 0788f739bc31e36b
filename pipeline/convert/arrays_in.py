"""In-memory graphs (NumPy ``.npz``/``.npy`` folders, Planetoid, PyG): arrays staged as ``.npy``.

Arrays are written one at a time to a staging folder (inside the step's temporary output) and
read back memory-mapped by the chunk tasks, so workers never receive whole arrays by pickle.
"""

from __future__ import annotations

import os
import zipfile

import numpy as np

from graphprep.formats import ChunkFiles, EdgeType, FormatError
from graphprep.formats.output import save_npy, write_array_chunk
from graphprep.formats.sparse import CSR, is_csr
from graphprep.formats.fields import ArraySource, ChunkedArray
from graphprep.pipeline.convert.sources import ArrayEdges, EdgeSource, NpyArray, SourceGraph

FIELD_ALIASES = {"x": "feat", "y": "label", "edge_attr": "feat"}


def stage(staging: str, key: str, array) -> ArraySource:
    """Save ``array`` as ``staging/key.npy`` and return it as a memory-mapped source; sparse
    rows (:class:`CsrRows`) as a CSR chunk ``staging/key.parquet``, kept sparse."""
    stem = key.replace("/", "__").replace(":", "_")
    os.makedirs(staging, exist_ok=True)
    if is_csr(array):
        write_array_chunk(os.path.join(staging, stem + ".parquet"), array)
        return ChunkedArray(stem, staging, ChunkFiles(CSR, (stem + ".parquet",), dim=array.dim),
                            (len(array),))
    path = os.path.join(staging, stem + ".npy")
    save_npy(path, np.ascontiguousarray(np.asarray(array)))
    return NpyArray.open(path)


def edge_index_parts(path: str, src: NpyArray, dst: NpyArray, data: dict, chunk_size: int):
    """Array edges cut into parts of ``chunk_size`` rows."""
    n = src.num_rows
    if dst.num_rows != n:
        raise FormatError(f"src has {n} rows, dst has {dst.num_rows}", file=path, field="dst")
    for name, a in data.items():
        if a.num_rows != n:
            raise FormatError(f"edge data has {a.num_rows} rows for {n} edges", file=path,
                              field=name)
    return tuple(ArrayEdges(path, src, dst, tuple(data.items()), s, min(s + chunk_size, n))
                 for s in range(0, n, chunk_size)) or (ArrayEdges(path, src, dst, (), 0, 0),)


def split_edge_index(path: str, edge_index: np.ndarray, staging: str, key: str):
    """``[2, E]`` or ``[E, 2]`` edge_index -> (src, dst) staged sources."""
    ei = np.asarray(edge_index)
    if ei.ndim != 2 or 2 not in ei.shape:
        raise FormatError(f"edge_index must have shape [2, E] or [E, 2], found {ei.shape}",
                          file=path, field=key)
    if ei.shape[0] != 2:
        ei = ei.T
    return stage(staging, f"{key}.src", ei[0]), stage(staging, f"{key}.dst", ei[1])


def _checked_member(npz, path: str):
    """``npz[key]``, a damaged member (bad CRC, cut short) as :class:`FormatError`."""
    def load(key: str):
        try:
            return npz[key]
        except (ValueError, OSError, EOFError, zipfile.BadZipFile) as err:
            raise FormatError(f"array {key!r} unreadable ({err})", file=path,
                              field=key) from None
    return load


def from_numpy(path: str, staging: str, chunk_size: int, num_nodes: int | None,
               name: str | None) -> SourceGraph:
    """A ``.npz`` or a folder of ``.npy``: ``edge_index`` (or ``src`` + ``dst``), edge data as
    ``edge_<name>``, every other array is node data (``x`` -> feat, ``y`` -> label); a single
    ``.npy`` file is an ``edge_index`` alone."""
    if os.path.isdir(path):
        arrays = {os.path.splitext(f)[0]: os.path.join(path, f)
                  for f in sorted(os.listdir(path)) if f.endswith(".npy")}
        load = lambda k: NpyArray.open(arrays[k]).mapped()  # noqa: E731 (errors name the file)
        keys = list(arrays)
    elif path.lower().endswith(".npy"):     # one array: the edge_index
        edge_index = NpyArray.open(path).mapped()
        load = lambda k: edge_index  # noqa: E731
        keys = ["edge_index"]
    else:
        try:
            npz = np.load(path)
            keys = list(npz.files)
        except (ValueError, OSError, EOFError, zipfile.BadZipFile) as err:  # truncated archive
            raise FormatError(f"unreadable or truncated NumPy file ({err})", file=path) from None
        load = _checked_member(npz, path)
    if "edge_index" in keys:
        src, dst = split_edge_index(path, load("edge_index"), staging, "edge_index")
    elif "src" in keys and "dst" in keys:
        src, dst = stage(staging, "src", load("src")), stage(staging, "dst", load("dst"))
    else:
        raise FormatError(f"needs 'edge_index' or 'src' and 'dst' arrays (found {keys})",
                          file=path, field="edge_index")
    edge_data = {k[5:]: stage(staging, k, load(k)) for k in keys if k.startswith("edge_")
                 and k != "edge_index"}
    node_data = {FIELD_ALIASES.get(k, k): stage(staging, f"node.{k}", load(k)) for k in keys
                 if k not in ("edge_index", "src", "dst", "num_nodes") and not k.startswith("edge_")}
    if "num_nodes" in keys and num_nodes is None:
        num_nodes = int(load("num_nodes"))
    et = EdgeType("_N", "_E", "_N")
    parts = edge_index_parts(path, src, dst, edge_data, chunk_size)
    return SourceGraph(name or os.path.splitext(os.path.basename(path))[0], ("_N",),
                       {"_N": num_nodes}, (EdgeSource(et, parts, tuple(edge_data)),),
                       {"_N": node_data} if node_data else {}, inputs=(path,))
