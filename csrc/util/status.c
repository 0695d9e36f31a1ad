/* Messages and names for dsm_status_t. */
#include "dsm/status.h"

#define STATUSES(X) \
    X(DSM_OK, "success") \
    X(DSM_ERR_INVALID, "invalid argument") \
    X(DSM_ERR_NOMEM, "out of memory") \
    X(DSM_ERR_BAD_ADDR, "bad global address (outside any partition, or a freed block)") \
    X(DSM_ERR_PEER_DEAD, "peer node is dead or has left") \
    X(DSM_ERR_NO_PEER, "no such node in the cluster") \
    X(DSM_ERR_TIMEOUT, "operation timed out") \
    X(DSM_ERR_AUTH, "authentication failed (wrong or missing cluster secret)") \
    X(DSM_ERR_PROTO, "malformed, truncated or oversized message") \
    X(DSM_ERR_NO_HANDLER, "unknown handler or function") \
    X(DSM_ERR_RANK_TAKEN, "rank already taken by another node") \
    X(DSM_ERR_FABRIC, "fabric (UCX) error") \
    X(DSM_ERR_IO, "socket or file error") \
    X(DSM_ERR_CLOSED, "node or cluster is closed") \
    X(DSM_ERR_EXISTS, "already registered") \
    X(DSM_ERR_TOO_BIG, "buffer or message too large") \
    X(DSM_ERR_UNSUPPORTED, "not supported by this transport or build") \
    X(DSM_ERR_STATE, "not allowed in the current state") \
    X(DSM_ERR_CANCELLED, "cancelled on request") \
    X(DSM_ERR_BUSY, "target busy: at its limit of concurrent work")

const char *dsm_strerror(dsm_status_t status)
{
    switch (status) {
#define MESSAGE(code, text) case code: return text;
        STATUSES(MESSAGE)
#undef MESSAGE
    }
    return "unknown status";
}

const char *dsm_status_name(dsm_status_t status)
{
    switch (status) {
#define NAME(code, text) case code: return #code;
        STATUSES(NAME)
#undef NAME
    }
    return "DSM_ERR_UNKNOWN";
}
