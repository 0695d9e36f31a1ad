/* The address checker: proves a joining member's worker address usable in a
 * process of its own before any member hands it to UCX.
 *
 * UCX trusts the bytes of a worker address: malformed ones make
 * ucp_ep_create assert and abort the process. The coordinator therefore
 * passes each joiner's address to a child (dsmd --check-addresses), which
 * creates an endpoint to it and closes it again. A verdict comes back over a
 * socket; a child that dies or stays silent is the verdict that the address
 * is poison, and the next check starts a new child. */
#ifndef DSM_RUNTIME_ADDR_CHECK_H
#define DSM_RUNTIME_ADDR_CHECK_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "dsm/fabric.h"
#include "dsm/status.h"

enum {
    DSM_ADDR_CHECK_MAX_ADDR = 4096,      /* as DSM_CTL_MAX_ADDR */
    DSM_ADDR_CHECK_MAX_REASON = 200,
    DSM_ADDR_CHECK_REPLY_MAX = 3 + DSM_ADDR_CHECK_MAX_REASON,
    DSM_ADDR_CHECK_FD = 3,               /* the child's end of the socket */
};

typedef struct dsm_addr_checker {
    char *program;               /* a dsmd; NULL: none found */
    dsm_transport_t transport;   /* the cluster's */
    pid_t pid;                   /* 0: no child running */
    int fd;                      /* our end of the socket */
    char unavailable[128];       /* why there is no checker, if there is none */
} dsm_addr_checker_t;

/* Prepare a checker running `program` (NULL: $DSM_ADDRESS_CHECKER, else the
 * dsmd beside this executable) and start its child at once, so that the
 * fabric's start-up overlaps the members' own. */
void dsm_addr_checker_init(dsm_addr_checker_t *checker, const char *program, dsm_transport_t transport);
/* DSM_OK if the address is usable; otherwise an error and, in `why`, the
 * reason to tell the joiner. Waits at most timeout_ms for the verdict. */
dsm_status_t dsm_addr_checker_check(dsm_addr_checker_t *checker, const void *addr, size_t len,
                                    uint32_t timeout_ms, char *why, size_t why_cap);
void dsm_addr_checker_close(dsm_addr_checker_t *checker);

/* The child's side: serve checks on `fd` until it closes. Returns the exit code. */
int dsm_addr_checker_serve(int fd, dsm_transport_t transport);

/* The verdict's wire format (pure; fuzzed): {i8 status, u16 reason length,
 * reason}. decode returns 1 for a whole, well-formed reply. */
size_t dsm_addr_check_reply_encode(dsm_status_t status, const char *reason, uint8_t *out, size_t cap);
int dsm_addr_check_reply_decode(const uint8_t *buf, size_t len, dsm_status_t *status, char *reason, size_t cap);

#endif
