"""Who stopped answering, and where this rank was waiting when it gave up.

A collective or RPC that times out only knows that *someone* did not answer (gloo: "Timed out
waiting 15000ms for recv operation"). To name the one, each rank publishes who it is in the
job's store at start (``health/who/<rank>``: host name, address, pid) and, once the groups are
up, a daemon thread beats once a second (``health/hb/<rank>``: a counter and this rank's step)
and reads every rank's beat (one more request), noting on this rank's own clock when each one
last changed. A frozen host (SIGSTOP, a hung machine, a cut link: sockets stay open, nothing
is closed) stops beating; a rank that is alive but stuck keeps beating and says where it is.

When a wait fails, :func:`timeout_message` turns that into one line: the ranks that went silent
(with host and pid), or the job's store that went silent (its host is stuck or cut off), or, if
every rank still beats, where the others are; and the step this rank waited in, from
:data:`where` (set by the train loop: attribute stores, no I/O, no lock) or from the batch and
stage a loader thread's failure was tagged with (:func:`tag_batch`).

Costs: two store requests per rank per second (one write, one read of every rank's beat, so
O(world) keys per read: reads are spread out past 64 ranks); nothing per batch but a few
attribute stores.
"""

from __future__ import annotations

import json
import os
import re
import socket
import threading
import time
from dataclasses import dataclass
from datetime import timedelta

BEAT_S = 1.0              # one beat per second
SILENT_BEATS = 3          # a rank is silent after this many beats not seen
STORE_OP_S = 5.0          # the heartbeat's own store requests give up after this
READS_PER_S_RANKS = 64    # read every beat up to this many ranks, less often past it
MAX_LISTED = 4            # ranks named in one line
PREFIX = "health"
TIMEOUT_WORDS = re.compile(r"time[d ]?\s?out", re.IGNORECASE)   # timeout, timed out


class Where:
    """Where this rank's training thread is: a step (``"the gradient all-reduce"``) and the
    epoch and batch it belongs to. Set on the hot path (plain attribute stores, no lock: a
    reader may see a mix of two updates, which only blurs a failure message); read when a wait
    fails and by the heartbeat."""

    __slots__ = ("step", "epoch", "batch")

    def __init__(self):
        self.at("the start-up")

    def at(self, step: str, epoch: int | None = None, batch: int | None = None) -> None:
        """This rank is now in ``step`` of ``epoch`` (and ``batch``)."""
        self.step, self.epoch, self.batch = step, epoch, batch

    def text(self) -> str:
        """``the forward/backward of epoch 2 batch 17``."""
        return describe_step(self.step, self.epoch, self.batch)


def describe_step(step: str, epoch: int | None, batch: int | None) -> str:
    """``step`` with its epoch and batch, when known."""
    out = step
    if epoch is not None:
        out += f" of epoch {epoch}"
        if batch is not None:
            out += f" batch {batch}"
    return out


where = Where()
EVALUATION = "the evaluation"


def tag_batch(err: BaseException, batch: int) -> None:
    """Note on ``err``, raised on a loader thread, the batch it was preparing: the training
    thread re-raises it later, when it is already in another step."""
    try:
        err.graphprep_batch = batch
    except AttributeError:      # an exception type without a __dict__: left unnamed
        pass


def failed_step(err: BaseException | None) -> str:
    """The step the failure ``err`` happened in: a loader thread's stage (sampling, feature
    fetch) and batch when it was tagged, else where the training thread is."""
    batch = getattr(err, "graphprep_batch", None)
    if batch is None:
        return where.text()
    stage = getattr(err, "stage", None) or "batch preparation"
    step = f"the evaluation {stage}" if where.step.startswith(EVALUATION) else f"the {stage}"
    return describe_step(step, where.epoch, batch)


