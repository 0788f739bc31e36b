"""What a rank checks of its part before it trains on it (numpy only: runs before torch loads).

In order, each failure a :class:`FormatError` naming the file:

1. ``part.json``: the folder holds part ``p`` of this dispatch (parts swapped in graph.json, or
   left from another dispatch, are caught even when every size matches);
2. the integrity manifest, layout only: every file present, sizes, ``.npy`` dtypes and shapes;
3. structure, against graph.json: row counts from the partition book, ``orig_ids`` strictly
   increasing within ``[0, num_nodes)``, ``halo_ids`` strictly increasing and owned by another
   part, ``indptr`` from 0, monotone, ending at the part's edge count, ``indices`` within
   owned + halo of the source type, edge ``orig_ids`` within ``[0, num_edges)``, labels in
   ``[-1, num_classes)`` and >= 0 where a split mask is set, masks 0/1, float data finite;
4. the manifest's sampled hashes (and full hashes with ``verify_data``).

Steps 1, 2 and 4 read a bounded number of bytes. Step 3 reads every row only with
``verify_data``; by default it checks a bounded sample of each array (its first and last rows
and slices spread between: :func:`_slices`), so a rank's start-up reads about the same
whatever the part's size. Every row was checked when ``prep verify`` compared the parts with
the input, and the sampled hashes catch a file changed since. Arrays are memory-mapped and
scanned in slices of about 4 Mi elements: a check holds a few slices' temporaries whatever
the part's size.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from graphprep.formats.errors import FormatError
from graphprep.formats.integrity import PART_JSON, check_part_files, npy_data_bytes, npy_header, \
    read_part_json
from graphprep.formats.partitioned import PartitionedGraph
from graphprep.formats.sparse import CSR, csr_paths
from graphprep.formats.finite import check_finite

SLICE_ELEMENTS = 1 << 22
# the bounded check at every rank's start: per array at most this many slices of this many
# elements (8 x 512 KiB of int64), so start-up reads the same whatever the part's size
SAMPLE_SLICES, SAMPLE_ELEMENTS = 8, 1 << 16
MASKS = ("train_mask", "val_mask", "test_mask")


@dataclass
class PartReport:
    """What the check of one part found short of an error (e.g. no manifest to check)."""

    part: int
    warnings: list[str]


def check_part(graph: PartitionedGraph, p: int, *, verify_data: bool = False) -> PartReport:
    """Check part ``p`` of ``graph`` (local folder) as the module says; raises FormatError.
    ``verify_data``: the structure of every row and the full hashes, reading the whole part;
    else a bounded sample of each array's rows and the sampled hashes (see the module)."""
    info, folder = graph.parts[p], graph.part_path(p)
    report = PartReport(p, [])
    if not os.path.isdir(folder):
        raise FormatError("part folder not found", file=folder)
    if info.manifest or os.path.exists(os.path.join(folder, PART_JSON)):
        _check_stamp(graph, p, folder)
    if info.manifest:
        check_part_files(folder, info.manifest, hashes=False)
    else:
        report.warnings.append(f"graph.json records no integrity manifest for part {p} "
                               "(dispatched by an older graphprep): file sizes and content "
                               "hashes cannot be checked, only the structure; dispatch again "
                               "to get them")
    check_structure(graph, p, full=verify_data)
    if info.manifest:
        check_part_files(folder, info.manifest, full=verify_data)
    return report


def _check_stamp(graph: PartitionedGraph, p: int, folder: str) -> None:
    stamp, path = read_part_json(folder), os.path.join(folder, PART_JSON)
    if stamp.part != p:
        raise FormatError(f"the folder holds part {stamp.part}, graph.json lists it as part {p} "
                          "(parts swapped or moved)", file=path, field="part")
    if stamp.graph_name != graph.graph_name:
        raise FormatError(f"the folder holds a part of graph {stamp.graph_name!r}, graph.json "
                          f"describes {graph.graph_name!r}", file=path, field="graph_name")
    if graph.dispatch_id and stamp.dispatch_id != graph.dispatch_id:
        raise FormatError(f"the folder comes from dispatch {stamp.dispatch_id}, graph.json from "
                          f"{graph.dispatch_id} (a part left from another dispatch)", file=path,
                          field="dispatch_id")


