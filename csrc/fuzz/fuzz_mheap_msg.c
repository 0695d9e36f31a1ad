/* libFuzzer target for the managed heap's control messages (mheap/msg.h),
 * which a memory server decodes from the CPU server and the CPU server from
 * memory servers: a decoded message is peeked as its type, re-encodes to
 * bytes that decode again and re-encode to themselves; arrays lie inside the input; a BATCH's or
 * BATCH_REP's items lie inside it and are decoded in turn. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mheap/msg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static dsm_mheap_types_t types1, types2;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dsm_mheap_msg_t m;
    uint16_t peeked = 0;
    dsm_status_t peek = dsm_mheap_msg_peek_type(data, size, &peeked);
    if (dsm_mheap_msg_decode(data, size, &m, &types1) != DSM_OK)
        return 0;
    if (peek != DSM_OK || peeked != m.type)
        abort();   /* a message that decodes is peeked as its type */
    const uint8_t *end = data + size;
    if ((m.roots && (m.roots < data || m.roots + (size_t)m.nroots * 8 > end)) ||
        (m.slots && (m.slots < data || m.slots + (size_t)m.nslots * 8 > end)) ||
        (m.more && (m.more < data || m.more + (size_t)m.nmore * 4 > end)) ||
        (m.pages && (m.pages < data || m.pages + (size_t)m.npages * DSM_MHEAP_PAGE_ITEM > end)))
        abort();
    if (m.type == DSM_MHEAP_MSG_BATCH || m.type == DSM_MHEAP_MSG_BATCH_REP) {
        size_t pos = 0, len;
        const uint8_t *item;
        dsm_status_t status;
        for (uint32_t i = 0; i < m.nitems; i++) {
            if (dsm_mheap_batch_item(&m, &pos, &item, &len, &status) != DSM_OK || item < data || item + len > end)
                abort();
            dsm_mheap_msg_t it;
            (void)dsm_mheap_msg_decode(item, len, &it, &types2);
        }
        if (dsm_mheap_batch_item(&m, &pos, &item, &len, &status) == DSM_OK)
            abort();   /* no item past the count */
    }
    dsm_writer_t a = {0}, b = {0};
    dsm_mheap_msg_encode(&m, &a);
    if (!a.ok)
        abort();
    dsm_mheap_msg_t m2;
    if (dsm_mheap_msg_decode(a.buf, a.len, &m2, &types2) != DSM_OK || m2.type != m.type)
        abort();
    dsm_mheap_msg_encode(&m2, &b);
    if (!b.ok || b.len != a.len || memcmp(a.buf, b.buf, a.len) != 0)
        abort();
    dsm_writer_free(&a);
    dsm_writer_free(&b);
    return 0;
}