def is_timeout(err: BaseException) -> bool:
    """Whether ``err`` (or what caused it) says a wait ran out of time."""
    seen = 0
    while err is not None and seen < 8:
        if TIMEOUT_WORDS.search(str(err)):
            return True
        err, seen = err.__cause__ or err.__context__, seen + 1
    return False


@dataclass(frozen=True)
class Peer:
    """Who a rank is: the host's name and the address it talks on, its process id."""

    host: str
    address: str
    pid: int

    def __str__(self) -> str:
        return f"host {self.host} at {self.address}, pid {self.pid}"


def me(address: str) -> Peer:
    """This process as a :class:`Peer` talking on ``address``."""
    return Peer(socket.gethostname(), address, os.getpid())


def _key(kind: str, rank: int) -> str:
    return f"{PREFIX}/{kind}/{rank}"


def publish(store, rank: int, peer: Peer) -> None:
    """Say who this rank is and give it a first beat (before the process groups start, so
    every rank's keys exist once they are up)."""
    store.set(_key("who", rank), json.dumps([peer.host, peer.address, peer.pid]))
    store.set(_key("hb", rank), "0 " + where.text())


class Heartbeat:
    """This rank's beat in the job's store, and when every rank's beat last changed.

    ``store`` should be a connection of its own (requests on one connection queue behind each
    other: a beat must not wait behind a long ``wait``), with a short timeout. ``store_at``:
    the store's (IP address, port); ``store_rank``: the rank whose process serves it (None:
    torchrun's agent does)."""

    def __init__(self, store, rank: int, world_size: int, peers: dict[int, Peer],
                 store_at: tuple[str, int], store_rank: int | None = None,
                 beat_s: float = BEAT_S):
        self.store, self.rank, self.world_size = store, rank, world_size
        self.peers, self.store_at, self.store_rank = peers, store_at, store_rank
        self.beat_s = beat_s
        self.read_every = max(1, -(-world_size // READS_PER_S_RANKS))
        self.silent_s = SILENT_BEATS * beat_s * self.read_every
        self._keys = [_key("hb", r) for r in range(world_size)]
        now = time.monotonic()
        self._seen: list[bytes | None] = [None] * world_size
        self._moved = [now] * world_size      # when each beat last changed, on our clock
        self._last_read = now                 # the last read that got an answer
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)

    def start(self) -> "Heartbeat":
        self._thread.start()
        return self

    def stop(self) -> None:
        """No more beats (the job is done: a rank that stops now is not a silent one)."""
        self._stop.set()
        self._thread.join(timeout=STORE_OP_S + self.beat_s)

    def _run(self) -> None:
        n = 0
        while not self._stop.wait(self.beat_s):
            n += 1
            try:
                self.store.set(self._keys[self.rank], f"{n} {where.text()}")
                if n % self.read_every == 0:
                    self.saw(self.store.multi_get(self._keys))
            except Exception:  # noqa: BLE001 - an unanswered store is what _last_read tells
                continue

    def saw(self, beats: list[bytes], now: float | None = None) -> None:
        """Record a read of every rank's beat (``beats[r]``) at ``now``."""
        now = time.monotonic() if now is None else now
        self._last_read = now
        for r, beat in enumerate(beats):
            if beat != self._seen[r]:
                self._seen[r], self._moved[r] = beat, now

    def silent(self, now: float | None = None) -> list[int]:
        """The other ranks whose beat has not changed for ``silent_s``."""
        now = time.monotonic() if now is None else now
        return [r for r in range(self.world_size)
                if r != self.rank and now - self._moved[r] > self.silent_s]

    def store_silent(self, now: float | None = None) -> bool:
        """Whether the store itself has not answered a read for ``silent_s``."""
        now = time.monotonic() if now is None else now
        return now - self._last_read > self.silent_s

    def step_of(self, rank: int) -> str:
        """The step ``rank`` said it was in, at its last beat read here."""
        beat = self._seen[rank]
        if not beat:
            return "an unknown step"
        return beat.decode(errors="replace").partition(" ")[2] or "an unknown step"

    def settle(self) -> tuple[list[int], bool]:
        """``(silent ranks, store silent)``, waiting up to ``silent_s`` for either when neither
        shows yet: a peer frozen just before this rank's wait began (or a timeout shorter
        than ``silent_s``) has not been silent long enough to tell."""
        deadline = time.monotonic() + self.silent_s
        while True:
            now = time.monotonic()
            silent, store = self.silent(now), self.store_silent(now)
            if silent or store or now >= deadline:
                return silent, store
            time.sleep(min(0.2, self.beat_s / 4))

    def name(self, rank: int) -> str:
        """``rank 1 (host b at 10.0.0.2, pid 7)``."""
        peer = self.peers.get(rank)
        return f"rank {rank} ({peer})" if peer else f"rank {rank}"


_heartbeat: list[Heartbeat] = []     # this process's, once started


def start_heartbeat(store, rank: int, world_size: int, store_at: tuple[str, int],
                    store_rank: int | None) -> Heartbeat:
    """Read every rank's identity from ``store`` (all published: call once the groups are
    up) and start this rank's heartbeat on it (``store_at``, ``store_rank``: as
    :class:`Heartbeat` takes them)."""
    who = store.multi_get([_key("who", r) for r in range(world_size)])
    peers = {r: Peer(*json.loads(w)) for r, w in enumerate(who)}
    hb = Heartbeat(store, rank, world_size, peers, store_at, store_rank).start()
    _heartbeat[:] = [hb]
    return hb


def stop_heartbeat() -> None:
    """Stop this process's heartbeat, if any."""
    while _heartbeat:
        _heartbeat.pop().stop()


def heartbeat_store(host: str, port: int, world_size: int):
    """A connection of the heartbeat's own to the job's store at ``host:port``."""
    import torch.distributed as dist
    return dist.TCPStore(host, port, world_size, False,
                         timeout=timedelta(seconds=STORE_OP_S))


def _listed(hb: Heartbeat, ranks: list[int]) -> str:
    names = [hb.name(r) for r in ranks[:MAX_LISTED]]
    more = len(ranks) - MAX_LISTED
    return ", ".join(names) + (f" and {more} more" if more > 0 else "")


def timeout_message(rank: int, timeout_s: float, err: BaseException | None = None,
                    hb: Heartbeat | None = None) -> str:
    """One line for a collective or RPC of this rank that got no answer within ``timeout_s``:
    who went silent (by the heartbeats), and the step this rank waited in."""
    hb = hb or (_heartbeat[0] if _heartbeat else None)
    within = f"within --rpc-timeout {timeout_s:g} s while waiting in {failed_step(err)}"
    if hb is None:
        return (f"rank {rank}: a collective or RPC got no answer {within}: another rank is "
                "stuck or gone (no heartbeats yet to tell which)")
    silent, store_silent = hb.settle()
    if store_silent and hb.store_rank not in (None, rank):
        return (f"rank {rank}: no answer from {hb.name(hb.store_rank)}, which serves the "
                f"job's store, {within}")
    if store_silent:
        host, port = hb.store_at
        there = [r for r, p in hb.peers.items() if r != rank and p.address == host]
        on = f" on the host of {_listed(hb, there)}" if there else ""
        return (f"rank {rank}: no answer from the job's store at {host}:{port}{on} nor from "
                f"the others {within}: that host is stuck or cut off")
    if silent:
        return f"rank {rank}: no answer from {_listed(hb, silent)} {within}"
    others = [r for r in range(hb.world_size) if r != rank]
    where_others = "; ".join(f"{hb.name(r)} in {hb.step_of(r)}" for r in others[:MAX_LISTED])
    peer = getattr(err, "peer", None)
    asked = f" (a request to {peer})" if peer else ""
    return (f"rank {rank}: a collective or RPC got no answer {within}{asked}; every rank "
            f"still beats (stuck or slow, not frozen): {where_others}")