def check_structure(g: PartitionedGraph, p: int, *, full: bool = True) -> None:
    """Step 3 of the module: the part's arrays against graph.json (raises FormatError);
    ``full``: every row, else the rows of :func:`_slices`'s bounded sample."""
    owned, halo = {}, {}
    for t in g.node_types:
        start, end = g.node_map[t][p]
        owned[t] = end - start
        orig = _open(g.part_path(p, "nodes", t, "orig_ids.npy"), rows=owned[t], integer=True)
        _check_increasing(orig, g.part_path(p, "nodes", t, "orig_ids.npy"), 0, g.num_nodes[t],
                          full=full)
        path = g.part_path(p, "nodes", t, "halo_ids.npy")
        halo[t] = _open(path, integer=True)
        _check_increasing(halo[t], path, 0, g.num_nodes[t], full=full)
        inside = np.searchsorted(halo[t], [start, end])
        if inside[1] > inside[0]:
            raise FormatError(f"halo node {int(halo[t][inside[0]])} is owned by this part "
                              f"([{start}, {end}))", file=path, row=int(inside[0]))
        _check_node_data(g, p, t, owned[t], full)
    for et in g.edge_types:
        _check_edges(g, p, et, owned[et.src] + len(halo[et.src]), owned[et.dst], full)


def _check_edges(g: PartitionedGraph, p: int, et, sources: int, destinations: int,
                 full: bool) -> None:
    start, end = g.edge_map[et][p]
    m = end - start
    path = g.part_path(p, "edges", et.dirname, "indptr.npy")
    indptr = _open(path, rows=destinations + 1, integer=True)
    if indptr[0] != 0 or indptr[-1] != m:
        raise FormatError(f"runs from {int(indptr[0])} to {int(indptr[-1])}; graph.json's "
                          f"edge_map gives this part {m} edges", file=path,
                          row=0 if indptr[0] != 0 else destinations)
    _check_increasing(indptr, path, 0, m + 1, strict=False, full=full)
    path = g.part_path(p, "edges", et.dirname, "indices.npy")
    _check_range(_open(path, rows=m, integer=True), path, 0, sources,
                 f"local source index (owned + halo of {et.src})", full=full)
    path = g.part_path(p, "edges", et.dirname, "orig_ids.npy")
    _check_range(_open(path, rows=m, integer=True), path, 0, g.num_edges[et],
                 "original edge ID", full=full)
    for name, spec in g.edge_feats.get(et, {}).items():
        path = g.part_path(p, "edge_feats", et.dirname, f"{name}.npy")
        _check_finite(_open(path, rows=m, spec=spec), path, full)


def _check_node_data(g: PartitionedGraph, p: int, t: str, owned: int, full: bool) -> None:
    specs = g.node_feats.get(t, {})
    for name, spec in specs.items():
        if spec.get("format") == CSR:
            _check_csr(csr_paths(g.part_path(p, "node_feats", t, name)), owned, spec, full)
    data = {name: _open(g.part_path(p, "node_feats", t, f"{name}.npy"), rows=owned, spec=spec)
            for name, spec in specs.items() if spec.get("format") != CSR}
    for name, arr in data.items():
        path = g.part_path(p, "node_feats", t, f"{name}.npy")
        if name in MASKS and arr.dtype != np.bool_:
            _check_range(arr, path, 0, 2, "split mask value (0 or 1)", full=full)
        _check_finite(arr, path, full)
    if "label" in data and data["label"].dtype.kind in "iu":
        _check_labels(g, p, t, data, full)


def _check_csr(files: dict[str, str], owned: int, spec: dict, full: bool) -> None:
    """A sparse field's three files: indptr of ``owned + 1`` rows from 0, non-decreasing, to
    the stored count; column indices in ``[0, width)``; finite values of the spec's dtype."""
    values = _open(files["values"])
    nnz = len(values)
    if values.ndim != 1 or str(values.dtype) != spec["dtype"]:
        raise FormatError(f"holds {values.dtype}{list(values.shape)}; graph.json says "
                          f"{spec['dtype']}[n]", file=files["values"], field="dtype")
    indptr = _open(files["indptr"], rows=owned + 1, integer=True)
    if indptr[0] != 0 or indptr[-1] != nnz:
        raise FormatError(f"runs from {int(indptr[0])} to {int(indptr[-1])}; the values file "
                          f"holds {nnz}", file=files["indptr"],
                          row=0 if indptr[0] != 0 else owned)
    _check_increasing(indptr, files["indptr"], 0, nnz + 1, strict=False, full=full)
    _check_range(_open(files["indices"], rows=nnz, integer=True), files["indices"], 0,
                 int(spec["shape"][0]), "column index", full=full)
    _check_finite(values, files["values"], full)


