/* The notice board of an attached runtime: a few bytes a node sets before a
 * run (e.g. the trusts it hands to the other nodes) and the others read by
 * message (DSM_AM_DELEG_BOARD) before they start. A board carries the run
 * count of its node when it was set, so a reader tells the board of the
 * coming run from the one of the last run still there; and the runtime of a
 * node (dsmd attaches one when asked) and its attached peers are found
 * here, for workloads that run across nodes. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "deleg/remote.h"
#include "util/log.h"

#define LOG "deleg"

dsm_deleg_rt_t *dsm_deleg_node_rt(dsm_node_t *node)
{
    dsm_deleg_remote_t *R = node ? dsm_module_state(node, &dsm_deleg_module) : NULL;
    if (!R) return NULL;
    pthread_mutex_lock(&R->lock);
    dsm_deleg_rt_t *rt = R->rt;
    pthread_mutex_unlock(&R->lock);
    return rt;
}

uint32_t dsm_deleg_peers(dsm_deleg_rt_t *rt, uint32_t *ranks, uint32_t cap)
{
    dsm_deleg_remote_t *R = rt ? rt->remote : NULL;
    uint32_t n = 0;
    if (!R) return 0;
    for (uint32_t r = 0; r < RMAX_NODES; r++) {
        if (r == R->self || !atomic_load_explicit(&R->peer_ok[r], memory_order_acquire)) continue;
        if (n < cap && ranks) ranks[n] = r;
        n++;
    }
    return n;
}

dsm_status_t dsm_deleg_board_set(dsm_deleg_rt_t *rt, const void *bytes, size_t len)
{
    dsm_deleg_remote_t *R = rt ? rt->remote : NULL;
    if (!R || (len && !bytes)) return DSM_ERR_INVALID;
    if (len > RBOARD_MAX) return DSM_ERR_TOO_BIG;
    if (atomic_load(&rt->running)) return DSM_ERR_STATE; /* for the coming run, set between runs */
    uint8_t *copy = malloc(len ? len : 1);
    if (!copy) return DSM_ERR_NOMEM;
    if (len) memcpy(copy, bytes, len);
    pthread_mutex_lock(&R->lock);
    free(R->board);
    R->board = copy;
    R->board_len = len;
    R->board_tag = R->runs;
    pthread_mutex_unlock(&R->lock);
    return DSM_OK;
}

void dsm_deleg_rboard_handler(void *ctx, const dsm_am_msg_t *msg)
{
    dsm_deleg_remote_t *R = ctx;
    if (!msg->request_id) return;
    uint8_t reply[RBOARD_HDR + RBOARD_MAX];
    pthread_mutex_lock(&R->lock);
    rboard_t b = {.phase = (uint32_t)R->phase, .runs = R->runs, .tag = R->board_tag, .len = R->board_len};
    if (b.len) memcpy(reply + RBOARD_HDR, R->board, b.len);
    pthread_mutex_unlock(&R->lock);
    dsm_rboard_encode_hdr(reply, &b);
    dsm_fabric_am_reply(R->fabric, msg->src_rank, msg->request_id, DSM_OK, reply, RBOARD_HDR + b.len);
}

/* Is b the board rank r set for the coming run? A peer known from the last
 * run set it at the count it had then; one never seen has set it since its
 * last run (or it is already running the coming run). */
static int board_current(const dsm_deleg_remote_t *R, uint32_t r, const rboard_t *b)
{
    if (b->tag == RBOARD_NONE) return 0;
    if (R->seen_known[r]) return b->tag == R->seen[r];
    return b->phase == RPHASE_RUNNING ? b->tag + 1 == b->runs : b->tag == b->runs;
}

dsm_status_t dsm_deleg_board_get(dsm_deleg_rt_t *rt, uint32_t rank, void *out, size_t cap, size_t *len,
                                 uint32_t timeout_ms)
{
    dsm_deleg_remote_t *R = rt ? rt->remote : NULL;
    if (!R || !len || (cap && !out) || rank >= RMAX_NODES || rank == R->self) return DSM_ERR_INVALID;
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    uint8_t *reply = malloc(RBOARD_HDR + RBOARD_MAX);
    if (!reply) return DSM_ERR_NOMEM;
    dsm_status_t st;
    for (;;) {
        if (!atomic_load_explicit(&R->peer_ok[rank], memory_order_acquire)) {
            st = DSM_ERR_NO_PEER;
            break;
        }
        size_t got = 0;
        rboard_t b;
        st = dsm_fabric_am_request(R->fabric, rank, DSM_AM_DELEG_BOARD, NULL, 0, reply, RBOARD_HDR + RBOARD_MAX,
                                   &got, 0);
        if (st == DSM_OK) st = dsm_rboard_decode(reply, got, &b);
        if (st != DSM_OK) break;
        if (board_current(R, rank, &b)) {
            *len = b.len;
            if (b.len > cap) {
                st = DSM_ERR_TOO_BIG;
                break;
            }
            if (b.len) memcpy(out, b.bytes, b.len);
            break;
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        double ms = (double)(now.tv_sec - t0.tv_sec) * 1e3 + (double)(now.tv_nsec - t0.tv_nsec) / 1e6;
        if (ms > timeout_ms) {
            DSM_ERROR(LOG, "rank %u set no board for the coming run within %u ms", rank, timeout_ms);
            st = DSM_ERR_TIMEOUT;
            break;
        }
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    free(reply);
    return st;
}
