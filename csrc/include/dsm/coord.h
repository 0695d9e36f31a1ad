/* The coordinator: where nodes meet. It authenticates every join with the
 * cluster secret (HMAC-SHA256 challenge-response), assigns and guards ranks,
 * hands out the member table (worker addresses, region keys), announces joins
 * and deaths, runs barriers and watches heartbeats. Hosted by the launcher
 * (Python driver) or by rank 0's dsmd.
 *
 * Part of the user API (dsm/dsm.h): a program that starts a cluster starts
 * its coordinator. */
#ifndef DSM_COORD_H
#define DSM_COORD_H

#include <stdint.h>
#include "dsm/api.h"
#include "dsm/transport.h"
#include "dsm/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dsm_coord dsm_coord_t;

typedef struct dsm_coord_config {
    const char *bind;          /* "host:port"; port 0 picks a free one */
    const char *secret;        /* required */
    uint32_t peer_timeout_ms;  /* no heartbeat for this long = dead; 0 = 3000 */
    dsm_transport_t transport; /* the cluster's transport, told to nodes that join
                                  with DSM_TRANSPORT_AUTO; AUTO = not said */
    const char *address_checker; /* a dsmd that tries joiners' worker addresses
                                    (dsmd --check-addresses) before members use
                                    them; NULL: $DSM_ADDRESS_CHECKER, else the
                                    dsmd beside this program; none found: joins
                                    are refused, saying so */
} dsm_coord_config_t;

DSM_API dsm_status_t dsm_coord_start(const dsm_coord_config_t *config, dsm_coord_t **out);
DSM_API uint16_t dsm_coord_port(const dsm_coord_t *coord);
/* Tell every member to stop, then close. */
DSM_API void dsm_coord_stop(dsm_coord_t *coord);

#ifdef __cplusplus
}
#endif
#endif