def _check_labels(g: PartitionedGraph, p: int, t: str, data: dict, full: bool) -> None:
    """Labels in [-1, C) (C from graph.json when recorded), and >= 0 on every masked node."""
    labels, path = data["label"], g.part_path(p, "node_feats", t, "label.npy")
    classes = g.num_classes.get(t)
    _check_range(labels, path, -1, classes if classes is not None else np.iinfo(np.int64).max,
                 "label", " (-1 = unlabeled" + (f"; graph.json records {classes} classes)"
                                               if classes is not None else ")"), full=full)
    for mask in (m for m in MASKS if m in data):
        for start, chunk in _slices(labels, full):
            picked = data[mask][start:start + len(chunk)].astype(bool)
            bad = np.flatnonzero(picked & (chunk < 0) if chunk.ndim == 1 else
                                 picked & (chunk < 0).any(axis=tuple(range(1, chunk.ndim))))
            if len(bad):
                raise FormatError(f"node in {mask} has label {chunk[bad[0]]}: split nodes "
                                  "need a class", file=path, row=start + int(bad[0]))


def _open(path: str, *, rows: int | None = None, integer: bool = False, spec: dict | None = None
          ) -> np.ndarray:
    """Memory-map a ``.npy`` read-only after checking its header: the file holds the bytes its
    shape needs, ``rows`` rows, an integer dtype, or ``spec``'s dtype and row shape."""
    if not os.path.isfile(path):
        raise FormatError("missing", file=path)
    dtype, shape, offset = npy_header(path)
    need = offset + npy_data_bytes(dtype, shape)
    if os.path.getsize(path) < need:
        raise FormatError(f"truncated: {os.path.getsize(path)} bytes, the header's shape needs "
                          f"{need}", file=path, field="size")
    if rows is not None and (not shape or shape[0] != rows):
        raise FormatError(f"shape {list(shape)}: graph.json's partition book gives {rows} rows",
                          file=path, field="shape")
    if integer and np.dtype(dtype).kind not in "iu":
        raise FormatError(f"dtype {dtype} is not an integer type", file=path, field="dtype")
    if spec is not None and (dtype != spec["dtype"] or list(shape[1:]) != list(spec["shape"])):
        raise FormatError(f"dtype {dtype}, row shape {list(shape[1:])}; graph.json says "
                          f"{spec['dtype']}, {list(spec['shape'])}", file=path, field="dtype")
    return np.load(path, mmap_mode="r")


def _slices(arr: np.ndarray, full: bool = True):
    """``(first row, rows)`` views in row order: with ``full``, all of ``arr`` in slices of
    about SLICE_ELEMENTS elements; else a bounded sample whatever the array's length, the
    first and last SAMPLE_ELEMENTS and SAMPLE_SLICES - 2 slices as long spread evenly
    between (all of an array no longer than that)."""
    width = max(1, int(np.prod(arr.shape[1:], dtype=np.int64)))
    if full or len(arr) * width <= SAMPLE_SLICES * SAMPLE_ELEMENTS:
        step = max(1, SLICE_ELEMENTS // width)
        starts = range(0, len(arr), step)
    else:
        step = max(1, SAMPLE_ELEMENTS // width)
        starts = np.unique(np.linspace(0, len(arr) - step, SAMPLE_SLICES).astype(np.int64))
    for start in starts:
        start = int(start)
        yield start, arr[start:start + step]


def _check_range(arr: np.ndarray, path: str, lo: int, hi: int, what: str, note: str = "",
                 full: bool = True) -> None:
    """Every value within ``[lo, hi)``: min/max per slice, the first bad row on failure."""
    for start, chunk in _slices(arr, full):
        if len(chunk) and (chunk.min() < lo or chunk.max() >= hi):
            flat = chunk.reshape(len(chunk), -1)
            row = int(np.flatnonzero(((flat < lo) | (flat >= hi)).any(axis=1))[0])
            value = flat[row][(flat[row] < lo) | (flat[row] >= hi)][0]
            raise FormatError(f"{what} {value} outside [{lo}, {hi}){note}", file=path,
                              row=start + row)


def _check_increasing(arr: np.ndarray, path: str, lo: int, hi: int, strict: bool = True,
                      full: bool = True) -> None:
    """Values within ``[lo, hi)`` and (strictly) increasing, across slice boundaries too
    (between sampled slices: each starts above where the one before ended)."""
    _check_range(arr, path, lo, hi, "value", full=full)
    previous = None
    for start, chunk in _slices(arr, full):
        if not len(chunk):
            continue
        steps = np.diff(chunk) if previous is None else np.diff(chunk, prepend=previous)
        bad = np.flatnonzero(steps <= 0 if strict else steps < 0)
        if len(bad):
            row = start + int(bad[0]) + (1 if previous is None else 0)
            raise FormatError("not strictly increasing (must be sorted and unique)" if strict
                              else "decreases (must be monotone)", file=path, row=row)
        previous = chunk[-1]


def _check_finite(arr: np.ndarray, path: str, full: bool = True) -> None:
    """No NaN or inf in float data, slice by slice (the pipeline's own check)."""
    if arr.dtype.kind not in "fc":
        return
    for start, chunk in _slices(arr, full):
        check_finite(chunk, "error", file=path, field=None, row0=start, hint="")
