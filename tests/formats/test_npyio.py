"""The one ``.npy`` header reader and writer (graphprep.formats.npyio): what numpy itself reads
and writes, for local files and fsspec URLs."""

import io

import fsspec
import numpy as np
import pytest

from graphprep.formats.npyio import (NpyWriter, npy_header_bytes, npy_header_of, npy_shape,
                                     new_npy, read_npy_header, read_rows, write_rows)


def _saved(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


@pytest.mark.parametrize("array", [np.arange(12, dtype=np.int32).reshape(4, 3),
                                   np.zeros(0, dtype="<u2"), np.ones((2, 2, 2), np.float64)])
def test_header_reader_agrees_with_numpy(tmp_path, array):
    path = tmp_path / "a.npy"
    np.save(path, array)
    shape, dtype, offset, fortran = npy_header_of(str(path))
    assert (shape, dtype, fortran) == (array.shape, array.dtype, False)
    assert offset == len(_saved(array)) - array.nbytes
    assert npy_shape(str(path)) == (array.shape, array.dtype)
    fs = fsspec.filesystem("memory")
    fs.pipe("/npyio/a.npy", _saved(array))
    with fsspec.open("memory:///npyio/a.npy", "rb") as f:
        assert read_npy_header(f) == (shape, dtype, offset, fortran)


def test_header_bytes_and_writer_are_np_save(tmp_path):
    array = np.arange(15, dtype=np.float32).reshape(5, 3)
    assert _saved(array).startswith(npy_header_bytes(array.dtype, array.shape))
    assert len(npy_header_bytes(np.int64, (0,))) == len(npy_header_bytes(np.int64, (10**12,)))
    path = str(tmp_path / "w" / "b.npy")
    writer = NpyWriter(path, array.shape, array.dtype)
    writer.write(array[:2])
    writer.write(array[2:])
    writer.close()
    assert open(path, "rb").read() == _saved(array)
    assert np.array_equal(read_rows(path, 1, 4), array[1:4])


def test_damaged_header_raises_what_numpy_raises(tmp_path):
    path = tmp_path / "bad.npy"
    path.write_bytes(b"\x93NUMPY\x01")
    with pytest.raises((ValueError, EOFError, OSError)):
        npy_header_of(str(path))


def test_rows_written_in_any_order_are_np_save_of_the_whole(tmp_path):
    """A new file is ``np.save`` of zeros; ranges written out of order, cast to the file's dtype, give the bytes of ``np.save``;
    rows that do not fit the file raise and leave it as it was."""
    whole = np.arange(40, dtype=np.int16).reshape(10, 4)
    path = str(tmp_path / "r.npy")
    new_npy(path, whole.shape, np.int16)
    assert open(path, "rb").read() == _saved(np.zeros_like(whole))
    for start, stop in [(6, 10), (0, 3), (3, 6)]:
        write_rows(path, start, whole[start:stop].astype(np.int64))
    assert open(path, "rb").read() == _saved(whole)
    for start, rows in [(8, whole[:3]), (-1, whole[:1]), (0, whole[:2, :3])]:
        with pytest.raises(ValueError, match="do not fit"):
            write_rows(path, start, rows)
    assert open(path, "rb").read() == _saved(whole)
    assert np.array_equal(read_rows(path, 2, 5), whole[2:5])
