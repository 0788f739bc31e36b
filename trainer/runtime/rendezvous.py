"""One rendezvous for the process group (DDP) and RPC, from ``torchrun``-style env vars.

``MASTER_ADDR``/``MASTER_PORT`` name a TCP store (created by rank 0, listening on that address
only, or by ``torchrun``'s agent); the gloo/nccl process group and the RPC group meet on it.
No port is a constant.
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed import rpc
from torch.distributed.rendezvous import register_rendezvous_handler

from graphprep.trainer.runtime import health
from graphprep.trainer.runtime.launch import STORE_FD_ENV, listening_socket
from graphprep.trainer.runtime.netif import NetworkSetupError, resolve, talk_address
from graphprep.trainer.sampling.service import rank_name

log = logging.getLogger("graphprep.trainer")


@dataclass(frozen=True)
class RankEnv:
    """Where this process sits: global rank, world size, rank on its host, master address."""

    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int
    agent_store: bool  # torchrun's agent already serves the store on MASTER_PORT
    local_world_size: int = 1  # ranks on this host

    @classmethod
    def from_env(cls) -> "RankEnv":
        try:
            return cls(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]),
                       int(os.environ.get("LOCAL_RANK", os.environ["RANK"])),
                       os.environ.get("MASTER_ADDR", "127.0.0.1"),
                       int(os.environ["MASTER_PORT"]),
                       os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True",
                       int(os.environ.get("LOCAL_WORLD_SIZE", 1)))
        except KeyError as err:
            raise RuntimeError(f"environment variable {err.args[0]} is not set (run under "
                               "`python -m graphprep.trainer` or torchrun)") from None


def backend_for(device: torch.device, shared_gpu: bool = False) -> str:
    """The process-group backend for ranks computing on ``device``: gloo on CPU; on CUDA,
    NCCL for the gradients plus gloo for CPU tensors. The epoch statistics, evaluation
    counts, barriers and object gathers are CPU tensors, and a plain ``"nccl"`` group has no
    CPU backend: each of those collectives would fail on the first epoch.

    ``shared_gpu``: some rank of the job shares its GPU with another. NCCL refuses two ranks
    on one GPU ("Duplicate GPU detected"), so gloo reduces the CUDA tensors too, through
    host memory: slower gradient sync, but a 1-GPU host can train a many-part graph."""
    if device.type != "cuda" or shared_gpu:
        return "gloo"
    return "cpu:gloo,cuda:nccl"


def any_rank(store, key: str, flag: bool, world_size: int, timeout: timedelta) -> bool:
    """Whether ``flag`` holds on any rank: every rank calls this once with the same ``key``
    and blocks until all have. Used before the process group exists (its backend is what
    the ranks must agree on), so it runs on the job's store alone."""
    store.add(f"{key}/true", int(flag))
    if store.add(f"{key}/arrived", 1) == world_size:
        store.set(f"{key}/done", "1")
    store.wait([f"{key}/done"], timeout)
    return store.add(f"{key}/true", 0) > 0


def start(env: RankEnv, device: torch.device, timeout_s: float) -> None:
    """Join the process group (its backend as :func:`backend_for` picks for ``device``, the
    same on every rank) and the RPC group, both on the one store at ``MASTER_ADDR``; every
    blocking call is bounded by ``timeout_s`` so a dead peer ends this rank with an error
    instead of a hang. Call ``graphprep.trainer.runtime.netif`` first: it picks the interface the process
    groups listen on.

    Each rank says who it is in the store and, once both groups are up, beats there
    (``graphprep.trainer.runtime.health``): a wait that times out can then name the ranks that went silent."""
    timeout = timedelta(seconds=timeout_s)
    store = _store(env, timeout)
    _job[:] = [_JobStore(store, env.rank, env.world_size,
                         serves=env.rank == 0 and not env.agent_store, timeout=timeout)]
    health.publish(store, env.rank, health.me(talk_address(env.master_addr)))
    backend = backend_for(device)
    if device.type == "cuda":
        shares = env.local_world_size > torch.cuda.device_count()
        if any_rank(dist.PrefixStore("gpu-shared", store), "any", shares, env.world_size,
                    timeout):
            backend = backend_for(device, shared_gpu=True)
            if shares:
                log.warning("%d ranks on this host share %d GPU(s): NCCL refuses two ranks on "
                            "one GPU, so gloo reduces the gradients (through host memory)",
                            env.local_world_size, torch.cuda.device_count())
    dist.init_process_group(backend, store=dist.PrefixStore("pg", store), rank=env.rank,
                            world_size=env.world_size, timeout=timeout)
    _rpc_store[:] = [dist.PrefixStore("rpc", store)]
    options = rpc.TensorPipeRpcBackendOptions(init_method=f"{RPC_SCHEME}://",
                                              rpc_timeout=timeout_s, num_worker_threads=16)
    rpc.init_rpc(rank_name(env.rank), rank=env.rank, world_size=env.world_size,
                 rpc_backend_options=options)
    # init_rpc met every rank on the store, so every identity is published by now
    health.start_heartbeat(health.heartbeat_store(env.master_addr, env.master_port,
                                                  env.world_size),
                           env.rank, env.world_size, (resolve(env.master_addr), env.master_port),
                           None if env.agent_store else 0)


