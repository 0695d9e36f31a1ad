/* Zeroed memory on 128-byte blocks of its own (two cache lines, the
 * adjacent-line prefetcher's pair), for state one thread writes while another
 * reads or writes its neighbour: as plain callocs side by side, two runtime
 * threads' pair arrays shared a line and local delegation ran at half speed.
 * Freed with free(). */
#ifndef DSM_UTIL_ZALLOC_H
#define DSM_UTIL_ZALLOC_H

#include <stdlib.h>
#include <string.h>

static inline void *dsm_zalloc_lines(size_t size)
{
    size = (size + 127) & ~(size_t)127;
    void *p = NULL;
    if (posix_memalign(&p, 128, size ? size : 128) != 0) return NULL;
    memset(p, 0, size);
    return p;
}

#endif
