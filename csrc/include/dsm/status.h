/* Status codes shared by every layer of libdsm, and their messages.
 *
 * Part of the user API (dsm/dsm.h). */
#ifndef DSM_STATUS_H
#define DSM_STATUS_H

#include "dsm/api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 0 is success; every error is negative. Python maps each to a DsmError subclass. */
typedef enum dsm_status {
    DSM_OK = 0,
    DSM_ERR_INVALID = -1,       /* bad argument from the caller */
    DSM_ERR_NOMEM = -2,         /* out of memory (local or partition exhausted) */
    DSM_ERR_BAD_ADDR = -3,      /* address outside any partition, or a freed block */
    DSM_ERR_PEER_DEAD = -4,     /* the target node died or left */
    DSM_ERR_NO_PEER = -5,       /* no such rank in the cluster */
    DSM_ERR_TIMEOUT = -6,       /* the operation did not complete in time */
    DSM_ERR_AUTH = -7,          /* wrong or missing cluster secret */
    DSM_ERR_PROTO = -8,         /* malformed, truncated or oversized message */
    DSM_ERR_NO_HANDLER = -9,    /* unknown handler or function id */
    DSM_ERR_RANK_TAKEN = -10,   /* a second node claimed the same rank */
    DSM_ERR_FABRIC = -11,       /* the transport layer (UCX) failed */
    DSM_ERR_IO = -12,           /* a socket or file operation failed */
    DSM_ERR_CLOSED = -13,       /* the node or cluster was shut down */
    DSM_ERR_EXISTS = -14,       /* a name or id registered twice */
    DSM_ERR_TOO_BIG = -15,      /* a buffer or message over its limit */
    DSM_ERR_UNSUPPORTED = -16,  /* not available with this transport or build */
    DSM_ERR_STATE = -17,        /* call not allowed in the current state */
    DSM_ERR_CANCELLED = -18,    /* stopped on request (a cancelled spawn) */
    DSM_ERR_BUSY = -19,         /* refused: the target is at its limit of concurrent work */
} dsm_status_t;

/* A short message for a status; never NULL. */
DSM_API const char *dsm_strerror(dsm_status_t status);

/* Name of the status constant, e.g. "DSM_ERR_PEER_DEAD"; never NULL. */
DSM_API const char *dsm_status_name(dsm_status_t status);

#ifdef __cplusplus
}
#endif
#endif
