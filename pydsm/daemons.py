"""Daemon supervision for local clusters: the coordinator hosted in this
process, and the dsmd processes (start-up, logs, kill, reaping)."""
from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from typing import Any, List, Optional, Sequence

from . import _lib
from .errors import DaemonFailed

#: a local cluster's log folder in the temporary directory: the prefix, the
#: driver's pid, a random part
LOGDIR_PREFIX = "pydsm-"


def _sweep_orphan_logdirs() -> None:
    """Remove the log folders of drivers that died without cleaning up (a
    kill -9 runs no finaliser): ours by name and owner, their pid gone."""
    root = tempfile.gettempdir()
    try:
        names = os.listdir(root)
    except OSError:
        return
    for name in names:
        rest = name[len(LOGDIR_PREFIX):] if name.startswith(LOGDIR_PREFIX) else ""
        pid_text = rest.split("-", 1)[0]
        path = os.path.join(root, name)
        if not pid_text.isdigit() or int(pid_text) == os.getpid():
            continue
        try:
            if os.stat(path).st_uid != os.getuid() or not os.path.isdir(path):
                continue
            os.kill(int(pid_text), 0)
            continue                       # its driver is alive
        except ProcessLookupError:
            pass                           # gone: an orphan
        except OSError:
            continue                       # not ours to judge (e.g. EPERM)
        shutil.rmtree(path, ignore_errors=True)


