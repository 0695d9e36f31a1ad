"""The linearizability checker against hand-made histories whose verdict is
known, and against random histories built around known linearization
points (linearizable by construction; one changed result makes them not)."""
from __future__ import annotations

import math
import random
import threading
from typing import Any, List

import pytest

from pydsm.linearizability import sequential_history
from pydsm.testing import EMPTY, Counter, FifoQueue, History, KVMap, Op, Register, check


def op(client: int, kind: str, call: float, ret: float, arg: Any = None, result: Any = None, key: Any = None) -> Op:
    return Op(client, kind, arg, result, key, call=call, ret=ret)


# ---- registers ----------------------------------------------------------------

def test_sequential_register_history():
    h = list(sequential_history([(0, "write", 1, None, None), (1, "read", None, 1, None),
                                 (0, "write", 2, None, None), (1, "read", None, 2, None)]))
    r = check(h, Register(0))
    assert r.ok, r.explain()
    assert [o.kind for o in r.order] == ["write", "read", "write", "read"]


def test_stale_read_after_a_completed_write_is_caught():
    h = [op(0, "write", 0, 10, arg=1), op(1, "read", 20, 30, result=0)]
    r = check(h, Register(0))
    assert not r.ok
    assert r.stuck is not None and r.stuck.kind == "read"
    assert "not linearizable" in r.explain()


def test_read_overlapping_a_write_may_see_either_value():
    for seen in (0, 1):
        h = [op(0, "write", 0, 100, arg=1), op(1, "read", 10, 20, result=seen)]
        assert check(h, Register(0)).ok


def test_reads_may_not_go_back_in_time():
    # both reads overlap the write, but once one read saw 1 a later read may not see 0
    h = [op(0, "write", 0, 100, arg=1), op(1, "read", 10, 20, result=1), op(2, "read", 30, 40, result=0)]
    assert not check(h, Register(0)).ok


def test_cas():
    h = [op(0, "cas", 0, 10, arg=(0, 5), result=True), op(1, "cas", 0, 10, arg=(0, 7), result=False),
         op(2, "read", 20, 30, result=5)]
    assert check(h, Register(0)).ok
    h[1].result = True   # both cannot have won
    assert not check(h, Register(0)).ok


def test_a_pending_write_may_or_may_not_have_happened():
    seen = [op(0, "write", 0, math.inf, arg=9), op(1, "read", 10, 20, result=9)]
    assert check(seen, Register(0)).ok
    unseen = [op(0, "write", 0, math.inf, arg=9), op(1, "read", 10, 20, result=0)]
    assert check(unseen, Register(0)).ok
    never_written = [op(0, "write", 0, math.inf, arg=9), op(1, "read", 10, 20, result=4)]
    assert not check(never_written, Register(0)).ok


# ---- counters ------------------------------------------------------------------

def test_fetch_add_results_must_be_distinct():
    h = [op(c, "fetch_add", 0, 10, arg=1, result=r) for c, r in enumerate([2, 0, 1])]
    h.append(op(9, "read", 20, 30, result=3))
    assert check(h, Counter()).ok
    h[0].result = 1   # two adds saw the same value: one was lost
    assert not check(h, Counter()).ok


def test_a_lost_increment_is_caught():
    h = [op(c, "add", 0, 10, arg=1) for c in range(3)] + [op(0, "read", 20, 30, result=2)]
    assert not check(h, Counter()).ok


def test_counters_on_different_keys_are_separate_objects():
    # one counter could not return 0 twice; two counters (kv's per-key
    # values) each may
    h = [op(0, "fetch_add", 0, 10, arg=1, result=0, key="a"), op(1, "fetch_add", 20, 30, arg=1, result=0, key="b"),
         op(2, "read", 40, 50, result=1, key="a")]
    assert check(h, Counter()).ok
    for o in h:
        o.key = None
    assert not check(h, Counter()).ok


# ---- key-value maps --------------------------------------------------------------

def test_keys_are_checked_one_by_one():
    h = [op(0, "put", 0, 10, arg="a", key=1), op(1, "put", 0, 10, arg="b", key=2),
         op(2, "get", 20, 30, result="a", key=1), op(2, "get", 40, 50, result="b", key=2),
         op(0, "delete", 60, 70, key=1), op(1, "get", 80, 90, result=EMPTY, key=1)]
    r = check(h, KVMap())
    assert r.ok, r.explain()
    assert len(r.order) == len(h)


def test_a_value_never_put_is_caught():
    h = [op(0, "put", 0, 10, arg="a", key=1), op(1, "get", 20, 30, result="b", key=1)]
    r = check(h, KVMap())
    assert not r.ok and r.stuck is not None and r.stuck.key == 1


