"""Boxes from Python (pydsm.own): borrow views over daemons' memory with
DRust's coherence, views that are released after their block, the borrow
rules, and the per-run counters of the kv workload in the Result."""
from __future__ import annotations

import numpy as np
import pytest

import pydsm


def test_box_round_trip_and_views(dsm_cluster):
    c = dsm_cluster
    node = c.nodes[-1]
    data = np.arange(12.0).reshape(3, 4)
    with c.box(data, node=node) as box:
        assert box.shape == (3, 4) and box.dtype == np.float64 and box.nbytes == 96
        with box.borrow() as a:
            assert isinstance(a, pydsm.BorrowView)
            np.testing.assert_array_equal(a, data)
            assert float(a.sum()) == float(data.sum())
            with pytest.raises(ValueError):   # a shared borrow is read-only
                a[0, 0] = 5
            row = a[1]
        # After the block: every use of the view (and of views of it) is an error.
        for use in (lambda: a[0], lambda: a + 1, lambda: np.sum(a), lambda: len(a), lambda: row[0],
                    lambda: a.tolist()):
            with pytest.raises(pydsm.BorrowEnded):
                use()
        assert "released" in repr(a)
        with box.borrow_mut() as m:
            m[:, 0] = -1
        with pytest.raises(pydsm.BorrowEnded):
            m[0, 0] = 7          # a write after the block is refused, not lost silently
        with box.borrow() as a:
            assert list(a[:, 0]) == [-1, -1, -1]
            assert a[2, 3] == 11


def test_box_coherence_counters(dsm_cluster):
    """A miss reads the object once, a second borrow hits this process's
    cache, a write gives the object a new coloured address (so the cached
    copy is never used again) and the next borrow misses and sees it."""
    c = dsm_cluster
    box = c.box((1024,), np.uint64, node=c.nodes[0])
    try:
        s0 = c.own_stats()
        with box.borrow() as a:
            assert int(a.sum()) == 0
        s1 = c.own_stats()
        assert s1["cache_misses"] - s0["cache_misses"] == 1
        with box.borrow() as a:
            assert int(a[5]) == 0
        s2 = c.own_stats()
        assert s2["cache_hits"] - s1["cache_hits"] == 1
        assert s2["cache_misses"] == s1["cache_misses"]
        g0 = box.address
        with box.borrow_mut() as m:
            m[5] = 42
        s3 = c.own_stats()
        assert s3["moves"] - s2["moves"] == 1          # a new slot at the home
        assert box.address != g0
        with box.borrow() as a:
            assert int(a[5]) == 42
        s4 = c.own_stats()
        assert s4["cache_misses"] - s3["cache_misses"] == 1
        assert s4["invalidations"] == s0["invalidations"] == 0   # own never sends one
    finally:
        box.drop()


def test_box_borrow_rules_and_bad_input(dsm_cluster):
    c = dsm_cluster
    box = c.box([1, 2, 3], np.int32, node=c.nodes[0])
    with box.borrow():
        with pytest.raises(pydsm.StateError):
            with box.borrow_mut():
                pass
        with pytest.raises(pydsm.StateError):
            box.drop()
    with box.borrow_mut():
        with pytest.raises(pydsm.StateError):
            with box.borrow():
                pass
    box.drop()
    with pytest.raises(pydsm.StateError):
        with box.borrow():
            pass
    with pytest.raises(pydsm.InvalidArgument):
        c.box("not an array")
    with pytest.raises(pydsm.InvalidArgument):
        c.box(np.array([object()]))
    with pytest.raises(pydsm.NoPeer):
        c.box((4,), node=99)


@pytest.mark.parametrize("protocol", ["own", "dir"])
def test_kv_result_has_the_protocol_counters(protocol, dsm_cluster):
    c = dsm_cluster
    params = dict(buckets=16, keys=100, ops=40, seed=3)
    with c.alloc(np.zeros(1 + 2 * params["buckets"], np.uint64), node=c.nodes[0]) as directory:
        res = c.run("kv", protocol=protocol, directory=directory, **params)
    for name in ("messages", "bytes", "cache_hits", "cache_misses", "moves", "invalidations"):
        assert len(res.per_node(name).value) == len(c.nodes), name
    total = {n: float(np.sum(res.per_node(n).value)) for n in ("messages", "cache_misses", "moves",
                                                               "invalidations")}
    assert total["messages"] > 0 and total["cache_misses"] > 0
    if protocol == "own":
        assert total["invalidations"] == 0 and total["moves"] > 0   # own never invalidates
    else:
        assert total["invalidations"] > 0                           # dir's writes invalidate sharers


def test_bench_drust_is_shipped_and_refuses_bad_arguments():
    import subprocess

    from pydsm import _lib
    from pydsm.tools import bench

    assert "drust" in bench.available() and "drust" in bench.KNOWN_BENCHMARKS
    prog = _lib.bench_path("drust")
    for args, why in ((["--reps", "2"], "medians of >= 3"), (["--ops", "0"], "positive count"),
                      (["--transport", "smoke"], "unknown transport"),
                      (["--workloads", "nope"], "names none")):
        p = subprocess.run([prog] + args, capture_output=True, text=True, timeout=60)
        assert p.returncode == 2 and why in p.stderr, (args, p.stderr)
