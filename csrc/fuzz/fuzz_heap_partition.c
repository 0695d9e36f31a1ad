/* libFuzzer target: the decoder of the partition value a heap publishes at
 * join (heap/partition.h), which every node runs on its peers' values. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "heap/partition.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dsm_heap_partition_info_t info;
    if (dsm_heap_partition_decode(data, size, &info) == DSM_OK) {
        /* The key lies inside the input and the range is sane. */
        if (info.key_len == 0 || info.key < data || info.key + info.key_len != data + size ||
            info.size == 0 || info.size > (1ull << 40) || info.base + info.size < info.base)
            abort();
    }
    return 0;
}
