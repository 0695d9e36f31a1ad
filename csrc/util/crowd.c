/* The crowded-host sample and the cores it compares with (see crowd.h). */
#include "util/crowd.h"

#include <ctype.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { PATH_CAP = 4096 };

static bool token_in(const char *list, const char *tok)
{
    size_t n = strlen(tok);
    for (const char *p = list; p && *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && strncmp(p, tok, n) == 0)
            return true;
        p = end ? end + 1 : NULL;
    }
    return false;
}

/* The first line of `path` (newline cut) into buf; false if unreadable. */
static bool read_line(const char *path, char *buf, size_t cap)
{
    FILE *fp = fopen(path, "re");
    if (!fp)
        return false;
    bool ok = fgets(buf, (int)cap, fp) != NULL;
    fclose(fp);
    if (ok)
        buf[strcspn(buf, "\n")] = 0;
    return ok;
}

unsigned dsm_crowd_cpulist_count(const char *list)
{
    unsigned long n = 0;
    const char *p = list;
    while (*p) {
        char *end;
        if (!isdigit((unsigned char)*p))
            return 0;
        unsigned long lo = strtoul(p, &end, 10), hi = lo;
        p = end;
        if (*p == '-') {
            if (!isdigit((unsigned char)p[1]))
                return 0;
            hi = strtoul(p + 1, &end, 10);
            p = end;
            if (hi < lo)
                return 0;
        }
        n += hi - lo + 1;
        if (n > UINT_MAX)
            return UINT_MAX;
        if (*p == ',')
            p++;
        else if (*p != '\0')
            return 0;
    }
    return (unsigned)n;
}

/* A process's directory in one cgroup hierarchy: `dir`, under the root,
 * and the length of its mount point's part (the walk up stops there). */
typedef struct cg_dir {
    char dir[PATH_CAP];
    size_t base;
} cg_dir_t;

/* The hierarchy with `controller` (NULL: the v2 one) of the process, as
 * /proc/self/cgroup and /proc/self/mountinfo under root name it. */
static bool cg_find(const char *root, const char *controller, cg_dir_t *out)
{
    char path[PATH_CAP], line[PATH_CAP], cg[PATH_CAP] = "";
    bool found = false;
    snprintf(path, sizeof path, "%s/proc/self/cgroup", root);
    FILE *fp = fopen(path, "re");
    if (!fp)
        return false;
    while (!found && fgets(line, sizeof line, fp)) {
        line[strcspn(line, "\n")] = 0;
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c2 = 0;
        if (controller ? token_in(c1 + 1, controller) : c2 == c1 + 1) {
            snprintf(cg, sizeof cg, "%s", c2 + 1);
            found = true;
        }
    }
    fclose(fp);
    if (!found)
        return false;
    snprintf(path, sizeof path, "%s/proc/self/mountinfo", root);
    if (!(fp = fopen(path, "re")))
        return false;
    found = false;
    while (!found && fgets(line, sizeof line, fp)) {
        /* ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS... - FSTYPE SOURCE SUPEROPTIONS */
        char mroot[PATH_CAP], mpoint[PATH_CAP], fstype[64], super[PATH_CAP];
        const char *sep = strstr(line, " - ");
        if (!sep || sscanf(line, "%*s %*s %*s %4095s %4095s", mroot, mpoint) != 2 ||
            sscanf(sep + 3, "%63s %*s %4095s", fstype, super) != 2)
            continue;
        if (strcmp(fstype, controller ? "cgroup" : "cgroup2") != 0 || (controller && !token_in(super, controller)))
            continue;
        /* the process's path is relative to the hierarchy's root, the mount
         * shows the part below mroot */
        size_t rl = strcmp(mroot, "/") == 0 ? 0 : strlen(mroot);
        if (strncmp(cg, mroot, rl) != 0 || (cg[rl] != '/' && cg[rl] != '\0'))
            continue;
        int base = snprintf(out->dir, sizeof out->dir, "%s%s", root, strcmp(mpoint, "/") == 0 ? "" : mpoint);
        int len = snprintf(out->dir + base, sizeof out->dir - (size_t)base, "%s", cg + rl);
        if (base < 0 || len < 0 || (size_t)base + (size_t)len >= sizeof out->dir)
            continue;
        out->dir[base + len - (len > 0 && out->dir[base + len - 1] == '/')] = 0;
        out->base = (size_t)base;
        found = true;
    }
    fclose(fp);
    return found;
}

/* One level up; false at the hierarchy's root (already read). */
static bool cg_up(cg_dir_t *d)
{
    size_t len = strlen(d->dir);
    if (len <= d->base)
        return false;
    char *slash = strrchr(d->dir + d->base, '/');
    if (!slash)
        return false;
    *slash = 0;
    return true;
}

