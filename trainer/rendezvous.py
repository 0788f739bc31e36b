"""One rendezvous for the process group (DDP) and RPC, from ``torchrun``-style env vars.

``MASTER_ADDR``/``MASTER_PORT`` name a TCP store (created by rank 0, or by ``torchrun``'s agent);
the gloo/nccl process group runs on it, and rank 0 picks a free port for RPC at runtime and
publishes it there. No port is a constant.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import timedelta

import torch.distributed as dist
from torch.distributed import rpc

from .launch import free_port  # torch-free home (the launcher needs it); used here too
from .service import rank_name

RPC_PORT_KEY = "graphprep/rpc_port"


@dataclass(frozen=True)
class RankEnv:
    """Where this process sits: global rank, world size, rank on its host, master address."""

    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int
    agent_store: bool  # torchrun's agent already serves the store on MASTER_PORT

    @classmethod
    def from_env(cls) -> "RankEnv":
        try:
            return cls(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]),
                       int(os.environ.get("LOCAL_RANK", os.environ["RANK"])),
                       os.environ.get("MASTER_ADDR", "127.0.0.1"),
                       int(os.environ["MASTER_PORT"]),
                       os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True")
        except KeyError as err:
            raise RuntimeError(f"environment variable {err.args[0]} is not set (run under "
                               "`python -m trainer` or torchrun)") from None


def start(env: RankEnv, backend: str, timeout_s: float) -> None:
    """Join the process group and the RPC group; every blocking call is bounded by
    ``timeout_s`` so a dead peer ends this rank with an error instead of a hang."""
    timeout = timedelta(seconds=timeout_s)
    store = dist.TCPStore(env.master_addr, env.master_port, env.world_size,
                          is_master=env.rank == 0 and not env.agent_store, timeout=timeout)
    dist.init_process_group(backend, store=dist.PrefixStore("pg", store), rank=env.rank,
                            world_size=env.world_size, timeout=timeout)
    if env.rank == 0:
        store.set(RPC_PORT_KEY, str(free_port(_bind_host(env.master_addr))))
    port = int(store.get(RPC_PORT_KEY))
    options = rpc.TensorPipeRpcBackendOptions(
        init_method=f"tcp://{env.master_addr}:{port}", rpc_timeout=timeout_s,
        num_worker_threads=16)
    # torch's tcp:// rendezvous makes every rank a client when torchrun's agent hosts the
    # store; the RPC store on the port rank 0 just picked is hosted by rank 0 itself.
    agent = os.environ.pop("TORCHELASTIC_USE_AGENT_STORE", None)
    try:
        rpc.init_rpc(rank_name(env.rank), rank=env.rank, world_size=env.world_size,
                     rpc_backend_options=options)
    finally:
        if agent is not None:
            os.environ["TORCHELASTIC_USE_AGENT_STORE"] = agent


def _bind_host(addr: str) -> str:
    try:
        socket.inet_aton(addr)
        return addr
    except OSError:
        return socket.gethostbyname(addr)


def stop() -> None:
    """Clean shutdown: wait until every rank is done with requests, then leave RPC, then the
    process group."""
    rpc.shutdown(graceful=True)
    dist.destroy_process_group()