def test_a_get_after_delete_must_miss():
    h = [op(0, "put", 0, 10, arg="a", key=1), op(0, "delete", 20, 30, key=1),
         op(1, "get", 40, 50, result="a", key=1)]
    assert not check(h, KVMap()).ok


# ---- queues ----------------------------------------------------------------------

def test_fifo_order():
    h = [op(0, "push", 0, 10, arg="a"), op(0, "push", 20, 30, arg="b"),
         op(1, "pop", 40, 50, result="a"), op(1, "pop", 60, 70, result="b"), op(1, "pop", 80, 90, result=EMPTY)]
    assert check(h, FifoQueue()).ok
    h[2].result, h[3].result = "b", "a"
    assert not check(h, FifoQueue()).ok


def test_concurrent_pushes_may_come_out_in_either_order():
    for first, second in (("a", "b"), ("b", "a")):
        h = [op(0, "push", 0, 10, arg="a"), op(1, "push", 5, 15, arg="b"),
             op(2, "pop", 20, 30, result=first), op(2, "pop", 40, 50, result=second)]
        assert check(h, FifoQueue()).ok


def test_each_pop_matches_exactly_one_push():
    h = [op(0, "push", 0, 10, arg="a"), op(1, "pop", 20, 30, result="a"), op(2, "pop", 20, 30, result="a")]
    assert not check(h, FifoQueue()).ok
    empty_after_push = [op(0, "push", 0, 10, arg="a"), op(1, "pop", 20, 30, result=EMPTY)]
    assert not check(empty_after_push, FifoQueue()).ok


# ---- random histories with known linearization points ---------------------------------

def _random_history(model: str, n: int, clients: int, seed: int) -> List[Op]:
    """Run n operations on a sequential object at increasing linearization
    points; each op's interval is a random window around its point, and a
    client's ops do not overlap one another."""
    rng = random.Random(seed)
    reg, queue, pushed = 0, [], 0
    busy_until = [0.0] * clients
    ops: List[Op] = []
    t = 0.0
    for i in range(n):
        t += rng.uniform(1, 10)
        free = [c for c in range(clients) if busy_until[c] < t]
        if not free:
            continue
        c = rng.choice(free)
        call = max(busy_until[c] + 0.5, t - rng.uniform(0, 30))
        ret = t + rng.uniform(0, 30)
        busy_until[c] = ret
        if model == "register":
            if rng.random() < 0.5:
                reg = i
                ops.append(op(c, "write", call, ret, arg=i))
            else:
                ops.append(op(c, "read", call, ret, result=reg))
        else:
            if rng.random() < 0.5:
                pushed += 1
                queue.append(pushed)
                ops.append(op(c, "push", call, ret, arg=pushed))
            else:
                ops.append(op(c, "pop", call, ret, result=queue.pop(0) if queue else EMPTY))
    return ops


@pytest.mark.parametrize("seed", range(8))
def test_random_register_histories(seed):
    h = _random_history("register", 120, 4, seed)
    r = check(h, Register(0))
    assert r.ok, r.explain()
    # a read of a value nobody wrote can never be explained
    reads = [o for o in h if o.kind == "read"]
    rng = random.Random(seed)
    rng.choice(reads).result = -1
    assert not check(h, Register(0)).ok


@pytest.mark.parametrize("seed", range(8))
def test_random_queue_histories(seed):
    h = _random_history("queue", 60, 4, seed)
    r = check(h, FifoQueue())
    assert r.ok, r.explain()
    pops = [o for o in h if o.kind == "pop" and o.result is not EMPTY]
    # popping a value twice can never be explained
    pops[-1].result = pops[0].result
    assert not check(h, FifoQueue()).ok


# ---- recording ------------------------------------------------------------------------

def test_history_records_threads_and_exceptions():
    h = History()
    value = [0]
    lock = threading.Lock()

    def client(c: int) -> None:
        for _ in range(50):
            with h.op(c, "fetch_add", arg=1) as rec:
                with lock:
                    rec.result = value[0]
                    value[0] += 1

    threads = [threading.Thread(target=client, args=(c,)) for c in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with pytest.raises(RuntimeError):
        with h.op(3, "add", arg=100):
            raise RuntimeError("the client died mid-call")
    assert len(h) == 151
    assert sum(o.pending for o in h.ops) == 1
    assert check(h, Counter()).ok
    with h.op(0, "read") as rec:
        rec.result = 250     # the pending add took effect
    assert check(h, Counter()).ok
    with h.op(0, "read") as rec:
        rec.result = 150     # and cannot be undone
    assert not check(h, Counter()).ok


def test_bad_input_is_refused_with_a_message():
    with pytest.raises(ValueError, match="returns before it is called"):
        check([op(0, "read", 10, 5, result=0)], Register(0))
    with pytest.raises(ValueError, match="no operation 'push'"):
        check([op(0, "push", 0, 1, arg=1)], Register(0))
