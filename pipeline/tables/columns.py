"""Table columns -> node and edge data, one task per input part, in two passes.

1. :func:`part_vocabulary`: the distinct values of each categorical and label column of a
   part (at most ``MAX_VOCABULARY``); the client merges them into sorted vocabularies.
2. :func:`encode_part`: the part's fields as ``.npy`` arrays, in its rows' order (edges
   dropped by the key mapping left out): features as float32 ``[rows, width]``, categorical
   and label columns as int64 codes into their vocabulary (a null: the vocabulary's last
   entry, null, for categoricals; -1, unlabelled, for labels) or a float32 one-hot, and
   split masks.

A task holds one part's columns and its encoded arrays.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graphprep.formats import FormatError
from graphprep.formats.output import save_npy, write_array_chunk
from graphprep.formats.sparse import csr_from_lists, is_csr
from graphprep.pipeline.core.arrayops import mix
from graphprep.pipeline.tables.config import SPLIT_NAMES, FieldSpec, SplitSpec
from graphprep.pipeline.tables.parts import TablePart, read_part

MAX_VOCABULARY = 1 << 20
MAX_ONE_HOT = 1024
_UNIT = float(2 ** 53)


@dataclass(frozen=True)
class VocabTask:
    part: TablePart
    fields: tuple[FieldSpec, ...]          # the categorical and label fields (and sparse
                                           # fields of unknown width)
    first_row: int = 0                     # the row, in its file, of the part's first row


def part_vocabulary(task: VocabTask) -> tuple[list, ...]:
    """Per field: its distinct non-null values in this part (sorted), then whether it had a
    null (as the list's last element ``None``); for a sparse field, ``[largest index]`` (``[]``
    when the part has none)."""
    table = read_part(task.part)
    out = []
    for f in task.fields:
        col = table.column(f.columns[0])
        if f.kind == "sparse":
            flat = pc.list_flatten(sparse_lists(col, f, task.part.path, task.first_row))
            out.append([pc.max(flat).as_py()] if len(flat) else [])
            continue
        _check_category_type(col.type, task.part.path, f.columns[0])
        values = pc.unique(col.drop_null() if col.null_count else col)
        if len(values) > MAX_VOCABULARY:
            raise FormatError(f"more than {MAX_VOCABULARY:,} distinct values in one part: "
                              f"not a categorical column (a key, or a feature?)",
                              file=task.part.path, field=f.columns[0])
        out.append(sorted(values.to_pylist()) + ([None] if col.null_count else []))
    return tuple(out)


def _check_category_type(dtype: pa.DataType, path: str, column: str) -> None:
    if not (pa.types.is_integer(dtype) or pa.types.is_string(dtype) or pa.types.is_boolean(
            dtype) or pa.types.is_large_string(dtype) or pa.types.is_null(dtype)):
        what = "floats" if pa.types.is_floating(dtype) else str(dtype)
        hint = (": a list of active indices goes in sparse:" if pa.types.is_list(dtype) or
                pa.types.is_large_list(dtype) else "")
        raise FormatError(f"a categorical or label column must hold strings or integers, not "
                          f"{what}{hint}", file=path, field=column)


def merge_vocabularies(per_part: list[tuple[list, ...]], fields,
                       paths: list[str] | None = None) -> list[list]:
    """Sorted distinct values per field over all parts (a null last when any part had one);
    a sparse field of unknown width: ``[largest index + 1]``. Raises :class:`FormatError` when
    a column mixes strings and integers across files, naming the file (``paths``: each
    part's) where the second kind appears."""
    merged = []
    for i, f in enumerate(fields):
        if f.kind == "sparse":
            top = [v for part in per_part for v in part[i]]
            if not top:
                raise FormatError("no active index in any file: give sparse.<field>.dim, the "
                                  "row width", file=paths[0] if paths else None,
                                  field=f.columns[0])
            merged.append([max(max(top) + 1, 1)])
            continue
        values, null, kinds = set(), False, {}
        for j, part in enumerate(per_part):
            vals = part[i]
            if vals and vals[-1] is None:
                null, vals = True, vals[:-1]
            values.update(vals)
            for v in vals:
                kinds.setdefault(_kind(v), (j, v))
        if len(kinds) > 1:
            (_, (j0, v0)), (kind, (j, v)) = sorted(kinds.items(), key=lambda kv: kv[1][0])[:2]
            first = paths[j0] if paths else "another file"
            raise FormatError(f"column holds {kind} (e.g. {v!r}) here, {_kind(v0)} (e.g. "
                              f"{v0!r}) in {first}: a column must hold one kind in every file",
                              file=paths[j] if paths else None, field=f.columns[0])
        if len(values) > MAX_VOCABULARY:
            raise FormatError(f"more than {MAX_VOCABULARY:,} distinct values: not a "
                              f"categorical column", field=f.columns[0])
        merged.append(sorted(values) + ([None] if null and f.kind == "categorical" else []))
    return merged


def _kind(value) -> str:
    return "strings" if isinstance(value, str) else "booleans" if isinstance(value, bool) \
        else "integers"


@dataclass(frozen=True)
class EncodeTask:
    part: TablePart
    fields: tuple[FieldSpec, ...]
    vocabularies: tuple[tuple, ...]      # per field: its vocabulary (() for features)
    split: SplitSpec | None
    first_id: int                        # nodes: the ID of the part's first row
    first_row: int                       # the row, in its file, of the part's first row
    keep: str                            # edges: a .npy mask of the rows kept ("": all)
    target: str                          # prefix: <target>.<field>.npy
    edge_split: object = None            # edges: a graphprep.pipeline.split_edges.SplitSpec
    ids: str = ""                        # edges: prefix of the part's IDs (.src/.dst.npy)
    nan_policy: str = "error"            # NaN/inf in a feature: error names file, column, row


def encode_part(task: EncodeTask) -> int:
    """Write the part's fields; returns its rows (after ``keep``)."""
    table = read_part(task.part)
    keep = np.load(task.keep) if task.keep else None
    arrays = encode_fields(task, table)
    os.makedirs(os.path.dirname(task.target), exist_ok=True)
    for name, values in arrays.items():
        write_array_chunk(field_file(task.target, name, is_csr(values)),
                          values[keep] if keep is not None else values)
    if task.edge_split is not None:
        masks = edge_split_masks(task, np.load(task.ids + ".src.npy"),
                                 np.load(task.ids + ".dst.npy"))
        for name, values in masks.items():
            save_npy(f"{task.target}.{name}.npy", values)
    return int(keep.sum()) if keep is not None else table.num_rows


def encode_fields(task: EncodeTask, table: pa.Table) -> dict:
    """``{field: rows}`` of the part's ``table`` (every row, before ``keep``): its fields and,
    for a node table with a split, the split masks. Holds the part's encoded rows."""
    arrays = {f.name: _encode(f, vocab, table, task)
              for f, vocab in zip(task.fields, task.vocabularies)}
    if task.split is not None:
        arrays.update(_split_masks(task, table, table.num_rows))
        _check_labels_in_training(task, arrays)
    return arrays


def edge_split_masks(task: EncodeTask, src: np.ndarray, dst: np.ndarray) -> dict:
    """The link split's masks of kept edges ``src -> dst`` (IDs), drawn by their endpoints
    as ``prep split-edges`` draws them."""
    from graphprep.pipeline.split_edges import MASKS, split_codes
    codes = split_codes(task.edge_split, src, dst)
    return {name: codes == code for code, name in enumerate(MASKS)}


def field_file(target: str, name: str, csr: bool) -> str:
    """Where :func:`encode_part` writes field ``name`` of a part (sparse: a CSR chunk)."""
    return f"{target}.{name}.{'parquet' if csr else 'npy'}"


def _encode(f: FieldSpec, vocab: tuple, table: pa.Table, task: EncodeTask) -> np.ndarray:
    if f.kind == "sparse":
        path, row0 = task.part.path, task.first_row
        values = sparse_lists(table.column(f.columns[1]), f, path, row0, pa.float64()) \
            if len(f.columns) > 1 else None
        rows = csr_from_lists(sparse_lists(table.column(f.columns[0]), f, path, row0), values,
                              f.dim, file=path, field=f.columns[0], row0=row0)
        if values is not None:
            _check_finite(rows.values, task, f.columns[1], row=lambda at: int(
                np.searchsorted(rows.indptr, at, side="right") - 1))
        return rows
    if f.kind == "feature":
        return np.concatenate([_checked(_numeric(table.column(c), task, c), task, c)
                               for c in f.columns], axis=1).astype(f.dtype, copy=False)
    col = table.column(f.columns[0])
    _check_category_type(col.type, task.part.path, f.columns[0])
    values = [v for v in vocab if v is not None]
    codes = pc.fill_null(pc.index_in(col, value_set=pa.array(values, col.type)), -1)
    codes = codes.to_numpy(zero_copy_only=False).astype(np.int64)
    if f.kind == "categorical" and len(vocab) > len(values):
        codes[codes < 0] = len(values)               # null: the vocabulary's last entry
    if f.one_hot:
        if len(vocab) > MAX_ONE_HOT:
            raise FormatError(f"one_hot needs at most {MAX_ONE_HOT} values, the column has "
                              f"{len(vocab)}: use codes (one_hot: false) and an embedding",
                              file=task.part.path, field=f.columns[0])
        out = np.zeros((len(codes), len(vocab)), dtype=np.float32)
        out[np.arange(len(codes)), codes] = 1
        return out
    return codes


def _checked(values: np.ndarray, task: EncodeTask, name: str) -> np.ndarray:
    _check_finite(values, task, name, row=lambda at: at // max(values.shape[1], 1))
    return values


def _check_finite(values: np.ndarray, task: EncodeTask, name: str, row) -> None:
    """Under ``nan_policy`` error, a NaN/inf among ``values`` (``row(flat index)``: its
    row) names the table's file, column and row, not the output chunk it would go to."""
    if task.nan_policy != "error" or values.dtype.kind != "f":
        return
    bad = ~np.isfinite(values.reshape(-1))
    if bad.any():
        at = int(np.flatnonzero(bad)[0])
        raise FormatError(f"{values.reshape(-1)[at]} in a feature (--nan warn or allow accepts "
                          f"it)", file=task.part.path, field=name,
                          row=task.first_row + row(at))


def sparse_lists(col: pa.ChunkedArray, f: FieldSpec, path: str, row0: int,
                 value_type: pa.DataType = pa.int64()) -> pa.Array:
    """A sparse field's column (its indices, or with ``value_type`` float64 its values) as a
    list array: a list column as it is, a string column split at ``f.separator`` (empty
    tokens dropped: "3  17 " is [3, 17]; an empty or null string: no entry). Raises
    :class:`FormatError` naming the file, column and row of a token that is not a number, or
    for a column of another type. Holds the column's tokens."""
    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    indices = value_type == pa.int64()
    name, what = (f.columns[0], "indices") if indices else (f.columns[-1], "values")
    if pa.types.is_list(col.type) or pa.types.is_large_list(col.type) or \
            pa.types.is_fixed_size_list(col.type):
        inner = col.type.value_type
        if not (pa.types.is_integer(inner) or pa.types.is_null(inner) or (not indices and (
                pa.types.is_floating(inner) or pa.types.is_decimal(inner)))):
            raise FormatError(f"sparse {what} must be lists of "
                              f"{'integers' if indices else 'numbers'}, not {col.type}",
                              file=path, field=name)
        return pc.cast(col, pa.list_(inner)) if pa.types.is_fixed_size_list(col.type) else col
    text_type = pa.types.is_string(col.type) or pa.types.is_large_string(col.type)
    if (text_type or pa.types.is_null(col.type)) and f.separator:
        tokens = pc.split_pattern(pc.fill_null(pc.cast(col, pa.string()), ""), f.separator)
        flat = pc.utf8_trim_whitespace(pc.list_flatten(tokens))
        parent = pc.list_parent_indices(tokens).to_numpy(zero_copy_only=False)
        keep = pc.not_equal(flat, "").to_numpy(zero_copy_only=False)
        flat, parent = flat.filter(pa.array(keep)), parent[keep]
        try:
            numbers = pc.cast(flat, value_type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pattern = r"^[-+]?[0-9]+$" if indices else \
                r"^[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$|^[-+]?(inf|nan)$"
            good = pc.match_substring_regex(flat, pattern, ignore_case=True).to_numpy(
                zero_copy_only=False)
            at = int(np.flatnonzero(~good)[0]) if (~good).any() else 0
            raise FormatError(f"{flat[at].as_py()!r} is not "
                              f"{'an integer index' if indices else 'a number'} (separator "
                              f"{f.separator!r})", file=path, field=name,
                              row=row0 + int(parent[at])) from None
        offsets = np.zeros(len(col) + 1, np.int64)
        np.cumsum(np.bincount(parent, minlength=len(col)), out=offsets[1:])
        return pa.LargeListArray.from_arrays(pa.array(offsets), numbers)
    if text_type:
        raise FormatError(f"a string column of sparse {what} needs sparse.{f.name}.separator "
                          f"(e.g. \" \" for \"3 17 42\")", file=path, field=name)
    raise FormatError(f"sparse {what} must be a list column (or, with separator, a string "
                      f"column), not {col.type}: a row's active indices are a list",
                      file=path, field=name)


def _numeric(col: pa.ChunkedArray, task: EncodeTask, name: str) -> np.ndarray:
    """A numeric column as ``[rows, 1]``, a list column of one length as ``[rows, length]``
    (a part of no rows: ``[0, 1]``, whatever its type: a header-only file has none)."""
    col = col.combine_chunks()
    if not len(col):
        return np.zeros((0, 1), np.float32)
    if col.null_count:
        row = int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])
        raise FormatError("missing value in a feature column", file=task.part.path,
                          field=name, row=task.first_row + row)
    if pa.types.is_fixed_size_list(col.type) or pa.types.is_list(col.type) or \
            pa.types.is_large_list(col.type):
        lengths = pc.list_value_length(col).to_numpy(zero_copy_only=False)
        if len(lengths) and (lengths != lengths[0]).any():
            row = int(np.flatnonzero(lengths != lengths[0])[0])
            raise FormatError(f"list has {lengths[row]} values, the first row {lengths[0]}: "
                              f"a feature list must have one length", file=task.part.path,
                              field=name, row=task.first_row + row)
        flat = pc.list_flatten(col)
        _check_number(flat.type, task, name)
        width = int(lengths[0]) if len(lengths) else 0
        return flat.to_numpy(zero_copy_only=False).reshape(len(col), width)
    _check_number(col.type, task, name)
    return col.to_numpy(zero_copy_only=False).reshape(-1, 1)


def _check_number(dtype, task: EncodeTask, name: str) -> None:
    if not (pa.types.is_integer(dtype) or pa.types.is_floating(dtype)
            or pa.types.is_boolean(dtype) or pa.types.is_decimal(dtype)):
        raise FormatError(f"a feature column must be numeric (or a list of numbers), not "
                          f"{dtype}: strings go in categorical:", file=task.part.path,
                          field=name)


def _split_masks(task: EncodeTask, table: pa.Table, n: int) -> dict[str, np.ndarray]:
    s = task.split
    if s.column:
        text = pc.utf8_lower(pc.cast(table.column(s.column), pa.string()))
        return {f"{name}_mask": pc.fill_null(pc.equal(text, name), False).to_numpy(
            zero_copy_only=False) for name in SPLIT_NAMES}
    ids = np.arange(task.first_id, task.first_id + n, dtype=np.int64)
    u = (mix(s.seed, ids) >> np.uint64(11)).astype(np.float64) / _UNIT
    train, val, test = s.fractions
    return {"train_mask": u < train, "val_mask": (u >= train) & (u < train + val),
            "test_mask": (u >= train + val) & (u < train + val + test)}


def _check_labels_in_training(task: EncodeTask, arrays: dict) -> None:
    for f in task.fields:
        if f.kind != "label":
            continue
        bad = np.flatnonzero(arrays["train_mask"] & (arrays[f.name] < 0))
        if len(bad):
            raise FormatError("a training row has no label", file=task.part.path,
                              field=f.columns[0], row=task.first_row + int(bad[0]))