class _DeathSignal:
    """preexec_fn for dsmd: a new session (Ctrl-C in the driver's terminal
    reaches only the driver, which then stops the cluster cleanly) and
    PR_SET_PDEATHSIG so the daemon gets SIGTERM when the driver dies. The
    coordinator's socket closing does the same job (dsmd exits 3 when it loses
    the coordinator); this is the faster of the two."""

    PR_SET_PDEATHSIG = 1
    _libc_prctl: Any = False  # looked up once: a CDLL per daemon start kept ~50 B each

    def __init__(self) -> None:
        if _DeathSignal._libc_prctl is False:
            try:
                _DeathSignal._libc_prctl = ctypes.CDLL(None, use_errno=True).prctl
            except (OSError, AttributeError):  # pragma: no cover - non-Linux
                _DeathSignal._libc_prctl = None
        self._prctl = _DeathSignal._libc_prctl

    def __call__(self) -> None:
        os.setsid()
        if self._prctl is not None:
            self._prctl(self.PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


class Daemons:
    """The daemons of a local :class:`pydsm.Cluster` and the coordinator
    it hosts (a connected cluster has neither: its lists stay empty)."""

    def __init__(self, secret: str) -> None:
        self.secret = secret
        self.coordinator = ""
        self.processes: List["subprocess.Popen[bytes]"] = []
        self._logs: List[str] = []
        self._logdir: Optional[tempfile.TemporaryDirectory[str]] = None
        self._coord: Any = None
        self._keep: List[Any] = []

    def start_coordinator(self, fabric: str, peer_timeout_ms: int) -> str:
        """Host the cluster's coordinator in this process, on a free port;
        returns its address."""
        e = _lib.ext()
        ffi, lib = e.ffi, e.lib
        cc = ffi.new("dsm_coord_config_t *")
        bind, sec = _lib.cstr("127.0.0.1:0"), _lib.cstr(self.secret)
        self._keep += [bind, sec]
        cc.bind, cc.secret, cc.peer_timeout_ms = bind, sec, peer_timeout_ms
        # Clients that join with fabric="auto" learn the cluster's from here.
        ptrans = ffi.new("dsm_transport_t *")
        _lib.check(lib.dsm_transport_parse(fabric.encode(), ptrans), f"unknown fabric {fabric!r}")
        cc.transport = ptrans[0]
        # A joiner's worker address is tried in a dsmd child before any
        # member hands it to UCX (which aborts on malformed ones).
        checker = _lib.cstr(_lib.dsmd_path())
        self._keep.append(checker)
        cc.address_checker = checker
        pcoord = ffi.new("dsm_coord_t **")
        _lib.check(lib.dsm_coord_start(cc, pcoord), "cannot start the coordinator", op="coord_start")
        self._coord = pcoord[0]
        self.coordinator = f"127.0.0.1:{lib.dsm_coord_port(self._coord)}"
        return self.coordinator

    def stop_coordinator(self) -> None:
        """Tell every member to stop and close the coordinator (if any)."""
        if self._coord is not None:
            _lib.ext().lib.dsm_coord_stop(self._coord)
            self._coord = None

    def start(self, dsmd: str, nodes: int, fabric: str, part: int, progress: str,
                       heartbeat_ms: int, peer_timeout_ms: int, op_timeout_ms: int, log_level: int,
                       net_device: Optional[str], plugin: Optional[str], placement: Any = None,
                       flags: Sequence[str] = ()) -> None:
        """Start dsmd ranks 0..nodes-1, each logging to a file of its own;
        with a Placement, each attaches a delegation runtime sized from it.
        ``flags``: more dsmd flags, the same for every daemon."""
        _sweep_orphan_logdirs()
        self._logdir = tempfile.TemporaryDirectory(prefix=f"{LOGDIR_PREFIX}{os.getpid()}-")
        env = dict(os.environ, DSM_SECRET=self.secret)
        preexec = _DeathSignal() if threading.current_thread() is threading.main_thread() else os.setsid
        for rank in range(nodes):
            argv = [dsmd, "--coordinator", self.coordinator, "--rank", str(rank),
                    "--transport", fabric, "--partition", str(part), "--progress", progress,
                    "--heartbeat-ms", str(heartbeat_ms), "--peer-timeout-ms", str(peer_timeout_ms),
                    "--op-timeout-ms", str(op_timeout_ms), "--log-level", str(log_level)]
            if net_device:
                argv += ["--net-device", net_device]
            if plugin:
                argv += ["--plugin", plugin]
            if placement is not None:
                argv += ["--deleg-threads", str(placement.threads), "--deleg-trustees", placement.trustees]
            argv += list(flags)
            log = os.path.join(self._logdir.name, f"dsmd-{rank}.log")
            self._logs.append(log)
            with open(log, "wb") as f:
                self.processes.append(subprocess.Popen(
                    argv, env=env, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                    preexec_fn=preexec, close_fds=True))

    def check_processes(self) -> None:
        for rank, p in enumerate(self.processes):
            rc = p.poll()
            if rc is not None:
                raise DaemonFailed(f"dsmd rank {rank} exited with status {rc} during start-up"
                                   + self._log_tail(rank), node=rank, op="start")

    def _log_tail(self, rank: int, lines: int = 15) -> str:
        if rank >= len(self._logs):
            return ""
        try:
            with open(self._logs[rank], "rb") as f:
                text = f.read()[-max(8192, 256 * lines):].decode("utf-8", "replace")
        except OSError:
            return ""
        tail = text.strip().splitlines()[-lines:]
        return ("\n--- dsmd rank %d log (last lines) ---\n" % rank + "\n".join(tail)) if tail else ""

    def logs_hint(self, lines: int = 5) -> str:
        return "".join(self._log_tail(r, lines) for r in range(len(self._logs)))

    def log(self, node: int) -> str:
        """The stderr log of local daemon ``node`` so far (empty if none)."""
        try:
            with open(self._logs[node], "rb") as f:
                return f.read().decode("utf-8", "replace")
        except (OSError, IndexError):
            return ""

    def reap(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for sig in (None, signal.SIGTERM, signal.SIGKILL):
            alive = [p for p in self.processes if p.poll() is None]
            if not alive:
                return
            for p in alive:
                if sig is not None:
                    try:
                        p.send_signal(sig)
                    except ProcessLookupError:
                        pass
            for p in alive:
                try:
                    p.wait(max(0.1, deadline - time.monotonic()) if sig is None else 3.0)
                except subprocess.TimeoutExpired:
                    pass

    def kill(self, node: int, sig: int = signal.SIGKILL) -> None:
        """Kill daemon ``node`` and wait for it to exit."""
        self.processes[node].send_signal(sig)
        self.processes[node].wait(10)

    def cleanup(self) -> None:
        """Remove the daemons' log folder."""
        if self._logdir is not None:
            self._logdir.cleanup()
            self._logdir = None
