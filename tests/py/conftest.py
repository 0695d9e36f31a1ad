"""Shared helpers for the pydsm tests (fixtures come from the pydsm.testing plugin)."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import List

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def dsmd_pids(marker: str) -> List[int]:
    """Pids of live dsmd processes whose command line contains ``marker``
    (e.g. the coordinator address, unique per cluster)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{entry}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if state == b"Z":
            continue
        if argv and os.path.basename(argv[0]) == b"dsmd" and marker.encode() in b" ".join(argv):
            pids.append(int(entry))
    return pids


#: How long a test waits for daemons to appear or to be gone: milliseconds on
#: an idle host (a daemon gets SIGTERM when its driver dies), a
#: generous bound for a loaded 2-core one, which only a hang reaches.
DAEMONS_WAIT_S = 30


def wait_until(pred, timeout: float, interval: float = 0.1) -> bool:
    """Poll ``pred`` until it is true or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(interval)
    return bool(pred())


def stacks_of(pid: int) -> str:
    """Every thread's C stack of a live process (gdb), for the failure
    message of a test whose subprocess hung: a hang seen once in many runs
    must say where it was."""
    masks = []
    try:   # where a signal went: pending, blocked, ignored, caught, per thread
        for tid in sorted(os.listdir(f"/proc/{pid}/task")):
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
            masks.append(f"task {tid} {fields['Name'].strip()}: " + " ".join(
                f"{k}={fields[k].strip()}" for k in ("SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt")))
    except OSError as e:
        masks.append(f"(no signal masks: {e})")
    try:
        out = subprocess.run(["gdb", "-p", str(pid), "-batch", "-nx", "-ex", "thread apply all bt"],
                             capture_output=True, text=True, timeout=60)  # attaching under load is slow
        return "\n".join(masks + [line for line in out.stdout.splitlines() if line.startswith(("#", "Thread"))])
    except (OSError, subprocess.TimeoutExpired) as e:
        return "\n".join(masks + [f"(no stacks: {e})"])


def pydsm_cmd() -> List[str]:
    """The pydsm console script of this environment."""
    exe = os.path.join(os.path.dirname(sys.executable), "pydsm")
    return [exe] if os.path.exists(exe) else [sys.executable, "-m", "pydsm"]


@pytest.fixture
def run_pydsm():
    """Run the pydsm command; returns the CompletedProcess (text)."""
    def run(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
        p = subprocess.run(pydsm_cmd() + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        if check and p.returncode != 0:
            raise AssertionError(f"pydsm {' '.join(args)} exited {p.returncode}\n"
                                 f"stdout:\n{p.stdout}\nstderr:\n{p.stderr[-3000:]}")
        return p
    return run
