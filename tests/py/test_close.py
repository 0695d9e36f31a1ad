"""Cluster.close in the situations it meets: clients still connected, twice,
from a finaliser (a garbage collection on one of the node's own threads),
at exit, after a daemon was killed. Each runs as a program of its own, so
that an abort is seen as its exit, not as this test process dying."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

PRELUDE = textwrap.dedent("""
    import gc, logging, sys, threading, time
    import numpy as np
    import pydsm
""")


def run(body: str, *args: str, timeout: float = 120) -> str:
    """Run ``body`` after PRELUDE in a fresh interpreter; its stdout, once it
    exited 0 (anything else, a signal included, fails with its output)."""
    p = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body), *args], capture_output=True,
                       text=True, timeout=timeout, cwd="/")   # not the checkout: the installed pydsm
    assert p.returncode == 0, f"exit {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-6000:]}"
    return p.stdout


@pytest.mark.parametrize("fabric", ["shm", "tcp"])
def test_close_with_clients_still_connected(fabric):
    out = run("""
        c = pydsm.Cluster.local(nodes=2, fabric=sys.argv[1], partition="16MiB")
        buf = c.alloc(np.zeros(1, np.uint64), node=1)
        other = pydsm.Cluster.connect(c.coordinator, c.secret, fabric=sys.argv[1], nodes=2)
        other.fetch_add(buf.address, 1)
        c.close()
        try:   # over shm the daemon's memory may still be mapped here
            other.fetch_add(buf.address, 1)
        except pydsm.DsmError as e:
            print("refused", type(e).__name__)
        other.close()
        other.close()
        print("closed")
    """, fabric)
    assert out.rstrip().endswith("closed")


def test_close_twice_and_after_exit_of_with():
    out = run("""
        with pydsm.Cluster.local(nodes=2, fabric="shm", partition="16MiB") as c:
            c.close()
            c.close()
        c.close()
        print("closed", c.closed)
    """)
    assert "closed True" in out


@pytest.mark.parametrize("fabric", ["shm", "tcp"])
def test_close_after_a_daemon_was_killed(fabric):
    out = run("""
        c = pydsm.Cluster.local(nodes=3, fabric=sys.argv[1], partition="16MiB", peer_timeout_ms=1000)
        c.kill(2)
        t0 = time.monotonic()
        c.close()
        print("closed in", round(time.monotonic() - t0, 1))
    """, fabric)
    assert "closed in" in out


def test_close_from_a_finaliser_on_the_nodes_own_thread():
    """A cluster left in a reference cycle is closed by the cycle collector,
    which may run on whichever thread allocates: here the thread that
    emits the node's control thread's line about a peer's departure. Close
    there must neither destroy the node from one of its own threads nor
    wait for the very thread it runs on to flush the log."""
    out = run("""
        seen = []
        left = threading.Event()
        class Collect(logging.Handler):
            def emit(self, record):
                if threading.current_thread() is not threading.main_thread():
                    seen.append(record.getMessage())
                    gc.collect()
                    if "left" in seen[-1]:
                        left.set()
        logging.getLogger("pydsm").addHandler(Collect())
        logging.getLogger("pydsm").setLevel(logging.INFO)
        gc.disable()
        c = pydsm.Cluster.local(nodes=1, fabric="shm", partition="16MiB", log_level=2)
        coordinator, secret = c.coordinator, c.secret
        c.cycle = c          # only the cycle collector frees it
        other = pydsm.Cluster.connect(coordinator, secret, fabric="shm", log_level=2)
        del c
        other.close()        # "peer ... left", logged on c's control thread
        left.wait(60)        # generous: a peer's departure is logged within the peer timeout
        gc.collect()
        print("collected", any("left" in m for m in seen))
    """)
    assert "collected True" in out


def test_close_at_exit_with_a_client_connected():
    out = run("""
        c = pydsm.Cluster.local(nodes=2, fabric="tcp", partition="16MiB")
        other = pydsm.Cluster.connect(c.coordinator, c.secret, fabric="tcp", nodes=2)
        print("leaving both to atexit")
    """)
    assert "atexit" in out
