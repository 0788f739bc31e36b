"""``--dry-run``: the estimated worker peak and output size, from metadata alone, within 1.5x
of what the step then measures on fresh workers."""

from __future__ import annotations

import os

import pytest

from formats import load_chunked_graph
from pipeline import api
from pipeline.cluster import local_cluster, peak_rss_bytes
from pipeline.estimate import estimate_dispatch, estimate_partition


def _measured_peak(step) -> int:
    """The largest worker peak RSS (VmHWM) of ``step(client)`` on a fresh 2-worker cluster."""
    from distributed import Client
    with local_cluster(2) as cluster, Client(cluster) as client:
        step(client)
        return max(client.run(peak_rss_bytes).values())


def _du(path) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path)
               for f in files)


@pytest.fixture(scope="module")
def graph(tmp_path_factory, scheduler):
    root = tmp_path_factory.mktemp("est")
    from distributed import Client
    with Client(scheduler) as client:
        return api.synth(root / "g", nodes=200_000, edges=2_000_000, seed=4, client=client)


@pytest.mark.parametrize("method", ["metis", "multilevel"])
def test_partition_estimate_within_1_5x_of_measured(graph, tmp_path, method):
    estimate = estimate_partition(graph.graph, method, 4, worker_bytes=8 << 30)
    out = tmp_path / "a"
    peak = _measured_peak(lambda c: api.partition(graph.path, out, num_parts=4, method=method,
                                                  client=c))
    assert 1 / 1.5 <= estimate.peak_worker_bytes / peak <= 1.5, (estimate, peak)
    assert 1 / 1.5 <= estimate.output_bytes / _du(out) <= 1.5


def test_dispatch_estimate_within_1_5x_of_measured(graph, tmp_path, scheduler):
    from distributed import Client
    with Client(scheduler) as client:
        a = api.partition(graph.path, tmp_path / "a", num_parts=4, client=client)
    estimate = estimate_dispatch(load_chunked_graph(graph.path), 4)
    peak = _measured_peak(lambda c: api.dispatch(graph.path, a.path, tmp_path / "d", client=c))
    assert 1 / 1.5 <= estimate.peak_worker_bytes / peak <= 1.5, (estimate, peak)
    assert 1 / 1.5 <= estimate.output_bytes / _du(tmp_path / "d") <= 1.5


def test_dry_run_writes_nothing_and_names_the_method(prep, graph, tmp_path):
    result = prep("partition", graph.path, tmp_path / "a", "-p", 2, "--method", "auto",
                  "--dry-run", cluster=False)
    assert "partition (auto -> metis) dry run" in result.output and "MB" in result.output
    assert not (tmp_path / "a").exists()
    result = prep("partition", graph.path, tmp_path / "a", "-p", 2, "--method", "auto",
                  "--memory-limit", "500MiB", "--dry-run", cluster=False)
    assert "auto -> multilevel" in result.output
