"""Integrity manifest of a dispatched part: what each file must be, checked before training.

``prep dispatch`` records, per part, one :class:`FileRecord` per file (size, ``.npy`` dtype and
shape, a sampled hash and a full hash) in ``graph.json``, and writes ``part.json`` (part index,
graph name, dispatch id) into the part folder. Every trainer load checks sizes, headers and the
*sampled* hash (the file's size plus its first and last MiB and 64 evenly spaced 4 KiB blocks:
milliseconds per file, and it catches a file rewritten wholesale, e.g. zeroed or shuffled);
``--verify-data`` adds the full hash (xxh3 streamed in 8 MiB blocks: the whole part is read).
Errors are :class:`FormatError` naming the file and the field that differs.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import numpy as np
import xxhash

from graphprep.formats.errors import FormatError
from graphprep.formats.npyio import npy_header_of
from graphprep.formats.output import write_json

PART_JSON = "part.json"
EDGE_BYTES = 1 << 20       # sampled head and tail
BLOCK_BYTES = 4 << 10      # each sampled block in between
SAMPLED_BLOCKS = 64
STREAM_BYTES = 8 << 20     # read size of the full hash


@dataclass(frozen=True)
class FileRecord:
    """What one file of a part must be. ``dtype``/``shape`` only for ``.npy`` files (from the
    header); ``sample``/``xxh3`` are hex xxh3-64 digests (sampled / whole file)."""

    size: int
    sample: str
    xxh3: str
    dtype: str | None = None
    shape: tuple[int, ...] | None = None

    def to_json(self) -> dict:
        out = {"size": self.size, "sample": self.sample, "xxh3": self.xxh3}
        if self.dtype is not None:
            out.update(dtype=self.dtype, shape=list(self.shape))
        return out

    @classmethod
    def from_json(cls, obj: dict, *, file: str, field: str) -> "FileRecord":
        try:
            shape = obj.get("shape")
            return cls(int(obj["size"]), str(obj["sample"]), str(obj["xxh3"]), obj.get("dtype"),
                       None if shape is None else tuple(int(s) for s in shape))
        except (KeyError, TypeError, ValueError, AttributeError):
            raise FormatError("malformed file record (needs size, sample, xxh3)", file=file,
                              field=field) from None


@dataclass(frozen=True)
class PartStamp:
    """``part.json``: which part of which dispatch a folder holds. Parts swapped in graph.json,
    or a part left from another dispatch, disagree with it even when every size matches."""

    part: int
    graph_name: str
    dispatch_id: str

    def to_json(self) -> dict:
        return {"part": self.part, "graph_name": self.graph_name,
                "dispatch_id": self.dispatch_id}


def sample_spans(size: int) -> list[tuple[int, int]]:
    """``(offset, length)`` of the byte ranges the sampled hash reads: the whole file when it is
    small, else the first and last MiB and 64 evenly spaced 4 KiB blocks between them."""
    if size <= 2 * EDGE_BYTES + SAMPLED_BLOCKS * BLOCK_BYTES:
        return [(0, size)]
    middle = np.linspace(EDGE_BYTES, size - EDGE_BYTES - BLOCK_BYTES, SAMPLED_BLOCKS,
                         dtype=np.int64)
    return [(0, EDGE_BYTES), *((int(o), BLOCK_BYTES) for o in middle),
            (size - EDGE_BYTES, EDGE_BYTES)]


def sample_hash(path: str, size: int | None = None) -> str:
    """xxh3-64 of the file's size and its sampled ranges (:func:`sample_spans`); reads at most
    ~2.3 MiB whatever the file's size."""
    size = os.path.getsize(path) if size is None else size
    h = xxhash.xxh3_64(size.to_bytes(8, "little"))
    with open(path, "rb") as f:
        for offset, length in sample_spans(size):
            f.seek(offset)
            h.update(f.read(length))
    return h.hexdigest()


def full_hash(path: str) -> str:
    """xxh3-64 of the whole file, streamed in 8 MiB blocks (holds one block)."""
    h = xxhash.xxh3_64()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(STREAM_BYTES), b""):
            h.update(block)
    return h.hexdigest()


def npy_header(path: str) -> tuple[str, tuple[int, ...], int]:
    """``(dtype, shape, data offset)`` from a ``.npy`` header; FormatError when unreadable."""
    try:
        shape, dtype, offset, _ = npy_header_of(path)
        return str(dtype), shape, offset
    except (ValueError, OSError, SyntaxError) as err:
        raise FormatError(f"not a readable .npy file ({err})", file=path, field="header") \
            from None


