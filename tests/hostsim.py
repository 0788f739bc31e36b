"""Two simulated hosts on this machine: network namespaces joined by a veth pair.

Each ``TwoHosts`` gets unique namespace and interface names and a private /24; both ends of the
link live inside the namespaces, so no traffic leaves them and the host's own network is never
touched. As on stock Debian and Ubuntu, this machine's name resolves to 127.0.0.1 in both.
Processes run with ``ip netns exec`` in a PID namespace and a session of their own, so a "host"
can be killed as a whole.
``close()`` kills everything left in both namespaces and deletes them (and the link with them);
it runs even after a failure when used as a context manager or a fixture finalizer.

Needs root or CAP_NET_ADMIN (``netns_unavailable()`` says why not).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)
SOCKET_VARS = ("GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")


def netns_unavailable() -> str | None:
    """None when this process may create network namespaces, else the reason it may not."""
    if shutil.which("ip") is None:
        return "needs the `ip` tool (iproute2) to create network namespaces"
    name = f"gpprobe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if made.returncode != 0:
        return ("needs root or CAP_NET_ADMIN to create network namespaces "
                f"(ip netns add: {made.stderr.strip()})")
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return None


def _ip(*args, ns: str | None = None) -> None:
    cmd = (["ip", "netns", "exec", ns, "ip"] if ns else ["ip"]) + list(args)
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {done.stderr.strip()}")


@dataclass
class Host:
    """One namespace: its name, its address on the link, its interface name."""

    ns: str
    address: str
    iface: str
    procs: list = field(default_factory=list)

    @property
    def prefix(self) -> list[str]:
        """Run in this host's network namespace and in a PID namespace of its own: processes
        of one "host" cannot see another's, so TensorPipe cannot take its same-machine
        shortcuts (cross-memory attach) and talks TCP as between real hosts; killing the
        command's session kills everything it started (the namespace's init dies)."""
        return ["ip", "netns", "exec", self.ns, "unshare", "--pid", "--fork", "--kill-child",
                "--mount-proc"]

    def env(self, **extra) -> dict:
        """The environment of a process on this host: no interface variables (each test
        sets what it means to test)."""
        env = {k: v for k, v in os.environ.items() if k not in SOCKET_VARS}
        env.update(PYTHONUNBUFFERED="1", TQDM_DISABLE="1", **extra)
        return env

    def start(self, *cmd, log: str | None = None, **extra_env) -> subprocess.Popen:
        """Start ``cmd`` on this host in a new session; output to ``log`` (else discarded)."""
        out = open(log, "w") if log else subprocess.DEVNULL
        proc = subprocess.Popen([*self.prefix, *map(str, cmd)], cwd=ROOT,
                                env=self.env(**extra_env), stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(proc)
        return proc

    def run(self, *cmd, timeout: float = 300, **extra_env) -> subprocess.CompletedProcess:
        """Run ``cmd`` on this host to its end; the CompletedProcess (text)."""
        return subprocess.run([*self.prefix, *map(str, cmd)], cwd=ROOT,
                              env=self.env(**extra_env), capture_output=True, text=True,
                              timeout=timeout)

    def pids(self) -> list[int]:
        """Every process running in this namespace."""
        out = subprocess.run(["ip", "netns", "pids", self.ns], capture_output=True, text=True)
        return [int(p) for p in out.stdout.split()]

    def kill(self, proc: subprocess.Popen) -> None:
        """SIGKILL ``proc``'s whole session (the host's processes started with it)."""
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


class TwoHosts:
    """Hosts ``a`` (10.X.Y.1) and ``b`` (10.X.Y.2) on a private /24 of their own."""

    def __init__(self):
        rng = random.Random(f"{os.getpid()}-{time.time_ns()}")
        tag = f"{os.getpid() % 10000}{rng.randrange(100):02d}"
        net = f"10.{rng.randrange(64, 128)}.{rng.randrange(1, 255)}"
        self.a = Host(f"gpA{tag}", f"{net}.1", f"gpa{tag}")
        self.b = Host(f"gpB{tag}", f"{net}.2", f"gpb{tag}")
        try:
            for host in (self.a, self.b):
                _ip("netns", "add", host.ns)
                _ip("link", "set", "lo", "up", ns=host.ns)
            _ip("link", "add", self.a.iface, "netns", self.a.ns, "type", "veth",
                "peer", "name", self.b.iface, "netns", self.b.ns)
            for host in (self.a, self.b):
                _ip("addr", "add", f"{host.address}/24", "dev", host.iface, ns=host.ns)
                _ip("link", "set", host.iface, "up", ns=host.ns)
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> "TwoHosts":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Kill every process left in both namespaces, then delete them (and the link)."""
        for host in (self.a, self.b):
            for proc in host.procs:
                if proc.poll() is None:
                    host.kill(proc)
            for pid in host.pids():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            subprocess.run(["ip", "netns", "del", host.ns], capture_output=True)


def listening(pid: int) -> set[tuple[str, int]]:
    """``(address, port)`` of every TCP socket process ``pid`` listens on, read from its own
    namespace's ``/proc/<pid>/net/tcp{,6}`` and matched to its file descriptors."""
    inodes = set()
    fd_dir = f"/proc/{pid}/fd"
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = set()
    for table, width in (("tcp", 8), ("tcp6", 32)):
        with open(f"/proc/{pid}/net/{table}") as f:
            next(f)
            for line in f:
                cols = line.split()
                if cols[3] == "0A" and cols[9] in inodes:     # 0A: LISTEN
                    addr, port = cols[1].split(":")
                    found.add((_hex_address(addr, width), int(port, 16)))
    return found


def _hex_address(text: str, width: int) -> str:
    import ipaddress
    raw = bytes.fromhex(text)
    # /proc writes each 32-bit word in host (little-endian) order
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    return str(ipaddress.ip_address(words))
