"""The coordinator as a hostile or careless client meets it: a flood of
connections that never authenticate must not keep a correct client out, and
a client on the wrong fabric is told so at once (naming both fabrics)
rather than waiting for a timeout."""
import logging
import os
import re
import socket
import struct
import time

import pytest

import pydsm
from pydsm.errors import Timeout, Unsupported

CTL_MAGIC = 0x4C54434D   # "MCTL"


def _ctl_version():
    """The control protocol's version, read from the header that defines it."""
    path = os.path.join(os.path.dirname(__file__), "..", "..", "csrc", "runtime", "ctl_wire.h")
    with open(path) as f:
        return int(re.search(r"DSM_CTL_VERSION = (\d+)", f.read()).group(1))


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


def _rss_kb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_connect_while_connections_declare_megabytes():
    # 200 unauthenticated connections each announce a ~1 MB hello and send
    # it; the coordinator (in this process) must not buffer them.
    with pydsm.Cluster.local(nodes=1, fabric="shm", partition="4MiB") as c:
        host, port = c.coordinator.rsplit(":", 1)
        before = _rss_kb()
        header = struct.pack("<IHHII", CTL_MAGIC, _ctl_version(), 2, 1000 * 1000, 0)  # a HELLO of 1 MB
        chunk = b"\0" * 65536
        conns, sent = [], []
        try:
            for _ in range(200):
                s = socket.create_connection((host, int(port)), timeout=10)
                s.setblocking(False)
                try:
                    s.send(header)
                except OSError:
                    pass
                conns.append(s)
                sent.append(0)
            peak, deadline = _rss_kb(), time.monotonic() + 30
            busy = True
            while busy and time.monotonic() < deadline:
                busy = False
                for i, s in enumerate(conns):
                    if s is None or sent[i] >= 1000 * 1000:
                        continue
                    try:
                        sent[i] += s.send(chunk[: 1000 * 1000 - sent[i]])
                        busy = True
                    except BlockingIOError:
                        busy = True
                    except OSError:  # the coordinator hung up: what it should do
                        s.close()
                        conns[i] = None
                peak = max(peak, _rss_kb())
                if busy:
                    time.sleep(0.001)
            with pydsm.Cluster.connect(c.coordinator, c.secret, timeout=30) as d:
                assert d.live_nodes() == [0]
            peak = max(peak, _rss_kb())
        finally:
            for s in conns:
                if s is not None:
                    s.close()
        print(f"200 connections declaring 1 MB: driver RSS {before // 1024} -> peak {peak // 1024} MB, "
              f"{sum(sent) // 1000} kB accepted by the kernel")
        assert peak - before < 64 * 1024


def test_a_node_of_another_version_is_named_as_such(caplog):
    """A joining node built from another version of the project (another
    control protocol version) is closed with a warning that names both
    versions, not taken for a malformed message; the cluster goes on."""
    version = _ctl_version()
    with pydsm.Cluster.local(nodes=1, fabric="shm", partition="4MiB") as c:
        host, port = c.coordinator.rsplit(":", 1)
        with caplog.at_level(logging.WARNING, logger="pydsm"):
            with socket.create_connection((host, int(port)), timeout=10) as s:
                s.sendall(struct.pack("<IHHII", CTL_MAGIC, version - 1, 2, 100, 0))
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline and "control protocol version" not in caplog.text:
                    time.sleep(0.01)
        assert f"speaks control protocol version {version - 1}, this coordinator {version}" in caplog.text
        with pydsm.Cluster.connect(c.coordinator, c.secret, timeout=30) as d:
            assert d.live_nodes() == [0]
