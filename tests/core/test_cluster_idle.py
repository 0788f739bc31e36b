"""An embedded cluster spends little CPU while it waits: its workers run without Dask's
statistical profiler, and each of its processes checks its event loop once a second instead of
every 20 ms (``cluster.IDLE_QUIET``; an idle 2-worker cluster used 8.3 s of CPU a minute with
Dask's defaults and 2.7 s without them: examples/benchmarks/RESULTS.md)."""

from __future__ import annotations

import pytest
from distributed import Client

from graphprep.pipeline.core.cluster import _named_cluster, local_cluster


def quiet(dask_worker=None, dask_scheduler=None) -> tuple[bool, float]:
    """(runs Dask's statistical profiler, event-loop check interval in ms) of the server it
    runs on (``Client.run`` and ``run_on_scheduler`` pass it by name)."""
    callbacks = (dask_worker or dask_scheduler).periodic_callbacks
    return "profile" in callbacks, callbacks["tick"].callback_time


@pytest.mark.parametrize("make", [lambda: local_cluster(2),
                                  lambda: _named_cluster(["m0", "m1"], "1GB")],
                         ids=["local", "named machines"])
def test_embedded_clusters_run_without_profiler_and_check_their_loop_once_a_second(make):
    with make() as cluster, Client(cluster) as client:
        workers = client.run(quiet)
        assert sorted(workers.values()) == [(False, 1000.0)] * 2, workers
        assert client.run_on_scheduler(quiet) == (False, 1000.0)
