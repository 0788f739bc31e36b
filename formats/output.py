"""Writing a format folder safely: temp folder renamed into place, chunk writers, manifest.

Nothing half-written is ever visible at the final path: a step writes into ``.NAME.partial``
beside it and :meth:`AtomicOutput.commit` renames it into place. A stale ``.partial`` folder
from a killed run is removed when the step starts again.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import platform
import shutil
from contextlib import contextmanager, suppress
from importlib import metadata as importlib_metadata

import numpy as np

from graphprep.formats.errors import FormatError
from graphprep.formats.sparse import DIM_KEY, CsrRows, csr_paths, is_csr
from graphprep.formats.storage import is_url

MANIFEST = "manifest.json"
PARQUET_OPTIONS = {"compression": "zstd", "compression_level": 1}


class AtomicOutput:
    """A local output folder that appears only when complete.

    ``with AtomicOutput(final) as tmp: ...write into tmp...; out.commit()``. On an exception the
    temporary folder is removed and ``final`` is left as it was: an existing output is replaced
    only by :meth:`commit`, by two renames. A run killed between them left the previous output
    as ``.NAME.old``; the next run puts it back before anything else.
    """

    def __init__(self, final: str):
        if is_url(final):
            raise FormatError("this step writes to a local folder; URLs are for dispatch",
                              file=final)
        self.final = os.path.abspath(final)
        self.tmp, self._old = side_paths(self.final)
        self.committed = False

    def __enter__(self) -> str:
        os.makedirs(os.path.dirname(self.final), exist_ok=True)
        restore_previous(self.final)
        shutil.rmtree(self.tmp, ignore_errors=True)
        os.makedirs(self.tmp)
        return self.tmp

    def commit(self) -> None:
        """Move the finished folder into place, replacing an older one."""
        swap_into_place(self.tmp, self.final)
        self.committed = True

    def __exit__(self, exc_type, exc, tb) -> None:
        if not self.committed:
            shutil.rmtree(self.tmp, ignore_errors=True)


def side_paths(final: str) -> tuple[str, str]:
    """``(.NAME.partial, .NAME.old)`` beside ``final``: the output being built, and the
    previous output while it is being replaced."""
    parent, name = os.path.split(os.path.abspath(final))
    return os.path.join(parent, f".{name}.partial"), os.path.join(parent, f".{name}.old")


def restore_previous(final: str) -> None:
    """Undo a replacement cut between its two renames: ``.NAME.old`` back to ``final``."""
    _, old = side_paths(final)
    if os.path.exists(old):
        if os.path.exists(final):
            shutil.rmtree(old)
        else:
            os.rename(old, final)


def swap_into_place(partial: str, final: str) -> bool:
    """Replace ``final`` by the complete folder ``partial`` (rename the old one aside, rename
    the new one in, delete the old). Idempotent: returns False when ``partial`` is gone (already
    swapped, e.g. by another worker sharing this file system). Workers of one host swap one at
    a time: two machines' commit tasks on a shared file system raced between the check and the
    rename, and the loser failed on the folder the winner had just moved."""
    _, old = side_paths(final)
    with _folder_lock(os.path.dirname(os.path.abspath(final))):
        if not os.path.exists(partial):
            return False
        if os.path.exists(final):
            shutil.rmtree(old, ignore_errors=True)
            os.rename(final, old)
        os.rename(partial, final)
        shutil.rmtree(old, ignore_errors=True)
    return True


@contextmanager
def replacing_file(path: str):
    """``with replacing_file(path) as tmp: write tmp``: the file appears at ``path`` only when
    the block succeeds (``.NAME.partial`` beside it, renamed over ``path``); on any failure the
    partial file is removed and ``path`` keeps its previous bytes. Holds nothing."""
    folder, name = os.path.split(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{name}.partial")
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        with suppress(FileNotFoundError):
            os.remove(tmp)
        raise


@contextmanager
def _folder_lock(folder: str):
    """An exclusive ``flock`` on ``folder`` itself (no lock file left behind); a no-op where
    the platform has no ``fcntl``."""
    try:
        import fcntl
    except ImportError:  # Windows: one worker per output folder there
        yield
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)        # releases the lock


def device_of(path: str) -> str:
    """The device and mount point holding ``path`` (or its nearest existing parent)."""
    import psutil

    real = os.path.realpath(path)
    mounts = [m for m in psutil.disk_partitions(all=True)
              if real == m.mountpoint or real.startswith(m.mountpoint.rstrip("/") + "/")]
    if not mounts:
        return "the device"
    m = max(mounts, key=lambda m: len(m.mountpoint))
    return f"{m.device} (mounted on {m.mountpoint})"


def is_disk_full(err: BaseException) -> bool:
    """An OSError from a full disk: ENOSPC, or numpy's short write that reports no errno."""
    text = str(err)
    return isinstance(err, OSError) and (
        err.errno in (errno.ENOSPC, errno.EDQUOT) or "No space left" in text
        or ("requested and" in text and "written" in text))


def disk_full_error(path: str) -> OSError:
    """The error to raise for a full disk while writing ``path``: names the device and file."""
    return OSError(errno.ENOSPC, f"no space left on {device_of(path)} while writing {path}",
                   path)


