"""The pieces of the deployment that run without root or test hosts: dsmd
--version (what the playbooks compare across hosts), the plugin's
--dsm-net-device, dsm-check's usage, the test-host script's usage."""
from __future__ import annotations

import os
import subprocess
import sys

import pydsm
import pydsm._lib as lib

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_dsmd_version_is_the_package_version():
    out = subprocess.run([lib.dsmd_path(), "--version"], stdout=subprocess.PIPE, text=True, timeout=30, check=True)
    assert out.stdout.strip() == f"dsmd {pydsm.lib_version()}"
    with open(os.path.join(REPO, "VERSION")) as f:
        assert pydsm.lib_version() == f.read().strip()


def test_plugin_joins_through_a_given_device(pytester):
    up = pydsm.Cluster.local(nodes=2, fabric="tcp", partition="16MiB")
    try:
        pytester.makepyfile(test_inner="""
def test_joined(dsm_cluster):
    assert dsm_cluster.mode == "connect" and dsm_cluster.fabric == "tcp"
    assert dsm_cluster.live_nodes() == [0, 1]
""")
        res = pytester.runpytest_subprocess("-q", "--dsm-connect", up.coordinator, "--dsm-secret", up.secret,
                                            "--dsm-connect-fabric", "tcp", "--dsm-net-device", "lo")
        res.assert_outcomes(passed=1)
        bad = pytester.runpytest_subprocess("-q", "--dsm-connect", up.coordinator, "--dsm-secret", up.secret,
                                            "--dsm-connect-fabric", "tcp", "--dsm-net-device", "no-such-dev0")
        assert bad.ret != 0
    finally:
        up.close()


def test_dsm_check_usage():
    script = os.path.join(REPO, "playbooks", "roles", "pydsm", "files", "dsm-check")
    p = subprocess.run([sys.executable, script, "--help"], stdout=subprocess.PIPE, text=True, timeout=60)
    assert p.returncode == 0 and "members" in p.stdout and "pairs" in p.stdout
    p = subprocess.run([sys.executable, script, "members"], stderr=subprocess.PIPE, text=True, timeout=60)
    assert p.returncode == 2 and "--coordinator" in p.stderr


def test_testhosts_usage():
    p = subprocess.run([os.path.join(REPO, "scripts", "testhosts.sh")], stderr=subprocess.PIPE, text=True, timeout=30)
    assert p.returncode == 2 and "testhosts.sh up" in p.stderr and "no netem" in p.stderr
    p = subprocess.run([os.path.join(REPO, "scripts", "testhosts.sh"), "link", "9", "down"],
                       stderr=subprocess.PIPE, text=True, timeout=30)
    assert p.returncode != 0 and "no test host '9'" in p.stderr
