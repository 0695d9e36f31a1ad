/* dsm-bench-kv5's CoRM design: one compact object per key (its 8-byte key
 * and 32-byte value), homed on node id % 3; a GET is dsm_compact_get (a
 * one-sided read, validated), a SET an RPC write of the whole object to its
 * home. The objects are allocated once per cluster and reset before every
 * run by their homes. */
#include "bench/kv5/kv5.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsm/compact.h"

enum { OBJ_WORDS = 1 + KV5_VALUE_WORDS };

static struct {
    dsm_harness_t *c;
    uint32_t keys;
    dsm_compact_ptr_t *ptr;   /* per key */
} corm;

typedef struct corm_job {
    const kv5_streams_t *s;
    int reset;   /* 1: the untimed phase that (allocates and) writes every key's initial value */
} corm_job_t;

static void fill(uint64_t *w, uint32_t id, uint64_t v)
{
    w[0] = kv5_key(id);
    for (int k = 1; k < OBJ_WORDS; k++) w[k] = v;
}

/* The object's value if it is whole and names its key, else -1 printed. */
static int object_ok(const uint64_t *w, size_t len, uint32_t id, uint64_t *v)
{
    int ok = len == sizeof(uint64_t) * OBJ_WORDS && w[0] == kv5_key(id) && kv5_put_names(w[1], id);
    for (int k = 2; ok && k < OBJ_WORDS; k++) ok = w[k] == w[1];
    if (!ok) fprintf(stderr, "dsm-bench-kv5: corm: key %u read a wrong or torn object\n", id);
    *v = w[1];
    return ok ? 0 : -1;
}

static int corm_node(void *ctx, int i)
{
    corm_job_t *j = ctx;
    dsm_node_t *node = corm.c->nodes[i];
    dsm_compact_t *cm = dsm_compact_of(node);
    uint64_t w[OBJ_WORDS];
    dsm_status_t st = DSM_OK;
    if (j->reset) {
        for (uint32_t id = (uint32_t)i; id < corm.keys && st == DSM_OK; id += KV5_NODES) {
            if (corm.ptr[id].w[0] == 0 && corm.ptr[id].w[1] == 0)
                st = dsm_compact_alloc(cm, dsm_node_rank(node), sizeof w, &corm.ptr[id]);
            fill(w, id, kv5_put_value(id, -1, (uint64_t)-1));
            if (st == DSM_OK) st = dsm_compact_write(cm, &corm.ptr[id], w, sizeof w);
        }
        if (st != DSM_OK) fprintf(stderr, "dsm-bench-kv5: corm load: %s\n", dsm_strerror(st));
        return st == DSM_OK ? 0 : -1;
    }
    /* this client's pointers: a read may correct one */
    dsm_compact_ptr_t *ptr = malloc(corm.keys * sizeof *ptr);
    if (ptr == NULL) return -1;
    memcpy(ptr, corm.ptr, corm.keys * sizeof *ptr);
    const kv5_op_t *ops = j->s->ops[i];
    int rc = 0;
    for (uint64_t n = 0; n < j->s->cell.nops && rc == 0; n++) {
        uint32_t id = ops[n].id;
        if (ops[n].get) {
            size_t len = 0;
            uint64_t v;
            st = dsm_compact_get(cm, &ptr[id], w, sizeof w, &len);
            if (st == DSM_OK) rc = object_ok(w, len, id, &v);
        } else {
            fill(w, id, kv5_put_value(id, i, n));
            st = dsm_compact_write(cm, &ptr[id], w, sizeof w);
        }
        if (st != DSM_OK) {
            fprintf(stderr, "dsm-bench-kv5: corm node %d: %s\n", i, dsm_strerror(st));
            rc = -1;
        }
    }
    free(ptr);
    return rc;
}

int kv5_run_corm(dsm_harness_t *c, const kv5_streams_t *s, kv5_result_t *out)
{
    for (int i = 0; i < KV5_NODES; i++)
        if (dsm_compact_of(c->nodes[i]) == NULL) {
            fprintf(stderr, "dsm-bench-kv5: corm: node %d has no compact store\n", i);
            return -1;
        }
    if (corm.c != c || corm.keys != s->cell.keys) {
        kv5_corm_close();
        corm.ptr = calloc(s->cell.keys, sizeof *corm.ptr);
        if (corm.ptr == NULL) return -1;
        corm.c = c;
        corm.keys = s->cell.keys;
    }
    kv5_result_t load;
    corm_job_t j = {.s = s, .reset = 1};
    if (kv5_run_nodes(c, corm_node, &j, &load) != 0) return -1;
    j.reset = 0;
    if (kv5_run_nodes(c, corm_node, &j, out) != 0) return -1;
    /* the final read-back, every key from node 0 */
    dsm_compact_t *cm = dsm_compact_of(c->nodes[0]);
    for (uint32_t id = 0; id < s->cell.keys; id++) {
        uint64_t w[OBJ_WORDS], v;
        size_t len = 0;
        dsm_status_t st = dsm_compact_read(cm, &corm.ptr[id], w, sizeof w, &len);
        if (st != DSM_OK || object_ok(w, len, id, &v) != 0 || !kv5_final_ok(s, id, v)) {
            fprintf(stderr, "dsm-bench-kv5: corm: key %u's final value %016llx is no sequential order's (%s)\n", id,
                    (unsigned long long)w[1], dsm_strerror(st));
            return -1;
        }
    }
    out->ops = (double)KV5_NODES * (double)s->cell.nops;
    return 0;
}

void kv5_corm_close(void)
{
    if (corm.c)
        for (uint32_t id = 0; id < corm.keys; id++)
            if (corm.ptr[id].w[0] || corm.ptr[id].w[1])
                (void)dsm_compact_free(dsm_compact_of(corm.c->nodes[id % KV5_NODES]), &corm.ptr[id]);
    free(corm.ptr);
    memset(&corm, 0, sizeof corm);
}
