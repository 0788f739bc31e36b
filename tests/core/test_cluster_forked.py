"""An embedded cluster forks its workers from one forkserver that imported Dask, numpy and
pyarrow once (``cluster.FORKED_WORKERS``, ``cluster.WORKER_PRELOAD``), instead of spawning a
fresh interpreter per worker that imports them again (examples/benchmarks/RESULTS.md, "Workers
forked, not spawned")."""

from __future__ import annotations

import os
import sys

import pytest
from distributed import Client

from graphprep.pipeline.core.cluster import (FORKED_WORKERS, WORKER_PRELOAD, ClusterOptions,
                                             _named_cluster, dask_client, local_cluster)

pytestmark = pytest.mark.skipif(not FORKED_WORKERS, reason="no forkserver on this platform "
                                "(Windows): workers are spawned there")


def start_state() -> tuple[str, list[str]]:
    """How this worker process was started (the multiprocessing module named on its command
    line: ``forkserver`` or ``spawn``) and which of the preloaded modules it holds."""
    import psutil
    cmdline = " ".join(psutil.Process().cmdline())
    how = "forkserver" if "multiprocessing.forkserver" in cmdline else (
        "spawn" if "multiprocessing.spawn" in cmdline else cmdline)
    return how, sorted(m for m in WORKER_PRELOAD if m in sys.modules)


@pytest.mark.parametrize("make", [lambda: local_cluster(2),
                                  lambda: _named_cluster(["m0", "m1"], "1GB")],
                         ids=["local", "named machines"])
def test_embedded_workers_are_forked_with_the_preloaded_modules(make):
    with make() as cluster, Client(cluster) as client:
        states = list(client.run(start_state).values())
    assert states == [("forkserver", sorted(WORKER_PRELOAD))] * 2, states
    assert "torch" not in WORKER_PRELOAD        # prep's workers never import torch


def test_a_steps_worker_restarted_between_passes_is_forked_too():
    """A ``prep`` step's embedded cluster (``dask_client``) keeps the method for its life: the
    nanny's restart (``graphprep.pipeline.core.recycle``) forks the new worker as well."""
    with dask_client(ClusterOptions(progress=False)) as client:
        before = client.run(os.getpid)
        client.restart_workers(list(before))
        after = client.run(start_state)
        assert set(client.run(os.getpid).values()).isdisjoint(before.values())
    assert list(after.values()) == [("forkserver", sorted(WORKER_PRELOAD))] * 2, after
