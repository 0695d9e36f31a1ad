/* libFuzzer target: what the coordinator reads about a joiner's worker
 * address before any member uses it. The address checker's verdict either
 * decodes to a status and a printable reason that encode back to the same
 * bytes, or is refused; a worker address's fabric prefix is judged without
 * reading past it. (The bytes after the prefix go only to UCX in the
 * checker's own process: tests/c/test_runtime_coord_limits.c.) */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "dsm/fabric.h"
#include "runtime/addr_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dsm_status_t st;
    char reason[DSM_ADDR_CHECK_MAX_REASON + 1];
    if (dsm_addr_check_reply_decode(data, size, &st, reason, sizeof reason)) {
        if (st > 0) __builtin_trap();
        uint8_t again[DSM_ADDR_CHECK_REPLY_MAX];
        size_t n = dsm_addr_check_reply_encode(st, reason, again, sizeof again);
        if (n != 3 + strlen(reason)) __builtin_trap();
        dsm_status_t st2;
        char reason2[sizeof reason];
        if (!dsm_addr_check_reply_decode(again, n, &st2, reason2, sizeof reason2)) __builtin_trap();
        if (st2 != st || strcmp(reason, reason2) != 0) __builtin_trap();
    }
    unsigned theirs = 0, mine = 0;
    dsm_status_t v = dsm_fabric_address_check(data, size, &theirs, &mine);
    if (v == DSM_OK && theirs != mine) __builtin_trap();
    return 0;
}
