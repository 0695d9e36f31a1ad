"""Exceptions: one :class:`DsmError` subclass per ``dsm_status_t`` error code.

Each class names its C status (``status_name``, e.g. ``"DSM_ERR_PEER_DEAD"``);
the value (``status``) is read from the extension, generated from status.h.
Every exception carries the C status (``.status``, ``.status_name``), the C
message, and the context of the failed call (which node, which address), so
``str(exc)`` reads like ``PeerDead: node 2 at 0x20000001000: the target node
died or left (DSM_ERR_PEER_DEAD) in read``.
"""
from __future__ import annotations

from typing import Dict, Optional, Type


class DsmError(Exception):
    """Base class of every error pydsm raises for the C core or a cluster.

    Attributes:
        status: the negative ``dsm_status_t`` code (0 when raised by Python
            itself before calling C).
        status_name: e.g. ``"DSM_ERR_PEER_DEAD"``.
        c_message: the text of ``dsm_strerror``.
        node: the node (rank) the call targeted, when known.
        address: the global address involved, when known.
        op: the operation name (``"read"``, ``"alloc"``, ...).
    """

    status: int = 0
    status_name: str = ""

    def __init__(self, message: str = "", *, status: Optional[int] = None,
                 status_name: Optional[str] = None, c_message: str = "",
                 node: Optional[int] = None, address: Optional[int] = None,
                 op: Optional[str] = None) -> None:
        if status is not None:
            self.status = status
        if status_name is not None:
            self.status_name = status_name
        self.c_message = c_message
        #: the message as given, without node, status or operation
        self.message = message
        self.node = node
        self.address = address
        self.op = op
        parts = []
        if node is not None:
            parts.append(f"node {node}")
        if address is not None:
            parts.append(f"at {address:#x}")
        if message:
            text = message
            if c_message and c_message not in message:
                text = f"{message}: {c_message}"
        elif c_message:
            text = c_message
        else:
            text = (self.__class__.__doc__ or "").strip().splitlines()[0]
        if self.status_name:
            text += f" ({self.status_name})"
        if op:
            text += f" in {op}"
        prefix = " ".join(parts)
        super().__init__(f"{prefix}: {text}" if prefix else text)


class InvalidArgument(DsmError, ValueError):
    """A bad argument (DSM_ERR_INVALID, or caught by Python before calling C)."""
    status_name = "DSM_ERR_INVALID"


class OutOfMemory(DsmError, MemoryError):
    """Out of memory: the node's partition is exhausted or the size is too big."""
    status_name = "DSM_ERR_NOMEM"


class BadAddress(DsmError):
    """An address outside any partition, a freed block, or from another cluster."""
    status_name = "DSM_ERR_BAD_ADDR"


class PeerDead(DsmError):
    """The target node died or left the cluster."""
    status_name = "DSM_ERR_PEER_DEAD"


class NoPeer(DsmError, LookupError):
    """No node with that index or rank in the cluster."""
    status_name = "DSM_ERR_NO_PEER"


class Timeout(DsmError, TimeoutError):
    """The operation did not complete in time."""
    status_name = "DSM_ERR_TIMEOUT"


class AuthError(DsmError, PermissionError):
    """Wrong or missing cluster secret."""
    status_name = "DSM_ERR_AUTH"


class ProtocolError(DsmError):
    """A malformed, truncated or oversized message."""
    status_name = "DSM_ERR_PROTO"


class NoHandler(DsmError, LookupError):
    """Unknown handler or function (workload) name."""
    status_name = "DSM_ERR_NO_HANDLER"


class RankTaken(DsmError):
    """A second node claimed the same rank."""
    status_name = "DSM_ERR_RANK_TAKEN"


class FabricError(DsmError):
    """The transport layer (UCX) failed."""
    status_name = "DSM_ERR_FABRIC"


class DsmIOError(DsmError, OSError):
    """A socket or file operation failed (e.g. the coordinator is unreachable)."""
    status_name = "DSM_ERR_IO"


class ClusterClosed(DsmError):
    """The node or cluster was shut down."""
    status_name = "DSM_ERR_CLOSED"


class AlreadyExists(DsmError):
    """A name or id registered twice."""
    status_name = "DSM_ERR_EXISTS"


class TooBig(DsmError, ValueError):
    """A buffer or message over its limit."""
    status_name = "DSM_ERR_TOO_BIG"


class Unsupported(DsmError):
    """Not available with this transport or build."""
    status_name = "DSM_ERR_UNSUPPORTED"


class StateError(DsmError):
    """The call is not allowed in the current state."""
    status_name = "DSM_ERR_STATE"


class Cancelled(DsmError):
    """The work was stopped on request (a cancelled run)."""
    status_name = "DSM_ERR_CANCELLED"


class Busy(DsmError):
    """The target refused the work: it is at its limit of concurrent work; retry later."""
    status_name = "DSM_ERR_BUSY"


class DaemonFailed(DsmError):
    """A dsmd process of a local cluster exited (its stderr tail is in the message)."""


def _bind_statuses() -> Dict[int, Type[DsmError]]:
    """Each class's ``status`` from the extension (the C enum, by the class's
    ``status_name``); {status: class}. Empty when the extension is not built:
    pydsm._lib.ext() then raises with a hint at the first call into C."""
    try:
        from ._dsm import lib
    except ImportError:
        return {}
    by_status: Dict[int, Type[DsmError]] = {}
    for cls in _CLASSES:
        cls.status = int(getattr(lib, cls.status_name))
        by_status[cls.status] = cls
    return by_status


_CLASSES = [cls for cls in DsmError.__subclasses__() if cls.status_name]
_BY_STATUS = _bind_statuses()


def error_class(status: int) -> Type[DsmError]:
    """The exception class for a ``dsm_status_t`` code (DsmError if unknown)."""
    return _BY_STATUS.get(int(status), DsmError)


__all__ = ["DsmError", "error_class", "DaemonFailed"] + [c.__name__ for c in _CLASSES]
