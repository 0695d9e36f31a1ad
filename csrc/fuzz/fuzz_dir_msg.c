/* libFuzzer target for dir's wire messages and object header: a decoded
 * message re-encodes to exactly the same bytes and respects the documented
 * ranges; an accepted header fits the room it was given. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dir/msg.h"
#include "dsm/heap.h"
#include "dsm/log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dsm_set_log_level(0);
    dir_msg_t m;
    if (dir_msg_decode(data, size, &m) == DSM_OK) {
        if (dsm_gaddr_strip(m.addr) != m.addr || dsm_gaddr_offset(m.addr) == 0)
            abort();
        if (dir_msg_has_object(m.type) && (m.len < DIR_OBJ_HEADER || m.len > DIR_MAX_OBJECT ||
                                       m.data < data || m.data + m.len > data + size))
            abort();
        if (m.type == DIR_MSG_RECALL && m.mode > DIR_RECALL_INVALIDATE)
            abort();
        size_t n = dir_msg_size(&m);
        uint8_t *buf = malloc(n ? n : 1);
        if (buf == NULL)
            return 0;
        if (dir_msg_encode(&m, buf) != size || memcmp(buf, data, size) != 0)
            abort();
        free(buf);
    }
    uint32_t type;
    uint64_t osize;
    uint64_t room = size >= 8 ? (uint64_t)data[0] << 4 : 0;
    if (dir_obj_header_decode(data, size, room, &type, &osize) == DSM_OK &&
        (type == 0 || osize + DIR_OBJ_HEADER > room || osize + DIR_OBJ_HEADER > DIR_MAX_OBJECT))
        abort();
    return 0;
}
