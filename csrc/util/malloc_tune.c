/* The process's allocator, set once for large messages (see malloc_tune.h). */
#include "util/malloc_tune.h"

#include <pthread.h>
#include <stdlib.h>

static pthread_once_t once = PTHREAD_ONCE_INIT;

static void keep_large_blocks(void)
{
    /* Never touched: mmap'd, then unmapped by the free, which is what moves
     * the thresholds. The page past the size covers the block's header.
     * Through a volatile pointer: a compiler may drop a malloc whose block
     * nothing uses, and its free with it. */
    void *volatile block = malloc(DSM_MALLOC_KEPT + 4096);
    free(block);
}

void dsm_malloc_keep_large_blocks(void) { (void)pthread_once(&once, keep_large_blocks); }
