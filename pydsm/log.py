"""libdsm's diagnostics (and UCX's) as Python log records.

The C core hands every line to a sink installed when the extension loads;
the line becomes a record of logger ``pydsm.<module>`` (``pydsm.fabric``,
``pydsm.runtime``, ``pydsm.ucx``, ...), so notebooks and programs see them
through :mod:`logging` and nothing is written to stderr behind their back.
Like any library, pydsm adds only a ``NullHandler``: configure logging (e.g.
``logging.basicConfig()``) to see the lines; the ``pydsm`` command does.
:func:`set_log_level` sets both the C core's filter and the logger's level.
Lines of the library's own threads arrive through the ``pydsm-log`` thread
(see :func:`install`); :func:`flush` waits until those queued are out.
"""
from __future__ import annotations

import atexit
import logging
import os
import threading
from typing import Any, Callable, Optional, Tuple, Union

logger = logging.getLogger("pydsm")
logger.addHandler(logging.NullHandler())

#: libdsm's levels (dsm/log.h) and Python's.
_TO_PY = {0: logging.ERROR, 1: logging.WARNING, 2: logging.INFO, 3: logging.DEBUG}
_NAMES = {"error": 0, "warning": 1, "warn": 1, "info": 2, "debug": 3}


def install(ext: Any) -> None:
    """Route libdsm's log lines of this process into :mod:`logging` (called
    once, when pydsm loads its C extension).

    A line logged by a thread Python knows (one inside a call into libdsm)
    becomes a record at once. A line of libdsm's own threads (the
    coordinator, a node's control thread, progress threads) or UCX's waits
    in a ring for the ``pydsm-log`` thread: those threads carry heartbeats
    and replies and must not wait for the GIL. :func:`flush` waits until
    every line queued so far is out."""
    global _ext
    ffi, lib = ext.ffi, ext.lib
    def_extern: Callable[[], Callable[[Callable[..., None]], Callable[..., None]]] = ffi.def_extern

    @def_extern()
    def _pydsm_log_line(ctx: Any, level: int, module: Any, message: Any) -> None:
        # Runs on a Python thread inside a call into C: it must not raise into C.
        try:
            _emit(level, ffi.string(module), ffi.string(message))
        except Exception:  # pragma: no cover - a logging handler failed
            pass

    _ext = ext
    _start_log_thread()
    lib._pydsm_log_install(1)
    os.register_at_fork(after_in_child=_after_fork_in_child)
    # No callback into an interpreter that is shutting down: lines go to
    # stderr from here on, and what is queued is written out first.
    atexit.register(_at_exit)


_ext: Any = None
_taken = 0                       # lines the log thread has taken off the ring
_taken_cond = threading.Condition()
_thread: Optional[threading.Thread] = None


def _emit(level: int, module: bytes, message: bytes) -> None:
    logger.getChild(module.decode("utf-8", "replace")).log(
        _TO_PY.get(level, logging.DEBUG), "%s", message.decode("utf-8", "replace"))


def _take_and_emit(timeout_ms: int, bufs: Tuple[Any, Any, Any, Any]) -> int:
    """Emit the oldest queued line, waiting up to ``timeout_ms`` for one;
    returns how many were taken (0 or 1)."""
    global _taken
    ffi, lib = _ext.ffi, _ext.lib
    level, module, message, dropped = bufs
    took = int(lib._pydsm_log_take(timeout_ms, level, module, message, dropped))
    try:
        if dropped[0]:
            logger.warning("%d lines of libdsm's threads were dropped: the pydsm-log thread fell behind",
                           int(dropped[0]))
        if took:
            _emit(int(level[0]), ffi.string(module), ffi.string(message))
    except Exception:  # pragma: no cover - a logging handler failed
        pass
    with _taken_cond:
        _taken += took
        _taken_cond.notify_all()
    return took


def _buffers() -> Tuple[Any, Any, Any, Any]:
    ffi, lib = _ext.ffi, _ext.lib
    return (ffi.new("int *"), ffi.new("char[]", lib.PYDSM_LOG_MODULE_LEN),
            ffi.new("char[]", lib.PYDSM_LOG_MESSAGE_LEN), ffi.new("unsigned long long *"))


def _log_thread() -> None:
    bufs = _buffers()
    while True:
        _take_and_emit(5000, bufs)


def _start_log_thread() -> None:
    global _thread
    _thread = threading.Thread(target=_log_thread, name="pydsm-log", daemon=True)
    _thread.start()


def _after_fork_in_child() -> None:
    global _taken_cond
    _ext.lib._pydsm_log_after_fork()
    _taken_cond = threading.Condition()
    _start_log_thread()


def flush(timeout: float = 10.0) -> bool:
    """Wait until every line libdsm's threads queued before this call has
    reached :mod:`logging` (at most ``timeout`` seconds); returns whether
    they all did."""
    if _ext is None:
        return True
    target = int(_ext.lib._pydsm_log_queued())
    if _thread is None or not _thread.is_alive() or threading.current_thread() is _thread:
        bufs = _buffers()
        while _taken < target and _take_and_emit(0, bufs):
            pass
        return _taken >= target
    with _taken_cond:
        return _taken_cond.wait_for(lambda: _taken >= target, timeout)


def _at_exit() -> None:
    _ext.lib._pydsm_log_install(0)
    flush(timeout=2.0)


def set_log_level(level: Union[int, str]) -> None:
    """How much libdsm logs in this process: 0/"error", 1/"warning",
    2/"info", 3/"debug" (the ``pydsm`` logger gets the matching level).
    Daemons take theirs from ``Cluster.local(log_level=...)``."""
    if isinstance(level, str):
        if level.lower() not in _NAMES:
            raise ValueError(f"log level must be one of {sorted(set(_NAMES))} or 0..3, not {level!r}")
        level = _NAMES[level.lower()]
    if isinstance(level, bool) or not isinstance(level, int) or not 0 <= level <= 3:
        raise ValueError(f"log level must be 0..3 or a name, not {level!r}")
    from . import _lib
    _lib.ext().lib.dsm_set_log_level(level)
    logger.setLevel(_TO_PY[level])
