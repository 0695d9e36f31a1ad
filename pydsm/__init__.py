"""pydsm: rack-scale distributed shared memory from Python.

A C core (libdsm, run by ``dsmd`` daemons) shares memory across machines over
UCX (shm, tcp, verbs); this package starts and joins clusters, allocates and
accesses global memory through numpy arrays, runs C workloads with a
placement, and hands results back as numpy record arrays.

    >>> import numpy as np, pydsm
    >>> with pydsm.Cluster.local(nodes=3, fabric="shm") as c:
    ...     buf = c.alloc(np.arange(10.0), node=1)
    ...     buf.read()
"""
from __future__ import annotations

import os

from .cluster import Cluster, GlobalBuffer, NodeTask, Placement, Task, encode_args, decode_result
from .errors import (AlreadyExists, AuthError, BadAddress, Cancelled, ClusterClosed, DaemonFailed,
                     DsmError, DsmIOError, FabricError, InvalidArgument, NoHandler, NoPeer,
                     OutOfMemory, PeerDead, ProtocolError, RankTaken, StateError, Timeout,
                     TooBig, Unsupported, error_class)
from .log import set_log_level
from .own import BorrowEnded, BorrowView, Box
from .result import OversubscribedWarning, Result
from .workloads import Param, WorkloadInfo


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
    "Box", "BorrowEnded", "BorrowView", "Cluster", "GlobalBuffer", "Param", "NodeTask", "OversubscribedWarning",
    "Placement", "Result", "Task", "WorkloadInfo", "encode_args", "decode_result",
    "DsmError", "AlreadyExists", "AuthError", "BadAddress", "Cancelled", "ClusterClosed", "DaemonFailed",
    "DsmIOError", "FabricError", "InvalidArgument", "NoHandler", "NoPeer", "OutOfMemory",
    "PeerDead", "ProtocolError", "RankTaken", "StateError", "Timeout", "TooBig", "Unsupported",
    "error_class", "get_include", "lib_version", "set_log_level",
]


def lib_version() -> str:
    """Version string of the C core (libdsm)."""
    from ._lib import version
    return version()


def get_include() -> str:
    """The directory holding libdsm's public headers (``dsm/*.h``), for C
    plugins built against the installed package: ``cc -I$(python -c 'import
    pydsm; print(pydsm.get_include())') ...``."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "include")
