/* libFuzzer target for the heap's guarded operations (heap/ops.h): the
 * input as a request is validated; one that passes re-encodes to exactly the
 * same bytes, and serving it on a small partition with live and freed
 * objects never crashes and gives a reply that the initiator's checker
 * accepts for exactly those ops. The input is also checked as a reply. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dsm/heap.h"
#include "dsm/log.h"
#include "heap/alloc.h"
#include "heap/ops.h"

enum { PARTITION = 2 * 1024 * 1024, SELF = 3 };
static uint64_t partition[PARTITION / 8];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dsm_set_log_level(0);
    uint32_t n;
    size_t rep_len;
    if (dsm_heap_ops_validate(data, size, &n, &rep_len) != DSM_OK) {
        /* not a request: as a reply to one fadd it must not crash the checker */
        dsm_heap_op_t one = {.op = DSM_HEAP_OP_FADD, .len = 8, .gaddr = dsm_gaddr_make(SELF, 1 << 16)};
        (void)dsm_heap_ops_reply_check(data, size, &one, 1);
        return 0;
    }
    dsm_heap_op_t *ops = calloc(n, sizeof *ops);
    uint8_t *again = malloc(size);
    if (ops == NULL || again == NULL)
        abort();
    dsm_heap_ops_iter_t it;
    if (dsm_heap_ops_begin(data, size, &it) != DSM_OK)
        abort();
    for (uint32_t i = 0; i < n; i++)
        if (dsm_heap_ops_next(&it, &ops[i]) != DSM_OK)
            abort();
    if (dsm_heap_ops_req_len(ops, n) != size || dsm_heap_ops_encode(ops, n, again) != size ||
        memcmp(again, data, size) != 0 || dsm_heap_ops_rep_len(ops, n) != rep_len)
        abort();

    dsm_heap_alloc_t *a;
    if (dsm_heap_alloc_create(partition, sizeof partition, &a) != DSM_OK)
        abort();
    uint64_t off;
    uint16_t gen;
    for (int i = 0; i < 8; i++) {   /* a few live objects and a freed one */
        if (dsm_heap_alloc(a, (size_t)16 << i, &off, &gen) != DSM_OK)
            abort();
        if (i == 3)
            (void)dsm_heap_free(a, off, gen);
    }
    uint8_t small[128], *rep;
    size_t got;
    if (dsm_heap_ops_serve(a, SELF, data, size, small, sizeof small, &rep, &got) != DSM_OK || got != rep_len ||
        dsm_heap_ops_reply_check(rep, got, ops, n) != DSM_OK)
        abort();
    if (rep != small)
        free(rep);
    dsm_heap_alloc_destroy(a);
    free(ops);
    free(again);
    return 0;
}
