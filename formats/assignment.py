"""Partition assignment (FORMATS.md §2): ``partition_meta.json`` + ``<ntype>.npy`` (int32).

Also reads DGL's/ParMETIS's ``<ntype>.txt`` (one partition id per line) and writes it with
``--dgl-compat``. :func:`load_assignment` is the one validating loader.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field

import numpy as np

from graphprep.formats.errors import FormatError
from graphprep.formats.output import write_json
from graphprep.formats.schema import ChunkedGraph, check_version

META = "partition_meta.json"
ASSIGNMENT_VERSION = 1
_SCAN_ROWS = 1 << 22


@dataclass(frozen=True)
class AssignmentMeta:
    """``partition_meta.json``; DGL's files have only ``num_parts`` and ``algo_name``."""

    num_parts: int
    algo_name: str
    graph_name: str = ""
    seed: int | None = None
    input_fingerprint: str = ""
    node_types: tuple[str, ...] = ()
    options: dict = field(default_factory=dict)
    stats: dict = field(default_factory=dict)
    format_version: int = ASSIGNMENT_VERSION
    # What really ran, where algo_name had to be a name DGL's tools accept (--dgl-compat
    # with multilevel: DGL takes only "random" or "metis"); else "".
    method: str = ""

    @property
    def method_name(self) -> str:
        """The partition method that made the assignment."""
        return self.method or self.algo_name

    def to_json(self) -> dict:
        out = asdict(self)
        out["node_types"] = list(self.node_types)
        return out


@dataclass(frozen=True)
class Assignment:
    """An assignment folder; arrays are opened on demand (memory-mapped for ``.npy``)."""

    root: str
    meta: AssignmentMeta

    def path(self, ntype: str) -> str:
        npy = os.path.join(self.root, f"{ntype}.npy")
        return npy if os.path.exists(npy) else os.path.join(self.root, f"{ntype}.txt")

    def parts_of(self, ntype: str) -> np.ndarray:
        """Partition id of every node of ``ntype`` (int32; memory-mapped when ``.npy``)."""
        path = self.path(ntype)
        if path.endswith(".npy"):
            try:
                return np.load(path, mmap_mode="r", allow_pickle=False)
            except (ValueError, OSError, EOFError) as err:  # truncated or not a .npy
                raise FormatError(f"unreadable or truncated .npy file ({err})",
                                  file=path) from None
        return read_dgl_txt(path)


def read_dgl_txt(path: str) -> np.ndarray:
    try:
        return np.loadtxt(path, dtype=np.int64, ndmin=1).astype(np.int32)
    except ValueError as err:
        raise FormatError(f"not one partition id per line ({err})", file=path) from None


def write_meta(root: str, meta: AssignmentMeta) -> None:
    """Write ``partition_meta.json`` (replacing it atomically)."""
    tmp = os.path.join(root, META + ".tmp")
    write_json(tmp, meta.to_json())
    os.replace(tmp, os.path.join(root, META))


def load_assignment(root: str, graph: ChunkedGraph | None = None) -> Assignment:
    """Read and check an assignment folder (graphprep's or DGL's).

    With ``graph``: every node type has a file whose length is the type's node count and whose
    values are in ``[0, num_parts)`` (scanned in slices of 4 Mi rows). Raises FormatError.
    """
    meta_path = os.path.join(root, META)
    if not os.path.exists(meta_path):
        raise FormatError("partition_meta.json not found: not an assignment folder",
                          file=meta_path)
    try:
        raw = json.loads(open(meta_path).read())
    except json.JSONDecodeError as err:
        raise FormatError(f"invalid JSON: {err.msg} (line {err.lineno})", file=meta_path) from None
    if not isinstance(raw, dict):
        raise FormatError("top level must be a JSON object", file=meta_path)
    check_version(raw, ASSIGNMENT_VERSION, meta_path)
    for key in ("num_parts", "algo_name"):
        if key not in raw:
            raise FormatError("required field is missing", file=meta_path, field=key)
    if type(raw["num_parts"]) is not int or raw["num_parts"] < 1:
        raise FormatError("must be a positive integer", file=meta_path, field="num_parts")
    known = AssignmentMeta.__dataclass_fields__
    meta = AssignmentMeta(**{k: v for k, v in raw.items() if k in known})
    meta = AssignmentMeta(**{**asdict(meta), "node_types": tuple(meta.node_types)})
    assignment = Assignment(root, meta)
    if graph is not None:
        for t in graph.node_types:
            _check_parts(assignment, t, graph.num_nodes[t])
    return assignment


def _check_parts(assignment: Assignment, ntype: str, num_nodes: int) -> None:
    path = assignment.path(ntype)
    if not os.path.exists(path):
        raise FormatError(f"no assignment for node type {ntype!r}", file=path)
    parts = assignment.parts_of(ntype)
    if parts.ndim != 1 or len(parts) != num_nodes:
        raise FormatError(f"has {len(parts)} entries, node type {ntype!r} has {num_nodes} nodes",
                          file=path)
    if parts.dtype.kind not in "iu":
        raise FormatError(f"partition ids must be integers, found {parts.dtype}", file=path)
    p = assignment.meta.num_parts
    for start in range(0, num_nodes, _SCAN_ROWS):
        block = np.asarray(parts[start:start + _SCAN_ROWS])
        bad = (block < 0) | (block >= p)
        if bad.any():
            row = start + int(np.flatnonzero(bad)[0])
            raise FormatError(f"partition id {int(parts[row])} out of range [0, {p})",
                              file=path, row=row)
