"""The system packages building pydsm's C core needs, checked before CMake
runs: without them CMake stops with "A required package was not found"
deep inside pip's output, naming no package to install. Used by setup.py
(not imported by the package at run time)."""
from __future__ import annotations

import shutil
import subprocess
from typing import List, Tuple

#: (pkg-config module, what provides it on Debian/Ubuntu)
PKG_CONFIG_MODULES: Tuple[Tuple[str, str], ...] = (("ucx", "libucx-dev"), ("libcrypto", "libssl-dev"))
#: (program, Debian package)
PROGRAMS: Tuple[Tuple[str, str], ...] = (("cmake", "cmake"), ("pkg-config", "pkg-config"), ("cc", "build-essential"))


def missing() -> List[str]:
    """Debian packages of what the C build needs and this host lacks."""
    out = [pkg for prog, pkg in PROGRAMS if not shutil.which(prog)]
    if shutil.which("pkg-config"):
        for module, pkg in PKG_CONFIG_MODULES:
            if subprocess.run(["pkg-config", "--exists", module], check=False).returncode != 0:
                out.append(pkg)
    return out


def check() -> None:
    """Raise SystemExit naming the packages to install when any is missing."""
    need = missing()
    if need:
        raise SystemExit(
            f"pydsm builds its C core here and needs system packages this host lacks: {' '.join(need)}.\n"
            f"On Debian/Ubuntu: sudo apt-get install {' '.join(need)} "
            f"(ucx-utils rdma-core libibverbs-dev add the shm, tcp and verbs transports' tools),\n"
            f"then run pip install again. From a checkout, `make setup` installs them.")
