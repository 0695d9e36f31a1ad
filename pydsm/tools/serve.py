"""Servers built on pydsm's mechanisms. ``MemcachedServer`` runs the
delegation-based memcached server (Trust<T>: the key-value store is sharded
over trustee threads; the front end speaks memcached's text protocol), the
``dsm-memcached`` program shipped in the package, behind ``pydsm serve
memcached``."""
from __future__ import annotations

import os
import re
import subprocess
import time
from typing import List, Optional, Tuple

from .. import _lib

_LISTENING = re.compile(rb"listening on (\S+):(\d+)")


class ServerFailed(RuntimeError):
    """The server program is missing, exited, or did not come up in time."""


class MemcachedServer:
    """The delegation memcached server as a child process.

    Use as a context manager::

        with MemcachedServer(port=0, trustees=1) as srv:
            host, port = srv.address   # the port the server actually bound

    ``port=0`` picks a free port. ``workers`` threads serve connections and
    are trustees of the store's shards themselves (shared mode); ``trustees``
    adds that many dedicated trustee threads that only serve the store.
    As memcached: ``memory_mb`` of items are kept before the least recently
    used are evicted (per shard; default 64), at most ``max_conns``
    connections are served (default 1024) and items up to ``item_max`` bytes
    are stored (default 1 MiB; larger ones are answered
    ``SERVER_ERROR object too large for cache``). ``progress`` is how an
    idle worker waits for its next request: ``"blocking"`` sleeps in epoll
    at once, ``"hybrid"`` polls 100 µs first (a client's next request then
    costs no wake-up, while a core is spare), ``"adaptive"`` (the default)
    polls as long as that has lately paid and the host has a core to spare.
    """

    PROGRESS = ("blocking", "hybrid", "adaptive")

    def __init__(self, host: str = "127.0.0.1", port: int = 11211, workers: int = 2,
                 trustees: Optional[int] = None, shards: Optional[int] = None,
                 start_timeout: float = 10.0, memory_mb: Optional[int] = None,
                 max_conns: Optional[int] = None, item_max: Optional[int] = None,
                 progress: Optional[str] = None) -> None:
        if not 0 <= port <= 65535:
            raise ValueError(f"port must be in 0..65535, got {port}")
        if workers < 1 or (trustees is not None and trustees < 1) or (shards is not None and shards < 1):
            raise ValueError("workers, trustees and shards must be positive")
        if any(v is not None and v < 1 for v in (memory_mb, max_conns)):
            raise ValueError("memory_mb and max_conns must be positive")
        if item_max is not None and not 1024 <= item_max <= 128 << 20:
            raise ValueError(f"item_max must be in 1KiB..128MiB, got {item_max}")
        if progress is not None and progress not in self.PROGRESS:
            raise ValueError(f"progress must be one of {', '.join(self.PROGRESS)}, got {progress!r}")
        self.argv = self._argv(host, port, workers, trustees, shards, memory_mb, max_conns, item_max, progress)
        self.start_timeout = start_timeout
        self.process: Optional["subprocess.Popen[bytes]"] = None
        self.address: Optional[Tuple[str, int]] = None

    @staticmethod
    def _argv(host: str, port: int, workers: int, trustees: Optional[int], shards: Optional[int],
              memory_mb: Optional[int] = None, max_conns: Optional[int] = None,
              item_max: Optional[int] = None, progress: Optional[str] = None) -> List[str]:
        prog = _lib.find_binary("dsm-memcached")
        if not prog:
            raise ServerFailed("the memcached server is not built: no dsm-memcached in the package's bin/, "
                               "a build directory or PATH (reinstall pydsm with 'pip install .')")
        argv = [prog, "--host", host, "--port", str(port), "--workers", str(workers)]
        if trustees is not None:
            argv += ["--trustees", str(trustees)]
        if shards is not None:
            argv += ["--shards", str(shards)]
        if memory_mb is not None:
            argv += ["--memory", str(memory_mb)]
        if max_conns is not None:
            argv += ["--max-conns", str(max_conns)]
        if item_max is not None:
            argv += ["-I", str(item_max)]
        if progress is not None:
            argv += ["--progress", progress]
        return argv

    def start(self) -> "MemcachedServer":
        """Start the server and wait until it listens; sets ``address``."""
        self.process = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self.start_timeout
        output = b""
        assert self.process.stdout is not None
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            output += line
            m = _LISTENING.search(line)
            if m:
                self.address = (m.group(1).decode(), int(m.group(2)))
                return self
            if not line and self.process.poll() is not None:
                break
        self.stop()
        raise ServerFailed(f"memcached server did not start: {' '.join(self.argv)}\n"
                           f"{output.decode('utf-8', 'replace').strip()}")

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 5 s)."""
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process and self.process.stdout:
            self.process.stdout.close()

    def __enter__(self) -> "MemcachedServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve_forever(host: str, port: int, workers: int, trustees: Optional[int], shards: Optional[int],
                  memory_mb: Optional[int] = None, max_conns: Optional[int] = None,
                  item_max: Optional[int] = None, progress: Optional[str] = None) -> int:
    """Run the server in the foreground (replaces this process)."""
    argv = MemcachedServer._argv(host, port, workers, trustees, shards, memory_mb, max_conns, item_max, progress)
    os.execv(argv[0], argv)
    return 1  # not reached
