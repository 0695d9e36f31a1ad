"""Progress of long runs (workloads, the demo, benchmarks): tqdm bars, a
widget in notebooks that have ipywidgets, a bar on a terminal, and plain
updating lines when stderr is a file or a pipe."""
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


def _tqdm_class() -> Any:
    """tqdm's widget bar in a notebook that has ipywidgets, else its text
    bar: ``tqdm.auto`` warns "IProgress not found" in every notebook of an
    install without ipywidgets (it is no dependency of pydsm)."""
    if in_notebook():
        import importlib.util
        try:
            has_widgets = importlib.util.find_spec("ipywidgets") is not None
        except ValueError:   # in sys.modules as None: not importable
            has_widgets = False
        if has_widgets:
            from tqdm.notebook import tqdm as widget_bar
            return widget_bar
    from tqdm.std import tqdm as text_bar
    return text_bar


def bar(total: Optional[int] = None, desc: str = "", unit: str = "it", enabled: Optional[bool] = None) -> Any:
    """A progress bar (tqdm: a widget in a notebook with ipywidgets, text
    otherwise) on stderr, or a silent one when ``enabled`` is False (None:
    :func:`default_enabled`)."""
    tqdm = _tqdm_class()
    on = default_enabled() if enabled is None else enabled
    return tqdm(total=total, desc=desc, unit=unit, disable=not on, file=sys.stderr, leave=True,
                dynamic_ncols=True, mininterval=0.5)
