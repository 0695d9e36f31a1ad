"""The pytest plugin pydsm.testing: fixtures, markers, --dsm-connect."""
from __future__ import annotations

import json
import signal
import subprocess

import pytest

import pydsm
from conftest import pydsm_cmd

INNER = """
import numpy as np, pytest

SEEN = []

def test_default(dsm_cluster):
    SEEN.append(dsm_cluster)
    assert dsm_cluster.fabric in ("shm", "tcp") and len(dsm_cluster.nodes) >= 2
    with dsm_cluster.alloc(np.arange(5), node=dsm_cluster.nodes[-1]) as b:
        assert list(b.read()) == [0, 1, 2, 3, 4]

@pytest.mark.tcp
def test_tcp_marker(dsm_cluster, request):
    assert dsm_cluster.fabric == "tcp"   # a connected shm cluster skips this

@pytest.mark.shm
def test_shm_marker(dsm_cluster, request):
    assert dsm_cluster.fabric == "shm"

def test_shared_between_tests(dsm_cluster):
    # the very cluster test_default got (the session's shm one, or the deployed one)
    assert SEEN and dsm_cluster is SEEN[0]

def test_explicit_tcp(dsm_cluster_tcp):
    assert dsm_cluster_tcp.fabric == "tcp"
"""


def test_plugin_registered(pytestconfig):
    assert pytestconfig.pluginmanager.has_plugin("dsm")


def test_fixture_local(pytester):
    pytester.makepyfile(test_inner=INNER)
    res = pytester.runpytest_subprocess("-q", "--dsm-nodes", "2")
    res.assert_outcomes(passed=5)


def test_fixture_against_a_deployed_cluster(pytester):
    up = subprocess.Popen(pydsm_cmd() + ["up", "--nodes", "2", "--partition", "16MiB", "--json"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          stdin=subprocess.DEVNULL)
    try:
        info = json.loads(up.stdout.readline())
        pytester.makepyfile(test_inner=INNER)
        res = pytester.runpytest_subprocess("-q", "--dsm-connect", info["coordinator"],
                                            "--dsm-secret", info["secret"], "--dsm-connect-fabric", "shm",
                                            "-rs")
        # dsm_cluster_tcp is local-only; the tcp-marked test does not run on shm
        res.assert_outcomes(passed=3, skipped=2)
        res.stdout.fnmatch_lines(["*marked tcp, but the cluster of --dsm-connect runs over shm*"])
    finally:
        up.send_signal(signal.SIGTERM)
        up.wait(20)


def test_connect_needs_secret(pytester):
    pytester.makepyfile(test_inner="def test_x(dsm_cluster):\n    pass\n")
    res = pytester.runpytest_subprocess("-q", "--dsm-connect", "127.0.0.1:1")
    assert res.ret != 0
    assert "dsm-secret" in res.stdout.str() + res.stderr.str()


@pytest.mark.shm
def test_marker_selects_shm(dsm_cluster):
    assert dsm_cluster.fabric == "shm"


@pytest.mark.tcp
def test_marker_selects_tcp(dsm_cluster):
    assert dsm_cluster.fabric == "tcp"


def test_pool_restarts_a_broken_cluster(dsm_cluster_pool):
    c = dsm_cluster_pool.get("shm", 2)
    c.kill(1)
    c2 = dsm_cluster_pool.get("shm", 2)
    assert c2 is not c and c.closed and c2.live_nodes() == [0, 1]
    assert isinstance(c2, pydsm.Cluster)
