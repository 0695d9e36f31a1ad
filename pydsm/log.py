"""libdsm's diagnostics (and UCX's) as Python log records.

The C core hands every line to a sink installed when the extension loads;
the line becomes a record of logger ``pydsm.<module>`` (``pydsm.fabric``,
``pydsm.runtime``, ``pydsm.ucx``, ...), so notebooks and programs see them
through :mod:`logging` and nothing is written to stderr behind their back.
Like any library, pydsm adds only a ``NullHandler``: configure logging (e.g.
``logging.basicConfig()``) to see the lines; the ``pydsm`` command does.
:func:`set_log_level` sets both the C core's filter and the logger's level.
"""
from __future__ import annotations

import atexit
import logging
from typing import Any, Callable, Union

logger = logging.getLogger("pydsm")
logger.addHandler(logging.NullHandler())

#: libdsm's levels (dsm/log.h) and Python's.
_TO_PY = {0: logging.ERROR, 1: logging.WARNING, 2: logging.INFO, 3: logging.DEBUG}
_NAMES = {"error": 0, "warning": 1, "warn": 1, "info": 2, "debug": 3}


def install(ext: Any) -> None:
    """Route libdsm's log lines of this process into :mod:`logging` (called
    once, when pydsm loads its C extension)."""
    ffi, lib = ext.ffi, ext.lib
    def_extern: Callable[[], Callable[[Callable[..., None]], Callable[..., None]]] = ffi.def_extern

    @def_extern()
    def _pydsm_log_line(ctx: Any, level: int, module: Any, message: Any) -> None:
        # Runs on whichever C thread logged (UCX's progress thread too): it must
        # not raise into C.
        try:
            name = ffi.string(module).decode("utf-8", "replace")
            text = ffi.string(message).decode("utf-8", "replace")
            logger.getChild(name).log(_TO_PY.get(level, logging.DEBUG), "%s", text)
        except Exception:  # pragma: no cover - a logging handler failed
            pass

    lib.dsm_set_log_sink(lib._pydsm_log_line, ffi.NULL)
    # No callback into an interpreter that is shutting down.
    atexit.register(lib.dsm_set_log_sink, ffi.NULL, ffi.NULL)


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
