"""The delegation memcached server from Python (MemcachedServer) and the CLI
(`pydsm serve memcached`), spoken to in memcached's text protocol."""
import socket
import subprocess
import sys

import pytest

from pydsm.tools.serve import MemcachedServer


def _talk(address, data: bytes, expect_end: bytes) -> bytes:
    with socket.create_connection(address, timeout=10) as s:
        s.sendall(data)
        out = b""
        while not out.endswith(expect_end):
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
        return out


def test_memcached_server_set_get_and_errors():
    with MemcachedServer(port=0, workers=2, trustees=1) as srv:
        host, port = srv.address
        assert port > 0
        assert _talk(srv.address, b"set k 5 0 3\r\nabc\r\n", b"\r\n") == b"STORED\r\n"
        assert _talk(srv.address, b"get k\r\n", b"END\r\n") == b"VALUE k 5 3\r\nabc\r\nEND\r\n"
        assert _talk(srv.address, b"incr k 1\r\n", b"\r\n").startswith(b"CLIENT_ERROR")
        assert _talk(srv.address, b"bogus\r\n", b"\r\n") == b"ERROR\r\n"
        # the connection and the server stay usable after bad input
        assert _talk(srv.address, b"delete k\r\nget k\r\n", b"END\r\n") == b"DELETED\r\nEND\r\n"
    assert srv.process.poll() is not None  # stopped on exit


def test_memcached_server_bad_arguments():
    with pytest.raises(ValueError):
        MemcachedServer(port=70000)
    with pytest.raises(ValueError):
        MemcachedServer(workers=0)


def test_cli_serve_memcached():
    proc = subprocess.Popen([sys.executable, "-m", "pydsm", "serve", "memcached", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        line = proc.stdout.readline().decode()
        assert line.startswith("listening on 127.0.0.1:"), line
        port = int(line.rsplit(":", 1)[1])
        assert _talk(("127.0.0.1", port), b"version\r\n", b"\r\n").startswith(b"VERSION ")
    finally:
        proc.terminate()
        assert proc.wait(10) == 0


def test_memcached_server_limits_reach_the_server():
    with MemcachedServer(port=0, memory_mb=8, max_conns=50, item_max=2 << 20) as srv:
        out = _talk(srv.address, b"stats settings\r\n", b"END\r\n")
        assert b"STAT maxbytes 8388608\r\n" in out
        assert b"STAT maxconns 50\r\n" in out
        assert b"STAT item_size_max 2097152\r\n" in out
        workers = _talk(srv.address, b"stats workers\r\n", b"END\r\n")
        assert b"STAT worker:0:progress adaptive\r\n" in workers   # the program's default
    with MemcachedServer(port=0, progress="blocking") as srv:
        assert b"STAT worker:0:progress blocking\r\n" in _talk(srv.address, b"stats workers\r\n", b"END\r\n")
    with pytest.raises(ValueError):
        MemcachedServer(memory_mb=0)
    with pytest.raises(ValueError):
        MemcachedServer(item_max=10)
    with pytest.raises(ValueError, match="progress must be one of"):
        MemcachedServer(progress="busy")


def test_cli_serve_memcached_limits():
    proc = subprocess.Popen([sys.executable, "-m", "pydsm", "serve", "memcached", "--port", "0",
                             "--memory", "16", "--max-conns", "7", "-I", "2m", "--progress", "hybrid"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        line = proc.stdout.readline().decode()
        assert line.startswith("listening on 127.0.0.1:"), line
        port = int(line.rsplit(":", 1)[1])
        out = _talk(("127.0.0.1", port), b"stats settings\r\n", b"END\r\n")
        assert b"STAT maxbytes 16777216\r\n" in out and b"STAT maxconns 7\r\n" in out
        assert b"STAT item_size_max 2097152\r\n" in out
        workers = _talk(("127.0.0.1", port), b"stats workers\r\n", b"END\r\n")
        assert b"STAT worker:0:progress hybrid\r\n" in workers
    finally:
        proc.terminate()
        assert proc.wait(10) == 0
