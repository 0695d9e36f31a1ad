"""LOCO's kvstore and shared queue (csrc/chan) are linearizable under the
chaos fabric, on histories recorded by 3 daemons over shm and tcp; and the
kvstore with its fence before the lock's release removed is not, under the
same chaos: the checker and the chaos fabric bite. Both also with windows
of puts and deletes (put_many, delete_many).

The histories come from the ``chan_ops`` workload run on the daemons (the
library Python uses has no test-only switches, so the broken kvstore is the
workload's documented ``fence=0``, unsafe, there to show why the fence
matters).
"""
from __future__ import annotations

import pytest

import pydsm
from pydsm.linearizability import FifoQueue, KVMap, check
from pydsm.tools.chaos import TORN, chan_history

# Every fault at its default rate: the positive runs.
ALL = "all"
# The negative run's chaos: every one-sided write is completed before it is
# placed, and placed 0-20 ms later (10 ms on average) unless a later read,
# atomic or flush on the same connection releases it first. An unfenced
# update of a key hosted elsewhere is then still unplaced when its put
# returns, for milliseconds, so other nodes' gets that start after it read
# the old value (or a later writer's value is overwritten by the late one).
# A violation needs another node's get to land in that window, before the
# writer's own next read or atomic on the connection releases the write:
# four keys over three nodes, mostly gets. Measured (late=100,max_us=20000,
# get_pct=70): 100 operations per node fail the check in 7 of 8 runs over
# tcp (the weaker fabric here), so 1000 per node leave a wide margin; see
# the commit for the runs of this test's settings.
LATE = "late=100,max_us=20000"
NEGATIVE = dict(keys=4, locks=4, ops=1000, get_pct=70, delete_pct=5)
# The same with windows: runs of up to 8 puts (or deletes) in a row go as
# one put_many (delete_many), their locks taken together; fewer gets, so
# that runs of puts occur.
WINDOWED = dict(NEGATIVE, get_pct=50, window=8)

# three daemons busy on a 2-core host: said once by the driver, expected here
pytestmark = pytest.mark.filterwarnings("ignore::pydsm.OversubscribedWarning")


def _overlapping(history) -> bool:
    """Some key saw operations from all three nodes."""
    clients = {}
    for op in history.ops:
        clients.setdefault(op.key, set()).add(op.client)
    return any(len(c) == 3 for c in clients.values())


@pytest.mark.parametrize("fabric", ["shm", "tcp"])
def test_kvstore_and_queue_linearizable_under_chaos(monkeypatch, fabric):
    monkeypatch.delenv("DSM_CHAOS", raising=False)
    with pydsm.Cluster.local(nodes=3, fabric=fabric, op_timeout_ms=30000, peer_timeout_ms=10000,
                             chaos=f"21:{ALL}") as c:
        kv = chan_history(c, "kvstore", seed=21, ops=300, keys=8)
        assert len(kv) == 3 * 300
        assert _overlapping(kv)
        kinds = {op.kind for op in kv.ops}
        assert kinds == {"get", "put", "delete"}, kinds
        verdict = check(kv, KVMap())
        assert verdict.ok, verdict.explain()
        # windows of puts and deletes (put_many, delete_many) beside single gets
        kvw = chan_history(c, "kvstore", seed=22, ops=300, keys=8, get_pct=40, window=8)
        assert len(kvw) == 3 * 300
        assert _overlapping(kvw)
        verdict = check(kvw, KVMap())
        assert verdict.ok, verdict.explain()
        q = chan_history(c, "queue", seed=21, ops=200, capacity=8)
        assert len(q) == 3 * 200
        assert {op.kind for op in q.ops} == {"push", "pop"}
        verdict = check(q, FifoQueue())
        assert verdict.ok, verdict.explain()
        stats = [c.stats(node) for node in c.nodes]
    assert sum(int(s.get("chaos_late", 0)) + int(s.get("chaos_split", 0)) for s in stats) > 0
    if fabric == "tcp":
        # the asynchronous gets and puts to one peer wait in the fabric's
        # queue of deferred requests behind one in flight, and chaos held,
        # delayed or sent early some of those queues: the histories above
        # went through that path
        assert sum(int(s["deferred"]) for s in stats) > 0, stats
        assert sum(int(s["chaos_defer_held"]) + int(s["chaos_defer_opened"]) + int(s["chaos_defer_early"])
                   for s in stats) > 0, stats


@pytest.mark.parametrize("fabric", ["shm", "tcp"])
def test_kvstore_without_its_fence_fails_the_check(monkeypatch, fabric):
    monkeypatch.delenv("DSM_CHAOS", raising=False)
    with pydsm.Cluster.local(nodes=3, fabric=fabric, op_timeout_ms=30000, peer_timeout_ms=10000,
                             chaos=f"5:{LATE}") as c:
        # the same chaos with the fence: linearizable
        fenced = chan_history(c, "kvstore", seed=5, fence=1, **NEGATIVE)
        verdict = check(fenced, KVMap())
        assert verdict.ok, verdict.explain()
        # without it: not
        broken = chan_history(c, "kvstore", seed=5, fence=0, settle_ms=500, **NEGATIVE)
        verdict = check(broken, KVMap())
        assert not verdict.ok, "the kvstore without its fence passed the check: chaos or checker does not bite"
        assert verdict.stuck is not None
        torn = [op for op in broken.ops if op.result == TORN]
        print(f"{fabric}: no-fence history refused ({len(torn)} torn gets): {verdict.explain().splitlines()[1]}")
        # and with windows of puts (put_many): the same, fenced or not
        fenced = chan_history(c, "kvstore", seed=6, fence=1, **WINDOWED)
        verdict = check(fenced, KVMap())
        assert verdict.ok, verdict.explain()
        broken = chan_history(c, "kvstore", seed=6, fence=0, settle_ms=500, **WINDOWED)
        verdict = check(broken, KVMap())
        assert not verdict.ok, "put_many without its fence passed the check: chaos or checker does not bite"
