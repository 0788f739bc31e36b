"""graphprep.trainer.runtime.health: the line a rank logs when a collective or RPC times out names the ranks
whose heartbeats stopped (host, address, pid), or the store that went silent, and the step the
rank waited in; the heartbeat thread really beats and reads beats through a store.

Fast (no processes): a torch HashStore stands in for the job's TCPStore. The end-to-end cases
are tests/steps/test_multihost.py (a frozen host under torchrun) and tests/trainer/test_faults_trainer.py (a
stopped rank under the local launcher).
"""

from __future__ import annotations

import time

import pytest

from graphprep.trainer.runtime import health
from graphprep.trainer.runtime.health import EVALUATION, Heartbeat, Peer, where
from graphprep.trainer.sampling.service import RequestFailed

PEERS = {0: Peer("hostA", "10.0.0.1", 11), 1: Peer("hostB", "10.0.0.2", 22),
         2: Peer("hostB", "10.0.0.2", 23)}
GLOO = ("Got the following error when running the callback: Got the following error when "
        "running the callback: Timed out waiting 15000ms for recv operation to complete")


@pytest.fixture(autouse=True)
def fresh_where():
    """Each test starts at start-up and leaves ``where`` as it found it."""
    saved = (where.step, where.epoch, where.batch)
    where.at("the start-up")
    yield
    where.at(*saved)


def beats(*counts) -> list[bytes]:
    return [f"{n} the forward/backward of epoch 2 batch {r}".encode()
            for r, n in enumerate(counts)]


def watching(rank=0, store_rank=None, beat_s=1.0) -> Heartbeat:
    """A heartbeat of ``rank`` in a 3-rank job that is not started (its reads are fed by
    hand), the store on host A."""
    return Heartbeat(None, rank, 3, PEERS, ("10.0.0.1", 29500), store_rank, beat_s=beat_s)


def test_the_rank_whose_beat_stopped_is_named_with_host_pid_and_step():
    hb = watching()
    now = time.monotonic()
    hb.saw(beats(1, 1, 1), now=now - 20)
    hb.saw(beats(19, 1, 19), now=now)          # rank 1's counter stopped 20 s ago
    where.at("the forward/backward", 2, 17)
    where.step = "the gradient all-reduce"     # as DDP's hook sets it
    line = health.timeout_message(0, 15, RuntimeError(GLOO), hb)
    assert line == ("rank 0: no answer from rank 1 (host hostB at 10.0.0.2, pid 22) within "
                    "--rpc-timeout 15 s while waiting in the gradient all-reduce of epoch 2 "
                    "batch 17")


def test_every_silent_rank_is_named():
    hb = watching()
    now = time.monotonic()
    hb.saw(beats(1, 1, 1), now=now - 20)
    hb.saw(beats(19, 1, 1), now=now)
    line = health.timeout_message(0, 15, None, hb)
    assert "no answer from rank 1 (host hostB at 10.0.0.2, pid 22), rank 2 (host hostB at " \
           "10.0.0.2, pid 23) within" in line


@pytest.mark.parametrize("stage", ["sampling", "feature fetch"])
def test_a_loader_failure_names_its_own_stage_and_batch(stage):
    err = RequestFailed("request to rank 1 (part 1) failed: RPC ran for more than set timeout",
                        stage)
    health.tag_batch(err, 6)                   # as the loader thread does
    where.at("the forward/backward", 3, 4)     # the training thread, two batches behind
    assert health.failed_step(err) == f"the {stage} of epoch 3 batch 6"
    where.at(EVALUATION, 3)
    assert health.failed_step(err) == f"the evaluation {stage} of epoch 3 batch 6"
    assert health.failed_step(RuntimeError("x")) == "the evaluation of epoch 3"


def test_a_silent_store_served_by_rank_0_names_rank_0():
    hb = watching(rank=1, store_rank=0)
    hb.saw(beats(1, 1, 1), now=time.monotonic() - 20)    # no read has answered since
    where.at("the sampling", 4, 0)
    line = health.timeout_message(1, 5, None, hb)
    assert line == ("rank 1: no answer from rank 0 (host hostA at 10.0.0.1, pid 11), which "
                    "serves the job's store, within --rpc-timeout 5 s while waiting in the "
                    "sampling of epoch 4 batch 0")


