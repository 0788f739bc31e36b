"""Two hosts for real (``pytest -m multihost``; in the default run where namespaces can be made).

Host A (``TwoHosts.a``) runs the Dask scheduler and worker ``m0``, host B worker ``m1``; the
commands are the README's "Run on a cluster" walkthrough. Checked: the pipeline through the
scheduler with parts delivered per host and verified where they lie; a worker restarting
during dispatch; TLS (refusals included) giving the same bytes; torchrun on both hosts with no
interface variables reproducing a local run while every rank listens on its host's address
only; the loss of host B mid-epoch ending host A's job in bounded time, naming the host; and
host B frozen mid-epoch (SIGSTOP) named by host A in one line with the step it waited in.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import psutil
import pytest

from conftest import shared_data
from faultkit import needs_privilege, tree_hash
from hostsim import BIN, ROOT, TwoHosts, listening, netns_unavailable

pytestmark = pytest.mark.multihost
_why = netns_unavailable()


@pytest.fixture(scope="module", autouse=True)
def _namespaces():
    """Every case here needs network namespaces: skipped naming why as a non-root user, failed
    as root (faultkit.needs_privilege)."""
    needs_privilege(_why)

DASK = os.path.join(BIN, "dask")
PREP = os.path.join(BIN, "prep")
SCHEDULER_PORT = 8786
TRAIN = ("--fanouts", "5,5", "--batch-size", 64, "--epochs", 2, "--threads", 1,
         "--no-progress")


def wait_for_workers(host, address: str, names, timeout: float = 60, **tls) -> None:
    """Block until the scheduler at ``address`` lists workers of all ``names``."""
    code = ("import sys, time; from distributed import Client; from graphprep.pipeline.core.cluster import "
            "tls_security; c = Client(sys.argv[1], security=tls_security(sys.argv[1], "
            "*(a or None for a in sys.argv[3:6])), timeout=30); want = set(sys.argv[2]."
            "split(',')); t = time.time()\n"
            "while want - {w['name'] for w in c.scheduler_info(n_workers=-1)['workers']."
            "values()}:\n  assert time.time() - t < 60, c.scheduler_info()\n  time.sleep(0.2)")
    done = host.run(sys.executable, "-c", code, address, ",".join(names),
                    tls.get("ca", ""), tls.get("cert", ""), tls.get("key", ""),
                    timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]


def start_cluster(hosts, tmp, port: int = SCHEDULER_PORT, tls: dict | None = None):
    """The README's commands: ``dask scheduler`` and worker m0 on A, worker m1 on B."""
    flags = []
    if tls:
        flags = ["--tls-ca-file", tls["ca"], "--tls-cert", tls["cert"], "--tls-key", tls["key"]]
    proto = "tls" if tls else "tcp"
    address = f"{proto}://{hosts.a.address}:{port}"
    hosts.a.start(DASK, "scheduler", "--host", hosts.a.address, "--port", port,
                  "--protocol", proto, "--dashboard-address", f"{hosts.a.address}:0", *flags,
                  log=tmp / f"scheduler-{proto}.log")
    for host, name in ((hosts.a, "m0"), (hosts.b, "m1")):
        host.start(DASK, "worker", address, "--name", name, "--host", host.address,
                   "--nthreads", 1, "--memory-limit", "2GiB", "--no-dashboard",
                   "--local-directory", tmp / f"dask-{name}-{proto}", *flags,
                   log=tmp / f"worker-{name}-{proto}.log")
    wait_for_workers(hosts.a, address, ("m0", "m1"), **(tls or {}))
    return address


@pytest.fixture(scope="module")
def hosts():
    with TwoHosts() as pair:
        yield pair


@pytest.fixture(scope="module")
def cluster(hosts, tmp_path_factory):
    """``(scheduler address, folder)``: the plain-TCP cluster across both hosts."""
    tmp = tmp_path_factory.mktemp("multihost")
    return start_cluster(hosts, tmp), tmp


