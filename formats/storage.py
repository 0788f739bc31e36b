"""Paths that are local folders or fsspec URLs (``memory://``, ``s3://``...).

Local paths use plain ``os`` calls (so ``.npy`` files can be memory-mapped); anything with a
protocol goes through fsspec. fsspec and pyarrow are imported where a URL or a Parquet file
needs them: a trainer rank reads local parts and is spared their import (0.2 s).
"""

from __future__ import annotations

import os
import posixpath
from typing import TYPE_CHECKING

from graphprep.formats.errors import FormatError

if TYPE_CHECKING:
    import pyarrow.parquet as pq


def is_url(path: str) -> bool:
    return "://" in str(path)


def join(root: str, relpath: str) -> str:
    if is_url(relpath) or os.path.isabs(relpath):
        return relpath
    return posixpath.join(str(root), relpath) if is_url(root) else os.path.join(root, relpath)


def _url_fs(path: str):
    import fsspec

    return fsspec.core.url_to_fs(path)


def exists(path: str) -> bool:
    if is_url(path):
        fs, p = _url_fs(path)
        return fs.exists(p)
    return os.path.exists(path)


def size(path: str) -> int:
    if is_url(path):
        fs, p = _url_fs(path)
        return fs.size(p)
    return os.path.getsize(path)


def open_file(path: str, mode: str = "rb", compression: str | None = None):
    """A file object for a local path or URL; ``compression='infer'`` unpacks .gz/.bz2/..."""
    import fsspec

    return fsspec.open(str(path), mode, compression=compression).open()


def parquet_file(path: str) -> pq.ParquetFile:
    """A Parquet file (local path or URL) opened for reading its footer and row groups;
    :class:`FormatError` naming it when unreadable or truncated."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(open_file(path) if is_url(path) else path)
    except (pa.ArrowInvalid, OSError) as err:
        raise FormatError(f"unreadable or truncated Parquet file ({err})", file=path) from None


def read_text(path: str) -> str:
    with (open_file(path, "rb") if is_url(path) else open(path, "rb")) as f:
        return f.read().decode("utf-8")
