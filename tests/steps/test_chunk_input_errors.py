"""Edge-list inputs a new user tries first: a single ``.npy`` file is an edge_index (it crashed,
taken for an archive), ``--map-keys`` on input that holds IDs already is refused, and text
that is not UTF-8 is named by file, column and data row (not pyarrow's line count)."""

from __future__ import annotations

import numpy as np

from conftest import edges_of
from faultkit import prep_fails


def test_single_npy_is_an_edge_index(tmp_path, prep):
    edge_index = np.array([[0, 1, 2, 3], [1, 2, 3, 0]], dtype=np.int64)
    np.save(tmp_path / "e.npy", edge_index.T)            # [E, 2] is accepted too
    prep("chunk", tmp_path / "e.npy", tmp_path / "G")
    src, dst = edges_of(tmp_path / "G")
    assert sorted(zip(src.tolist(), dst.tolist())) == sorted(zip(*edge_index.tolist()))


def test_map_keys_on_numpy_input_is_refused(tmp_path, scheduler):
    np.save(tmp_path / "e.npy", np.array([[0, 1], [1, 0]]))
    prep_fails(scheduler, "chunk", tmp_path / "e.npy", tmp_path / "G", "--map-keys", code=2,
               names=("e.npy", "--map-keys"))
    assert not (tmp_path / "G").exists()


def test_invalid_utf8_names_column_and_data_row(tmp_path, scheduler):
    (tmp_path / "e.csv").write_bytes(b"a,b\nx,y\nz,\xff\xfe\n")
    out = prep_fails(scheduler, "chunk", tmp_path / "e.csv", tmp_path / "G", code=2,
                     names=("e.csv", "column #1", "row 1", "UTF8"))
    assert "Row #" not in out
