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


def _recap_module():
    import importlib.util
    spec = importlib.util.spec_from_file_location("deploy_recap", os.path.join(REPO, "tests", "deploy", "recap.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_RERUN_LOG = """
TASK [pydsm : Build the pydsm wheel (pip wheel)] *******************************
changed: [pydsmh1 -> localhost]

TASK [common : Directories] ****************************************************
ok: [pydsmh1] => (item={'path': '/opt/pydsm'})
changed: [pydsmh2] => (item={'path': '/opt/pydsm'})
changed: [pydsmh2] => (item={'path': '/etc/pydsm'})

RUNNING HANDLER [dsmd : Restart dsmd on the other hosts (supervised fallback)] ***
changed: [pydsmh2]

PLAY RECAP *********************************************************************
pydsmh1                    : ok=40   changed=1    unreachable=0    failed=0    skipped=9    rescued=0    ignored=0
pydsmh2                    : ok=38   changed=2    unreachable=0    failed=0    skipped=9    rescued=0    ignored=0
pydsmh3                    : ok=38   changed=0    unreachable=0    failed=0    skipped=9    rescued=0    ignored=0
"""


def test_recap_names_the_hosts_and_tasks_a_rerun_changed(tmp_path):
    rc = _recap_module()
    assert rc.recap(_RERUN_LOG) == {"pydsmh1": 1, "pydsmh2": 2, "pydsmh3": 0}
    assert rc.unchanged_problems(_RERUN_LOG) == [
        "pydsmh1: changed=1: pydsm : Build the pydsm wheel (pip wheel)",
        "pydsmh2: changed=2: common : Directories; dsmd : Restart dsmd on the other hosts (supervised fallback)",
    ]
    clean = _RERUN_LOG.split("PLAY RECAP")[0] + "PLAY RECAP ***\n" + "\n".join(
        f"pydsmh{i}                    : ok=38   changed=0    unreachable=0    failed=0" for i in (1, 2, 3)) + "\n"
    assert rc.unchanged_problems(clean) == []
    assert rc.unchanged_problems("TASK [x] ***\nfatal: [pydsmh1]: FAILED!\n") == [
        "no PLAY RECAP in the log: the run did not finish"]
    log = tmp_path / "deploy-again.log"
    log.write_text(_RERUN_LOG)
    p = subprocess.run([sys.executable, os.path.join(REPO, "tests", "deploy", "recap.py"), "--expect-unchanged",
                        str(log)], stderr=subprocess.PIPE, text=True, timeout=60)
    assert p.returncode == 1 and "pydsmh2: changed=2: common : Directories" in p.stderr


ROLES = ("cluster", "common", "rdma", "pydsm", "dsmd", "verify", "teardown")


def _role_yaml(role: str, *path: str):
    import yaml
    with open(os.path.join(REPO, "playbooks", "roles", role, *path)) as f:
        return yaml.safe_load(f)


def test_every_role_declares_its_settings_in_argument_specs():
    # ansible validates these at run time; this keeps them in step with the defaults.
    for role in ROLES:
        defaults = _role_yaml(role, "defaults", "main.yml")
        options = _role_yaml(role, "meta", "argument_specs.yml")["argument_specs"]["main"]["options"]
        assert set(defaults) <= set(options), (role, set(defaults) - set(options))
        for name, spec in options.items():
            assert spec.get("type") and spec.get("description"), (role, name)
            if name not in defaults:
                assert spec.get("required") is False, (role, name)  # only optional inputs (dsm_secret) lack a default
                continue
            value = defaults[name]
            if isinstance(value, str) and "{{" in value:
                assert "default" not in spec, (role, name)  # a spec is templated at run time: computed ones in words
            else:
                assert spec.get("default") == value, (role, name, spec.get("default"), value)
            if "choices" in spec and not (isinstance(value, str) and "{{" in value):
                assert value in spec["choices"], (role, name)


def test_group_vars_reference_lists_every_setting_with_its_default():
    import yaml
    with open(os.path.join(REPO, "playbooks", "inventory", "group_vars_reference.yml")) as f:
        text = f.read()
    for role in ROLES:
        for name, value in _role_yaml(role, "defaults", "main.yml").items():
            lines = [ln for ln in text.splitlines() if ln.startswith(f"# {name}:")]
            assert len(lines) == 1, (role, name)
            shown = lines[0][2:].split(":", 1)[1].strip()
            if shown:  # a list is written out below its name
                assert yaml.safe_load(f"v: {shown}")["v"] == value, (role, name, shown, value)
