/* The trustee side of delegation across nodes (Gossamer §3.2.4): a batch
 * of a remote client found in the receive square (or, for a large request,
 * its message in the inbox) is decoded first, then each request runs — user
 * closures by registry id on the property its handle names, weight updates,
 * launches and launch results — and its responses go back in one slot write
 * (with what does not fit by message). A request that does not decode, an
 * unknown closure, a handle with no property, a launch on a property that is
 * no latch: refused with an error in its response; the batch's other
 * requests and every other client are served as usual. */
#include <stdlib.h>
#include <string.h>

#include "deleg/remote.h"
#include "util/log.h"

#define LOG "deleg"

typedef struct rwriter {
    uint8_t *pay;     /* the response staging block's payload */
    size_t len;
    size_t min_rest;  /* minimum footprint of the responses still to come */
    unsigned spills;
    int big_used;     /* the batch's big block holds a response */
} rwriter_t;

/* Place one response; what does not fit (keeping room for the minimum of
 * the rest) goes by message. */
static void respond(deleg_thread_t *th, rwriter_t *w, uint32_t rank, unsigned c, uint64_t seq, unsigned index,
                    dsm_status_t st, const void *data, size_t len)
{
    dsm_deleg_remote_t *R = th->remote->R;
    if (st != DSM_OK) len = 0;
    if (len > RRESP_MAX_LEN) {
        st = DSM_ERR_TOO_BIG;
        len = 0;
    }
    if (w->len + RRESP_HDR + rpad8(len) + w->min_rest <= RSLOT_PAYLOAD) {
        w->len += dsm_rresp_encode(w->pay + w->len, st, data, len);
        return;
    }
    if (!w->big_used && len <= R->big) {
        /* the first that does not fit goes into the batch's big block */
        dsm_status_t bs =
            dsm_rslot_put_big(R, rank, rsq_big_resp_off(R, c, R->self, th->idx, (unsigned)(seq % R->inflight)), data, len);
        if (bs == DSM_OK) {
            w->len += dsm_rresp_encode_spilled(w->pay + w->len, len, 1);
            w->big_used = 1;
            th->remote->spilled_out++;
        } else {
            w->len += dsm_rresp_encode(w->pay + w->len, bs, NULL, 0);
        }
        return;
    }
    uint8_t *msg = malloc(RLARGE_HDR + len);
    dsm_status_t ms = DSM_ERR_NOMEM;
    if (msg) {
        dsm_rlarge_encode_hdr(msg, 1, th->idx, c, index, (uint32_t)R->runs, seq);
        memcpy(msg + RLARGE_HDR, data, len);
        ms = dsm_fabric_am_send(R->fabric, rank, DSM_AM_DELEG_SPILL, msg, RLARGE_HDR + len);
        free(msg);
    }
    if (ms == DSM_OK) {
        w->len += dsm_rresp_encode_spilled(w->pay + w->len, len, 0);
        w->spills++;
        th->remote->spilled_out++;
    } else {
        w->len += dsm_rresp_encode(w->pay + w->len, ms, NULL, 0);
    }
}

