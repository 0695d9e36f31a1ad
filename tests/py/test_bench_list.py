"""dsm-bench-NAME --list is the figure catalogue: every figure the quick run
writes to its JSON must be listed there (path is cheap: seconds)."""
import json
import os
import subprocess

import pytest

from pydsm import _lib
from pydsm.tools import bench


def test_path_list_names_every_quick_figure(tmp_path):
    prog = _lib.bench_path("path")
    if not prog:
        pytest.fail("dsm-bench-path is not built (configure with -DDSM_BENCH=ON)")
    listed = {c["figure"] for c in bench.cases("path")}
    assert all(c["better"] in ("higher", "lower") and c["anchor"] for c in bench.cases("path"))
    out = tmp_path / "path.json"
    env = dict(os.environ, UCX_PROTO_ENABLE="y")
    subprocess.run([prog, "--quick", "--runs", "1", "--json", str(out)], env=env, check=True,
                   stdout=subprocess.DEVNULL, timeout=300)
    figures = {f["name"] for f in json.loads(out.read_text())["figures"]}
    assert figures, "the quick run reported no figure"
    assert figures <= listed, f"figures not in --list: {sorted(figures - listed)}"
