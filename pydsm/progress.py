"""Progress of long runs (workloads, the demo, benchmarks): ``tqdm.auto``
bars, a widget in notebooks, a bar on a terminal, and plain updating lines
when stderr is a file or a pipe."""
from __future__ import annotations

import sys
from typing import Any, Optional


def in_notebook() -> bool:
    """True inside a Jupyter kernel."""
    shell = sys.modules.get("IPython")
    try:
        ip = shell.get_ipython() if shell else None
    except Exception:  # pragma: no cover
        return False
    return ip is not None and "IPKernelApp" in getattr(ip, "config", {})


def default_enabled() -> bool:
    """Show progress by default on a terminal and in notebooks."""
    return sys.stderr.isatty() or in_notebook()


def bar(total: Optional[int] = None, desc: str = "", unit: str = "it", enabled: Optional[bool] = None) -> Any:
    """A progress bar (``tqdm.auto.tqdm``) on stderr, or a silent one when
    ``enabled`` is False (None: :func:`default_enabled`)."""
    from tqdm.auto import tqdm

    on = default_enabled() if enabled is None else enabled
    return tqdm(total=total, desc=desc, unit=unit, disable=not on, file=sys.stderr, leave=True,
                dynamic_ncols=True, mininterval=0.5)
