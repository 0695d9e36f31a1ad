"""pydsm: rack-scale distributed shared memory from Python.

A C core (libdsm, run by ``dsmd`` daemons) shares memory across machines over
UCX (shm, tcp, verbs); this package starts and joins clusters, allocates and
accesses global memory through numpy arrays, runs C workloads with a
placement, and hands results back as numpy record arrays.

    >>> import numpy as np, pydsm
    >>> with pydsm.Cluster.local(nodes=3, fabric="shm") as c:
    ...     buf = c.asarray(np.arange(10.0), node=1)
    ...     buf.read()

The library is this package's modules; the command line (``pydsm``) and the
tools behind it (demo, benchmarks, the memcached server) are
:mod:`pydsm.tools`.
"""
from __future__ import annotations

import os

from . import chan, compact, mheap, own
from .chan import Chan
from .cluster import Cluster, GlobalBuffer, Placement, Task
from .compact import Compact, CompactStore
from .memory import Memory
from .errors import (AlreadyExists, AuthError, BadAddress, Busy, Cancelled, ClusterClosed, DaemonFailed,
                     DsmError, DsmIOError, FabricError, InvalidArgument, NoHandler, NoPeer,
                     OutOfMemory, PeerDead, ProtocolError, RankTaken, StateError, Timeout,
                     TooBig, Unsupported, error_class)
from .log import set_log_level
from .own import BorrowEnded, BorrowView, Box, Own
from .result import OversubscribedWarning, Result
from .mheap import Mheap
from .session import Session
from .workloads import Param, WorkloadInfo, Workloads


def _version() -> str:
    """The installed distribution's version (the checkout's VERSION file when
    pydsm runs from a source tree that was not installed)."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("pydsm")
    except PackageNotFoundError:
        with open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "VERSION")) as f:
            return f.read().strip()


__version__ = _version()

__all__ = [
    "Box", "BorrowEnded", "BorrowView", "Chan", "Cluster", "Compact", "CompactStore", "GlobalBuffer", "Memory", "Mheap", "Own",
    "OversubscribedWarning", "Param", "Placement", "Result", "Session", "Task", "WorkloadInfo", "Workloads",
    "DsmError", "AlreadyExists", "AuthError", "BadAddress", "Busy", "Cancelled", "ClusterClosed", "DaemonFailed",
    "DsmIOError", "FabricError", "InvalidArgument", "NoHandler", "NoPeer", "OutOfMemory",
    "PeerDead", "ProtocolError", "RankTaken", "StateError", "Timeout", "TooBig", "Unsupported",
    "error_class", "get_include", "lib_version", "load_plugin", "set_log_level",
]


def lib_version() -> str:
    """Version string of the C core (libdsm)."""
    from ._lib import version
    return version()


def load_plugin(path: str) -> None:
    """Load a workload plugin (a ``.so`` built against :func:`get_include`)
    into this process, so that its workloads are described here:
    ``c.workloads()`` lists them and their arguments are checked before a
    run. ``Cluster.local(plugin=...)`` does this itself; call it for a
    cluster you connect to whose daemons load the plugin (``dsmd
    --plugin``). Loading a path again does nothing."""
    from ._lib import load_plugin as load
    load(path)


def get_include() -> str:
    """The directory holding libdsm's public headers (``dsm/*.h``), for C
    plugins built against the installed package: ``cc -I$(python -c 'import
    pydsm; print(pydsm.get_include())') ...``. The headers are
    ``dsm/dsm.h`` (the user API) and ``dsm/sdk.h`` (the user API and the SDK
    a plugin uses: ``dsm/plugin.h`` to register workloads and write results,
    the fabric and the runtime's module calls).

    Installed, the package holds them (``pydsm/include``); imported from a
    source checkout (no install), they are the checkout's ``csrc/include``.
    Raises FileNotFoundError when neither exists."""
    here = os.path.dirname(os.path.abspath(__file__))
    for path in (os.path.join(here, "include"), os.path.join(os.path.dirname(here), "csrc", "include")):
        if os.path.isfile(os.path.join(path, "dsm", "dsm.h")):
            return path
    raise FileNotFoundError(f"pydsm's C headers are not installed beside {here} (no include/dsm/dsm.h): "
                            f"install the package with 'pip install .' (or 'make setup' in the checkout)")
