/* libFuzzer target: the request of a one-sided operation emulated over
 * messages (tcp). A decoded request must re-encode to the same header, and a
 * put's payload must lie inside the input. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "fabric/rma_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dsm_rma_wire_t m;
    if (dsm_rma_wire_decode(data, size, &m) != DSM_OK) return 0;
    uint8_t again[DSM_RMA_WIRE_LEN];
    dsm_rma_wire_encode(&m, again);
    if (memcmp(again, data, DSM_RMA_WIRE_LEN) != 0) __builtin_trap();
    if (m.op == DSM_RMA_PUT && m.length &&
        (m.data < data || m.data > data + size || m.length > (size_t)(data + size - m.data)))
        __builtin_trap();
    return 0;
}
