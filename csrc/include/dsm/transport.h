/* The transports and progress modes a node runs on, and their names as
 * users and command lines give them ("shm", "tcp", "busy", ...).
 *
 * Part of the user API (dsm/dsm.h). */
#ifndef DSM_TRANSPORT_H
#define DSM_TRANSPORT_H

#include "dsm/api.h"
#include "dsm/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dsm_transport {
    DSM_TRANSPORT_AUTO = 0,   /* let UCX choose among everything it found */
    DSM_TRANSPORT_SHM = 1,    /* posix/sysv/cma/self: processes on one host */
    DSM_TRANSPORT_TCP = 2,    /* any IP network; one-sided ops emulated with messages (DSM_AM_RMA_HANDLER) */
    DSM_TRANSPORT_VERBS = 3,  /* rc/ud/dc over rdma-core (InfiniBand/RoCE) */
} dsm_transport_t;

typedef enum dsm_progress_mode {
    DSM_PROGRESS_BLOCKING = 0, /* progress thread sleeps on the worker's event fd */
    DSM_PROGRESS_BUSY = 1,     /* progress thread polls without sleeping */
    /* blocking, but after activity the progress thread polls a moment (100 µs;
     * $DSM_PROGRESS_LINGER_US) before it sleeps, so a client's next request
     * costs the target no wake-up; costs a core while requests keep coming */
    DSM_PROGRESS_HYBRID = 2,
    /* per transport: adaptive over tcp, where every one-sided op is a message
     * the target's CPU must answer; blocking over shm and verbs, whose
     * one-sided ops need no target CPU */
    DSM_PROGRESS_AUTO = 3,
    /* hybrid whose linger adapts: as long as the next message has lately come
     * within it, shorter as it misses, none while the host runs more threads
     * than cores (the linger, at most $DSM_PROGRESS_LINGER_US) */
    DSM_PROGRESS_ADAPTIVE = 4,
} dsm_progress_mode_t;

/* Parse "shm"/"tcp"/"verbs"/"auto"; DSM_ERR_INVALID for anything else. */
DSM_API dsm_status_t dsm_transport_parse(const char *name, dsm_transport_t *out);
DSM_API const char *dsm_transport_name(dsm_transport_t transport);
/* Parse "blocking"/"busy"/"hybrid"/"auto"/"adaptive"; DSM_ERR_INVALID for anything else. */
DSM_API dsm_status_t dsm_progress_parse(const char *name, dsm_progress_mode_t *out);
DSM_API const char *dsm_progress_name(dsm_progress_mode_t mode);

#ifdef __cplusplus
}
#endif
#endif
