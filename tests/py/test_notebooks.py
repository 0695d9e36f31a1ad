"""Every notebook in notebooks/ runs top to bottom (small parameters) and the
quickstart produces its plot."""
from __future__ import annotations

import base64
import glob
import os

import pytest

import nbclient
import nbformat

from conftest import REPO  # noqa: E402

NOTEBOOKS = sorted(glob.glob(os.path.join(REPO, "notebooks", "*.ipynb")))


def _execute(path: str, tmp_path, env: dict) -> "nbformat.NotebookNode":
    nb = nbformat.read(path, as_version=4)
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        client = nbclient.NotebookClient(nb, timeout=240, kernel_name="python3",
                                         resources={"metadata": {"path": str(tmp_path)}})
        client.execute()
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return nb


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[os.path.basename(p) for p in NOTEBOOKS])
def test_notebook_runs(path, tmp_path):
    results = tmp_path / "results"
    nb = _execute(path, tmp_path, {"QUICKSTART_ITERS": "500", "QUICKSTART_NODES": "2",
                                   "QUICKSTART_RESULTS": str(results), "PYDSM_NOTEBOOK_QUICK": "1"})
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors
    if os.path.basename(path) == "quickstart.ipynb":
        png = results / "quickstart_fetch_add.png"
        assert png.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        images = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
                  if "image/png" in o.get("data", {})]
        assert images, "the plot cell shows no image"
        assert base64.b64decode(images[-1]["data"]["image/png"])[:4] == b"\x89PNG"
    if os.path.basename(path) == "corm.ipynb":
        for name in ("corm_active_memory.png", "corm_compaction_run.png"):
            png = results / name
            assert png.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if os.path.basename(path) == "trust.ipynb":
        png = results / "trust_fetch_add.png"
        assert png.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_quickstart_exists():
    assert any(p.endswith("quickstart.ipynb") for p in NOTEBOOKS)