static void run_request(deleg_thread_t *th, rwriter_t *w, uint32_t rank, unsigned c, uint64_t seq, unsigned index,
                        const rreq_t *q)
{
    rthread_t *t = th->remote;
    dsm_deleg_remote_t *R = t->R;
    dsm_deleg_prop_t *prop = NULL;
    if (q->kind != RK_LAUNCH_DONE) {
        prop = dsm_deleg_rhandle_find(R, q->handle, th->idx);
        if (!prop) {
            respond(th, w, rank, c, seq, index, DSM_ERR_BAD_ADDR, NULL, 0);
            return;
        }
    }
    switch (q->kind) {
    case RK_USER: {
        dsm_deleg_fn fn = dsm_deleg_rfn_find(t, q->fn_id);
        if (!fn) {
            respond(th, w, rank, c, seq, index, DSM_ERR_NO_HANDLER, NULL, 0);
            return;
        }
        int var = q->ret_size == RRET_VAR;
        dsm_deleg_ret_t r;
        dsm_deleg_ret_init_buf(&r, var ? 0 : q->ret_size, var);
        th->depth++;
        fn(&r, prop->obj, q->env, q->args, q->args_len);
        th->depth--;
        const uint8_t *data;
        size_t len;
        dsm_deleg_ret_result(&r, &data, &len);
        respond(th, w, rank, c, seq, index, DSM_OK, data, len);
        dsm_deleg_ret_fini(&r);
        return;
    }
    case RK_SUB:
    case RK_ADD: {
        uint64_t wt = 0;
        if (q->env_len == 8) memcpy(&wt, q->env, 8);
        if (q->env_len != 8 || wt > INT64_MAX) { /* no trust carries that much */
            respond(th, w, rank, c, seq, index, DSM_ERR_PROTO, NULL, 0);
            return;
        }
        /* respond first: a subtraction may free the property */
        respond(th, w, rank, c, seq, index, DSM_OK, NULL, 0);
        /* the sender's share of it (remote_share.c) */
        dsm_deleg_shares_note(R, prop, rank, q->kind == RK_SUB ? -(int64_t)wt : (int64_t)wt);
        th->depth++;
        (q->kind == RK_SUB ? dsm_deleg_sys_sub_weight : dsm_deleg_sys_add_weight)(NULL, prop, q->env, NULL, 0);
        th->depth--;
        return;
    }
    case RK_LAUNCH: {
        dsm_deleg_fn fn = dsm_deleg_rfn_find(t, q->fn_id);
        dsm_status_t st = !fn ? DSM_ERR_NO_HANDLER : !prop->latched || q->env_len < 8 ? DSM_ERR_INVALID : DSM_OK;
        if (st == DSM_OK) {
            uint64_t token;
            memcpy(&token, q->env, 8);
            st = dsm_deleg_start_launch_remote(th, rank, c, token, fn, prop, q->env + 8, q->env_len - 8, q->args,
                                               q->args_len);
        }
        respond(th, w, rank, c, seq, index, st, NULL, 0);
        return;
    }
    case RK_LAUNCH_DONE: {
        dsm_status_t st = DSM_ERR_PROTO;
        if (q->env_len == 16) {
            uint64_t token;
            int32_t lst;
            memcpy(&token, q->env, 8);
            memcpy(&lst, q->env + 8, 4);
            uint32_t idx = (uint32_t)token, gen = (uint32_t)(token >> 32);
            if (idx < t->nlaunch && t->launch[idx].used && t->launch[idx].gen == gen && lst <= 0 &&
                lst >= DSM_ERR_STATE) {
                rlaunch_t l = t->launch[idx];
                t->launch[idx].used = 0;
                if (l.then) {
                    th->depth++;
                    l.then(l.arg, (dsm_status_t)lst, q->args, lst == DSM_OK ? q->args_len : 0);
                    th->depth--;
                }
                th->outstanding--;
                st = DSM_OK;
            } else {
                DSM_WARN(LOG, "launch result from rank %u for no launch of this thread; dropped", rank);
                st = DSM_ERR_INVALID;
            }
        }
        respond(th, w, rank, c, seq, index, st, NULL, 0);
        return;
    }
    }
}

