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
