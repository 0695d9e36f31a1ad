/* The heap's partition: creation, publication at join, the checked decoder
 * of a peer's publication, and teardown. */
#include "heap/partition.h"

#include "heap/alloc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "dsm/heap.h"
#include "heap/ids.h"
#include "util/bytes.h"
#include "util/log.h"
#include "util/meminfo.h"

#define LOG_MOD "heap"

uint64_t dsm_heap_partition_rounded(uint64_t requested)
{
    /* Room for the header: the state words (8 B per block), the generation
     * table (2 B per 16 B of the whole range, so an extra seventh) and the
     * block rounding, so that the blocks served are at least what was asked
     * for. The table's pages are only touched where objects live. */
    if (requested == 0)
        return 0;
    if (requested > DSM_HEAP_MAX_PARTITION)
        return requested;   /* refused by the caller */
    uint64_t with_gens = requested + (requested + 6) / 7 + requested / 4096 + 3 * DSM_HEAP_BLOCK_SIZE;
    return (with_gens + 4095) & ~(uint64_t)4095;
}

static void gib(char *out, size_t cap, uint64_t bytes)
{
    snprintf(out, cap, "%.1f GiB", (double)bytes / (double)(1ull << 30));
}

dsm_status_t dsm_partitions_fit(uint64_t size, int in_shm, char *why, size_t why_cap)
{
    uint64_t mem = dsm_mem_available(), shm = in_shm ? dsm_shm_available() : UINT64_MAX;
    if (size <= mem && size <= shm)
        return DSM_OK;
    char want[32], have[32];
    gib(want, sizeof want, size);
    if (size > mem) {
        gib(have, sizeof have, mem);
        snprintf(why, why_cap, "%s does not fit in this host's available memory (%s, MemAvailable)", want, have);
    } else {
        gib(have, sizeof have, shm);
        snprintf(why, why_cap, "%s does not fit in /dev/shm (%s free)", want, have);
    }
    return DSM_ERR_NOMEM;
}

dsm_status_t dsm_heap_partition_create(dsm_fabric_t *fabric, dsm_transport_t transport, uint64_t size,
                                       dsm_heap_partition_t *p)
{
    memset(p, 0, sizeof *p);
    p->memfd = -1;
    if (size == 0)
        return DSM_OK;
    /* Refused before anything is allocated: an oversized partition would
     * fill memory (or /dev/shm) until the kernel kills processes. */
    char why[160];
    if (dsm_partitions_fit(size, transport == DSM_TRANSPORT_SHM || transport == DSM_TRANSPORT_AUTO, why,
                        sizeof why) != DSM_OK) {
        DSM_ERROR(LOG_MOD, "partition of %llu bytes refused: %s", (unsigned long long)size, why);
        return DSM_ERR_NOMEM;
    }
    /* Over shm the fabric allocates the partition itself (UCX's sysv/posix
     * shared memory), so peers map it and their one-sided operations are
     * loads, stores and CPU atomics; registered user memory would be reached
     * through a system call per access (cma). No memfd then. */
    if (transport == DSM_TRANSPORT_SHM || transport == DSM_TRANSPORT_AUTO) {
        dsm_status_t st = dsm_fabric_region_alloc(fabric, size, &p->region);
        if (st != DSM_OK) {
            DSM_ERROR(LOG_MOD, "cannot allocate a %llu-byte partition: %s", (unsigned long long)size,
                      dsm_strerror(st));
            return st;
        }
        p->base = dsm_fabric_region_base(p->region);
        p->size = size;
        return DSM_OK;
    }
    p->memfd = memfd_create("dsm-partition", MFD_CLOEXEC);
    if (p->memfd < 0 || ftruncate(p->memfd, (off_t)size) != 0) {
        DSM_ERROR(LOG_MOD, "cannot create a %llu-byte partition: %s", (unsigned long long)size, strerror(errno));
        return DSM_ERR_NOMEM;
    }
    void *base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, p->memfd, 0);
    if (base == MAP_FAILED) {
        DSM_ERROR(LOG_MOD, "cannot map the partition: %s", strerror(errno));
        return DSM_ERR_NOMEM;
    }
    p->base = base;
    p->size = size;
    return dsm_fabric_region_register(fabric, base, size, &p->region);
}

/* A fabric-allocated partition (memfd -1) is freed by unregistering its region. */
void dsm_heap_partition_destroy(dsm_heap_partition_t *p)
{
    if (p->region)
        dsm_fabric_region_unregister(p->region);
    p->region = NULL;
    if (p->base && p->memfd >= 0)
        munmap(p->base, p->size);
    p->base = NULL;
    if (p->memfd >= 0)
        close(p->memfd);
    p->memfd = -1;
}
