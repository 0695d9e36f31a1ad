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

from .cluster import Cluster, GlobalBuffer, Placement, Task, encode_args, decode_result
from .errors import (AlreadyExists, AuthError, BadAddress, ClusterClosed, DaemonFailed,
                     DsmError, DsmIOError, FabricError, InvalidArgument, NoHandler, NoPeer,
                     OutOfMemory, PeerDead, ProtocolError, RankTaken, StateError, Timeout,
                     TooBig, Unsupported, error_class)
from .result import Result

__version__ = "0.1.0"

__all__ = [
    "Cluster", "GlobalBuffer", "Placement", "Result", "Task", "encode_args", "decode_result",
    "DsmError", "AlreadyExists", "AuthError", "BadAddress", "ClusterClosed", "DaemonFailed",
    "DsmIOError", "FabricError", "InvalidArgument", "NoHandler", "NoPeer", "OutOfMemory",
    "PeerDead", "ProtocolError", "RankTaken", "StateError", "Timeout", "TooBig", "Unsupported",
    "error_class", "lib_version",
]


def lib_version() -> str:
    """Version string of the C core (libdsm)."""
    from ._lib import version
    return version()
