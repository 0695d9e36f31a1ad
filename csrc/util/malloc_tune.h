/* The process's allocator, set once for messages of up to DSM_MALLOC_KEPT
 * bytes: glibc serves a block above its mmap threshold (128 KiB at start)
 * with mmap, and gives the heap's top back to the kernel once twice the
 * threshold lies free there, so a 1 MiB message whose buffer (UCX's, or an
 * array the caller made for it) was freed after the last faulted all its
 * pages in again. Freeing one mmap'd block raises both thresholds to its size
 * (mallopt(3), the dynamic threshold), as a program that freed one array
 * of that size would; a threshold the user set (mallopt, or
 * MALLOC_MMAP_THRESHOLD_) turns that off, and is kept. */
#ifndef DSM_UTIL_MALLOC_TUNE_H
#define DSM_UTIL_MALLOC_TUNE_H

enum { DSM_MALLOC_KEPT = 4 * 1024 * 1024 };

/* Once per process; later calls do nothing. */
void dsm_malloc_keep_large_blocks(void);

#endif
