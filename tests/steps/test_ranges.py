"""The one range-reader stack (graphprep.pipeline.tables.ranges) under edge parts and table
parts: byte ranges that tile a file read each line once, row group runs cover every row."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from graphprep.pipeline.tables.ranges import LineRange, RowGroupRun, byte_ranges, row_group_runs
from graphprep.pipeline.convert.sources import CsvRange, ParquetEdges
from graphprep.pipeline.tables.parts import CsvTableRange, ParquetTablePart, table_parts


def test_line_ranges_tile_the_file(tmp_path):
    path = tmp_path / "e.csv"
    lines = [f"{i},{i * 7 % 1000},{'x' * (i % 13)}\n".encode() for i in range(40000)]
    path.write_bytes(b"".join(lines))
    ranges = byte_ranges(str(path), 5000)
    assert len(ranges) > 2 and ranges[0][0] == 0 and ranges[-1][1] == path.stat().st_size
    parts = [LineRange(str(path), start, end) for start, end in ranges]
    assert b"".join(p.read_lines() for p in parts) == b"".join(lines)
    assert [p.first_row for p in parts][:2] == [0, None]


def test_row_group_runs_read_every_row(tmp_path):
    path = str(tmp_path / "e.parquet")
    src = np.arange(1000, dtype=np.int64)
    pq.write_table(pa.table({"src": src, "dst": src[::-1]}), path, row_group_size=64)
    runs = row_group_runs(path, 200)
    parts = [RowGroupRun(path, *run) for run in runs]
    assert [p.first_row for p in parts] == [start for _, _, start in runs]
    got = np.concatenate([t.column("src").to_numpy() for p in parts
                          for t in p.row_groups(["src"])])
    assert np.array_equal(got, src)
    edges = [ParquetEdges(path, *run, src_col="dst", dst_col="src") for run in runs]
    assert np.array_equal(np.concatenate([b.src for p in edges for b in p.blocks()]), src[::-1])
    tables = table_parts(path, ("dst",), 200)
    assert all(isinstance(p, ParquetTablePart) for p in tables)
    assert sum(t.num_rows for p in tables for t in p.tables()) == len(src)


def test_parts_keep_their_fields_in_order():
    """Parts are built positionally: the shared bases keep each part's field order."""
    import dataclasses
    names = {cls: [f.name for f in dataclasses.fields(cls)]
             for cls in (CsvRange, CsvTableRange, ParquetTablePart)}
    assert names[CsvRange] == ["path", "start", "end", "columns"]
    assert names[CsvTableRange] == ["path", "columns", "start", "end", "fmt"]
    assert names[ParquetTablePart] == ["path", "columns", "first_group", "last_group",
                                       "row_start"]