/* Serve batch `seq` of client (rank, c) if it arrived. */
int dsm_deleg_rserve_pair(deleg_thread_t *th, uint32_t rank, unsigned c, rin_t *in)
{
    rthread_t *t = th->remote;
    dsm_deleg_remote_t *R = t->R;
    uint64_t seq = in->seq + 1;
    unsigned b = (unsigned)(seq % R->inflight);
    const uint8_t *block = R->base + rsq_req_off(R, th->idx, rank, c, b);
    if (rslot_seq(block) != seq) return 0;
    rslot_view_t v;
    dsm_status_t bad = dsm_rslot_decode(block, RSLOT_SIZE, &v);
    rlarge_msg_t *large = NULL;
    const uint8_t *big = NULL;
    if (bad == DSM_OK && (v.flags & RSLOT_BIG)) {
        if (!R->big) bad = DSM_ERR_PROTO; /* this node has no big blocks */
        else big = R->base + rsq_big_off(R, th->idx, rank, c, b);
    } else if (bad == DSM_OK && (v.flags & RSLOT_LARGE)) {
        large = dsm_rinbox_find(R, 0, rank, c, th->idx, seq, 0, 1);
        if (!large) return 0; /* its message has not arrived yet */
    }
    if (atomic_load_explicit(&th->idle, memory_order_relaxed)) atomic_store_explicit(&th->idle, 0, memory_order_relaxed);
    rstage_t *st = dsm_rstage_get(&in->stage[b]);
    if (!st) {
        free(large);
        return 0;
    }
    dsm_rslot_reap(st, 1);
    unsigned n = bad == DSM_OK ? v.count : 0;
    /* Decode the batch first: the responses' minimum footprint, and where a
     * request does not decode, it and the rest of the batch are refused. */
    rreq_t q[RSLOT_MAX_COUNT];
    unsigned ok = 0;
    size_t min_total = 0;
    if (large || big) {
        const uint8_t *bytes = large ? large->bytes : big;
        size_t len = large ? large->len : v.large_len;
        size_t used;
        if (dsm_rreq_decode(bytes, len, NULL, 0, &q[0], &used) == DSM_OK && used == len && used == v.large_len)
            ok = 1;
    } else {
        const uint8_t *pos = block + v.offset, *end = block + RSLOT_PAYLOAD;
        while (ok < n) {
            size_t used;
            if (dsm_rreq_decode(pos, (size_t)(end - pos), v.fn, v.nfn, &q[ok], &used) != DSM_OK) break;
            pos += used;
            ok++;
        }
    }
    for (unsigned i = 0; i < n; i++)
        min_total += RRESP_HDR + (i < ok && q[i].ret_size != RRET_VAR ? rpad8(q[i].ret_size) : 0);
    if (ok < n || bad != DSM_OK) DSM_WARN(LOG, "malformed request batch from rank %u thread %u: refused", rank, c);
    rwriter_t w = {.pay = st->buf + RSTAGE_HDR, .min_rest = min_total};
    if (min_total > RSLOT_PAYLOAD) {
        /* a client that budgeted no room for its responses: refuse it all */
        ok = 0;
        w.min_rest = n * RRESP_HDR;
    }
    for (unsigned i = 0; i < n; i++) {
        w.min_rest -= RRESP_HDR + (i < ok && q[i].ret_size != RRET_VAR ? rpad8(q[i].ret_size) : 0);
        if (i < ok) run_request(th, &w, rank, c, seq, i, &q[i]);
        else respond(th, &w, rank, c, seq, i, DSM_ERR_PROTO, NULL, 0);
    }
    free(large);
    in->seq = seq;
    /* RSLOT_SPILLS: the client waits for the messages before completing any */
    dsm_rslot_trailer_encode(w.pay + w.len, (uint16_t)(RSLOT_PAYLOAD - w.len), (uint16_t)n, NULL, 0,
                             w.spills ? RSLOT_SPILLS : 0, 0);
    dsm_status_t ws = dsm_rslot_write(R, &t->ep[rank], rank, c, rsq_resp_off(R, c, R->self, th->idx, b), st, w.len,
                                      seq);
    if (ws != DSM_OK) DSM_WARN(LOG, "responses to rank %u thread %u: %s", rank, c, dsm_strerror(ws));
    atomic_store_explicit(&t->rserved, atomic_load_explicit(&t->rserved, memory_order_relaxed) + n,
                          memory_order_release);
    return 1;
}

