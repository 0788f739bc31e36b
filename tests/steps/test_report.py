"""``prep report``: a self-contained HTML page whose plots render, whose cut matrix and
degree histogram are the graph's own, and whose metrics sections plot what real trainer runs of
both tasks (node classification, link prediction) wrote."""

from __future__ import annotations

import base64
import html
import json
import re
import struct
import subprocess
import sys

import numpy as np
import pytest

from graphprep.formats.partitioned import load_partitioned
from graphprep.pipeline.core.cluster import ClusterOptions, TaskRunner, dask_client
from graphprep.pipeline.report.profile import degree_bins, profile_partitioned
from tests.conftest import dispatched, edges_of, run_prep

from conftest import ROOT  # noqa: E402  (the repository)

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


@pytest.fixture(scope="module")
def trained(scheduler, cora_chunked, cora_parts, tmp_path_factory):
    """``--metrics-out`` files of real short runs (2 epochs, both trainers at once): node
    classification on the 3 METIS parts, and ``--task link`` on Cora split by ``prep
    split-edges`` (1 part). ``{"node": path, "link": path}``."""
    root = tmp_path_factory.mktemp("rep-train")
    run_prep(scheduler, "split-edges", cora_chunked, root / "s", "--etype", "_N:_E:_N")
    runs = {"node": [cora_parts],
            "link": [dispatched(scheduler, root / "s", root / "ld", 1), "--task", "link"]}
    procs = {task: subprocess.Popen(
        [sys.executable, "-m", "graphprep.trainer", "--graph", *map(str, args), "--epochs", "2",
         "--fanouts", "5,5", "--threads", "1", "--no-progress", "--metrics-out",
         str(root / f"{task}.json"), "--checkpoint-dir", str(root / f"ckpt-{task}")],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for task, args in runs.items()}
    for task, proc in procs.items():
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, (task, err[-3000:])
    return {task: root / f"{task}.json" for task in runs}


@pytest.fixture
def plotted(monkeypatch):
    """The (title, metric names) of every curve figure the report draws, in order."""
    from graphprep.pipeline.report import plots

    drawn, curves = [], plots.curves

    def record(epochs, names, title):
        drawn.append((title, list(names)))
        return curves(epochs, names, title)
    monkeypatch.setattr(plots, "curves", record)
    return drawn


def _metrics_section(page: str) -> str:
    (sec,) = re.findall(r'<section class="metrics">.*?</section>', page, re.S)
    return sec


def _alts(sec: str) -> list[str]:
    return re.findall(r'<img alt="([^"]+)"', sec)


def _metric_rows(sec: str) -> dict[str, list[str]]:
    """The metric table of the section's text: ``{name: [best, final]}``."""
    text = html.unescape(re.search(r"<pre>(.*?)</pre>", sec, re.S).group(1))
    rows = {}
    for line in text.splitlines():
        cells = line.split()
        if len(cells) == 3 and re.search(r"loss|acc|auc|mrr|hits", cells[0]):
            rows[cells[0]] = cells[1:]
    return rows


def test_report_renders_every_kind(prep, cora_chunked, cora_parts, trained, plotted,
                                   tmp_path):
    """All four kinds in one page; the metrics are a real node-classification run's."""
    metrics = trained["node"]
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
    sec = _metrics_section(page)
    assert _alts(sec) == ["loss", "metrics", "time per rank", "time by rank"]
    assert plotted == [("Training loss", ["loss"]),
                       ("Metrics", ["test_acc", "train_acc", "val_acc"])]
    data = json.loads(metrics.read_text())
    assert re.search(r"task +node\n", sec) and len(data["epochs"]) == 2
    last = data["epochs"][-1]
    assert len(last["time_by_rank_s"]["epoch_s"]) == 3                 # one bar per rank
    rows = _metric_rows(sec)
    assert set(rows) == {"loss", "train_acc", "val_acc", "test_acc"}
    assert rows["test_acc"][1] == f"{last['test_acc']:.4f}"            # the file's own value


def test_report_of_a_link_prediction_run(prep, trained, plotted, tmp_path):
    """A real ``--task link`` metrics file: its AUC, MRR and Hits@k curves (no accuracy),
    the loss and both time figures, and its table with the file's values."""
    metrics = trained["link"]
    out = tmp_path / "link.html"
    prep("report", metrics, "--out", out)
    page = out.read_text()
    assert re.findall(r'<section class="(\w+)">', page) == ["metrics"]
    sec = _metrics_section(page)
    assert _alts(sec) == ["loss", "metrics", "time per rank", "time by rank"]
    assert all(size > 8000 and w >= 300 and h >= 250 for size, w, h in _pngs(page))
    data = json.loads(metrics.read_text())
    last = data["epochs"][-1]
    expect = sorted(k for k in last if re.fullmatch(r"(val|test)_(auc|mrr|hits@\d+)", k))
    assert {"val_auc", "test_auc", "val_mrr", "test_mrr"} <= set(expect)
    assert plotted == [("Training loss", ["loss"]), ("Metrics", expect)]
    assert re.search(r"task +link\n", sec)
    rows = _metric_rows(sec)
    assert set(rows) == {"loss", *expect}
    for name in ("test_auc", "test_mrr"):
        assert rows[name][1] == f"{last[name]:.4f}", (name, rows[name])


def test_report_of_a_missing_path_exits_2(prep, tmp_path):
    result = prep("report", tmp_path / "nothing", "--out", tmp_path / "r.html", code=2)
    assert "nothing" in result.output and not (tmp_path / "r.html").exists()
