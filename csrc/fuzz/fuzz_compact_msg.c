/* libFuzzer target for the CoRM store's messages (compact/wire.h): the
 * decoder and its re-encoding, and a store serving sequences of arbitrary
 * requests, interleaved with frees of what it handed out and compaction
 * rounds; it must never crash, every reply must decode, and every object a
 * reply names must read back what was last written to it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "compact/layout.h"
#include "compact/store.h"
#include "compact/wire.h"
#include "dsm/log.h"
#include "util/bytes.h"

enum { KEEP = 64, SELF = 3, TAG = 0x77 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static dsm_compact_store_t *store(void)
{
    static dsm_compact_store_t *s;
    if (s == NULL) {
        dsm_compact_config_t cfg = {.range_size = 64 * 4096, .block_size = 4096, .id_bits = 8, .max_merges = 8};
        if (dsm_compact_store_create(&cfg, SELF, TAG, NULL, &s) != DSM_OK)
            abort();
    }
    return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dsm_set_log_level(0);
    dsm_compact_msg_t m;
    if (dsm_compact_msg_decode(data, size, &m) == DSM_OK) {
        static uint8_t buf[DSM_COMPACT_MSG_MAX_LEN];
        size_t n = dsm_compact_msg_encode(&m, buf);
        if (n != size || memcmp(buf, data, n) != 0)
            abort();
    }

    /* A fresh store per input would cost a memfd each; one store, emptied
     * at the end of each input instead. */
    dsm_compact_store_t *s = store();
    dsm_compact_ptr_t kept[KEEP];
    size_t nkept = 0;
    dsm_reader_t r = dsm_reader(data, size);
    while (r.ok && r.left >= 2) {
        const uint8_t *hdr = dsm_take(&r, 2);
        uint8_t op = hdr[0] % 5;
        size_t len = hdr[1] <= r.left ? hdr[1] : r.left;
        const uint8_t *msg = dsm_take(&r, len);
        if (!r.ok)
            break;
        uint8_t rep[DSM_COMPACT_MSG_HEADER_LEN + 20 + DSM_COMPACT_MSG_MAX_DATA], req[64 + DSM_COMPACT_MSG_MAX_DATA];
        size_t rep_len = 0;
        if (op == 3 || op == 4) {
            if (op == 4) {
                (void)dsm_compact_store_compact(s, len ? msg[0] % 12 - 1 : -1, NULL);
                continue;
            }
            /* well-formed ops on something handed out: write, read back, or free */
            if (nkept == 0 || len < 2)
                continue;
            size_t k = msg[0] % nkept;
            dsm_compact_msg_t q = {.type = DSM_COMPACT_MSG_WRITE_REQ, .ptr = kept[k], .data = msg + 1,
                                .len = (uint32_t)(len - 1)};
            if (msg[1] & 1) {
                q.type = DSM_COMPACT_MSG_FREE_REQ;
                kept[k] = kept[--nkept];
            }
            size_t n = dsm_compact_msg_encode(&q, req);
            dsm_status_t st = dsm_compact_store_serve(s, req, n, rep, sizeof rep, &rep_len);
            if (q.type == DSM_COMPACT_MSG_WRITE_REQ && st == DSM_OK) {
                uint8_t back[4096];
                size_t bl = 0;
                dsm_compact_ptr_t p = kept[k];
                if (dsm_compact_store_read(s, &p, back, sizeof back, &bl) != DSM_OK || bl != len - 1 ||
                    memcmp(back, msg + 1, bl) != 0)
                    abort();
            }
            continue;
        }
        dsm_status_t st = dsm_compact_store_serve(s, msg, len, rep, sizeof rep, &rep_len);
        if (st != DSM_OK && rep_len != 0)
            abort();
        if (st == DSM_OK) {
            dsm_compact_msg_t out;
            if (dsm_compact_msg_decode(rep, rep_len, &out) != DSM_OK)
                abort();
            if (out.type == DSM_COMPACT_MSG_ALLOC_REP && nkept < KEEP)
                kept[nkept++] = out.ptr;
        }
    }
    /* Empty the store for the next input. */
    for (size_t i = 0; i < nkept; i++)
        (void)dsm_compact_store_free(s, &kept[i]);
    dsm_compact_usage_t u;
    dsm_compact_store_usage(s, &u);
    /* What the fuzzer allocated through raw messages it may never free. */
    if (u.map_used > u.map_budget)
        abort();
    return 0;
}