def prep_on_a(hosts, *args, timeout=300):
    done = hosts.a.run(PREP, *args, "--no-progress", timeout=timeout)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def dispatched(hosts, cluster):
    """Cora chunked, partitioned in 2 and dispatched to m0 (host A) and m1 (host B), all
    through the scheduler. Returns (folder, dispatch seconds)."""
    address, tmp = cluster
    on = ("--scheduler", address)
    prep_on_a(hosts, "chunk", shared_data("planetoid"), tmp / "G", "--name", "cora", *on)
    prep_on_a(hosts, "partition", tmp / "G", tmp / "A", "-p", 2, "--method", "metis", *on)
    start = time.monotonic()
    prep_on_a(hosts, "dispatch", tmp / "G", tmp / "A", tmp / "D", "--machines", "m0,m1", *on)
    return tmp, time.monotonic() - start


def test_pipeline_delivers_each_part_to_its_host_and_verifies_there(hosts, cluster,
                                                                    dispatched):
    address, _ = cluster
    tmp, seconds = dispatched
    graph = json.loads((tmp / "D" / "graph.json").read_text())
    assert [(p["path"], p["machine"]) for p in graph["parts"]] == [("m0/part-0", "m0"),
                                                                    ("m1/part-1", "m1")]
    done = prep_on_a(hosts, "verify", tmp / "G", tmp / "D", "--scheduler", address)
    assert "verified: 10,556 edges and 2,708 nodes" in done.stdout
    # The same dispatch on one host (an embedded cluster of workers m0 and m1): same bytes.
    start = time.monotonic()
    prep_on_a(hosts, "dispatch", tmp / "G", tmp / "A", tmp / "D1", "--machines", "m0,m1")
    one_host = time.monotonic() - start
    assert tree_hash(tmp / "D1" / "m1") == tree_hash(tmp / "D" / "m1")
    print(f"dispatch: two hosts {seconds:.1f} s, one host {one_host:.1f} s")


def pause_worker(hosts, address: str, name: str) -> None:
    """Put worker ``name`` of the scheduler at ``address`` in Dask's paused state (as under
    memory pressure, with its memory monitor told never to resume it) and wait until the
    scheduler knows: it starts no task, so tasks pinned to it wait and the others run elsewhere.
    Its process restarting ends the pause (a fresh worker)."""
    code = ("import sys, time; from distributed import Client; from distributed.core import "
            "Status\n"
            "def pause(dask_worker):\n"
            "    dask_worker.memory_manager.memory_pause_fraction = False\n"
            "    dask_worker.status = Status.paused\n"
            "c = Client(sys.argv[1], timeout=30); t = time.time()\n"
            "def mine(): return {a: w for a, w in c.scheduler_info(n_workers=-1)['workers']."
            "items() if w['name'] == sys.argv[2]}\n"
            "c.run(pause, workers=list(mine()))\n"
            "while [w['status'] for w in mine().values()] != ['paused']:\n"
            "  assert time.time() - t < 30, mine(); time.sleep(0.1)")
    done = hosts.a.run(sys.executable, "-c", code, address, name, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]


def test_worker_restarting_during_dispatch_gives_the_same_bytes(hosts, cluster, dispatched):
    """m1's worker process (host B) dies while part 1, pinned to m1, waits to be built: its
    nanny restarts it, the step resubmits the part to the new m1, and the dispatch ends as an
    uninterrupted one: exit 0, the same bytes on both hosts, m1's return logged."""
    address, _ = cluster
    tmp, _ = dispatched
    # Paused, m1 holds part 1 back: the kill below lands inside 'build parts' every time.
    pause_worker(hosts, address, "m1")
    run = hosts.a.start(PREP, "dispatch", tmp / "G", tmp / "A", tmp / "D2", "--machines",
                        "m0,m1", "--scheduler", address, "--no-progress",
                        "--lost-worker-timeout", 30, log=tmp / "dispatch-restart.log")
    nanny = next(p for p in hosts.b.procs if "worker" in p.args)
    deadline = time.monotonic() + 60
    while not (tmp / ".D2.partial" / "m0" / "part-0").exists():   # m0 built its part
        assert run.poll() is None and time.monotonic() < deadline, \
            (tmp / "dispatch-restart.log").read_text()
        time.sleep(0.05)
    assert not (tmp / ".D2.partial" / "m1" / "part-1").exists()   # held back by the pause
    # m1's worker process is the nanny's child.
    worker = psutil.Process(nanny.pid).children(recursive=True)
    victims = [p for p in worker if "spawn_main" in " ".join(p.cmdline())]
    assert victims, [p.cmdline() for p in worker]
    for p in victims:
        p.kill()
    try:
        code = run.wait(timeout=90)
    except subprocess.TimeoutExpired:   # part 1 never resubmitted: it waits forever
        hosts.a.kill(run)
        code = None
    log = (tmp / "dispatch-restart.log").read_text()
    assert code == 0, log
    # Logged when the step sees m1 at a new address: what makes it resubmit part 1 there.
    assert "Dask worker m1 is back at" in log and "Traceback" not in log, log
    assert tree_hash(tmp / "D2" / "m1") == tree_hash(tmp / "D" / "m1"), log
    assert tree_hash(tmp / "D2" / "m0") == tree_hash(tmp / "D" / "m0"), log
    wait_for_workers(hosts.a, address, ("m0", "m1"))       # the nanny brought m1 back


