"""Fixtures for the tests against the namespace test hosts (scripts/testhosts.sh)
with pydsm deployed on them by playbooks/deploy.yml. scripts/deploy-test.sh
sets them up and runs these tests; they are not part of tests/py because they
need root, the hosts and a deployment.

Environment (set by scripts/deploy-test.sh):
    PYDSM_TH_INVENTORY   the generated inventory
    PYDSM_TH_COORD       the coordinator HOST:PORT
    PYDSM_TH_SECRET_FILE the generated secret on this machine
    PYDSM_TH_BRIDGE      the interface this machine reaches the hosts through
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Callable, Dict, List

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TESTHOSTS = os.path.join(REPO, "scripts", "testhosts.sh")
FIGURES: Dict[str, float] = {}


def env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        pytest.skip(f"{name} is not set: run scripts/deploy-test.sh")
    return value


class Hosts:
    """The test hosts: ssh into them, cut their links, drop their packets."""

    def __init__(self) -> None:
        self.inventory = env("PYDSM_TH_INVENTORY")
        self.coordinator = env("PYDSM_TH_COORD")
        with open(env("PYDSM_TH_SECRET_FILE")) as f:
            self.secret = f.read().strip()
        self.bridge = env("PYDSM_TH_BRIDGE")

    def run(self, *args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        p = subprocess.run([TESTHOSTS, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        if check and p.returncode != 0:
            raise AssertionError(f"testhosts.sh {' '.join(args)} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
        return p

    def ssh(self, host: int, cmd: str, check: bool = True) -> str:
        return self.run("ssh", str(host), cmd, check=check).stdout

    def dsmd_pid(self, host: int) -> int:
        out = self.ssh(host, "cat /run/pydsm/dsmd.pid 2>/dev/null || true").strip()
        return int(out) if out.isdigit() else 0

    def link(self, host: int, state: str) -> None:
        self.run("link", str(host), state)

    def loss(self, host: int, pct: str) -> None:
        self.run("loss", str(host), pct)

    def playbook(self, name: str, *extra: str, inventory: str = "", timeout: float = 300) -> subprocess.CompletedProcess:
        bindir = os.path.dirname(sys.executable)
        exe = os.path.join(bindir, "ansible-playbook")
        argv = [exe if os.path.exists(exe) else "ansible-playbook", "-i", inventory or self.inventory,
                os.path.join(REPO, "playbooks", name), *extra]
        return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL, env=dict(os.environ, ANSIBLE_NOCOLOR="1"))


@pytest.fixture(scope="session")
def hosts() -> Hosts:
    return Hosts()


@pytest.fixture
def connect(hosts: Hosts) -> Callable:
    """connect(**kw) -> a pydsm.Cluster joined to the deployed cluster (closed after the test)."""
    import pydsm

    made: List = []

    def make(**kw):
        kw.setdefault("fabric", "tcp")
        kw.setdefault("net_device", hosts.bridge)
        kw.setdefault("nodes", 3)
        kw.setdefault("timeout", 60)
        c = pydsm.Cluster.connect(hosts.coordinator, hosts.secret, **kw)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


def wait_for(pred: Callable[[], bool], timeout: float, interval: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(interval)
    return bool(pred())


def record(name: str, seconds: float) -> None:
    FIGURES[name] = round(seconds, 3)


def pytest_terminal_summary(terminalreporter) -> None:
    if not FIGURES:
        return
    terminalreporter.section("fault figures (namespace hosts on a shared, loaded machine)")
    for name, value in FIGURES.items():
        terminalreporter.write_line(f"{name:48s} {value:8.3f} s")
    out = os.path.join(REPO, "build-deploy", "fault-figures.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(FIGURES, f, indent=1)
