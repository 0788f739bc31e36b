"""Stable 64-bit hashes of key columns of any supported Arrow type, and the key type a node
type's keys are compared in.

The hash only places keys in buckets (its top bits) and orders keys that have no node table
(by hash, then key); equal keys hash equal in every process and on every machine, which
Python's ``hash`` does not promise. Vectorized: strings are hashed as a polynomial over their
bytes, ``ROWS_PER_PASS`` rows at a time (a pass holds 8 bytes per byte of those rows).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graphprep.formats import FormatError
from graphprep.pipeline.core.arrayops import mix

ROWS_PER_PASS = 1 << 16
_P = np.uint64(0x100000001B3)               # FNV's 64-bit prime: the polynomial's base
_STRING, _INTEGER = "string", "integer"


def key_kind(dtype: pa.DataType, *, file: str | None = None, field: str | None = None) -> str:
    """``"integer"`` or ``"string"``: how keys of ``dtype`` are compared (int8..uint64,
    dates and timestamps as integers; string, binary and their large and view variants as
    bytes; dictionaries as their values). Raises :class:`FormatError` naming the file and
    column for a type keys cannot have (floats: 1.0 and 1 would be two keys)."""
    if pa.types.is_dictionary(dtype):
        return key_kind(dtype.value_type, file=file, field=field)
    if (pa.types.is_integer(dtype) or pa.types.is_temporal(dtype)) and not \
            pa.types.is_duration(dtype):
        return _INTEGER
    if (pa.types.is_string(dtype) or pa.types.is_large_string(dtype)
            or pa.types.is_binary(dtype) or pa.types.is_large_binary(dtype)
            or pa.types.is_string_view(dtype) or pa.types.is_binary_view(dtype)
            or pa.types.is_fixed_size_binary(dtype)):
        return _STRING
    raise FormatError(f"a key column must hold integers, strings or bytes, not {dtype}",
                      file=file, field=field)


def is_text(dtype: pa.DataType) -> bool:
    """Whether a key column of ``dtype`` holds text (string types, or a dictionary of them),
    not bytes: its keys are written back as strings."""
    if pa.types.is_dictionary(dtype):
        return is_text(dtype.value_type)
    return (pa.types.is_string(dtype) or pa.types.is_large_string(dtype)
            or pa.types.is_string_view(dtype))


def normalize_keys(keys: pa.Array | pa.ChunkedArray, *, file: str | None = None,
                   field: str | None = None, row0: int = 0) -> pa.Array:
    """``keys`` as one array of the type keys of their kind are compared in: int64 for
    integers (uint64 above 2^63-1 refused), large_binary for strings and bytes (so that a
    string key and a large_string key are the same key). A null names its row."""
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    if pa.types.is_dictionary(keys.type):
        keys = keys.dictionary_decode()
    if keys.null_count:
        row = int(np.flatnonzero(keys.is_null().to_numpy(zero_copy_only=False))[0])
        raise FormatError("missing key", file=file, field=field, row=row0 + row)
    if pa.types.is_floating(keys.type) or pa.types.is_decimal(keys.type):
        # the first value names the column's problem: 1.0 and 1 would be two keys
        raise FormatError(f"node keys must be integers or text, not {keys.type} numbers like "
                          f"{keys[0].as_py()}" if len(keys) else
                          f"node keys must be integers or text, not {keys.type}",
                          file=file, field=field, row=row0 if len(keys) else None)
    if key_kind(keys.type, file=file, field=field) == _INTEGER:
        if pa.types.is_temporal(keys.type):
            keys = keys.view(pa.int64()) if keys.type.bit_width == 64 else \
                pc.cast(keys.view(pa.int32()), pa.int64())
        elif pa.types.is_uint64(keys.type) and len(keys) and pc.max(keys).as_py() >= 1 << 63:
            # the bound as a uint64 scalar: a Python int of 2^63 is no Arrow int64
            row = int(np.flatnonzero(pc.greater_equal(keys, pa.scalar(1 << 63, pa.uint64()))
                                     .to_numpy(zero_copy_only=False))[0])
            raise FormatError(f"integer keys must be below 2^63 ({_AS_TEXT}), not "
                              f"{keys[row].as_py()}", file=file, field=field, row=row0 + row)
        return pc.cast(keys, pa.int64())
    if pa.types.is_string_view(keys.type) or pa.types.is_binary_view(keys.type) \
            or pa.types.is_fixed_size_binary(keys.type):
        keys = pc.cast(keys, pa.binary())
    return keys.view(pa.large_binary()) if pa.types.is_large_string(keys.type) or \
        pa.types.is_large_binary(keys.type) else pc.cast(keys.view(pa.binary()),
                                                       pa.large_binary())


_AS_TEXT = "larger IDs, e.g. unsigned 64-bit hashes, can be text keys: give them a prefix"
_INT_TEXT = r"^\s*[+-]?[0-9]+\s*$"
_INT64_MAX = "9223372036854775807"


def parse_integer_keys(text: pa.Array | pa.ChunkedArray, *, file: str | None = None,
                       field: str | None = None, row0: int = 0) -> pa.Array:
    """Integer keys read as text (a CSV column whose first rows are numbers) as int64, nulls
    kept. Text keeps every digit, where a reader's type inference turns 2^63 into a double.
    Raises :class:`FormatError` naming the row and value of the first text that is not an
    integer (``1.0``: 1.0 and 1 would be two keys) or is outside int64. Holds the column
    and a few boolean columns of its length."""
    if isinstance(text, pa.ChunkedArray):
        text = text.combine_chunks()
    if not (pa.types.is_string(text.type) or pa.types.is_large_string(text.type)):
        return text
    try:
        return pc.cast(text, pa.int64())
    except pa.ArrowInvalid:
        pass          # spaces, a "+", or a bad row: checked and found vectorized
    is_int = pc.fill_null(pc.match_substring_regex(text, _INT_TEXT), True)
    bad = np.flatnonzero(~is_int.to_numpy(zero_copy_only=False))
    if len(bad):
        value = text[int(bad[0])].as_py()
        raise FormatError(
            f"node keys must be integers or text, not decimal numbers: {value.strip()}"
            if _is_number(value) else
            f"the column's first rows are integers, so this must be one too: {value!r}",
            file=file, field=field, row=row0 + int(bad[0]))
    trimmed = pc.utf8_trim_whitespace(text)
    negative = pc.starts_with(trimmed, "-")
    digits = pc.utf8_ltrim(pc.utf8_ltrim(trimmed, "+-"), "0")
    length = pc.utf8_length(digits)
    limit = pc.if_else(negative, "9223372036854775808", _INT64_MAX)
    too_big = pc.or_(pc.greater(length, 19),
                     pc.and_(pc.equal(length, 19), pc.greater(digits, limit)))
    rows = np.flatnonzero(pc.fill_null(too_big, False).to_numpy(zero_copy_only=False))
    if not len(rows):
        return pc.cast(pc.utf8_ltrim(trimmed, "+"), pa.int64())
    row = int(rows[0])
    raise FormatError(f"integer keys must be in [-2^63, 2^63) ({_AS_TEXT}), not "
                      f"{text[row].as_py().strip()}", file=file, field=field, row=row0 + row)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def key_hash(keys: pa.Array) -> np.ndarray:
    """The uint64 hash of each key of a :func:`normalize_keys` array."""
    if pa.types.is_int64(keys.type):
        return mix(keys.to_numpy(zero_copy_only=False).view(np.uint64))
    return np.concatenate([_bytes_hash(keys.slice(i, ROWS_PER_PASS))
                           for i in range(0, len(keys), ROWS_PER_PASS)] or
                          [np.empty(0, np.uint64)])


def _bytes_hash(keys: pa.Array) -> np.ndarray:
    """Polynomial hash of each large_binary value: sum of byte[i] * P^(len-1-i), mod 2^64,
    mixed with the length."""
    offsets = np.frombuffer(keys.buffers()[1], dtype=np.int64)[
        keys.offset:keys.offset + len(keys) + 1]
    data = keys.buffers()[2]
    raw = (np.frombuffer(data, dtype=np.uint8) if data is not None else
           np.empty(0, np.uint8))[offsets[0]:offsets[-1]]
    starts = offsets[:-1] - offsets[0]
    lengths = np.diff(offsets)
    # Position from the end of its key: the powers of P are read from one table.
    from_end = np.repeat(starts + lengths, lengths) - np.arange(len(raw)) - 1
    powers = _powers(int(lengths.max()) if len(lengths) else 0)
    with np.errstate(over="ignore"):
        terms = raw.astype(np.uint64) * powers[from_end]
        total = np.concatenate([[np.uint64(0)], np.cumsum(terms, dtype=np.uint64)])
        poly = total[starts + lengths] - total[starts]
        return mix(poly, lengths)


def _powers(n: int) -> np.ndarray:
    with np.errstate(over="ignore"):
        return np.cumprod(np.concatenate([[np.uint64(1)], np.full(max(n - 1, 0), _P)]),
                          dtype=np.uint64)


def bucket_of(hashes: np.ndarray, bits: int) -> np.ndarray:
    """The bucket of each hash: its top ``bits`` bits, so that buckets are hash ranges in
    order and numbering by (hash, key) does not depend on the bucket count."""
    if bits == 0:
        return np.zeros(len(hashes), dtype=np.int64)
    return (hashes >> np.uint64(64 - bits)).astype(np.int64)