def torchrun(host, hosts, graph, node_rank: int, tmp, *args, name: str, port: int = 29500):
    """``torchrun`` for one rank on ``host``, as the README's per-host line (no interface
    variables); started, not waited for."""
    return host.start(sys.executable, "-m", "torch.distributed.run", "--nnodes", 2,
                      "--nproc-per-node", 1, "--node-rank", node_rank, "--master-addr",
                      hosts.a.address, "--master-port", port, "-m", "graphprep.trainer", "--graph", graph,
                      "--checkpoint-dir", tmp / f"ckpt-{name}-{node_rank}", *map(str, args),
                      log=tmp / f"{name}-{node_rank}.log")


def _ranks(proc) -> list[psutil.Process]:
    """The trainer rank processes under a torchrun started by ``Host.start``."""
    ranks = []
    try:
        for p in psutil.Process(proc.pid).children(recursive=True):
            cmd = " ".join(p.cmdline())
            if "trainer" in cmd and "torch.distributed.run" not in cmd:
                ranks.append(p)
    except psutil.Error:          # gone or a zombie meanwhile
        pass
    return ranks


def test_torchrun_on_two_hosts_matches_a_local_run_and_listens_on_its_host_only(
        hosts, dispatched):
    tmp, _ = dispatched
    graph = tmp / "D" / "graph.json"
    local = subprocess.run([sys.executable, "-m", "graphprep.trainer", "--graph", graph, *map(str, TRAIN),
                            "--metrics-out", tmp / "local.json", "--checkpoint-dir",
                            tmp / "ckpt-local"], cwd=ROOT, capture_output=True, text=True,
                           timeout=300)
    assert local.returncode == 0, local.stderr[-3000:]
    procs = [torchrun(h, hosts, graph, r, tmp, *TRAIN, "--metrics-out",
                      tmp / f"two-hosts-{r}.json", name="two-hosts")
             for r, h in enumerate((hosts.a, hosts.b))]
    seen = {0: set(), 1: set()}
    while any(p.poll() is None for p in procs):
        for r, p in enumerate(procs):
            for rank in _ranks(p):
                try:
                    seen[r] |= listening(rank.pid)
                except (OSError, StopIteration):
                    pass
        time.sleep(0.2)
    logs = [(tmp / f"two-hosts-{r}.log").read_text() for r in range(2)]
    assert [p.returncode for p in procs] == [0, 0], logs[0][-3000:] + logs[1][-3000:]
    assert f"network interface {hosts.a.iface} ({hosts.a.address}" in logs[0], logs[0][-3000:]
    for r, host in enumerate((hosts.a, hosts.b)):
        assert seen[r] and {addr for addr, _ in seen[r]} == {host.address}, (r, seen[r])
    expect = json.loads((tmp / "local.json").read_text())
    got = json.loads((tmp / "two-hosts-0.json").read_text())
    assert [e["loss"] for e in got["epochs"]] == pytest.approx(
        [e["loss"] for e in expect["epochs"]], rel=1e-5)
    assert got["summary"]["test_acc"] == pytest.approx(expect["summary"]["test_acc"], abs=0.01)
    mean = lambda m: sum(e["epoch_s"] for e in m["epochs"]) / len(m["epochs"])   # noqa: E731
    rpc = got["epochs"][-1]["rpc_bytes_sent"] + got["epochs"][-1]["rpc_bytes_received"]
    print(f"epoch: two hosts {mean(got):.2f} s, one host {mean(expect):.2f} s; "
          f"rank 0 RPC bytes in the last epoch {rpc / 1e6:.2f} MB")


