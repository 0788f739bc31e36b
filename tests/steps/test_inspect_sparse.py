"""prep inspect of a chunked graph with a sparse (CSR) node field: its values' dtype, its width
``[dim]`` and its stored entries (nnz) and density, in the text and in ``--json``; was dtype
``?``, shape ``[]`` (the CSR Parquet chunk was read as a CSV line)."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from test_sparse import DIM, write_pages

from graphprep.formats import load_chunked_graph
from graphprep.formats.sparse import read_csr_parquet
from graphprep.pipeline import api


@pytest.fixture(scope="module")
def sparse_graph(scheduler, tmp_path_factory):
    """The pages table (2,500 nodes, a sparse 'feat' of width DIM) chunked in 900-row chunks:
    ``(folder, true nnz)``."""
    root = tmp_path_factory.mktemp("inspect-sparse")
    write_pages(root)
    api.chunk(str(root / "pages.json"), str(root / "g"), chunk_size=900, scheduler=scheduler)
    g = load_chunked_graph(str(root / "g"))
    files = g.node_data["page"]["feat"]
    nnz = sum(read_csr_parquet(g.path(f), files.dim).nnz for f in files.files)
    return root / "g", nnz


def inspect(*args) -> str:
    from graphprep.pipeline.cli import prep as cli
    result = CliRunner().invoke(cli, ["inspect", *map(str, args)])
    assert result.exit_code == 0, (result.output, result.exception)
    return result.output


def test_json_gives_a_sparse_fields_dtype_width_nnz_and_density(sparse_graph):
    folder, nnz = sparse_graph
    info = json.loads(inspect(folder, "--json"))
    field = next(f for f in info["node_data"] if f["name"] == "feat")
    assert (field["format"], field["dtype"], field["shape"], field["dim"]) == \
        ("csr", "float32", [DIM], DIM)
    assert field["nnz"] == nnz > 0
    assert field["density"] == pytest.approx(nnz / (2500 * DIM))
    assert field["num_chunks"] == 3 and field["rows"] == 2500


def test_text_shows_the_width_and_nnz_not_a_question_mark(sparse_graph):
    folder, nnz = sparse_graph
    text = inspect(folder)
    row = next(ln for ln in text.splitlines() if ln.split()[:2] == ["page", "feat"])
    assert f"float32  [{DIM}]" in row and " ? " not in row and "[]" not in row, row
    assert f"csr, {nnz:,} nnz (density {100 * nnz / (2500 * DIM):.3g}%)" in row, row


def test_the_dry_run_of_dispatch_counts_a_sparse_field_by_its_entries(sparse_graph):
    """Its rows weigh their stored entries, not the dense width (``_row_bytes`` of
    ``dispatch/estimate.py``)."""
    from graphprep.dispatch.estimate import _row_bytes
    folder, nnz = sparse_graph
    g = load_chunked_graph(str(folder))
    per_row = _row_bytes(g, "node")["page"]
    dense_feat = DIM * np.dtype("float32").itemsize
    assert per_row < dense_feat, per_row
    assert per_row >= nnz / 2500 * 8 * 0.99, per_row
