"""Every Python snippet of the README runs as printed.

The local ones run here, on a local cluster; the connect snippet of the
deploy section runs in tests/deploy against the namespace hosts.
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from readme_snippets import snippets  # noqa: E402


def local_snippets():
    return [s for s in snippets() if "Cluster.local(" in s]


def test_the_readme_has_its_snippets():
    progs = snippets()
    assert len(local_snippets()) >= 1
    assert any("Cluster.connect(" in s for s in progs)
    # every snippet is run by one test or the other
    assert all("Cluster.local(" in s or "Cluster.connect(" in s for s in progs), progs


def test_local_snippets_run(tmp_path):
    os.makedirs(tmp_path / "results", exist_ok=True)
    for prog in local_snippets():
        # run as a user would: a fresh interpreter, in a scratch folder
        p = subprocess.run([sys.executable, "-c", prog], cwd=tmp_path, capture_output=True, text=True,
                           timeout=300)   # generous: a 3-node cluster and a short run on 2 cores
        assert p.returncode == 0, f"snippet failed:\n{prog}\n--- stderr:\n{p.stderr[-3000:]}"