def train_into_epoch_2(hosts, tmp, name: str, port: int, timeout: int):
    """Rank 0 on host A, rank 1 on host B under torchrun, 50 epochs of Cora; returns the two
    torchrun processes and host A's log once epoch 2 is under way."""
    args = ("--fanouts", "5,5", "--batch-size", 16, "--epochs", 50, "--threads", 1,
            "--no-progress", "--rpc-timeout", timeout, "--eval-batch-size", 64)
    procs = [torchrun(h, hosts, tmp / "D" / "graph.json", r, tmp, *args, name=name,
                      port=port) for r, h in enumerate((hosts.a, hosts.b))]
    log_a = tmp / f"{name}-0.log"
    deadline = time.monotonic() + 120
    while "epoch 1:" not in log_a.read_text():
        assert all(p.poll() is None for p in procs) and time.monotonic() < deadline, \
            log_a.read_text()[-3000:] + (tmp / f"{name}-1.log").read_text()[-3000:]
        time.sleep(0.1)
    time.sleep(0.5)                                                # well into epoch 2
    return procs, log_a


def test_losing_host_b_mid_epoch_ends_host_a_naming_it(hosts, dispatched):
    tmp, _ = dispatched
    timeout = 10
    procs, log_a = train_into_epoch_2(hosts, tmp, "loss", 29510, timeout)
    lost = time.monotonic()
    victims = [psutil.Process(procs[1].pid), *_ranks(procs[1])]
    hosts.b.kill(procs[1])
    for p in victims:                                              # torchrun's own sessions
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    code = procs[0].wait(timeout=timeout + 60)
    took = time.monotonic() - lost
    text = log_a.read_text()
    assert code != 0, text[-3000:]
    assert took < timeout + 15, (took, text[-3000:])
    assert re.search(rf"rank 1|{re.escape(hosts.b.address)}", text), text[-3000:]
    time.sleep(1)
    left = [p for h in (hosts.a, hosts.b) for p in map(psutil.Process, h.pids())
            if "trainer" in " ".join(p.cmdline())]
    assert not left, [p.cmdline() for p in left]
    print(f"host B lost: host A's job exited {code} after {took:.1f} s "
          f"(--rpc-timeout {timeout} s)")


def _ns_pid(pid: int) -> int:
    """``pid`` as its own host sees it (the innermost PID namespace's number)."""
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith("NSpid:")).split()[-1])


def test_frozen_host_b_is_named_in_one_line_with_the_step_host_a_waited_in(hosts,
                                                                          dispatched):
    """Host B frozen (SIGSTOP: its sockets stay open, as on a hung machine or a dropped link):
    host A's rank times out after --rpc-timeout and says, in one line, which rank and host did
    not answer and where it was waiting; no traceback without -v."""
    tmp, _ = dispatched
    timeout = 10
    frozen = []
    try:
        procs, log_a = train_into_epoch_2(hosts, tmp, "frozen", 29520, timeout)
        # every process of host B's job (torchrun's agent and the rank): frozen, not gone
        frozen = [psutil.Process(procs[1].pid), *psutil.Process(procs[1].pid).children(
            recursive=True)]
        ranks_b = _ranks(procs[1])
        assert ranks_b, [p.cmdline() for p in frozen]
        stopped = time.monotonic()
        for p in frozen:
            p.send_signal(signal.SIGSTOP)
        code = procs[0].wait(timeout=timeout + 60)
        took = time.monotonic() - stopped
        text = log_a.read_text()
        assert code != 0, text[-3000:]
        assert took < timeout + 8, (took, text[-3000:])
        # what the rank said (torchrun's agent adds its own summary, with a traceback of its
        # own ChildFailedError, after the rank has exited)
        own = [line for line in text.splitlines() if line.startswith("20")
               and "] ERROR graphprep.trainer:" in line]
        named = [line for line in own if re.search(
            rf"\[rank 0\] ERROR graphprep.trainer: rank 0: no answer from rank 1 \(host "
            rf"{re.escape(socket.gethostname())} at {re.escape(hosts.b.address)}, pid "
            rf"{_ns_pid(ranks_b[0].pid)}\) within --rpc-timeout {timeout} s while waiting "
            r"in the [A-Za-z /-]+ of epoch \d+( batch \d+)?$", line)]
        assert len(named) == 1 and own == named, text[-5000:]
        rank_output = text.split("] failed (exitcode:")[0]       # torchrun's agent from there
        for noise in ("Traceback", "Timed out", "ran for more than set timeout"):
            assert noise not in rank_output, rank_output[-5000:]
        # torchrun's summary shows the rank's line instead of "To enable traceback see"
        assert f"traceback : {named[0].split('ERROR graphprep.trainer: ')[1]}" in text, text[-3000:]
    finally:
        for p in frozen:
            try:
                p.send_signal(signal.SIGCONT)
                p.kill()
            except psutil.NoSuchProcess:
                pass
        hosts.b.kill(procs[1])
        hosts.a.kill(procs[0])
    print(f"host B frozen: host A's job exited {code} after {took:.1f} s "
          f"(--rpc-timeout {timeout} s)")


