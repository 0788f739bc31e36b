"""The trust model on one host: which interface ranks choose and listen on, what the embedded
Dask cluster listens on, and file modes that follow the user's umask. (Two hosts:
test_multihost.py.)"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time

import pytest

from conftest import dispatched
from hostsim import ROOT, listening
from graphprep.trainer.runtime import netif
from graphprep.trainer.runtime import rendezvous


def _devices_served(backend: str) -> dict[str, str]:
    """Device type -> backend for an ``init_process_group`` backend string, as torch reads it."""
    import torch.distributed as dist
    if ":" in backend:
        return dict(pair.split(":") for pair in backend.split(","))
    return {device: backend for device in dist.Backend.backend_capability[backend]}


def test_cuda_ranks_keep_a_cpu_backend_for_their_cpu_collectives():
    """Epoch statistics, evaluation counts, barriers and object gathers are CPU tensors: the
    group of CUDA ranks must serve CPU too (a plain "nccl" group does not). NCCL itself is
    the CUDA-only part and cannot run here: no CUDA device."""
    import torch
    assert "cpu" not in _devices_served("nccl")              # why the choice matters
    cuda = _devices_served(rendezvous.backend_for(torch.device("cuda")))
    assert cuda == {"cpu": "gloo", "cuda": "nccl"}
    assert _devices_served(rendezvous.backend_for(torch.device("cpu")))["cpu"] == "gloo"
    # two ranks on one GPU: NCCL refuses them, gloo serves both device types
    shared = _devices_served(rendezvous.backend_for(torch.device("cuda"), shared_gpu=True))
    assert shared["cpu"] == "gloo" and shared["cuda"] == "gloo"


@pytest.mark.parametrize("flags", [(False, False, False), (False, True, False), (True, True, True)])
def test_ranks_agree_on_a_flag_any_of_them_holds(flags):
    """The GPU-sharing flag picks the backend, which every rank must agree on: any rank
    that shares its GPU turns every rank to gloo, and none returns before all have spoken."""
    from concurrent.futures import ThreadPoolExecutor
    from datetime import timedelta

    import torch.distributed as dist
    store = dist.HashStore()
    with ThreadPoolExecutor(len(flags)) as pool:
        answers = list(pool.map(lambda f: rendezvous.any_rank(
            store, "k", f, len(flags), timedelta(seconds=30)), flags))
    assert answers == [any(flags)] * len(flags)


def _rank0_env(port: int) -> rendezvous.RankEnv:
    return rendezvous.RankEnv(0, 2, 0, "127.0.0.1", port, agent_store=False)


def test_rank0_serves_the_store_on_the_socket_its_launcher_bound(monkeypatch):
    """The launcher binds the store's port before any rank starts and rank 0 inherits the
    socket: a port picked free and closed could be taken meanwhile by another process (a Dask
    worker, another job), which the other ranks would then talk to."""
    from graphprep.trainer.runtime.launch import STORE_FD_ENV, listening_socket
    with listening_socket("127.0.0.1") as held:
        port = held.getsockname()[1]
        monkeypatch.setenv(STORE_FD_ENV, str(held.fileno()))
        assert rendezvous._store_listener(_rank0_env(port)) == held.fileno()
        assert STORE_FD_ENV not in os.environ          # not passed on to rank 0's children
        held.detach()
    with listening_socket("127.0.0.1") as other:
        monkeypatch.setenv(STORE_FD_ENV, str(other.fileno()))
        with pytest.raises(netif.NetworkSetupError, match="is not a socket on MASTER_PORT"):
            rendezvous._store_listener(_rank0_env(other.getsockname()[1] + 1))
    monkeypatch.setenv(STORE_FD_ENV, "x")
    with pytest.raises(netif.NetworkSetupError, match="GRAPHPREP_STORE_FD=x"):
        rendezvous._store_listener(_rank0_env(1))


def test_rank0_without_a_launcher_binds_master_port_and_names_it_when_taken(monkeypatch):
    from graphprep.trainer.runtime.launch import STORE_FD_ENV, listening_socket
    monkeypatch.delenv(STORE_FD_ENV, raising=False)
    with listening_socket("127.0.0.1") as taken:
        with pytest.raises(netif.NetworkSetupError, match="rank 0 cannot listen on "
                           "MASTER_ADDR=127.0.0.1 port"):
            rendezvous._store_listener(_rank0_env(taken.getsockname()[1]))


def test_loopback_master_picks_lo_and_fills_unset_variables_only():
    env = {"TP_SOCKET_IFNAME": "mine"}
    chosen = netif.configure("127.0.0.1", multi_host=False, environ=env, cuda=True)
    assert chosen.address == "127.0.0.1" and chosen.is_loopback
    assert env == {"TP_SOCKET_IFNAME": "mine", "GLOO_SOCKET_IFNAME": chosen.name,
                   "NCCL_SOCKET_IFNAME": chosen.name}


def test_iface_overrides_everything_and_an_unknown_one_is_named():
    lo = netif.choose("127.0.0.1").name
    env = {"GLOO_SOCKET_IFNAME": "eth9"}
    assert netif.configure("127.0.0.1", multi_host=False, iface=lo, environ=env).how == "--iface"
    assert env == {"GLOO_SOCKET_IFNAME": lo, "TP_SOCKET_IFNAME": lo}
    with pytest.raises(netif.NetworkSetupError, match=r"--iface nosuch0: no such interface.*"
                                                       rf"{lo}"):
        netif.choose("127.0.0.1", "nosuch0")


def test_a_multi_host_job_on_loopback_is_refused_and_unresolvable_master_named(monkeypatch):
    with pytest.raises(netif.NetworkSetupError, match="MASTER_ADDR=localhost leads to the "
                                                      "loopback address"):
        netif.configure("localhost", multi_host=True, environ={})
    assert netif.configure("localhost", multi_host=None, environ={}).is_loopback
    # unknown span: a MASTER_ADDR other than 127.0.0.1/localhost means other hosts, so a name
    # that resolves to loopback here (stock Debian's hostname) is refused
    monkeypatch.setattr(netif, "choose", lambda *a: netif.Interface("lo", "127.0.1.1", "test"))
    with pytest.raises(netif.NetworkSetupError, match="MASTER_ADDR=node-a leads to"):
        netif.configure("node-a", multi_host=None, environ={})
    with pytest.raises(netif.NetworkSetupError, match="MASTER_ADDR=no-such-host.invalid: "
                                                      "cannot resolve"):
        netif.route_source("no-such-host.invalid")


@pytest.fixture(scope="module")
def cora_two_parts(scheduler, cora_chunked, tmp_path_factory):
    return dispatched(scheduler, cora_chunked, tmp_path_factory.mktemp("net") / "d", 2)


def test_multi_host_rank_on_loopback_names_the_variable(cora_two_parts):
    env = dict(os.environ, RANK="1", WORLD_SIZE="2", LOCAL_WORLD_SIZE="1", LOCAL_RANK="0",
               MASTER_ADDR="localhost", MASTER_PORT="1")
    env.pop("GRAPHPREP_LAUNCHER_PID", None)
    proc = subprocess.run([sys.executable, "-m", "graphprep.trainer", "--graph", cora_two_parts,
                           "--no-progress"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "set MASTER_ADDR to rank 0's address" in proc.stderr
    assert "Traceback" not in proc.stderr


def assert_umask_027(*folders) -> None:
    """Every file and folder under ``folders`` lacks the bits umask 027 removes."""
    checked = 0
    for top in folders:
        for folder, _, files in os.walk(top):
            for path in [folder] + [os.path.join(folder, f) for f in files]:
                mode = stat.S_IMODE(os.stat(path).st_mode)
                assert mode & 0o027 == 0, (path, oct(mode))
                checked += 1
    assert checked >= 2, folders


def test_local_ranks_listen_on_loopback_only_and_checkpoints_follow_the_umask(cora_two_parts,
                                                                              tmp_path):
    import psutil
    log = tmp_path / "train.log"
    with open(log, "w") as err:     # a file, not a pipe: nobody drains it while we poll
        proc = subprocess.Popen([sys.executable, "-m", "graphprep.trainer", "--graph", cora_two_parts,
                                 "--epochs", "1", "--fanouts", "5,5", "--threads", "1",
                                 "--no-progress", "--checkpoint-dir", str(tmp_path / "ckpt")],
                                cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err, text=True,
                                umask=0o027)
        seen = set()
        while proc.poll() is None:
            try:
                for rank in psutil.Process(proc.pid).children():
                    seen |= listening(rank.pid)
            except (psutil.Error, OSError):
                pass
            time.sleep(0.02)        # poll, don't spin: the ranks need both cores
    assert proc.returncode == 0, log.read_text()[-3000:]
    assert seen and {addr for addr, _ in seen} == {"127.0.0.1"}, seen
    assert_umask_027(tmp_path / "ckpt")


def test_embedded_cluster_listens_on_loopback_only(scheduler):
    # the session's embedded scheduler (and its dashboard) run in this process
    assert scheduler.startswith("tcp://127.0.0.1:")
    sockets = listening(os.getpid())
    assert ("127.0.0.1", int(scheduler.rsplit(":", 1)[1])) in sockets, sockets  # it is seen
    assert {addr for addr, _ in sockets} == {"127.0.0.1"}, sockets


def test_dispatch_output_follows_the_umask(cora_chunked, cora_two_parts, tmp_path):
    """Dispatch on an embedded cluster started under umask 027: its workers write nothing
    world-readable or group-writable."""
    prep = os.path.join(os.path.dirname(sys.executable), "prep")
    assignment = f"{os.path.dirname(cora_two_parts)}-a"
    done = subprocess.run([prep, "dispatch", str(cora_chunked), assignment, str(tmp_path / "d"),
                           "--no-progress"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, umask=0o027)
    assert done.returncode == 0, done.stderr[-3000:]
    assert_umask_027(tmp_path / "d")


def test_default_threads_share_the_cores_between_local_ranks_and_stop_at_eight():
    from graphprep.trainer.cli import default_threads
    assert default_threads(2, 1) == 2           # this machine: both cores
    assert default_threads(16, 2) == 8
    assert default_threads(16, 1) == 8          # 16 in one rank measured 4.7x slower (RESULTS)
    assert default_threads(64, 4) == 8
    assert default_threads(2, 4) == 1           # more ranks than cores: one each
