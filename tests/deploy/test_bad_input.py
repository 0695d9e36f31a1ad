"""Bad input to the deployment: each play fails naming the host and the fix,
and changes nothing that runs."""
from __future__ import annotations

import os

import pytest
import yaml

import pydsm


def test_unreachable_host_stops_the_deploy_naming_it(hosts, tmp_path):
    with open(hosts.inventory) as f:
        inv = yaml.safe_load(f)
    inv["all"]["children"]["dsm_nodes"]["hosts"]["pydsmghost"] = {"ansible_host": "10.213.0.99"}
    bad = tmp_path / "inventory.yml"
    bad.write_text(yaml.safe_dump(inv))
    before = [hosts.dsmd_pid(h) for h in (1, 2, 3)]
    p = hosts.playbook("deploy.yml", inventory=str(bad))
    assert p.returncode != 0, p.stdout[-3000:]
    assert "pydsmghost (10.213.0.99) is unreachable" in p.stdout, p.stdout[-3000:]
    assert "Fix: check the host is up" in p.stdout
    assert "PLAY [Deploy pydsm]" not in p.stdout  # the run stopped at the preflight
    assert [hosts.dsmd_pid(h) for h in (1, 2, 3)] == before  # nothing was restarted


def test_missing_vault_secret_fails_naming_every_host(hosts):
    before = [hosts.dsmd_pid(h) for h in (1, 2, 3)]
    p = hosts.playbook("deploy.yml", "--tags", "dsmd", "-e", "dsm_secret_source=vault")
    assert p.returncode != 0, p.stdout[-3000:]
    for h in ("pydsmh1", "pydsmh2", "pydsmh3"):
        assert f"{h}: no cluster secret" in p.stdout, p.stdout[-3000:]
    assert "ansible-vault encrypt_string" in p.stdout
    assert [hosts.dsmd_pid(h) for h in (1, 2, 3)] == before


def test_dsmd_version_mismatch_fails_naming_the_host(hosts):
    # Someone put another dsmd on host 3 by hand.
    hosts.ssh(3, "mv /opt/pydsm/bin/dsmd /opt/pydsm/bin/dsmd.keep && "
                 "printf '#!/bin/sh\\necho dsmd 0.0.9\\n' > /opt/pydsm/bin/dsmd && chmod +x /opt/pydsm/bin/dsmd")
    try:
        p = hosts.playbook("verify.yml")
    finally:
        hosts.ssh(3, "mv -f /opt/pydsm/bin/dsmd.keep /opt/pydsm/bin/dsmd")
    assert p.returncode != 0, p.stdout[-3000:]
    assert "pydsmh3 runs 'dsmd 0.0.9' but this cluster is dsmd" in p.stdout, p.stdout[-3000:]
    assert "--limit pydsmh3" in p.stdout
    assert "pydsmh1 runs" not in p.stdout and "pydsmh2 runs" not in p.stdout


def test_verify_names_the_failing_pairs(hosts):
    p = hosts.playbook("verify.yml", "-e", "dsm_verify_max_latency_us=0.001")
    assert p.returncode != 0, p.stdout[-3000:]
    assert "fabric check failed for" in p.stdout
    for a, b in (("pydsmh1", "pydsmh2"), ("pydsmh3", "pydsmh1")):
        assert f"{a} -> {b}: FAILED: latency" in p.stdout, p.stdout[-3000:]


def test_dsmd_with_another_clusters_secret_cannot_join(hosts, connect):
    out = hosts.ssh(3, "DSM_SECRET=another-clusters-secret-0123 timeout 60 /opt/pydsm/bin/dsmd "
                       f"--coordinator {hosts.coordinator} --transport tcp --net-device eth0 "
                       "--partition 16MiB --log-level 1 2>&1; echo exit=$?", check=False)
    assert "wrong cluster secret" in out and "exit=2" in out, out
    with pytest.raises(pydsm.AuthError):
        pydsm.Cluster.connect(hosts.coordinator, "another-clusters-secret-0123", fabric="tcp",
                              net_device=hosts.bridge, timeout=30)
    c = connect()  # the cluster itself is unharmed
    assert c.live_nodes() == [0, 1, 2]


def test_secret_is_readable_only_by_the_service(hosts):
    out = hosts.ssh(2, "stat -c '%U %a' /etc/pydsm/secret")
    assert out.split() == ["pydsm", "400"]
    secret_file = os.environ["PYDSM_TH_SECRET_FILE"]
    assert oct(os.stat(secret_file).st_mode & 0o777) == "0o600"
