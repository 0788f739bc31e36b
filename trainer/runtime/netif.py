"""Which network interface a rank talks on: the one whose address routes to ``MASTER_ADDR``.

Gloo, TensorPipe and NCCL otherwise advertise the address this host's name resolves to, which
stock Debian and Ubuntu map to 127.0.0.1: ranks on other hosts then cannot connect
(``connectFullMesh failed ... remote=[127.0.0.1]``). A connected UDP socket names the source
address the kernel would use towards ``MASTER_ADDR`` without sending a packet; the interface
holding that address is the one every rank of this host uses. The choice is written into
``GLOO_SOCKET_IFNAME``, ``TP_SOCKET_IFNAME`` (and ``NCCL_SOCKET_IFNAME`` on CUDA) before any
process group starts; a variable the user set is kept, ``--iface`` overrides everything.

No torch here: the check runs, and fails, before torch is imported.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
import sys
from dataclasses import dataclass

import psutil

log = logging.getLogger("graphprep.trainer")

SOCKET_VARS = ("GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME")
CUDA_SOCKET_VARS = ("NCCL_SOCKET_IFNAME",)


class NetworkSetupError(RuntimeError):
    """This rank's network settings cannot work (exit 2 with the message)."""


@dataclass(frozen=True)
class Interface:
    """The interface a rank uses, its IPv4 address, and how it was chosen."""

    name: str
    address: str
    how: str

    @property
    def is_loopback(self) -> bool:
        return ipaddress.ip_address(self.address).is_loopback


def resolve(host: str) -> str:
    """``host``'s IPv4 address (``host`` itself when it is one)."""
    try:
        return socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
    except socket.gaierror as err:
        raise NetworkSetupError(f"MASTER_ADDR={host}: cannot resolve it ({err})") from None


def route_source(host: str) -> str:
    """The local address the kernel would send from towards ``host`` (nothing is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((resolve(host), 9))
        except OSError as err:
            raise NetworkSetupError(f"MASTER_ADDR={host}: no route to it from this host "
                                    f"({err})") from None
        return probe.getsockname()[0]


def ipv4_interfaces() -> dict[str, str]:
    """Interface name -> its first IPv4 address, for every interface that has one."""
    found = {}
    for name, addrs in psutil.net_if_addrs().items():
        for addr in addrs:
            if addr.family == socket.AF_INET:
                found.setdefault(name, addr.address)
    return found


def choose(master_addr: str, iface: str | None = None) -> Interface:
    """The interface for traffic to ``master_addr``: ``iface`` when given (it must exist and
    hold an IPv4 address), else the one holding the routed source address."""
    interfaces = ipv4_interfaces()
    if iface is not None:
        if iface not in interfaces:
            raise NetworkSetupError(f"--iface {iface}: no such interface with an IPv4 address "
                                    f"on this host (have: {', '.join(sorted(interfaces))})")
        return Interface(iface, interfaces[iface], "--iface")
    source = route_source(master_addr)
    for name, address in interfaces.items():
        if address == source:
            return Interface(name, address, f"routes to MASTER_ADDR={master_addr}")
    raise NetworkSetupError(f"MASTER_ADDR={master_addr}: traffic to it leaves from {source}, "
                            "which no interface of this host holds; name one with --iface")


def configure(master_addr: str, *, multi_host: bool | None, iface: str | None = None,
              cuda: bool = False, environ=os.environ) -> Interface:
    """Choose this rank's interface and write it into the socket variables of ``environ``
    that are unset (all of them with ``iface``). ``multi_host``: whether the job spans hosts
    (None: unknown, then a ``MASTER_ADDR`` other than 127.0.0.1/localhost says it does).
    Raises ``NetworkSetupError`` when ranks on several hosts would meet on a loopback address.
    Returns the choice (logged)."""
    chosen = choose(master_addr, iface)
    names = SOCKET_VARS + (CUDA_SOCKET_VARS if cuda else ())
    kept = {v: environ[v] for v in names if v in environ and iface is None}
    if multi_host is None:
        multi_host = not _is_loopback_name(master_addr)
    if chosen.is_loopback and multi_host:
        raise NetworkSetupError(
            f"MASTER_ADDR={master_addr} leads to the loopback address {chosen.address} "
            f"({chosen.name}) on this host, where ranks on other hosts cannot reach it: set "
            "MASTER_ADDR to rank 0's address on the cluster network, or name the interface "
            "with --iface (or GLOO_SOCKET_IFNAME and TP_SOCKET_IFNAME)")
    for name in names:
        if name not in kept:
            environ[name] = chosen.name
    log.info("network interface %s (%s, %s)%s", chosen.name, chosen.address, chosen.how,
             "".join(f"; {k}={v} kept as set" for k, v in kept.items()))
    return chosen


def talk_address(master_addr: str) -> str:
    """The IPv4 address this rank's process groups talk on: that of the interface in
    ``GLOO_SOCKET_IFNAME`` (as :func:`configure` set it, or the user), else the routed source
    address towards ``master_addr``. Names this rank to the others (graphprep.trainer.runtime.health)."""
    name = os.environ.get("GLOO_SOCKET_IFNAME", "").split(",")[0]
    address = ipv4_interfaces().get(name) if name else None
    return address or route_source(master_addr)


def _is_loopback_name(host: str) -> bool:
    """Whether ``host`` names this host's loopback by itself (``127.0.0.1``, ``localhost``), as
    opposed to a host name that merely resolves there."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def configure_rank(iface: str | None, device: str) -> Interface:
    """``configure`` from torchrun's variables (``MASTER_ADDR``, ``WORLD_SIZE``,
    ``LOCAL_WORLD_SIZE``) for a rank on ``device``; a setting that cannot work ends the rank
    with exit code 2 and a one-line message saying which variable or option to set."""
    world = int(os.environ.get("WORLD_SIZE", 1))
    local = os.environ.get("LOCAL_WORLD_SIZE")
    try:
        return configure(os.environ.get("MASTER_ADDR", "127.0.0.1"),
                         multi_host=None if local is None else world > int(local),
                         iface=iface, cuda=device == "cuda")
    except NetworkSetupError as err:
        log.error("rank %s: %s", os.environ.get("RANK", "?"), err)
        sys.stderr.flush()
        sys.exit(2)


IFACE_HELP = ("Network interface for this host's ranks (Gloo, TensorPipe, NCCL) [default: the "
              "one whose address routes to MASTER_ADDR; GLOO_SOCKET_IFNAME, TP_SOCKET_IFNAME, "
              "NCCL_SOCKET_IFNAME are kept when set].")