/* The first line of `file` in d's directory. */
static bool cg_read(const cg_dir_t *d, const char *file, char *buf, size_t cap)
{
    char path[PATH_CAP + 64];
    snprintf(path, sizeof path, "%s/%s", d->dir, file);
    return read_line(path, buf, cap);
}

static unsigned quota_cores(long long quota, long long period)
{
    if (quota <= 0 || period <= 0)
        return 0;
    long long n = (quota + period - 1) / period;
    return n > UINT_MAX ? UINT_MAX : (unsigned)n;
}

static void bound(unsigned *cores, unsigned limit)
{
    if (limit != 0 && limit < *cores)
        *cores = limit;
}

/* The nearest cpuset the hierarchy gives the process (the effective list,
 * else the configured one); 0 for none. */
static unsigned cg_cpuset(cg_dir_t d, const char *effective, const char *configured)
{
    char buf[PATH_CAP];
    do {
        unsigned n = 0;
        if (cg_read(&d, effective, buf, sizeof buf))
            n = dsm_crowd_cpulist_count(buf);
        if (n == 0 && configured && cg_read(&d, configured, buf, sizeof buf))
            n = dsm_crowd_cpulist_count(buf);
        if (n != 0)
            return n;
    } while (cg_up(&d));
    return 0;
}

/* The tightest cpu quota of the process's cgroup and its ancestors, in
 * cores (rounded up); 0 for none. */
static unsigned cg_quota(cg_dir_t d, bool v2)
{
    unsigned cores = UINT_MAX;
    char buf[256], quota[64];
    do {
        long long q = 0, period = 0;
        if (v2) {
            if (cg_read(&d, "cpu.max", buf, sizeof buf) && sscanf(buf, "%63s %lld", quota, &period) == 2 &&
                strcmp(quota, "max") != 0)
                q = atoll(quota);
        } else if (cg_read(&d, "cpu.cfs_quota_us", buf, sizeof buf)) {
            q = atoll(buf);
            if (cg_read(&d, "cpu.cfs_period_us", buf, sizeof buf))
                period = atoll(buf);
        }
        bound(&cores, quota_cores(q, period));
    } while (cg_up(&d));
    return cores == UINT_MAX ? 0 : cores;
}

unsigned dsm_crowd_cores_at(const char *root, unsigned online)
{
    unsigned cores = online ? online : 1;
    cg_dir_t d;
    if (cg_find(root, NULL, &d)) {
        bound(&cores, cg_cpuset(d, "cpuset.cpus.effective", NULL));
        bound(&cores, cg_quota(d, true));
    }
    if (cg_find(root, "cpuset", &d))
        bound(&cores, cg_cpuset(d, "cpuset.effective_cpus", "cpuset.cpus"));
    if (cg_find(root, "cpu", &d))
        bound(&cores, cg_quota(d, false));
    return cores;
}

bool dsm_crowd_loadavg_crowded(const char *loadavg, unsigned cores)
{
    unsigned running = 0;
    return sscanf(loadavg, "%*s %*s %*s %u/", &running) == 1 && running > cores;
}

void dsm_crowd_init(dsm_crowd_t *c)
{
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    c->cores = dsm_crowd_cores_at("", online > 0 ? (unsigned)online : 1);
    c->loadavg_fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
    atomic_init(&c->checked_ns, 0);
    atomic_init(&c->run, 0);
}

void dsm_crowd_fini(dsm_crowd_t *c)
{
    if (c->loadavg_fd >= 0) close(c->loadavg_fd);
    c->loadavg_fd = -1;
}

/* The running count of /proc/loadavg includes the caller. */
static bool oversubscribed(const dsm_crowd_t *c)
{
    char buf[128];
    ssize_t n = c->loadavg_fd >= 0 ? pread(c->loadavg_fd, buf, sizeof buf - 1, 0) : -1;
    if (n <= 0) return false;
    buf[n] = 0;
    return dsm_crowd_loadavg_crowded(buf, c->cores);
}

unsigned dsm_crowd_run(dsm_crowd_t *c, uint64_t now_ns)
{
    uint64_t checked = atomic_load_explicit(&c->checked_ns, memory_order_relaxed);
    if (now_ns - checked >= (uint64_t)DSM_CROWD_CHECK_MS * 1000000u &&
        atomic_compare_exchange_strong_explicit(&c->checked_ns, &checked, now_ns, memory_order_relaxed,
                                                memory_order_relaxed)) {
        /* only the thread that won the sample writes the run */
        unsigned run = atomic_load_explicit(&c->run, memory_order_relaxed);
        run = !oversubscribed(c) ? 0 : run < DSM_CROWD_RUN_CAP ? run + 1 : DSM_CROWD_RUN_CAP;
        atomic_store_explicit(&c->run, run, memory_order_relaxed);
    }
    return atomic_load_explicit(&c->run, memory_order_relaxed);
}
