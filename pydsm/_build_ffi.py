"""CFFI (API mode) description of libdsm, generated from its user API.

The C declarations are not copied here: :func:`generate_cdef` runs the C
preprocessor over the user API's umbrella header ``dsm/dsm.h`` (not the
SDK, ``dsm/sdk.h``: Python calls no fabric, module or plugin-helper
function) with ``-DDSM_CFFI`` and
keeps what the line markers attribute to files under ``include/dsm`` (the
system headers' content goes; cffi knows their typedef names, ``uint64_t``,
``size_t``, ..., natively). With ``DSM_CFFI`` the headers give cffi plain
prototypes instead of ``static inline`` bodies and an empty ``DSM_API``.
API mode then compiles the extension against the real headers (without
``DSM_CFFI``), so a call to an inline helper is a call to the real one.

``setup.py`` calls :func:`configure` with the headers' directory and the
directory of the installed ``libdsm.so``.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sysconfig
from typing import Dict, Iterable, List, Optional

import cffi

UMBRELLA = "dsm/dsm.h"

#: C the extension adds to libdsm: the driver's single fetch_add as one call
#: that returns the old value (Python allocates no out-parameter for it), and
#: the anchor of the driver's latency figures (``pydsm bench``/demo), the same
#: single operation timed from C in this process, so that a figure from
#: Python shows what the CFFI call adds.
EXTRA_SOURCE = r"""
#include <stdio.h>
#include "dsm/fabric.h"
extern char **environ;
#include <string.h>
#include <time.h>
/* The calling thread's last status of _pydsm_fetch_add, read only when it
 * returned UINT64_MAX: a failure, or that very old value. */
static _Thread_local dsm_status_t pydsm_fetch_add_status;
static uint64_t _pydsm_fetch_add(dsm_node_t *node, uint64_t addr, uint64_t value)
{
    uint64_t old = UINT64_MAX;
    pydsm_fetch_add_status = dsm_fetch_add(node, addr, value, &old);
    return pydsm_fetch_add_status == DSM_OK ? old : UINT64_MAX;
}
static int _pydsm_fetch_add_status(void)
{
    return pydsm_fetch_add_status;
}
/* buf[i] of an 8-byte element the same way: one call that returns the word
 * (or its bits as a double), no buffer exported to C; UINT64_MAX (NaN bits
 * for the double) says to read the status. Writes return their status. */
static uint64_t _pydsm_read_u64(dsm_node_t *node, uint64_t addr)
{
    uint64_t v = UINT64_MAX;
    pydsm_fetch_add_status = dsm_read(node, addr, &v, sizeof v);
    return pydsm_fetch_add_status == DSM_OK ? v : UINT64_MAX;
}
static double _pydsm_read_f64(dsm_node_t *node, uint64_t addr)
{
    uint64_t v = _pydsm_read_u64(node, addr);
    double d;
    memcpy(&d, &v, sizeof d);
    return d;
}
static int _pydsm_write_u64(dsm_node_t *node, uint64_t addr, uint64_t v)
{
    return dsm_write(node, addr, &v, sizeof v);
}
static int _pydsm_write_f64(dsm_node_t *node, uint64_t addr, double d)
{
    return dsm_write(node, addr, &d, sizeof d);
}

/* libdsm's log lines. A thread Python knows (one that called into C)
 * hands its line to logging at once. Every other thread (libdsm's own:
 * the coordinator, a node's control thread, progress threads; UCX's)
 * leaves it in a ring for pydsm's log thread: such a thread must never
 * wait for the GIL, which Python code may hold for as long as it likes,
 * since heartbeats and replies run on it. */
#include <pthread.h>
static void _pydsm_log_line(void *, int, const char *, const char *);
#define PYDSM_LOG_SLOTS 512
#define PYDSM_LOG_MODULE_LEN 32
#define PYDSM_LOG_MESSAGE_LEN 1024
typedef struct {
    int level;
    char module[PYDSM_LOG_MODULE_LEN];
    char message[PYDSM_LOG_MESSAGE_LEN];
} pydsm_log_entry_t;
static pydsm_log_entry_t pydsm_log_ring[PYDSM_LOG_SLOTS];
static unsigned long long pydsm_log_queued, pydsm_log_taken, pydsm_log_dropped;
static pthread_mutex_t pydsm_log_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pydsm_log_cond = PTHREAD_COND_INITIALIZER;

