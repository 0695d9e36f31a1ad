"""Faults on the deployed namespace hosts: a killed dsmd, a cut link, 1 %
packet loss. The cluster reports the failure, operations on the lost node
fail with clear errors (bounded: no hang), acknowledged writes on the
surviving nodes stay, and the restarted dsmd rejoins. The times to detect
and to rejoin are printed at the end (they are figures, not assertions).

No delay test: this machine has no netem qdisc (see scripts/testhosts.sh)."""
from __future__ import annotations

import time

import numpy as np
import pytest

import pydsm
from conftest import record, wait_for

HANG_GUARD_S = 60  # an error must come well before this; a hang would not


def _populate(c):
    data = {r: np.arange(4096, dtype=np.uint64) * (r + 3) for r in range(3)}
    bufs = {r: c.alloc(data[r], node=r) for r in range(3)}
    counters = {r: c.alloc(np.zeros(1, np.uint64), node=r) for r in (0, 1)}
    for r in (0, 1):
        for _ in range(5):
            counters[r].fetch_add(3)
    return data, bufs, counters


def _survivors_intact(data, bufs, counters):
    for r in (0, 1):
        np.testing.assert_array_equal(bufs[r].read(), data[r])
        assert int(counters[r].read()[0]) == 15


def _usable(c, node):
    with c.alloc(np.arange(64, dtype=np.uint64), node=node) as b:
        np.testing.assert_array_equal(b.read(), np.arange(64))


def test_killed_dsmd_is_reported_then_rejoins(hosts, connect):
    c = connect()
    assert c.live_nodes() == [0, 1, 2]
    data, bufs, counters = _populate(c)
    pid = hosts.dsmd_pid(3)
    assert pid > 0
    # The hosts share this machine's clock: the kill's own timestamp, taken
    # on host 3, is the start (ssh's set-up time is not counted).
    t0 = float(hosts.ssh(3, f"date +%s.%N; kill -KILL {pid}").split()[0])
    assert wait_for(lambda: not c.node_alive(2), HANG_GUARD_S), "the cluster never reported rank 2 dead"
    record("kill dsmd: time to detect", time.time() - t0)
    t1 = time.monotonic()
    with pytest.raises(pydsm.PeerDead) as ei:
        bufs[2].read()
    assert ei.value.node == 2
    with pytest.raises(pydsm.PeerDead):
        c.alloc(64, node=2)
    with pytest.raises(pydsm.PeerDead):
        c.fetch_add(bufs[2], 1)
    assert time.monotonic() - t1 < HANG_GUARD_S
    _survivors_intact(data, bufs, counters)
    # The supervisor restarts dsmd; it claims rank 2 again.
    assert wait_for(lambda: c.node_alive(2), HANG_GUARD_S), "rank 2 never rejoined"
    record("kill dsmd: time to rejoin (from the kill)", time.time() - t0)
    assert hosts.dsmd_pid(3) not in (0, pid)
    _usable(c, 2)
    _survivors_intact(data, bufs, counters)


def test_cut_link_is_reported_then_the_host_rejoins(hosts, connect):
    c = connect()
    assert c.live_nodes() == [0, 1, 2]
    data, bufs, counters = _populate(c)
    t0 = time.monotonic()
    hosts.link(3, "down")
    try:
        t1 = time.monotonic()
        with pytest.raises((pydsm.PeerDead, pydsm.Timeout)):
            bufs[2].read()
        assert time.monotonic() - t1 < HANG_GUARD_S
        assert wait_for(lambda: not c.node_alive(2), HANG_GUARD_S), "the cluster never reported rank 2 dead"
        record("link cut: time to detect", time.monotonic() - t0)
        with pytest.raises(pydsm.PeerDead):
            bufs[2].read()
        _survivors_intact(data, bufs, counters)
        # The cut lasts a few seconds more: host 3's dsmd loses the
        # coordinator too and its supervisor keeps retrying the join.
        time.sleep(3)
    finally:
        hosts.link(3, "up")
    t2 = time.monotonic()
    assert wait_for(lambda: c.node_alive(2), 2 * HANG_GUARD_S), "host 3 never rejoined after the link came back"
    record("link cut: time to rejoin (from link up)", time.monotonic() - t2)
    _usable(c, 2)
    _survivors_intact(data, bufs, counters)


def test_one_percent_loss_loses_nothing(hosts, connect):
    c = connect()
    for h in (1, 2, 3):
        hosts.loss(h, "1")
    try:
        rng = np.random.default_rng(13)
        bufs = {r: c.alloc(np.zeros(512, np.uint64), node=r) for r in range(3)}
        counter = c.alloc(np.zeros(1, np.uint64), node=1)
        expect = {r: np.zeros(512, np.uint64) for r in range(3)}
        for i in range(300):
            r = i % 3
            chunk = rng.integers(0, 2 ** 63, 64, dtype=np.uint64)
            off = int(rng.integers(0, 512 - 64))
            c.write(bufs[r].addr(off * 8), chunk)
            expect[r][off:off + 64] = chunk
            counter.fetch_add(1)
        for r in range(3):
            np.testing.assert_array_equal(bufs[r].read(), expect[r])
        assert int(counter.read()[0]) == 300
        assert c.live_nodes() == [0, 1, 2]
    finally:
        for h in (1, 2, 3):
            hosts.loss(h, "off")