@contextmanager
def writing(path: str):
    """Turn a full-disk failure inside the block into :func:`disk_full_error` for ``path``."""
    try:
        yield
    except OSError as err:
        if is_disk_full(err) and err.filename in (None, path):
            raise disk_full_error(path) from None
        raise


def write_edge_chunk(path: str, src: np.ndarray, dst: np.ndarray) -> None:
    """Write one edge chunk: Parquet with int64 columns ``src`` and ``dst``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = {"src": pa.array(np.asarray(src, dtype=np.int64)),
               "dst": pa.array(np.asarray(dst, dtype=np.int64))}
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with writing(path):
        pq.write_table(pa.table(columns), path, **PARQUET_OPTIONS)


def write_array_chunk(path: str, array: np.ndarray) -> None:
    """Write one data chunk as ``.npy`` (memory-mappable). Sparse rows
    (:class:`graphprep.formats.sparse.CsrRows`) go to a CSR Parquet chunk where ``path`` ends in
    ``.parquet``, else to the three ``.npy`` files beside ``path`` (``NAME.indptr.npy``...)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if not is_csr(array):
        save_npy(path, array)
    elif path.endswith(".parquet"):
        with writing(path):
            write_csr_parquet(path, array)
    else:
        save_csr(path[:-len(".npy")] if path.endswith(".npy") else path, array)


def save_npy(path: str, array: np.ndarray) -> None:
    """``np.save`` without pickles; a full disk raises :func:`disk_full_error`."""
    with writing(path):
        np.save(path, np.ascontiguousarray(array), allow_pickle=False)


def save_csr(base: str, rows: CsrRows) -> None:
    """Write ``rows`` as ``base.{indptr,indices,values}.npy``."""
    os.makedirs(os.path.dirname(base) or ".", exist_ok=True)
    for name, path in csr_paths(base).items():
        save_npy(path, np.asarray(getattr(rows, name)))


def write_csr_parquet(path: str, rows: CsrRows) -> None:
    """One chunk of a sparse field in a chunked graph: list columns ``indices`` and ``values``
    (the list offsets are ``indptr``), the width in the schema metadata."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    offsets = pa.array(np.asarray(rows.indptr, dtype=np.int32 if rows.nnz < 2**31 else
                                  np.int64))
    kind = pa.ListArray if offsets.type == pa.int32() else pa.LargeListArray
    table = pa.table({"indices": kind.from_arrays(offsets, pa.array(np.asarray(rows.indices))),
                      "values": kind.from_arrays(offsets, pa.array(np.asarray(rows.values)))})
    table = table.replace_schema_metadata({DIM_KEY: str(rows.dim).encode()})
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    pq.write_table(table, path, **PARQUET_OPTIONS)


def link_files(root: str, relpaths, out: str) -> None:
    """Hard-link (or, across file systems, copy) the local files ``relpaths`` under ``root``
    into ``out`` at the same relative paths (URLs and absolute paths are left alone: the
    metadata names them as they are)."""
    from graphprep.formats.storage import is_url
    for rel in relpaths:
        if is_url(rel) or os.path.isabs(rel):
            continue
        target = os.path.join(out, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        try:
            os.link(os.path.join(root, rel), target)
        except OSError:
            shutil.copy2(os.path.join(root, rel), target)


def package_versions() -> dict[str, str]:
    names = ["graphprep", "numpy", "pyarrow", "dask", "distributed"]
    versions = {"python": platform.python_version()}
    for name in names:
        try:
            versions[name] = importlib_metadata.version(name)
        except importlib_metadata.PackageNotFoundError:
            pass
    return versions


def fingerprint(path: str) -> str:
    """A fast fingerprint of a file or folder: names, sizes, and the bytes of small files and
    of the first and last MiB of large ones (sha256). Changes when any file is replaced, grown,
    truncated or edited near its ends; not a full content hash (that would read terabytes).
    """
    h = hashlib.sha256()
    files = [path] if os.path.isfile(path) else sorted(
        os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs if f != MANIFEST)
    base = path if os.path.isdir(path) else os.path.dirname(path)
    for f in files:
        n = os.path.getsize(f)
        h.update(f"{os.path.relpath(f, base)}\0{n}\0".encode())
        with open(f, "rb") as fh:
            h.update(fh.read(1 << 20))
            if n > 2 << 20:
                fh.seek(-(1 << 20), os.SEEK_END)
                h.update(fh.read())
    return h.hexdigest()[:32]


def make_manifest(step: str, inputs: dict[str, str], options: dict, seed: int | None) -> dict:
    """The manifest of a step's output: what it was made from and how (no timestamps, no worker
    counts, so identical work gives identical bytes)."""
    manifest = {"tool": "graphprep", "step": step, "inputs": inputs, "options": options,
                "seed": seed, "versions": package_versions()}
    return json.loads(json.dumps(manifest))  # compare as it will read back (tuples -> lists)


def write_json(path: str, obj: dict) -> None:
    with writing(path), open(path, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=False)
        f.write("\n")


def read_manifest(folder: str) -> dict | None:
    path = os.path.join(folder, MANIFEST)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def same_work(manifest: dict | None, wanted: dict) -> bool:
    """True when an existing output was made by the same step from the same inputs/options."""
    if manifest is None:
        return False
    keys = ("step", "inputs", "options", "seed")
    return all(manifest.get(k) == wanted.get(k) for k in keys)