def _store(env: RankEnv, timeout: timedelta) -> dist.TCPStore:
    """The job's store: hosted by torchrun's agent, or by rank 0 listening on ``MASTER_ADDR``
    only (torch's own server would listen on every interface: anyone reaching the port could
    write into the job's rendezvous)."""
    if env.rank != 0 or env.agent_store:
        return dist.TCPStore(env.master_addr, env.master_port, env.world_size, False,
                             timeout=timeout)
    return dist.TCPStore(env.master_addr, env.master_port, env.world_size, True,
                         timeout=timeout, master_listen_fd=_store_listener(env))


def _store_listener(env: RankEnv) -> int:
    """Rank 0's listening socket for the store: the one the local launcher bound and passed
    on (``STORE_FD_ENV``), else bound here to ``MASTER_ADDR:MASTER_PORT``."""
    inherited = os.environ.pop(STORE_FD_ENV, None)
    if inherited is not None:
        try:
            listener = socket.socket(fileno=int(inherited))
        except (OSError, ValueError) as err:
            raise NetworkSetupError(f"{STORE_FD_ENV}={inherited}: {err}") from None
        port, fd = listener.getsockname()[1], listener.detach()
        if port != env.master_port:
            raise NetworkSetupError(f"{STORE_FD_ENV}={inherited} is not a socket on "
                                    f"MASTER_PORT {env.master_port}")
        return fd
    try:
        listener = listening_socket(resolve(env.master_addr), env.master_port,
                                    max(128, env.world_size))
    except OSError as err:
        raise NetworkSetupError(f"rank 0 cannot listen on MASTER_ADDR={env.master_addr} "
                                f"port {env.master_port}: {err}") from None
    return listener.detach()


# RPC meets on the job's store through this rendezvous scheme: its tcp:// scheme would start
# a second store server on every interface, on a port rank 0 would have to pick and publish.
RPC_SCHEME = "graphprep"
_rpc_store: list = []


def _rpc_rendezvous(url: str, **kwargs):
    yield _rpc_store[0], kwargs.get("rank", -1), kwargs.get("world_size", -1)


register_rendezvous_handler(RPC_SCHEME, _rpc_rendezvous)


@dataclass(frozen=True)
class _JobStore:
    """This rank's client of the job's store, and whether this rank's process serves it."""

    store: dist.Store
    rank: int
    world_size: int
    serves: bool
    timeout: timedelta

    def leave(self) -> None:
        """Say this rank is done with the store; the rank serving it then waits until every
        rank has said so. RPC's graceful shutdown ends in store reads (its last call-count
        round) that a quick rank finishes before a slow one: were the serving rank to exit
        then, the slow rank's read would fail with "Connection reset by peer" after a
        successful run."""
        if self.store.add("left", 1) == self.world_size:
            self.store.set("all-left", "1")
        if not self.serves:
            return
        try:
            self.store.wait(["all-left"], self.timeout)
        except RuntimeError as err:  # DistStoreError: a rank died after its work was done
            log.warning("rank %d: not every rank left the job's store (%s); ending anyway",
                        self.rank, err)


_job: list[_JobStore] = []


def stop() -> None:
    """Clean shutdown: wait until every rank is done with requests, then leave RPC, then the
    process group. The heartbeat stops once every rank is past RPC shutdown (none waits for
    another after it). The rank serving the job's store ends last (:meth:`_JobStore.leave`)."""
    health.where.at("the RPC shutdown")
    rpc.shutdown(graceful=True)
    health.stop_heartbeat()
    dist.destroy_process_group()
    while _job:
        _job.pop().leave()
