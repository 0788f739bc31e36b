"""The Python API (``graphprep.pipeline.api``): typed results, an existing client, reruns, errors, and
the notebook-style example running end to end."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from graphprep.formats import FormatError
from graphprep.pipeline import api
from tests.conftest import edges_of

from conftest import ROOT  # noqa: E402  (the repository)


@pytest.fixture(scope="module")
def client(scheduler):
    from distributed import Client
    with Client(scheduler) as c:
        yield c


def test_steps_on_an_existing_client_return_typed_results(client, tmp_path):
    g = api.synth(tmp_path / "g", nodes=2000, edges=20000, seed=2, client=client)
    assert isinstance(g, api.GraphResult) and not g.reused
    assert g.graph.num_edges == {next(iter(g.graph.edge_types)): 20000}
    a = api.partition(g.path, tmp_path / "a", num_parts=2, method="metis", client=client)
    assert a.method == "metis" and a.num_parts == 2 and 0 < a.stats["edge_cut"] < 20000
    d = api.dispatch(g.path, a.path, tmp_path / "d", client=client)
    assert d.graph.num_parts == 2 and os.path.isabs(d.path)
    assert api.verify(g.path, d.path, client=client) == api.VerifyResult(20000, 2000)
    assert client.status == "running"                       # ours: not closed by the API
    src, _ = edges_of(g.path)
    assert sum(r[1] - r[0] for r in d.graph.edge_map[next(iter(d.graph.edge_types))]) == \
        len(src)

    again = api.partition(g.path, a.path, num_parts=2, method="metis", client=client)
    assert again.reused and again.stats == a.stats
    with pytest.raises(FormatError, match="--overwrite"):
        api.partition(g.path, a.path, num_parts=3, method="metis", client=client)


def test_bad_options_raise_format_errors_naming_the_option(client, tmp_path):
    g = api.synth(tmp_path / "g", nodes=500, edges=2000, client=client)
    with pytest.raises(FormatError) as err:
        api.partition(g.path, tmp_path / "a", num_parts=2, method="metis",
                      balance="train,speed", client=client)
    assert err.value.field == "--balance" and "'speed'" in str(err.value)
    with pytest.raises(FormatError, match="--balance"):
        api.partition(g.path, tmp_path / "a", num_parts=2, balance=("train",), client=client)
    with pytest.raises(FormatError, match="--split"):
        api.synth(tmp_path / "h", split=(0.5, 0.5), client=client)
    assert not (tmp_path / "a").exists() and not (tmp_path / "h").exists()


def test_split_edges_and_export_through_the_api(client, tmp_path):
    pytest.importorskip("torch")
    g = api.synth(tmp_path / "g", nodes=1000, edges=8000, client=client)
    s = api.split_edges(g.path, tmp_path / "s", etype="_N:_E:_N", client=client)
    (counts,) = s.split_counts.values()
    assert sum(counts) == 8000 and counts[1] > 0 and counts[2] > 0
    a = api.partition(s.path, tmp_path / "a", num_parts=2, client=client)
    d = api.dispatch(s.path, a.path, tmp_path / "d", client=client)
    e = api.export(d.path, tmp_path / "pyg", to="pyg", client=client)
    assert e.root.endswith("synth-partitions") and os.path.exists(
        os.path.join(e.root, "META.json"))
    assert api.export(d.path, tmp_path / "pyg", to="pyg", client=client) == \
        api.ExportResult(e.path, "pyg", e.root, reused=True)
    assert np.load(os.path.join(d.path, "part-0", "edge_feats", "_N___E___N",
                                "train_mask.npy")).dtype == bool


def test_the_notebook_style_example_runs(tmp_path):
    done = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "api_walkthrough.py"),
                           str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "PYTHONPATH": ROOT})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "verified 200,000 edges, 20,000 nodes" in done.stdout
    assert "reused: True" in done.stdout
