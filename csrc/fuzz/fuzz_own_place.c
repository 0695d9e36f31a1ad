/* libFuzzer target for own's placement and concurrency inputs: the task
 * envelope (the spawn arguments of "_own.task"), the remote-allocation
 * request and the load report, the channel messages and a RECV reply's
 * item (a decoded message re-encodes to the same bytes), and a TBox
 * group's member table (memory a peer controls): an accepted member must
 * lie inside the payload, after the table. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dsm/heap.h"
#include "dsm/log.h"
#include "own/object.h"
#include "own/place_msg.h"
#include "own/tbox_layout.h"
#include "util/bytes.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dsm_set_log_level(0);
    own_task_hdr_t h;
    const void *args;
    size_t args_len;
    if (own_task_decode(data, size, &h, &args, &args_len) == DSM_OK) {
        uint8_t buf[OWN_TASK_HEADER];
        own_task_encode(&h, buf);
        if (size < OWN_TASK_HEADER || memcmp(buf, data, OWN_TASK_HEADER) != 0 ||
            args != data + OWN_TASK_HEADER || args_len != size - OWN_TASK_HEADER ||
            (h.box != 0 && !own_box_handle_ok(h.box)))
            abort();
    }
    uint32_t running;
    uint64_t free_bytes;
    if (own_pair_decode(OWN_LOAD_MAGIC, data, size, &running, &free_bytes) == DSM_OK) {
        uint8_t buf[OWN_LOAD_LEN];
        own_pair_encode(OWN_LOAD_MAGIC, running, free_bytes, buf);
        if (size != OWN_LOAD_LEN || memcmp(buf, data, size) != 0)
            abort();
    }
    own_chan_msg_t m;
    if (own_chan_decode(data, size, &m) == DSM_OK) {
        uint8_t buf[OWN_CHAN_MAX_LEN];
        size_t n = own_chan_encode(&m, buf);
        if (n != size || memcmp(buf, data, n) != 0 || dsm_gaddr_colour(m.chan) != OWN_CHAN_COLOUR ||
            dsm_gaddr_offset(m.chan) == 0)
            abort();
        if (m.type == OWN_CHAN_SEND && m.item.kind != OWN_CHAN_WORD &&
            (m.item.type == 0 || m.item.type > OWN_MAX_TYPE || m.item.size > OWN_MAX_SIZE))
            abort();
    }
    own_chan_item_t it;
    if (own_chan_item_decode(data, size, &it) == DSM_OK) {
        uint8_t buf[OWN_CHAN_ITEM_LEN];
        own_chan_item_encode(&it, buf);
        if (size != OWN_CHAN_ITEM_LEN || memcmp(buf, data, size) != 0 ||
            (it.kind != OWN_CHAN_BOX && it.kind != OWN_CHAN_WORD && it.kind != OWN_CHAN_REC) ||
            (it.kind == OWN_CHAN_WORD && (it.type != 0 || it.size != 0)) ||
            (it.kind == OWN_CHAN_REC && !own_box_handle_ok(it.value)))
            abort();
    }
    /* The member table: every member the decoder accepts lies inside. */
    uint32_t count = 0;
    uint64_t off, msz;
    for (uint32_t i = 0; i < 8; i++) {
        dsm_status_t st = own_tbox_member(data, size, i, &count, &off, &msz);
        if (st == DSM_OK && (off < 8 + 16 * (uint64_t)count || off + msz > size || (off & 7) || i >= count))
            abort();
        if (st == DSM_ERR_INVALID && i < count)
            abort();
        if (st == DSM_ERR_BAD_ADDR)
            break;
    }
    /* A layout written for sizes from the input decodes to those sizes. */
    if (size >= 2) {
        uint32_t n = 1 + data[0] % 8;
        size_t sizes[8];
        for (uint32_t i = 0; i < n; i++)
            sizes[i] = data[(1 + i) % size];
        uint64_t total = own_tbox_size(n, sizes);
        uint8_t *p = total ? calloc(1, total) : NULL;
        if (p) {
            own_tbox_layout(p, n, sizes);
            for (uint32_t i = 0; i < n; i++)
                if (own_tbox_member(p, total, i, NULL, &off, &msz) != DSM_OK || msz != sizes[i])
                    abort();
            free(p);
        }
    }
    return 0;
}
