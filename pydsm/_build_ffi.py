"""CFFI (API mode) description of the part of libdsm that Python uses.

The declarations below are a hand-written subset of ``csrc/include/dsm/*.h``.
API mode compiles them against the real headers, so any drift between the two
(a renamed function, a changed signature, a moved struct field) fails the
build instead of corrupting memory at run time.

``setup.py`` imports :data:`ffibuilder` and tells it where the headers and the
CMake-built ``libdsm.so`` are (see :func:`configure`).
"""
from __future__ import annotations

import os
from typing import Iterable

import cffi

CDEF = r"""
/* status.h */
typedef enum dsm_status {
    DSM_OK = 0,
    DSM_ERR_INVALID = -1,
    DSM_ERR_NOMEM = -2,
    DSM_ERR_BAD_ADDR = -3,
    DSM_ERR_PEER_DEAD = -4,
    DSM_ERR_NO_PEER = -5,
    DSM_ERR_TIMEOUT = -6,
    DSM_ERR_AUTH = -7,
    DSM_ERR_PROTO = -8,
    DSM_ERR_NO_HANDLER = -9,
    DSM_ERR_RANK_TAKEN = -10,
    DSM_ERR_FABRIC = -11,
    DSM_ERR_IO = -12,
    DSM_ERR_CLOSED = -13,
    DSM_ERR_EXISTS = -14,
    DSM_ERR_TOO_BIG = -15,
    DSM_ERR_UNSUPPORTED = -16,
    DSM_ERR_STATE = -17,
    ...
} dsm_status_t;
const char *dsm_strerror(dsm_status_t status);
const char *dsm_status_name(dsm_status_t status);

/* stats.h */
typedef struct dsm_stats {
    uint64_t gets;
    uint64_t puts;
    uint64_t atomics;
    uint64_t bytes_read;
    uint64_t bytes_written;
    uint64_t am_sent;
    uint64_t am_recv;
    uint64_t am_bytes_sent;
    uint64_t am_bytes_recv;
    uint64_t am_rejected;
    uint64_t spawns_run;
    uint64_t errors;
    ...;
} dsm_stats_t;

/* fabric.h */
typedef enum dsm_transport {
    DSM_TRANSPORT_AUTO = 0,
    DSM_TRANSPORT_SHM = 1,
    DSM_TRANSPORT_TCP = 2,
    DSM_TRANSPORT_VERBS = 3,
} dsm_transport_t;
typedef enum dsm_progress_mode {
    DSM_PROGRESS_BLOCKING = 0,
    DSM_PROGRESS_BUSY = 1,
} dsm_progress_mode_t;
dsm_status_t dsm_transport_parse(const char *name, dsm_transport_t *out);
const char *dsm_transport_name(dsm_transport_t transport);

/* node.h */
typedef struct dsm_node dsm_node_t;
enum {
    DSM_MAX_DAEMONS = 128,
    DSM_FIRST_CLIENT_RANK = 128,
    DSM_MAX_RANKS = 256,
    DSM_RANK_ANY = -1,
};
typedef enum dsm_member_kind {
    DSM_MEMBER_DAEMON = 0,
    DSM_MEMBER_CLIENT = 1,
} dsm_member_kind_t;
typedef struct dsm_node_config {
    const char *coordinator;
    const char *secret;
    int32_t rank;
    dsm_member_kind_t kind;
    dsm_transport_t transport;
    dsm_progress_mode_t progress;
    const char *net_device;
    uint64_t partition_size;
    uint32_t heartbeat_ms;
    uint32_t peer_timeout_ms;
    uint32_t op_timeout_ms;
    uint32_t join_timeout_ms;
    ...;
} dsm_node_config_t;
void dsm_node_config_init(dsm_node_config_t *config);
const dsm_node_config_t *dsm_node_config(const dsm_node_t *node);
void dsm_node_destroy(dsm_node_t *node);
uint32_t dsm_node_rank(const dsm_node_t *node);
uint64_t dsm_heap_partition_size(dsm_node_t *node, uint32_t rank);
dsm_status_t dsm_node_peer_state(dsm_node_t *node, uint32_t rank);
uint32_t dsm_node_daemons(dsm_node_t *node, uint32_t *ranks, uint32_t cap);
dsm_status_t dsm_node_wait_daemons(dsm_node_t *node, uint32_t count, uint32_t timeout_ms);
enum { DSM_NODE_OPEN = 0, DSM_NODE_STOPPED = 1, DSM_NODE_LOST = 2 };
int dsm_node_closed(const dsm_node_t *node);
dsm_status_t dsm_lookup(const char *name, uint32_t *id);
const char *dsm_registered_name(uint32_t index);
typedef struct dsm_task dsm_task_t;
enum { DSM_SPAWN_MAX_RESULT = 1048576 };
dsm_status_t dsm_spawn(dsm_node_t *node, uint32_t rank, const char *fn,
                       const void *args, size_t len, dsm_task_t **out);
dsm_status_t dsm_join(dsm_task_t *task, void *ret, size_t cap, size_t *ret_len, uint32_t timeout_ms);
void dsm_node_stats(dsm_node_t *node, dsm_stats_t *out);
dsm_status_t dsm_node_peer_stats(dsm_node_t *node, uint32_t rank, dsm_stats_t *out);
void dsm_set_log_level(int level);

/* coord.h */
typedef struct dsm_coord dsm_coord_t;
typedef struct dsm_coord_config {
    const char *bind;
    const char *secret;
    uint32_t peer_timeout_ms;
    dsm_transport_t transport;
    ...;
} dsm_coord_config_t;
dsm_status_t dsm_coord_start(const dsm_coord_config_t *config, dsm_coord_t **out);
uint16_t dsm_coord_port(const dsm_coord_t *coord);
uint32_t dsm_coord_members(dsm_coord_t *coord, uint32_t *daemons);
uint64_t dsm_coord_refused(dsm_coord_t *coord);
void dsm_coord_stop(dsm_coord_t *coord);

/* heap.h */
typedef uint64_t dsm_gaddr_t;
enum { DSM_GADDR_OFFSET_BITS = 40, DSM_GADDR_NODE_BITS = 8, DSM_GADDR_COLOUR_SHIFT = 48 };
dsm_gaddr_t dsm_gaddr_make(uint32_t node, uint64_t offset);
uint32_t dsm_gaddr_node(dsm_gaddr_t a);
uint64_t dsm_gaddr_offset(dsm_gaddr_t a);
dsm_status_t dsm_alloc(dsm_node_t *node, uint32_t rank, size_t size, dsm_gaddr_t *out);
dsm_status_t dsm_free(dsm_node_t *node, dsm_gaddr_t addr);
dsm_status_t dsm_alloc_size(dsm_node_t *node, dsm_gaddr_t addr, size_t *size);
dsm_status_t dsm_read(dsm_node_t *node, dsm_gaddr_t addr, void *dst, size_t len);
dsm_status_t dsm_write(dsm_node_t *node, dsm_gaddr_t addr, const void *src, size_t len);
dsm_status_t dsm_fetch_add(dsm_node_t *node, dsm_gaddr_t addr, uint64_t value, uint64_t *old);
dsm_status_t dsm_cas(dsm_node_t *node, dsm_gaddr_t addr, uint64_t expected, uint64_t desired, uint64_t *old);
dsm_status_t dsm_swap(dsm_node_t *node, dsm_gaddr_t addr, uint64_t value, uint64_t *old);

/* dsm.h */
dsm_status_t dsm_start(const dsm_node_config_t *config, dsm_node_t **out);
void dsm_register_builtin_workloads(void);
const char *dsm_version(void);
"""

