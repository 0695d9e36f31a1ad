/* libFuzzer target: the decoder of the region value a node publishes at
 * join (runtime/region_offer.h: the heap's partition, chan's arena), which
 * every node runs on its peers' values. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "runtime/region_offer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dsm_region_value_t v;
    if (dsm_region_value_decode(data, size, &v) == DSM_OK) {
        /* The key lies inside the input and the range is sane. */
        if (v.key_len == 0 || v.key < data || v.key + v.key_len != data + size || v.size == 0 ||
            v.size > (1ull << 40) || v.base + v.size < v.base)
            abort();
    }
    return 0;
}