static void _pydsm_log_sink(void *ctx, int level, const char *module, const char *message)
{
    if (PyGILState_GetThisThreadState() != NULL) {
        _pydsm_log_line(ctx, level, module, message);
        return;
    }
    pthread_mutex_lock(&pydsm_log_lock);
    if (pydsm_log_queued - pydsm_log_taken < PYDSM_LOG_SLOTS) {
        pydsm_log_entry_t *e = &pydsm_log_ring[pydsm_log_queued % PYDSM_LOG_SLOTS];
        e->level = level;
        snprintf(e->module, sizeof e->module, "%s", module);
        snprintf(e->message, sizeof e->message, "%s", message);
        pydsm_log_queued++;
        pthread_cond_signal(&pydsm_log_cond);
    } else {
        pydsm_log_dropped++;
    }
    pthread_mutex_unlock(&pydsm_log_lock);
}

static void _pydsm_log_install(int on)
{
    dsm_set_log_sink(on ? _pydsm_log_sink : NULL, NULL);
}

/* The oldest queued line into the caller's buffers, waiting up to
 * timeout_ms for one: 1 if a line was taken, 0 if none came. *dropped
 * gets the lines lost to a full ring since the last call. */
static int _pydsm_log_take(int timeout_ms, int *level, char *module, char *message,
                           unsigned long long *dropped)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) { until.tv_sec++; until.tv_nsec -= 1000000000L; }
    pthread_mutex_lock(&pydsm_log_lock);
    while (pydsm_log_queued == pydsm_log_taken && timeout_ms > 0)
        if (pthread_cond_timedwait(&pydsm_log_cond, &pydsm_log_lock, &until) != 0) break;
    int took = pydsm_log_queued != pydsm_log_taken;
    if (took) {
        pydsm_log_entry_t *e = &pydsm_log_ring[pydsm_log_taken % PYDSM_LOG_SLOTS];
        *level = e->level;
        memcpy(module, e->module, sizeof e->module);
        memcpy(message, e->message, sizeof e->message);
        pydsm_log_taken++;
    }
    *dropped = pydsm_log_dropped;
    pydsm_log_dropped = 0;
    pthread_mutex_unlock(&pydsm_log_lock);
    return took;
}

/* How many lines were queued so far (a flush waits until they are out). */
static unsigned long long _pydsm_log_queued(void)
{
    pthread_mutex_lock(&pydsm_log_lock);
    unsigned long long q = pydsm_log_queued;
    pthread_mutex_unlock(&pydsm_log_lock);
    return q;
}

/* In a forked child: a thread of the parent may have held the lock. */
static void _pydsm_log_after_fork(void)
{
    pthread_mutex_init(&pydsm_log_lock, NULL);
    pthread_cond_init(&pydsm_log_cond, NULL);
}

