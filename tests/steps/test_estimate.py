"""``--dry-run``: the estimated worker peak and output size, from metadata alone, within 1.5x
of what the step then measures on fresh workers (here at 2x10^6 edges); from the metadata
of the graphs RESULTS.md measured, near those peaks at 2x10^6-10^9 edges, where a wrong
scaling shows; and shaped as the model says across sizes and parts."""

from __future__ import annotations

import os

import pytest

from graphprep.formats import load_chunked_graph
from graphprep.pipeline import api
from graphprep.pipeline.core.cluster import local_cluster
from graphprep.pipeline.core.memory import peak_rss_bytes
from graphprep.pipeline.core.recycle import RECYCLE_MB_KEY
from graphprep.dispatch.estimate import estimate_dispatch
from graphprep.pipeline.core.costs import MB, Estimate
from graphprep.pipeline.partition.estimate import estimate_partition
from graphprep.pipeline.synth import SynthSpec, plan


def _measured_peak(step) -> int:
    """The largest worker peak RSS (VmHWM) of ``step(client)`` on a fresh 2-worker cluster,
    whose workers are never restarted between passes (``--recycle-mb 0``): a restarted worker's
    high-water mark would leave with it."""
    import dask
    from distributed import Client
    with local_cluster(2) as cluster, Client(cluster) as client, \
            dask.config.set({RECYCLE_MB_KEY: 0}):
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


@pytest.mark.parametrize("method", ["metis", "multilevel", "kaminpar"])
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


# Worker peaks measured (VmHWM of the busier worker, MiB) on `prep synth` graphs of 10 edges per
# node, 4 parts, in RESULTS.md: fresh 2-worker clusters, 32-dim features ("--dry-run estimates
# against measured worker peaks", 2026-11-23; the multilevel 10^8 row from bench_partition.py);
# 16-dim features at 10^9 (bench_pipeline.py --huge, 2026-11-27); dispatch remeasured on
# 2026-11-27 after the halo became flags ("--dry-run dispatch estimate refitted"); kaminpar from
# bench_partition.py --methods metis,prep_kaminpar --balance ntypes --parts 4 (8-dim features,
# which partition does not read; issue 32, RESULTS.md).
# (nodes, edges, feature dim) -> {step: MiB}.
MEASURED_MB = {(200_000, 2 * 10**6, 32): {"random": 171, "metis": 608, "multilevel": 350,
                                          "dispatch": 277, "kaminpar": 325},
               (10**6, 10**7, 32): {"random": 195, "metis": 2688, "multilevel": 433,
                                    "dispatch": 395, "kaminpar": 710},
               (10**7, 10**8, 32): {"multilevel": 542},
               (10**8, 10**9, 16): {"multilevel": 3564, "dispatch": 1041}}
# The sizes the model was calibrated on: pipeline/core/costs.py reports 0.96-1.19x there
# (measured 0.957-1.195); held to 0.9-1.3x, a margin of about 0.06-0.1 for a recalibration.
# 10^9 was not among them and is held to this module's 1.5x: measured multilevel 0.85x,
# dispatch 1.22x.
CALIBRATED = (0.9, 1.3)
BAND = {size: CALIBRATED if size[1] < 10**9 else (1 / 1.5, 1.5) for size in MEASURED_MB}


@pytest.fixture(scope="module")
def features(graph, tmp_path_factory, scheduler):
    """Folders of synth graphs whose field headers ``estimate_dispatch`` reads, by feature
    dim: the module's graph (32) and a small one with 16-dim features."""
    from distributed import Client
    with Client(scheduler) as client:
        small = api.synth(tmp_path_factory.mktemp("est16") / "g", nodes=2000, edges=20_000,
                          feat_dim=16, client=client)
    return {32: graph.path, 16: small.path}


def synth_metadata(features, nodes: int, edges: int, feat_dim: int = 32):
    """The metadata ``prep synth`` would write at this size (``synth.plan``, nothing written),
    rooted where a graph with the same features lies (``estimate_dispatch`` reads the header
    of each field's first chunk)."""
    _, _, meta = plan(SynthSpec(nodes, edges, feat_dim=feat_dim), features[feat_dim], 1 << 20)
    return meta


def estimate(meta, step: str, parts: int = 4) -> Estimate:
    """The estimate of the run RESULTS.md measured: those partitions balanced node counts
    only (the default before work balancing), so ``balance=()``."""
    if step == "dispatch":
        return estimate_dispatch(meta, parts)
    return estimate_partition(meta, step, parts, balance=(), worker_bytes=8 << 30)


@pytest.mark.parametrize("size", list(MEASURED_MB), ids=lambda s: f"{s[1]:.0e}")
def test_estimates_near_the_peaks_measured_at_every_size(features, size):
    """Each estimate, from the metadata of the graph it was measured on, against that peak:
    2x10^6 is the calibration point of the live tests above; at 10^7-10^9 a per-edge cost
    too high or too low, or a multilevel peak that grows with the graph instead of staying
    flat (or stays flat where the O(nodes) pages grow), leaves the band."""
    meta = synth_metadata(features, *size)
    ratios = {step: estimate(meta, step).peak_worker_bytes / MB / measured
              for step, measured in MEASURED_MB[size].items()}
    low, high = BAND[size]
    assert all(low <= r <= high for r in ratios.values()), ratios


def test_estimates_scale_as_the_model_says(features):
    """The model's shape, from 10^6 to 10^9 edges (10 edges per node): metis is one task of
    the whole graph (its part above the idle worker grows exactly with the edges);
    multilevel's peak never shrinks with the graph and stays within the flat target from
    10^7 to 10^8 (<= 1.5x: range tasks of bounded size, the coarse budget capped); dispatch
    needs less per worker as parts are added, and its output does not depend on them;
    partition peaks do not depend on the parts."""
    from graphprep.pipeline.core.costs import WORKER_IDLE

    sizes = [10**6, 10**7, 10**8, 10**9]
    metas = {m: synth_metadata(features, m // 10, m) for m in sizes}
    metis = {m: estimate(metas[m], "metis").peak_worker_bytes - WORKER_IDLE for m in sizes}
    for a, b in zip(sizes, sizes[1:]):
        assert metis[b] == pytest.approx(metis[a] * b / a, rel=1e-6)
    ml = {m: estimate(metas[m], "multilevel").peak_worker_bytes for m in sizes}
    assert all(ml[a] <= ml[b] for a, b in zip(sizes, sizes[1:])), ml
    assert ml[10**8] <= 1.5 * ml[10**7], ml
    for m in sizes:
        by_parts = [estimate(metas[m], "dispatch", p) for p in (2, 4, 8, 16)]
        peaks = [e.peak_worker_bytes for e in by_parts]
        assert all(a > b for a, b in zip(peaks, peaks[1:])), (m, peaks)
        assert len({e.output_bytes for e in by_parts}) == 1
        for step in ("random", "metis", "multilevel", "kaminpar"):
            assert len({estimate(metas[m], step, p).peak_worker_bytes
                        for p in (2, 4, 8, 16)}) == 1
