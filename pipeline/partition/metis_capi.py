"""METIS's C API through ctypes, from the METIS that pymetis ships.

Why not ``pymetis.part_graph``: pymetis 2025.2 always passes ``ncon = 1`` to METIS, whatever the
length of ``vweights`` (measured: a 2-column weight array is read as one column of interleaved
values), so multi-constraint balancing (DGL's ``balance_ntypes``/``balance_edges``) silently
does not happen. The library inside pymetis exports ``METIS_PartGraphKway``/``Recursive``;
calling them directly with the real ``ncon`` is METIS itself, with no copies of the arrays.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pymetis
import pymetis._internal as _metis_internal

_IDX = {32: np.int32, 64: np.int64}[_metis_internal._idx_type_width()]
_NOPTIONS = 40
_OK = 1
_ERRORS = {-2: "input error", -3: "out of memory", -4: "error"}


def _lib():
    lib = ctypes.CDLL(_metis_internal.__file__)
    ptr = ctypes.c_void_p
    for name in ("METIS_PartGraphKway", "METIS_PartGraphRecursive"):
        fn = getattr(lib, name)
        fn.argtypes = [ptr] * 13
        fn.restype = ctypes.c_int
    lib.METIS_SetDefaultOptions.argtypes = [ptr]
    return lib


def _p(array: np.ndarray | None):
    return None if array is None else array.ctypes.data_as(ctypes.c_void_p)


def part_graph(num_parts: int, xadj: np.ndarray, adjncy: np.ndarray, vweights: np.ndarray,
               *, seed: int = 0, objective: int = 0, ufactor: int = 30,
               recursive: bool | None = None,
               eweights: np.ndarray | None = None) -> tuple[int, np.ndarray]:
    """Partition an undirected graph (CSR with both directions) into ``num_parts``.

    ``vweights`` is ``[n, ncon]``: METIS balances every column within ``ufactor``/1000.
    ``recursive`` None picks pymetis's default: recursive bisection for <= 8 parts, else k-way.
    ``eweights``: one positive weight per ``adjncy`` entry (METIS's ``adjwgt``; both directions
    of an edge must carry the same weight), None for unit weights; the cut is then weighted.
    Returns ``(edge cut, part of each vertex)``. Holds int-width copies of the arrays when
    their dtype is not METIS's ``idx_t``.
    """
    n = len(xadj) - 1
    if num_parts == 1 or n == 0:
        return 0, np.zeros(n, dtype=np.int64)
    weights = np.ascontiguousarray(vweights, dtype=_IDX).reshape(n, -1)
    if recursive is None:
        recursive = num_parts <= 8
    xadj = np.ascontiguousarray(xadj, dtype=_IDX)
    adjncy = np.ascontiguousarray(adjncy, dtype=_IDX)
    adjwgt = None if eweights is None else np.ascontiguousarray(eweights, dtype=_IDX)
    if adjwgt is not None and len(adjwgt) != len(adjncy):
        raise ValueError(f"{len(adjwgt)} edge weights for {len(adjncy)} adjacency entries")
    options = np.zeros(_NOPTIONS, dtype=_IDX)
    lib = _lib()
    lib.METIS_SetDefaultOptions(_p(options))
    idx = _metis_internal.options_indices
    options[idx.SEED], options[idx.OBJTYPE] = seed, objective
    options[idx.UFACTOR], options[idx.NUMBERING] = ufactor, 0
    nvtxs, ncon = np.array([n], _IDX), np.array([weights.shape[1]], _IDX)
    nparts, edgecut = np.array([num_parts], _IDX), np.zeros(1, _IDX)
    part = np.empty(n, dtype=_IDX)
    fn = lib.METIS_PartGraphRecursive if recursive else lib.METIS_PartGraphKway
    status = fn(_p(nvtxs), _p(ncon), _p(xadj), _p(adjncy), _p(weights), None, _p(adjwgt),
                _p(nparts), None, None, _p(options), _p(edgecut), _p(part))
    if status != _OK:
        raise RuntimeError(f"METIS failed: {_ERRORS.get(status, status)}")
    return int(edgecut[0]), part.astype(np.int64)


__all__ = ["part_graph", "pymetis"]