enum { PYDSM_OP_FETCH_ADD = 0, PYDSM_OP_READ8 = 1 };
static int64_t _pydsm_time_ops(dsm_node_t *node, int op, uint64_t addr, int64_t n)
{
    struct timespec a, b;
    uint64_t v = 0;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int64_t i = 0; i < n; i++) {
        dsm_status_t st = op == PYDSM_OP_FETCH_ADD ? dsm_fetch_add(node, addr, 1, &v) : dsm_read(node, addr, &v, 8);
        if (st != DSM_OK)
            return (int64_t)st;
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    return (int64_t)(b.tv_sec - a.tv_sec) * 1000000000 + (b.tv_nsec - a.tv_nsec);
}
"""
EXTRA_CDEF = ("uint64_t _pydsm_fetch_add(dsm_node_t *node, uint64_t addr, uint64_t value);\n"
              "int _pydsm_fetch_add_status(void);\n"
              "uint64_t _pydsm_read_u64(dsm_node_t *node, uint64_t addr);\n"
              "double _pydsm_read_f64(dsm_node_t *node, uint64_t addr);\n"
              "int _pydsm_write_u64(dsm_node_t *node, uint64_t addr, uint64_t v);\n"
              "int _pydsm_write_f64(dsm_node_t *node, uint64_t addr, double d);\n"
              "int64_t _pydsm_time_ops(dsm_node_t *node, int op, uint64_t addr, int64_t n);\n"
              "#define PYDSM_OP_FETCH_ADD 0\n#define PYDSM_OP_READ8 1\n"
              "void _pydsm_log_install(int on);\n"
              "int _pydsm_log_take(int timeout_ms, int *level, char *module, char *message,"
              " unsigned long long *dropped);\n"
              "unsigned long long _pydsm_log_queued(void);\n"
              "void _pydsm_log_after_fork(void);\n"
              "#define PYDSM_LOG_MODULE_LEN 32\n#define PYDSM_LOG_MESSAGE_LEN 1024\n"
              # the UCX settings a fabric runs with (from the SDK), and the
              # process's environment as C sees it, where libdsm sets them
              # and os.environ does not look (_lib.ucx_child_env)
              "void dsm_fabric_ucx_env_defaults(dsm_transport_t transport);\n"
              "char **environ;\n")
SOURCE = f'#include "{UMBRELLA}"\n' + EXTRA_SOURCE

_LINE_MARKER = re.compile(r'^#\s*(\d+)\s+"([^"]*)"')
_DEFINE = re.compile(r"^#define\s+([A-Za-z_]\w*)\s+(\S.*)$")


def _cc() -> List[str]:
    """The C compiler command: $CC, else the one Python was built with, else cc."""
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    return shlex.split(cc)


def _is_public(path: str) -> bool:
    return "/include/dsm/" in path.replace(os.sep, "/")


def generate_cdef(include_dir: str, cc: Optional[List[str]] = None) -> str:
    """The cdef text for every declaration of the public headers in
    ``include_dir`` (which holds ``dsm/*.h``).

    Object-like ``#define NAME value`` constants of the headers become
    ``#define NAME ...`` (cffi reads their value when it compiles);
    include guards and other empty macros are dropped."""
    cmd = (cc or _cc()) + ["-E", "-dD", "-DDSM_CFFI", "-I", include_dir,
                           os.path.join(include_dir, UMBRELLA)]
    pre = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, universal_newlines=True).stdout
    out: List[str] = []
    public = False
    for line in pre.splitlines():
        marker = _LINE_MARKER.match(line)
        if marker:
            public = _is_public(marker.group(2))
            continue
        if not public or not line.strip():
            continue
        if line.startswith("#"):
            define = _DEFINE.match(line)
            if define:
                out.append(f"#define {define.group(1)} ...")
            continue  # #undef, empty or function-like macros, pragmas
        out.append(line)
    if not out:
        raise RuntimeError(f"no declarations found by {' '.join(cmd)}")
    return "\n".join(out) + "\n"


def extension_options(include_dir: str, library_dirs: Iterable[str],
                      rpath: str = "$ORIGIN") -> Dict[str, List[str]]:
    """Compiler and linker options of the extension: the headers in
    ``include_dir``, ``libdsm.so`` from ``library_dirs``, found at import time
    through ``rpath`` (the package ships the library next to the extension)."""
    return {
        "include_dirs": [include_dir],
        "library_dirs": list(library_dirs),
        "libraries": ["dsm"],
        "extra_link_args": [f"-Wl,-rpath,{rpath}", "-Wl,--enable-new-dtags"],
        "extra_compile_args": ["-Wno-unused-function"],
    }


#: Functions written in Python that C calls (CFFI ``extern "Python"``).
PYTHON_CALLBACKS = 'extern "Python" void _pydsm_log_line(void *, int, const char *, const char *);'


def configure(include_dir: str, library_dirs: Iterable[str], rpath: str = "$ORIGIN") -> cffi.FFI:
    """A new FFI builder for ``pydsm._dsm``: the cdef generated from the
    headers in ``include_dir``, compiled with :func:`extension_options`."""
    ffibuilder = cffi.FFI()
    ffibuilder.cdef(generate_cdef(include_dir))
    # pydsm's own callback: libdsm's log lines into Python's logging (pydsm/log.py)
    ffibuilder.cdef(PYTHON_CALLBACKS)
    ffibuilder.cdef(EXTRA_CDEF)
    ffibuilder.set_source("pydsm._dsm", SOURCE, **extension_options(include_dir, library_dirs, rpath))
    return ffibuilder


if __name__ == "__main__":
    # python pydsm/_build_ffi.py: print the generated cdef of this checkout.
    print(generate_cdef(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                     "csrc", "include")), end="")