def test_a_silent_store_of_torchruns_agent_names_its_host():
    hb = watching(rank=1)
    hb.saw(beats(1, 1, 1), now=time.monotonic() - 20)
    line = health.timeout_message(1, 5, None, hb)
    assert line.startswith("rank 1: no answer from the job's store at 10.0.0.1:29500 on the "
                           "host of rank 0 (host hostA at 10.0.0.1, pid 11) nor from the others "
                           "within --rpc-timeout 5 s while waiting in the start-up")


def beating(store, world: int) -> list[Heartbeat]:
    """Started heartbeats of ranks 0..world-1 on ``store``, 20 beats a second."""
    for r in range(world):
        health.publish(store, r, PEERS[r])
    return [Heartbeat(store, r, world, PEERS, ("10.0.0.1", 29500), beat_s=0.05).start()
            for r in range(world)]


def test_when_every_rank_beats_it_says_where_the_others_are():
    import torch.distributed as dist
    where.at("the forward/backward", 2, 5)     # one process: every rank reports this step
    hbs = beating(dist.HashStore(), 3)
    try:
        deadline = time.monotonic() + 5
        while hbs[0].step_of(2) != "the forward/backward of epoch 2 batch 5":
            assert time.monotonic() < deadline, hbs[0].step_of(2)
            time.sleep(0.02)
        where.step = "the gradient all-reduce"
        line = health.timeout_message(0, 10, None, hbs[0])
        err = RequestFailed("request to rank 1 (part 1) failed: timeout", "sampling",
                            "rank 1 (part 1)")
        health.tag_batch(err, 3)
        asked = health.timeout_message(0, 10, err, hbs[0])
    finally:
        for hb in hbs:
            hb.stop()
    assert line.startswith("rank 0: a collective or RPC got no answer within --rpc-timeout 10 s "
                           "while waiting in the gradient all-reduce of epoch 2 batch 5; every "
                           "rank still beats (stuck or slow, not frozen): rank 1 (host hostB at "
                           "10.0.0.2, pid 22) in the "), line
    assert "rank 2 (host hostB at 10.0.0.2, pid 23) in the " in line
    assert "while waiting in the sampling of epoch 2 batch 3 (a request to rank 1 (part 1)); " \
        "every rank still beats" in asked, asked


def test_without_heartbeats_it_still_says_what_timed_out():
    line = health.timeout_message(3, 30, None, None)
    assert line.startswith("rank 3: a collective or RPC got no answer within --rpc-timeout 30 s "
                           "while waiting in the start-up")


@pytest.mark.parametrize("text,timed_out", [
    (GLOO, True),
    ("RPCErr:1:RPC ran for more than set timeout (10000 ms) and will now be marked", True),
    ("Socket Timeout", True),
    ("Connection reset by peer", False),
    ("injected failure on rank 1 (--fail-rank)", False),
])
def test_timeouts_are_told_from_other_failures(text, timed_out):
    assert health.is_timeout(RuntimeError(text)) is timed_out
    wrapped = RequestFailed("request to rank 1 (part 1) failed")
    wrapped.__cause__ = RuntimeError(text)
    assert health.is_timeout(wrapped) is timed_out


def test_heartbeats_go_through_the_store_and_stop_when_a_rank_freezes():
    import torch.distributed as dist
    where.at("the forward/backward", 1, 3)
    hbs = beating(dist.HashStore(), 2)
    try:
        deadline = time.monotonic() + 5
        while hbs[0].step_of(1) != "the forward/backward of epoch 1 batch 3" \
                or hbs[0].silent():
            assert time.monotonic() < deadline, (hbs[0].step_of(1), hbs[0].silent())
            time.sleep(0.02)
        hbs[1].stop()                          # rank 1 stops beating: frozen
        while hbs[0].silent() != [1]:
            assert time.monotonic() < deadline, hbs[0].silent()
            time.sleep(0.02)
        assert not hbs[0].store_silent()
    finally:
        for hb in hbs:
            hb.stop()
