"""``prep report``: a self-contained HTML page whose plots render, and whose cut matrix and
degree histogram are the graph's own."""

from __future__ import annotations

import base64
import json
import re
import struct

import numpy as np
import pytest

from formats.partitioned import load_partitioned
from pipeline.cluster import ClusterOptions, TaskRunner, dask_client
from pipeline.report.profile import degree_bins, profile_partitioned
from tests.conftest import dispatched, edges_of

pytest.importorskip("matplotlib")


@pytest.fixture(scope="module")
def cora_parts(scheduler, cora_chunked, tmp_path_factory):
    return dispatched(scheduler, cora_chunked, tmp_path_factory.mktemp("rep") / "d", 3,
                      "--method", "metis")


def _pngs(page: str) -> list[tuple[int, int, int]]:
    """(bytes, width, height) of every inlined PNG."""
    out = []
    for data in re.findall(r'src="data:image/png;base64,([^"]+)"', page):
        raw = base64.b64decode(data)
        assert raw[:8] == b"\x89PNG\r\n\x1a\n"
        width, height = struct.unpack(">II", raw[16:24])
        out.append((len(raw), width, height))
    return out


def test_profile_is_the_graphs_own(scheduler, cora_chunked, cora_parts):
    g = load_partitioned(cora_parts)
    with dask_client(ClusterOptions(scheduler, progress=False)) as client:
        prof = profile_partitioned(g, TaskRunner(client, False))
    src, dst = edges_of(cora_chunked)
    assignment = np.load(str(cora_parts).replace("/d/graph.json", "/d-a/_N.npy"))
    expect = np.zeros((3, 3), np.int64)
    np.add.at(expect, (assignment[src], assignment[dst]), 1)
    assert np.array_equal(prof.cut, expect)
    indeg = np.bincount(dst, minlength=g.num_nodes["_N"])
    assert np.array_equal(prof.degree_hist["_N:_E:_N"], degree_bins(indeg))
    assert sum(prof.edges) == len(src) and sum(prof.nodes["_N"]) == 2708


def test_report_renders_every_kind(prep, cora_chunked, cora_parts, tmp_path):
    metrics = tmp_path / "metrics.json"
    epochs = [{"epoch": e, "loss": 1.5 / (e + 1), "train_acc": 0.5 + e / 10,
               "val_acc": 0.45 + e / 12, "test_acc": 0.44 + e / 12,
               "time_per_rank_s": {"sample_local": 1.0, "feature_fetch": 0.5,
                                   "forward_backward": 2.0},
               "time_by_rank_s": {"sample_local": [0.5, 1.5], "feature_fetch": [0.5, 0.5],
                                  "forward_backward": [1.0, 3.0], "epoch_s": [3.0, 5.0]}}
              for e in range(4)]
    metrics.write_text(json.dumps({"config": {"epochs": 4}, "epochs": epochs,
                                   "summary": {"best_epoch": 3, "test_acc": 0.69}}))
    out = tmp_path / "report.html"
    d = str(cora_parts).rsplit("/", 1)[0]
    prep("report", d, d.replace("/d", "/d-a"), metrics, cora_chunked, "--out", out)
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    kinds = re.findall(r'<section class="(\w+)">', page)
    assert kinds == ["partitioned", "assignment", "metrics", "chunked"]
    pngs = _pngs(page)
    assert len(pngs) == 3 + 1 + 4    # degrees, bars, cut; bars; loss, metrics, time, by rank
    assert all(size > 8000 and w >= 300 and h >= 250 for size, w, h in pngs)
    for path in (d, metrics, cora_chunked):
        assert f": {path}</h2>" in page


def test_report_of_a_missing_path_exits_2(prep, tmp_path):
    result = prep("report", tmp_path / "nothing", "--out", tmp_path / "r.html", code=2)
    assert "nothing" in result.output and not (tmp_path / "r.html").exists()