def npy_data_bytes(dtype: str, shape: tuple[int, ...]) -> int:
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize


def file_record(path: str) -> FileRecord:
    """The record of one file: reads it whole once (full hash) plus the sampled ranges."""
    size = os.path.getsize(path)
    dtype = shape = None
    if path.endswith(".npy"):
        dtype, shape, _ = npy_header(path)
    return FileRecord(size, sample_hash(path, size), full_hash(path), dtype, shape)


def part_files(part_dir: str) -> list[str]:
    """Relative paths (``/``-separated, sorted) of every file under ``part_dir``."""
    found = [os.path.relpath(os.path.join(d, f), part_dir)
             for d, _, names in os.walk(part_dir) for f in names]
    return sorted(r.replace(os.sep, "/") for r in found)


def part_manifest(part_dir: str) -> dict[str, FileRecord]:
    """``{relative path: FileRecord}`` over every file of a part folder (reads each file once;
    holds one 8 MiB block)."""
    return {rel: file_record(os.path.join(part_dir, rel)) for rel in part_files(part_dir)}


def check_file(path: str, record: FileRecord, *, hashes: bool = True, full: bool = False
               ) -> None:
    """Check one file against its record: presence, size, ``.npy`` dtype and shape, then (with
    ``hashes``) the sampled hash and (with ``full``) the full hash. Raises FormatError naming
    the file and the field that differs (``size``, ``dtype``, ``shape``, ``sample``, ``xxh3``)."""
    if not os.path.isfile(path):
        raise FormatError("missing: graph.json's manifest lists this file", file=path)
    size = os.path.getsize(path)
    if record.dtype is not None:
        dtype, shape, offset = npy_header(path)
        if dtype != record.dtype:
            raise FormatError(f"dtype {dtype}, graph.json recorded {record.dtype}", file=path,
                              field="dtype")
        if shape != record.shape:
            raise FormatError(f"shape {list(shape)}, graph.json recorded {list(record.shape)}",
                              file=path, field="shape")
        if size < offset + npy_data_bytes(dtype, shape):
            raise FormatError(f"truncated: {size} bytes, the header's shape needs "
                              f"{offset + npy_data_bytes(dtype, shape)}", file=path, field="size")
    if size != record.size:
        raise FormatError(f"{size} bytes, graph.json recorded {record.size}", file=path,
                          field="size")
    if hashes and sample_hash(path, size) != record.sample:
        raise FormatError("content differs from graph.json's manifest (sampled hash)",
                          file=path, field="sample")
    if full and full_hash(path) != record.xxh3:
        raise FormatError("content differs from graph.json's manifest (full hash)", file=path,
                          field="xxh3")


def check_part_files(part_dir: str, manifest: dict[str, FileRecord], full: bool = False, *,
                     hashes: bool = True) -> None:
    """Check every file the manifest lists (see :func:`check_file`): layout only when not
    ``hashes``, sampled hashes by default, full hashes too with ``full``. Holds one block."""
    for rel, record in sorted(manifest.items()):
        check_file(os.path.join(part_dir, rel), record, hashes=hashes, full=full)


def write_part_json(part_dir: str, stamp: PartStamp) -> None:
    write_json(os.path.join(part_dir, PART_JSON), stamp.to_json())


def read_part_json(part_dir: str) -> PartStamp:
    """The part's stamp; FormatError naming ``part.json`` when missing or malformed."""
    path = os.path.join(part_dir, PART_JSON)
    try:
        with open(path) as f:
            obj = json.load(f)
        return PartStamp(int(obj["part"]), str(obj["graph_name"]), str(obj["dispatch_id"]))
    except FileNotFoundError:
        raise FormatError("missing: every dispatched part has one", file=path) from None
    except json.JSONDecodeError as err:
        raise FormatError(f"invalid JSON: {err.msg} (line {err.lineno})", file=path) from None
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise FormatError(f"malformed ({err})", file=path) from None


def dispatch_id(inputs: dict[str, str], options: dict) -> str:
    """Identity of a dispatch: xxh3-128 of the inputs' fingerprints (not their paths: the same
    data dispatched from another folder is the same graph) and the options."""
    key = json.dumps({"inputs": sorted(inputs.values()), "options": options}, sort_keys=True)
    return xxhash.xxh3_128_hexdigest(key.encode())


def manifest_digest(manifest: dict[str, FileRecord]) -> str:
    """One hash of a part's manifest (paths, sizes, full hashes): a part's identity."""
    key = json.dumps([[rel, r.size, r.xxh3] for rel, r in sorted(manifest.items())])
    return xxhash.xxh3_64_hexdigest(key.encode())
