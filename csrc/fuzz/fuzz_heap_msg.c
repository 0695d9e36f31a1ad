/* libFuzzer target for the heap's alloc/free/check messages: the decoder
 * (and its encode round trip), and the server applying sequences of
 * arbitrary requests to an allocator over a small partition, which must
 * never crash and keep its accounting sane. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dsm/heap.h"
#include "dsm/log.h"
#include "heap/alloc.h"
#include "heap/msg.h"
#include "util/bytes.h"

enum { PARTITION = 2 * 1024 * 1024, SELF = 3, KEEP = 64 };
static uint64_t partition[PARTITION / 8];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dsm_set_log_level(0);   /* bad frees are expected; their warnings are noise here */

    /* 1. The whole input as one message: a decoded message re-encodes to
     *    exactly the same bytes. */
    dsm_heap_msg_t m;
    if (dsm_heap_msg_decode(data, size, &m) == DSM_OK) {
        uint8_t buf[DSM_HEAP_MSG_MAX_LEN];
        size_t n = dsm_heap_msg_encode(&m, buf);
        if (n != size || memcmp(buf, data, n) != 0)
            abort();
    }

    /* 2. The input as a request sequence: op byte, length byte, message. */
    dsm_heap_alloc_t *a;
    if (dsm_heap_alloc_create(partition, sizeof partition, &a) != DSM_OK)
        abort();
    uint64_t kept[KEEP];
    size_t nkept = 0;
    dsm_reader_t r = dsm_reader(data, size);
    while (r.ok && r.left >= 2) {
        const uint8_t *hdr = dsm_take(&r, 2);
        uint8_t op = hdr[0] % 4;
        size_t len = hdr[1] <= r.left ? hdr[1] : r.left;   /* the last one may be short */
        const uint8_t *msg = dsm_take(&r, len);
        if (!r.ok)
            break;
        uint8_t rep[DSM_HEAP_MSG_MAX_LEN], req[DSM_HEAP_MSG_MAX_LEN];
        size_t rep_len;
        if (op == 3) {
            /* A well-formed free of something allocated earlier (so frees of
             * live objects, double frees and reuse all get exercised). */
            if (nkept == 0 || len == 0)
                continue;
            dsm_heap_msg_t f = {.type = DSM_HEAP_MSG_FREE_REQ, .gaddr = kept[msg[0] % nkept]};
            size_t n = dsm_heap_msg_encode(&f, req);
            (void)dsm_heap_msg_serve(a, SELF, DSM_HEAP_MSG_FREE_REQ, req, n, rep, &rep_len);
            continue;
        }
        static const uint16_t expect[] = {DSM_HEAP_MSG_ALLOC_REQ, DSM_HEAP_MSG_FREE_REQ, DSM_HEAP_MSG_CHECK_REQ};
        dsm_status_t st = dsm_heap_msg_serve(a, SELF, expect[op], msg, len, rep, &rep_len);
        if (rep_len > DSM_HEAP_MSG_MAX_LEN || (st != DSM_OK && rep_len != 0))
            abort();
        if (st == DSM_OK) {
            dsm_heap_msg_t out;
            if (dsm_heap_msg_decode(rep, rep_len, &out) != DSM_OK)
                abort();
            if (out.type == DSM_HEAP_MSG_ALLOC_REP) {
                if (dsm_gaddr_node(out.gaddr) != SELF || dsm_gaddr_offset(out.gaddr) + out.size > PARTITION)
                    abort();
                /* The object is really ours: writing all of it must be harmless. */
                memset((uint8_t *)partition + dsm_gaddr_offset(out.gaddr), 0xa5, (size_t)out.size);
                if (nkept < KEEP)
                    kept[nkept++] = out.gaddr;
            }
        }
    }
    uint64_t used, cap;
    dsm_heap_alloc_usage(a, &used, &cap);
    if (used > cap || cap > PARTITION)
        abort();
    dsm_heap_alloc_destroy(a);
    return 0;
}
