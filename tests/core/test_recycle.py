"""Workers restarted between passes (graphprep.pipeline.core.recycle): over the limit only, their setup run
again, the same partition as in one process, and the limit each cluster gets."""

import os

import dask
import numpy as np
import pytest
from distributed import Client

from conftest import assign, options

from graphprep.pipeline.core.memory import anon_bytes
from graphprep.pipeline.core.cluster import FORKED_WORKERS, TaskRunner, local_cluster
from graphprep.pipeline.core.recycle import (AUTO_RECYCLE_MB, RECYCLE_MB_KEY, Recycler,
                                             on_every_worker, recycle_limit_bytes)


@pytest.fixture
def own_cluster():
    """A cluster of this test's own: restarts must not touch the session's workers; restarted
    workers are forked, as in a ``prep`` step's embedded cluster."""
    with dask.config.set(FORKED_WORKERS), local_cluster(2) as cluster, Client(cluster) as client:
        yield client


def _pids(client) -> dict:
    return client.run(os.getpid)


def _mark():
    os.environ["GRAPHPREP_TEST_SETUP"] = str(os.getpid())


def _marks(client) -> list:
    return sorted(client.run(lambda: os.environ.get("GRAPHPREP_TEST_SETUP", "")).values())


def test_only_workers_over_the_limit_restart_and_their_setup_runs_again(own_cluster):
    client = own_cluster
    with on_every_worker(TaskRunner(client, progress=False), _mark):
        before = _pids(client)
        assert _marks(client) == sorted(str(p) for p in before.values())
        held = client.run(anon_bytes)
        assert all(b > 10 << 20 for b in held.values()), held      # a worker holds > 10 MB
        Recycler(client, max(held.values()) + (64 << 20))()         # nobody over: nobody restarts
        assert _pids(client) == before
        recycler = Recycler(client, 1 << 20)
        recycler()
        after = _pids(client)
        assert recycler.restarts == 2 and not set(after.values()) & set(before.values())
        # the setup registered before the restart ran in the new processes
        assert _marks(client) == sorted(str(p) for p in after.values())
    # once the step is over its setup does not follow into processes started later
    client.restart()
    assert _marks(client) == ["", ""]


class EveryEighthPass(Recycler):
    """Restarts every worker (a limit no worker is under) before every 8th pass, so that
    restarts land in coarsening, contraction and refinement alike, without one per pass."""

    calls = 0

    def __call__(self) -> None:
        self.calls += 1
        if self.calls % 8 == 0:
            super().__call__()


def test_a_multilevel_partition_restarted_between_passes_is_the_same(homo, tmp_path,
                                                                     own_cluster):
    from graphprep.pipeline.partition.multilevel import MultilevelPartitioner

    opts = options(4, ("ntypes", "train"), 0.05, coarse_edges=10_000, seed=5)
    method = MultilevelPartitioner(range_size=4096, refine_rounds=3)
    one = assign(method, homo, opts, tmp_path / "a")
    runner = TaskRunner(own_cluster, progress=False)
    runner.recycler = EveryEighthPass(own_cluster, 1 << 20)
    # The cluster's lost-worker check 15 s after a restart would hold back the restarts of
    # the next ~25 s (Recycler's docstring); this run checks the parts, not that guard.
    with dask.config.set({"distributed.deploy.lost-worker-timeout": "1h"}):
        restarted = assign(method, homo, opts, tmp_path / "b", runner)
    assert runner.recycler.restarts >= 16, (runner.recycler.calls, runner.recycler.restarts)
    np.testing.assert_array_equal(one, restarted)


def test_the_limit_auto_is_the_embedded_clusters_only(own_cluster, scheduler):
    assert recycle_limit_bytes(own_cluster) == AUTO_RECYCLE_MB << 20   # this process's cluster
    with Client(scheduler) as by_address:
        assert recycle_limit_bytes(by_address) is None                # may serve others
        with dask.config.set({RECYCLE_MB_KEY: 300}):
            assert recycle_limit_bytes(by_address) == 300 << 20
    with dask.config.set({RECYCLE_MB_KEY: 0}):
        assert recycle_limit_bytes(own_cluster) is None
        assert TaskRunner(own_cluster, progress=False).recycler is None


@pytest.mark.parametrize("value", ["-1", "lots"])
def test_cli_refuses_a_limit_that_is_not_mb_or_auto(prep, tmp_path, value):
    result = prep("partition", tmp_path, tmp_path / "out", "-p", 2, "--recycle-mb", value,
                  code=2)
    assert "--recycle-mb" in result.output and repr(value) in result.output


def test_no_restart_where_the_clusters_check_of_an_earlier_one_would_fall(own_cluster):
    import time

    recycler = Recycler(own_cluster, 1 << 20)
    delay = 15.0         # distributed.deploy.lost-worker-timeout's default
    for ago, held_back in ((2, False), (6, True), (15, True), (19, True), (22, False)):
        recycler._left_at = {"0": [time.monotonic() - ago]}
        assert recycler._checked_while_away("0") is held_back, (ago, delay)
        assert recycler._checked_while_away("1") is False
