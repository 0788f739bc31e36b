"""Issue 48: a step whose workers are all gone, or whose scheduler stops answering, fails within
the lost-worker timeout with one line naming what was lost, whatever Dask's own calls do; and
an embedded cluster keeps the nanny of a worker restarted between passes.

The hang: bench_sampling.py's steps shared one embedded cluster; a worker restarted between
passes (recycle.py) was away when the cluster's lost-worker check of an earlier restart fired,
so the cluster closed its nanny; both workers went so, and the next step started with none
left, which the runner's watch (counting only workers it saw leave) never noticed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import dask
import psutil
import pytest
from distributed import Client

from faultkit import PREP, ROOT, assert_clean_exit, run_cli
from graphprep.pipeline.core.cluster import (LostWorkerError, TaskRunner, embedded_workers,
                                             local_cluster)

TIMEOUT = 3.0          # the lost-worker timeout of these tests
MARGIN = 25.0          # polling, Dask's own calls returning, a loaded machine


def _nap(seconds: float) -> float:
    """Task: sleeps (a step's work), returns its argument."""
    time.sleep(seconds)
    return seconds


def _in_thread(fn, limit: float):
    """``fn()`` in a daemon thread: ``(returned or raised, seconds)``, or the test fails when
    it has not ended within ``limit`` seconds (today's hang, without hanging the suite)."""
    box = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as err:  # noqa: BLE001 - examined by the test
            box["value"] = err
    start = time.monotonic()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(limit)
    assert not thread.is_alive(), f"still waiting after {limit:g} s (the hang)"
    return box["value"], time.monotonic() - start


def _close_every_nanny(cluster, client) -> None:
    """Every worker of ``cluster`` gone for good: its process killed and its nanny closed (as
    the cluster's own lost-worker check did to a restarted worker's)."""
    for pid in client.run(os.getpid).values():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for nanny in list(cluster.workers.values()):
        cluster.sync(nanny.close, timeout=10)


def test_an_embedded_cluster_keeps_the_nanny_of_a_worker_restarted_at_its_check():
    # The cluster's check of a worker 0.2 s after it left finds a restarting worker away.
    with local_cluster(2) as cluster, Client(cluster) as client:
        client.wait_for_workers(2, timeout=60)
        with dask.config.set({"distributed.deploy.lost-worker-timeout": "0.2s"}):
            worker = sorted(client.scheduler_info()["workers"])[0]
            client.restart_workers(workers=[worker], timeout=30)
            time.sleep(1.0)
        client.wait_for_workers(2, timeout=30)
        assert len(cluster.workers) == 2
        assert client.submit(_nap, 0, pure=False).result(timeout=30) == 0


def test_a_step_that_starts_with_every_worker_gone_fails_naming_them():
    """The bench's hang: the next pass (here: of the same runner) starts on a cluster whose
    workers are already gone."""
    with local_cluster(2) as cluster, Client(cluster) as client:
        client.wait_for_workers(2, timeout=60)
        names = sorted(str(w["name"]) for w in client.scheduler_info()["workers"].values())
        runner = TaskRunner(client, progress=False, lost_worker_timeout=TIMEOUT)
        runner.recycler = None
        assert runner(_nap, [0, 0], "first pass") == [0, 0]
        _close_every_nanny(cluster, client)
        err, took = _in_thread(lambda: runner(_nap, [0, 0, 0], "partition_stats"),
                               TIMEOUT + MARGIN)
    assert isinstance(err, LostWorkerError), err
    assert took < TIMEOUT + MARGIN
    line = str(err)
    assert "\n" not in line and "'partition_stats'" in line and "3 of 3 tasks" in line, line
    for name in names:
        assert f"worker {name} (tcp://" in line, line


def test_a_new_step_on_a_cluster_with_no_worker_fails_naming_the_scheduler():
    """A step of its own (a new client and runner, as each step of the bench has) on a cluster
    whose workers went before it connected."""
    with local_cluster(2) as cluster, Client(cluster) as client:
        client.wait_for_workers(2, timeout=60)
        _close_every_nanny(cluster, client)
        with Client(cluster.scheduler_address) as step:
            runner = TaskRunner(step, progress=False, lost_worker_timeout=TIMEOUT)
            err, took = _in_thread(lambda: runner(_nap, [0], "validate"), TIMEOUT + MARGIN)
    assert isinstance(err, LostWorkerError), err
    assert "no Dask worker joined within 3 s to run 'validate'" in str(err), err
    assert str(err).endswith(cluster.scheduler_address), err


def test_a_scheduler_that_stops_answering_fails_the_step_naming_it():
    """A frozen scheduler (SIGSTOP): the connection stays open and no Dask call returns.
    The task is importable there (the scheduler unpickles it): time.sleep."""
    dask_bin = os.path.join(os.path.dirname(sys.executable), "dask")
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    scheduler = subprocess.Popen([dask_bin, "scheduler", "--host", "127.0.0.1", "--port",
                                  str(port), "--no-dashboard"], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
    worker = subprocess.Popen([dask_bin, "worker", address, "--no-nanny", "--nthreads", "1",
                               "--no-dashboard"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        with Client(address, timeout=60) as client:
            client.wait_for_workers(1, timeout=60)
            runner = TaskRunner(client, progress=False, lost_worker_timeout=TIMEOUT)
            threading.Timer(1.0, os.kill, (scheduler.pid, signal.SIGSTOP)).start()
            err, took = _in_thread(lambda: runner(time.sleep, [30, 30], "dispatch build"),
                                   TIMEOUT + MARGIN)
            scheduler.kill()        # a stopped process still dies of SIGKILL
    finally:
        for proc in (scheduler, worker):
            proc.kill()
            proc.wait()
    assert isinstance(err, LostWorkerError), err
    line = str(err)
    assert line.startswith("no answer for ") and "during 'dispatch build' (2 of 2 tasks " \
        "unfinished) from the Dask scheduler" in line and line.endswith(address), line


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_cli_step_whose_workers_are_all_killed_exits_1_naming_them(tmp_path):
    """Every worker process of a step's embedded cluster killed mid-step, and again each time
    its nanny starts it anew: exit 1 within the lost-worker timeout, one line naming them."""
    out = tmp_path / "G"
    args = [PREP, "synth", str(out), "--nodes", "400000", "--edges", "6000000",
            "--chunk-size", "40000", "--lost-worker-timeout", "5", "--no-progress"]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    me = psutil.Process(proc.pid)
    partial = tmp_path / ".G.partial"
    deadline = time.monotonic() + 120
    while not any(partial.glob("*/*/*/part-*")) or not embedded_workers(me.pid):   # tasks ran
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    killed_at = time.monotonic()
    while proc.poll() is None and time.monotonic() < killed_at + 5 + MARGIN + 30:
        for child in embedded_workers(me.pid):
            try:
                child.kill()
            except psutil.Error:
                pass
        time.sleep(0.05)
    took = time.monotonic() - killed_at
    if proc.poll() is None:
        proc.kill()
    stdout, stderr = proc.communicate()
    result = subprocess.CompletedProcess(args, proc.returncode, stdout, stderr)
    text = assert_clean_exit(result, 1, ["'synth'", "within 5 s", "worker 0 (tcp://",
                                         "worker 1 (tcp://"])
    assert took < 5 + MARGIN + 30, took
    last = [ln for ln in text.splitlines() if ln.strip()][-1]
    assert "worker 0 (tcp://" in last and "worker 1 (tcp://" in last, last
    assert not out.exists() and not partial.exists()


@pytest.fixture(autouse=True)
def _quiet_dask():
    """The killed workers' and the stopped scheduler's Dask errors are expected here."""
    import logging
    saved = logging.getLogger("distributed").level
    logging.getLogger("distributed").setLevel(logging.CRITICAL)
    yield
    logging.getLogger("distributed").setLevel(saved)


# --- a --scheduler address that leads nowhere: one line naming it, at once or bounded ---------

def test_a_dead_scheduler_address_fails_at_once_naming_it(tmp_path):
    port = _free_port()                       # nothing listens there
    start = time.monotonic()
    proc = run_cli("synth", tmp_path / "G", "--scheduler", f"tcp://127.0.0.1:{port}",
                   "--no-progress", timeout=60)
    text = assert_clean_exit(proc, 1, ["connection refused"])
    assert _last(text).endswith(f"--scheduler tcp://127.0.0.1:{port}"), text
    assert time.monotonic() - start < 20            # not Dask's 30 s of retries


@pytest.mark.parametrize("address,says", [("127.0.0.1", "missing port"),
                                          ("http://127.0.0.1:8787", "unknown scheme"),
                                          ("tcp://no-such-host.invalid:8786", "unknown host")])
def test_a_scheduler_address_that_names_no_scheduler_is_bad_input(tmp_path, address, says):
    proc = run_cli("synth", tmp_path / "G", "--scheduler", address, "--no-progress",
                   timeout=60)
    text = assert_clean_exit(proc, 2, [says])
    assert _last(text).endswith(f"--scheduler {address}"), text


def test_a_server_that_never_answers_the_handshake_is_bounded(tmp_path):
    """Something listens but never speaks Dask (a web server waiting for a request)."""
    import socket
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        address = f"tcp://127.0.0.1:{server.getsockname()[1]}"
        env = {**os.environ, "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "3s"}
        start = time.monotonic()
        proc = run_cli("synth", tmp_path / "G", "--scheduler", address, "--no-progress",
                       timeout=90, env=env)
    text = assert_clean_exit(proc, 1, ["no Dask scheduler answered within 3 s"])
    assert _last(text).endswith(f"--scheduler {address}"), text
    assert time.monotonic() - start < 40


def _last(text: str) -> str:
    return [ln for ln in text.splitlines() if ln.strip()][-1]
