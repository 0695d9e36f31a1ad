/* libFuzzer target: the chaos spec (DSM_CHAOS). Any text either parses or
 * is refused with a reason; a parsed spec prints as text that parses back
 * to the same spec. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fabric/chaos_spec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (text == NULL) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    dsm_chaos_spec_t s, back;
    char err[160], again[256];
    if (dsm_chaos_spec_parse(text, &s, err, sizeof err) != DSM_OK) {
        if (err[0] == '\0') __builtin_trap();   /* a refusal says why */
        free(text);
        return 0;
    }
    free(text);
    if (s.random_seed) s.random_seed = 0;   /* printed with the seed drawn */
    int n = dsm_chaos_spec_format(&s, again, sizeof again);
    if (n <= 0 || (size_t)n >= sizeof again) __builtin_trap();
    if (dsm_chaos_spec_parse(again, &back, err, sizeof err) != DSM_OK) __builtin_trap();
    if (!dsm_chaos_spec_equal(&s, &back)) __builtin_trap();
    return 0;
}
