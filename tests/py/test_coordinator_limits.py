"""The coordinator as a hostile or careless client meets it: a flood of
connections that never authenticate must not keep a correct client out, and
a client on the wrong fabric is told so at once (naming both fabrics)
rather than waiting for a timeout."""
import socket

import pytest

import pydsm
from pydsm.errors import Timeout, Unsupported


def test_connect_while_idle_connections_hold_the_port():
    with pydsm.Cluster.local(nodes=1, fabric="shm", partition="4MiB") as c:
        host, port = c.coordinator.rsplit(":", 1)
        idle = []
        try:
            for _ in range(512):
                idle.append(socket.create_connection((host, int(port)), timeout=10))
            with pydsm.Cluster.connect(c.coordinator, c.secret, timeout=30) as d:
                assert d.live_nodes() == [0]
            # the flood was turned away with a reason, not silently
            refused = 0
            for s in idle:
                s.settimeout(0.0)
                try:
                    data = s.recv(4096)
                except BlockingIOError:
                    continue
                if b"unauthenticated connections" in data:
                    refused += 1
            assert refused >= 256
        finally:
            for s in idle:
                s.close()


def test_wrong_fabric_is_refused_at_join_naming_both():
    with pydsm.Cluster.local(nodes=1, fabric="tcp", partition="4MiB") as c:
        with pytest.raises(Unsupported) as exc:
            pydsm.Cluster.connect(c.coordinator, c.secret, fabric="shm", timeout=60)
        assert not isinstance(exc.value, Timeout)
        text = str(exc.value)
        assert "fabric is shm" in text and "uses tcp" in text, text
