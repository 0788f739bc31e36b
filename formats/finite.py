"""The NaN/inf check every reader of float data applies (``--nan error|warn|ignore``), in
numpy alone: a trainer rank checks its part's features with it and imports no pyarrow."""

from __future__ import annotations

import numpy as np

from graphprep.formats.errors import FormatError
from graphprep.formats.sparse import CsrRows

NAN_POLICIES = ("error", "warn", "ignore")
NAN_HINT = " (use --nan warn to accept)"
# MAG240M (and DGL's copy of it) marks unlabelled nodes with a NaN float label.
NAN_LABEL_HINT = (" (NaN in a label usually marks an unlabelled node, as in MAG240M: --nan ignore "
                  "accepts them, here and in prep dispatch. The trainer refuses float data "
                  "with NaN and trains on integer labels only: store int64 labels with -1 for "
                  "unlabelled nodes, which it never takes as training seeds)")
LABEL_FIELDS = ("label", "labels", "y")


def nan_hint(field: str | None) -> str:
    """What the NaN/inf error suggests for ``field`` ("node_data.paper.label"...)."""
    name = (field or "").rsplit(".", 1)[-1]
    return NAN_LABEL_HINT if name in LABEL_FIELDS else NAN_HINT


def check_finite(values: np.ndarray, nan_policy: str, *, file: str, field: str | None,
                 row0: int = 0, hint: str | None = None) -> str | None:
    """Apply ``nan_policy`` to NaN/inf in float ``values`` (rows ``row0...`` of ``file``).

    "error" raises :class:`FormatError` naming the first bad row; "warn" returns the warning
    text (the caller logs or collects it); "ignore" and non-float data return None at once.
    The clean case costs one sum, no temporary: NaN or inf anywhere makes the sum non-finite
    (measured: one pass, faster than isfinite().all() or min and max). Only then is the
    per-value mask built, which also clears a sum that merely overflowed. ``hint`` ends the
    error's message (what the user can do about it; None: :func:`nan_hint` of ``field``).
    """
    if isinstance(values, CsrRows):      # only stored values can be NaN: find their first row
        stored = np.asarray(values.values)
        bad = np.flatnonzero(~np.isfinite(stored)) if nan_policy != "ignore" and \
            not np.isfinite(stored.sum()) else ()
        if not len(bad):
            return None
        flags = np.zeros((len(values), 1), np.float32)
        flags[int(values.row_of_entries()[bad[0]])] = np.nan   # worded by the dense path
        values = flags
    if nan_policy == "ignore" or values.dtype.kind not in "fc" or values.size == 0:
        return None
    values = np.asarray(values)
    wide = np.float32 if values.dtype == np.float16 else None   # float16 sums overflow early
    with np.errstate(over="ignore", invalid="ignore"):   # inf + -inf, overflow: expected here
        total = values.sum(dtype=wide)
    if np.isfinite(total):
        return None
    finite = np.isfinite(values).reshape(len(values), -1).all(axis=1)
    if finite.all():
        return None  # large finite values overflowed the sum
    err = FormatError("NaN or inf value", file=file, field=field,
                      row=row0 + int(np.flatnonzero(~finite)[0]))
    if nan_policy == "error":
        hint = nan_hint(field) if hint is None else hint
        raise FormatError(err.message + hint, file=err.file,
                          field=err.field, row=err.row)
    return str(err)
