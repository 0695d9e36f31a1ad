/* The host's available memory and /dev/shm room (see meminfo.h). */
#include "util/meminfo.h"

#include <stdio.h>
#include <string.h>
#include <sys/statvfs.h>

uint64_t dsm_mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (f == NULL)
        return UINT64_MAX;
    char line[128];
    unsigned long long kb = 0;
    int found = 0;
    while (!found && fgets(line, sizeof line, f))
        found = sscanf(line, "MemAvailable: %llu kB", &kb) == 1;
    fclose(f);
    return found ? (uint64_t)kb * 1024 : UINT64_MAX;
}

uint64_t dsm_shm_available(void)
{
    struct statvfs s;
    if (statvfs("/dev/shm", &s) != 0)
        return UINT64_MAX;
    return (uint64_t)s.f_bavail * s.f_frsize;
}

static void gib(char *out, size_t cap, uint64_t bytes)
{
    snprintf(out, cap, "%.1f GiB", (double)bytes / (double)(1ull << 30));
}

dsm_status_t dsm_memory_fits(uint64_t size, int in_shm, char *why, size_t why_cap)
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
