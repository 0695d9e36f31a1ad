"""libdsm's and UCX's log lines reach Python's logging, not stderr."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import pydsm

SCRIPT = r"""
import json, logging, pydsm
records = []
class Keep(logging.Handler):
    def emit(self, r):
        records.append([r.name, r.levelname, r.getMessage()])
logging.getLogger("pydsm").addHandler(Keep())
pydsm.set_log_level("info")
with pydsm.Cluster.local(nodes=1, fabric="tcp", partition="4MiB") as c:
    pydsm.set_log_level("info")   # Cluster.local set the driver's level from log_level
    c.alloc(64).read()
print(json.dumps(records))
"""


def test_c_and_ucx_lines_become_log_records(tmp_path):
    env = dict(os.environ, UCX_NO_SUCH_KNOB="1")   # UCX warns about an unknown variable
    env.pop("DSM_LOG_LEVEL", None)
    p = subprocess.run([sys.executable, "-I", "-c", SCRIPT], env=env, capture_output=True, text=True,
                       timeout=120, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    records = json.loads(p.stdout.strip().splitlines()[-1])
    ucx = [r for r in records if r[0] == "pydsm.ucx"]
    assert ucx and ucx[0][1] == "WARNING" and "UCX_NO_SUCH_KNOB" in ucx[0][2], records
    assert any(r[0] == "pydsm.coord" and r[1] == "INFO" for r in records), records
    # nothing written to stderr behind logging's back
    assert "UCX_NO_SUCH_KNOB" not in p.stderr and "dsm " not in p.stderr, p.stderr


def test_set_log_level_checks_its_argument():
    for bad in (5, -1, "loud", True, 1.0):
        with pytest.raises(ValueError):
            pydsm.set_log_level(bad)
    pydsm.set_log_level("warning")
    assert pydsm._lib.ext().lib.dsm_get_log_level() == 1
    pydsm.set_log_level(2)
    assert pydsm._lib.ext().lib.dsm_get_log_level() == 2


GIL_HOLDER = r"""
import logging, sys, time, numpy as np, pydsm
lines = []
class Keep(logging.Handler):
    def emit(self, r):
        lines.append(r.getMessage())
logging.getLogger("pydsm").addHandler(Keep())
with pydsm.Cluster.local(nodes=3, fabric="tcp", partition="4MiB", peer_timeout_ms=1000) as c:
    pydsm.set_log_level("info")    # joins and losses are logged
    counter = c.alloc(np.zeros(1, np.uint64), node=0)
    c.processes[2].kill()          # the coordinator and this node log the loss on their own threads
    sys.setswitchinterval(1000)    # from here this thread keeps the GIL while it runs Python
    end = time.monotonic() + 5     # five peer timeouts
    while time.monotonic() < end:
        pass
    sys.setswitchinterval(0.005)
    live = c.live_nodes()
    c.run("fetch_add", nodes=live, counter=counter, iters=10)
    print("live", live, "counted", int(counter[0]))
pydsm.log.flush()
print("logged", any("rank 2" in line for line in lines))
"""


def test_library_threads_never_wait_for_the_gil(tmp_path):
    """The coordinator and a node's control thread carry heartbeats: a log
    line of theirs must not wait for the GIL while Python code holds it, or
    every member misses its heartbeats and the cluster falls apart."""
    p = subprocess.run([sys.executable, "-c", GIL_HOLDER], capture_output=True, text=True, timeout=300,
                       cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr[-3000:]
    assert "live [0, 1] counted 20" in p.stdout, p.stdout + p.stderr[-3000:]
    assert "logged True" in p.stdout, p.stdout