def make_certificates(folder) -> dict:
    """A CA, a certificate for the cluster and the client signed by it, and one signed by a
    stranger CA: PEM files, made with openssl."""
    def run(*cmd):
        done = subprocess.run(["openssl", *map(str, cmd)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr

    folder.mkdir(exist_ok=True)
    out = {}
    for ca in ("ca", "stranger-ca"):
        run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", 2, "-subj", f"/CN={ca}",
            "-keyout", folder / f"{ca}.key", "-out", folder / f"{ca}.pem")
    for name, ca in (("node", "ca"), ("stranger", "stranger-ca")):
        run("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout",
            folder / f"{name}.key", "-out", folder / f"{name}.csr")
        run("x509", "-req", "-in", folder / f"{name}.csr", "-CA", folder / f"{ca}.pem",
            "-CAkey", folder / f"{ca}.key", "-CAcreateserial", "-days", 2,
            "-out", folder / f"{name}.pem")
    for name in ("ca", "node", "stranger", "stranger-ca"):
        out[name] = str(folder / f"{name}.pem")
        out[f"{name}-key"] = str(folder / f"{name}.key")
    return out


@pytest.mark.skipif(not __import__("shutil").which("openssl"), reason="needs openssl")
def test_tls_cluster_gives_the_same_bytes_and_refuses_strangers(hosts, dispatched):
    tmp, _ = dispatched
    certs = make_certificates(tmp / "certs")
    good = {"ca": certs["ca"], "cert": certs["node"], "key": certs["node-key"]}
    address = start_cluster(hosts, tmp, port=8796, tls=good)
    tls = ("--tls-ca-file", good["ca"], "--tls-cert", good["cert"], "--tls-key", good["key"])
    prep_on_a(hosts, "dispatch", tmp / "G", tmp / "A", tmp / "DT", "--machines", "m0,m1",
              "--scheduler", address, *tls)
    for m in ("m0", "m1"):
        assert tree_hash(tmp / "DT" / m) == tree_hash(tmp / "D" / m)
    # A client without certificates, or with a stranger CA's, is refused with a clear error.
    plain = hosts.a.run(PREP, "verify", tmp / "G", tmp / "DT", "--scheduler", address,
                        "--no-progress", timeout=120)
    assert plain.returncode == 2 and "needs certificates" in plain.stderr, plain.stderr
    stranger = hosts.a.run(PREP, "verify", tmp / "G", tmp / "DT", "--scheduler", address,
                           "--tls-ca-file", certs["stranger-ca"], "--tls-cert",
                           certs["stranger"], "--tls-key", certs["stranger-key"],
                           "--no-progress", timeout=120, DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT="5s")
    assert stranger.returncode != 0 and "Traceback" not in stranger.stderr, stranger.stderr
    # A worker with a stranger's certificate never joins.
    intruder = hosts.b.start(DASK, "worker", address, "--name", "intruder", "--host",
                             hosts.b.address, "--nthreads", 1, "--no-dashboard",
                             "--tls-ca-file", certs["stranger-ca"], "--tls-cert",
                             certs["stranger"], "--tls-key", certs["stranger-key"],
                             "--death-timeout", 8, log=tmp / "intruder.log")
    assert intruder.wait(timeout=60) != 0, (tmp / "intruder.log").read_text()[-2000:]
    done = prep_on_a(hosts, "verify", tmp / "G", tmp / "DT", "--scheduler", address, *tls)
    assert "verified" in done.stdout
