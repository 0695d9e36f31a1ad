/* TCP helpers for the control plane: resolve "host:port", listen, connect
 * with a deadline, and send/receive framed control messages. */
#ifndef DSM_RUNTIME_SOCK_H
#define DSM_RUNTIME_SOCK_H

#include <stddef.h>
#include <stdint.h>
#include "dsm/status.h"

/* Split "host:port"; host may be empty (any) or a name. */
dsm_status_t dsm_sock_parse(const char *hostport, char *host, size_t host_cap, uint16_t *port);
dsm_status_t dsm_sock_listen(const char *hostport, int *fd_out, uint16_t *port_out);
dsm_status_t dsm_sock_connect(const char *hostport, uint32_t timeout_ms, int *fd_out);
/* Write all bytes (MSG_NOSIGNAL); the socket's send timeout bounds it. */
dsm_status_t dsm_sock_send_all(int fd, const void *buf, size_t len);
/* Read exactly len bytes, waiting at most timeout_ms for each chunk
 * (DSM_SOCK_FOREVER: no bound). DSM_ERR_TIMEOUT when a wait ran out,
 * DSM_ERR_CLOSED at end of stream. */
#define DSM_SOCK_FOREVER UINT32_MAX
dsm_status_t dsm_sock_recv_all(int fd, void *buf, size_t len, uint32_t timeout_ms);
void dsm_sock_set_timeouts(int fd, uint32_t send_ms);

#endif
