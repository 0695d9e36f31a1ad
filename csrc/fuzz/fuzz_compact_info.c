/* libFuzzer target: the decoder of the store a node publishes at join
 * (compact/info.h), which every node runs on its peers' values. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "compact/info.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dsm_compact_info_t info;
    if (dsm_compact_info_decode(data, size, &info) != DSM_OK)
        return 0;
    if (info.flags & DSM_COMPACT_INFO_SERVES) {
        if (info.key_len == 0 || info.key < data || info.key + info.key_len != data + size || info.size == 0 ||
            info.size % info.block_size || info.base + info.size < info.base)
            abort();
    } else if (info.key_len != 0) {
        abort();
    }
    return 0;
}
