/* The negative test switches of a test build (test_switch.h): which of them
 * DSM_TEST_BREAK names. */
#include "util/test_switch.h"

#ifdef DSM_TEST_SWITCHES
#include <stdlib.h>
#include <string.h>

int dsm_test_switch(const char *name)
{
    /* Read on every call, not cached: tests turn a switch on for one case
     * (setenv) and off again; the switched paths are test-only anyway. */
    const char *list = getenv("DSM_TEST_BREAK");
    size_t n = strlen(name);
    for (const char *p = list; p && *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && memcmp(p, name, n) == 0)
            return 1;
        p = end ? end + 1 : NULL;
    }
    return 0;
}
#else
/* ISO C forbids an empty translation unit. */
typedef int dsm_test_switch_unused_t;
#endif
