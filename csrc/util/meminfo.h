/* How much memory this host can still give: the kernel's estimate of
 * available memory and the room left in its shared-memory filesystem. A
 * partition is refused up front when it cannot fit, rather than filling
 * /dev/shm until the kernel kills processes. */
#ifndef DSM_UTIL_MEMINFO_H
#define DSM_UTIL_MEMINFO_H

#include <stddef.h>
#include <stdint.h>


/* MemAvailable of /proc/meminfo in bytes; UINT64_MAX when unknown. */
uint64_t dsm_mem_available(void);
/* Bytes an unprivileged writer can still put in /dev/shm; UINT64_MAX when unknown. */
uint64_t dsm_shm_available(void);

#endif
