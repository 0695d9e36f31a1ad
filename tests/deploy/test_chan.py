"""LOCO's objects across the deployed namespace hosts: the kvstore's and
the shared queue's histories, recorded by ``chan_ops`` on every deployed
dsmd over tcp through the bridge, are linearizable, and every node's
operations are in them."""
from __future__ import annotations

import pytest

from pydsm.linearizability import FifoQueue, KVMap, check
from pydsm.tools.chaos import chan_history


@pytest.mark.parametrize("obj", ["kvstore", "queue"])
def test_chan_histories_on_the_deployed_hosts(hosts, connect, obj):
    c = connect()
    history = chan_history(c, obj, seed=11, ops=200)
    assert len(history) == len(c.nodes) * 200
    assert len({op.client for op in history.ops}) == len(c.nodes)
    verdict = check(history, KVMap() if obj == "kvstore" else FifoQueue())
    assert verdict.ok, verdict.explain()
