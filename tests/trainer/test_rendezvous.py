"""The rank that serves the job's store leaves it last."""

import threading
import time
from datetime import timedelta

import torch.distributed as dist

from graphprep.trainer.runtime.launch import free_port
from graphprep.trainer.runtime.rendezvous import _JobStore


def test_the_rank_serving_the_store_waits_until_every_rank_has_left():
    """A slow rank's last store reads (RPC shutdown's call-count round) would fail with
    "Connection reset by peer" were the serving rank's process gone: it must not return from
    leave() before the others have left."""
    port = free_port("127.0.0.1")
    timeout = timedelta(seconds=30)
    server = dist.TCPStore("127.0.0.1", port, 2, True, timeout=timeout, wait_for_workers=False)
    client = dist.TCPStore("127.0.0.1", port, 2, False, timeout=timeout)
    host = _JobStore(server, 0, 2, serves=True, timeout=timeout)
    other = _JobStore(client, 1, 2, serves=False, timeout=timeout)
    left = threading.Event()
    waiter = threading.Thread(target=lambda: (host.leave(), left.set()))
    waiter.start()
    assert not left.wait(1.0), "the serving rank left before rank 1"
    started = time.monotonic()
    other.leave()  # a client rank does not wait for anyone
    assert time.monotonic() - started < 5
    assert left.wait(10), "the serving rank still waits after every rank left"
    waiter.join()
