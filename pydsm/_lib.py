"""Loading the CFFI extension, turning status codes into exceptions, and
finding the binaries (dsmd, benchmarks) that ship with the package."""
from __future__ import annotations

import itertools
import os
import shutil
import sys
from typing import Any, Dict, List, Optional

from .errors import DsmError, error_class

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_DIR = os.path.dirname(PACKAGE_DIR)

_ext: Any = None


def _built_elsewhere() -> Optional[str]:
    """Another pydsm on sys.path that has its extension built, if this one
    has none: a source checkout shadowing the installed package."""
    for entry in sys.path:
        pkg = os.path.join(os.path.abspath(entry or os.curdir), "pydsm")
        if os.path.realpath(pkg) == os.path.realpath(PACKAGE_DIR) or not os.path.isdir(pkg):
            continue
        if any(name.startswith("_dsm") and name.endswith((".so", ".pyd")) for name in os.listdir(pkg)):
            return pkg
    return None


def _not_built_hint(exc: ImportError) -> str:
    other = _built_elsewhere()
    if other is not None:
        return (f"pydsm was imported from {PACKAGE_DIR}, a source checkout with no C extension, "
                f"ahead of the installed package at {other}: the current directory comes first on "
                "sys.path (as with 'python -m pytest' run in the checkout). Run 'pytest' or "
                "'make test' instead, or run from another directory. "
                f"Original error: {exc}")
    return ("pydsm's C extension (pydsm._dsm) is not built: install the package with "
            "'pip install .' (or run 'make demo' / 'make test' from the checkout). "
            f"Original error: {exc}")


def ext() -> Any:
    """The compiled extension module ``pydsm._dsm`` (``.ffi`` and ``.lib``).

    Raises ImportError with a hint when the package was not built (e.g.
    imported from a source checkout without ``pip install .``).
    """
    global _ext
    if _ext is None:
        try:
            from . import _dsm
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ImportError(_not_built_hint(exc)) from exc
        from .log import install
        install(_dsm)
        _ext = _dsm
    return _ext


def cstr(s: Optional[str]) -> Any:
    """A NUL-terminated C string that lives as long as the returned object
    (NULL for None)."""
    ffi = ext().ffi
    return ffi.NULL if s is None else ffi.new("char[]", s.encode())


def status_text(status: int) -> str:
    """``dsm_strerror(status)`` as text."""
    e = ext()
    return str(e.ffi.string(e.lib.dsm_strerror(status)).decode("utf-8", "replace"))


def status_name(status: int) -> str:
    """``dsm_status_name(status)`` as text, e.g. ``DSM_ERR_PEER_DEAD``."""
    e = ext()
    return str(e.ffi.string(e.lib.dsm_status_name(status)).decode("utf-8", "replace"))


def make_error(status: int, message: str = "", **context: Any) -> DsmError:
    """The DsmError subclass instance for a C status, with its C message."""
    cls = error_class(status)
    return cls(message, status=int(status), status_name=status_name(status),
               c_message=status_text(status), **context)


def check(status: int, message: str = "", **context: Any) -> None:
    """Raise the matching DsmError if ``status`` is an error (negative)."""
    if status < 0:
        raise make_error(status, message, **context)


def version() -> str:
    """libdsm's version string."""
    e = ext()
    return str(e.ffi.string(e.lib.dsm_version()).decode())


def ucx_child_env(transport: str, **overrides: str) -> Dict[str, str]:
    """The environment for a child process that runs UCX as a fabric on
    ``transport`` ("shm", "tcp", ...) would: this process's, with the UCX
    settings libdsm gives such a fabric where the user has not set them,
    then ``overrides``. A comparison's anchor (``ucx_perftest``) runs in it,
    so that both sides of a ratio run as configured alike. The settings are
    made in this process's environment too, as creating such a fabric
    here would make them; the environment is read as C holds it, since
    os.environ does not see what C sets."""
    e = ext()
    code = e.ffi.new("dsm_transport_t *")
    check(e.lib.dsm_transport_parse(transport.encode(), code), f"unknown transport {transport!r}")
    e.lib.dsm_fabric_ucx_env_defaults(code[0])
    env: Dict[str, str] = {}
    entries = e.lib.environ
    for i in itertools.count():
        if entries[i] == e.ffi.NULL:
            break
        key, _, value = os.fsdecode(e.ffi.string(entries[i])).partition("=")
        env[key] = value
    env.update(overrides)
    return env


def _candidates(name: str) -> List[str]:
    dirs = [os.path.join(PACKAGE_DIR, "bin"), PACKAGE_DIR]
    for build in ("build-py", "build"):
        dirs.append(os.path.join(REPO_DIR, build))
    return [os.path.join(d, name) for d in dirs]


def find_binary(name: str, env: Optional[str] = None) -> Optional[str]:
    """Path of a shipped executable: ``$env`` if set, the package's ``bin/``,
    a build directory of the checkout, then ``PATH``; None if not found."""
    if env and os.environ.get(env):
        path = os.environ[env]
        return path if os.access(path, os.X_OK) else None
    for path in _candidates(name):
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return shutil.which(name)


def dsmd_path() -> str:
    """Path of the dsmd daemon (``$DSM_DSMD`` overrides); raises if missing."""
    path = find_binary("dsmd", "DSM_DSMD")
    if not path:
        raise FileNotFoundError(
            "dsmd not found: it ships inside the package (pydsm/bin/dsmd) when installed "
            "with 'pip install .'; set DSM_DSMD to use another one")
    return path


def bench_path(name: str) -> Optional[str]:
    """Path of benchmark program ``dsm-bench-NAME``, or None if not built."""
    return find_binary(f"dsm-bench-{name}")


def bench_names() -> List[str]:
    """Names of the benchmark programs that are built and shipped."""
    found = set()
    for d in {os.path.dirname(p) for p in _candidates("x")}:
        if os.path.isdir(d):
            for f in os.listdir(d):
                if f.startswith("dsm-bench-") and os.access(os.path.join(d, f), os.X_OK):
                    found.add(f[len("dsm-bench-"):])
    return sorted(found)


_apps_loaded = False


def _plugin_error(what: str) -> str:
    e = ext()
    detail = str(e.ffi.string(e.lib.dsm_last_error()).decode("utf-8", "replace"))
    return f"{what}: {detail}" if detail else what


def load_apps() -> None:
    """Register the project's workloads in this process, once: libdsm loads
    its apps plugin (``libdsm-apps.so`` beside it, or ``$DSM_APPS_PLUGIN``),
    the same one every dsmd loads, so the driver knows each workload's
    parameters and checks arguments before a run."""
    global _apps_loaded
    if not _apps_loaded:
        e = ext()
        e.lib.dsm_clear_last_error()
        check(e.lib.dsm_plugin_load_apps(), _plugin_error("cannot load the apps plugin"))
        _apps_loaded = True


def load_plugin(path: str) -> None:
    """Load a workload plugin (a ``.so`` with ``dsm_plugin_init``) into this
    process, as dsmd does with ``--plugin``: its workloads are then listed
    by ``c.workloads()`` and their arguments checked here. Loading a path
    again does nothing."""
    e = ext()
    load_apps()
    e.lib.dsm_clear_last_error()
    check(e.lib.dsm_plugin_load(os.path.abspath(path).encode()), _plugin_error(f"cannot load plugin {path}"))