# Python never registers C functions itself (plugins do, inside the
# daemons), so dsm_register is left out of the cdef.
SOURCE = r"""
#include "dsm/dsm.h"
"""

def configure(include_dirs: Iterable[str], library_dirs: Iterable[str],
              rpath: str = "$ORIGIN") -> cffi.FFI:
    """A new FFI builder for ``pydsm._dsm`` with libdsm's headers and the
    directory of libdsm.so.

    ``rpath`` is where the extension looks for ``libdsm.so`` when imported;
    the package ships the library next to the extension.
    """
    ffibuilder = cffi.FFI()
    ffibuilder.cdef(CDEF)
    ffibuilder.set_source(
        "pydsm._dsm",
        SOURCE,
        include_dirs=list(include_dirs),
        library_dirs=list(library_dirs),
        libraries=["dsm"],
        extra_link_args=[f"-Wl,-rpath,{rpath}", "-Wl,--enable-new-dtags"],
        extra_compile_args=["-Wno-unused-function"],
    )
    return ffibuilder


# Default configuration for running this file by hand from a checkout
# (python pydsm/_build_ffi.py): headers from csrc/, library from $DSM_LIBDIR.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ffibuilder = configure([os.path.join(_ROOT, "csrc", "include")],
          [os.environ.get("DSM_LIBDIR", os.path.join(_ROOT, "build-py"))])

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
