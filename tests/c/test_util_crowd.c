/* The crowded-host check's inputs (util/crowd.h), injected: the cores a
 * process can be given, read from a made-up /proc and cgroup tree (v1 and
 * v2, quotas at the leaf and above it, cpusets), the cpuset lists, and the
 * verdict on /proc/loadavg texts. No timing, no real load. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/crowd.h"

static char g_root[256];

/* Writes `text` to root/path, making its directories. */
static void put(const char *path, const char *text)
{
    char full[512];
    snprintf(full, sizeof full, "%s/%s", g_root, path);
    for (char *p = full + strlen(g_root) + 1; (p = strchr(p, '/')) != NULL; p++) {
        *p = 0;
        mkdir(full, 0700);
        *p = '/';
    }
    FILE *fp = fopen(full, "w");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
}

static int make_root(void **state)
{
    (void)state;
    snprintf(g_root, sizeof g_root, "/tmp/dsm-test-crowd-XXXXXX");
    assert_non_null(mkdtemp(g_root));
    return 0;
}

static int remove_root(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_root);
    assert_int_equal(system(cmd), 0);
    return 0;
}

static const char MOUNTS_V1[] =
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct\n"
    "34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";

static const char MOUNTS_V2[] = "30 23 0:27 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";

static void test_cpulist(void **state)
{
    (void)state;
    assert_int_equal(dsm_crowd_cpulist_count("0"), 1);
    assert_int_equal(dsm_crowd_cpulist_count("0-1"), 2);
    assert_int_equal(dsm_crowd_cpulist_count("0-3,6,8-9"), 7);
    /* not a list: no bound */
    assert_int_equal(dsm_crowd_cpulist_count(""), 0);
    assert_int_equal(dsm_crowd_cpulist_count("3-1"), 0);
    assert_int_equal(dsm_crowd_cpulist_count("-1"), 0);
    assert_int_equal(dsm_crowd_cpulist_count("0-"), 0);
    assert_int_equal(dsm_crowd_cpulist_count("x"), 0);
}

/* Without any cgroup files the online CPUs count, whatever the affinity. */
static void test_online_cpus_without_cgroups(void **state)
{
    (void)state;
    assert_int_equal(dsm_crowd_cores_at(g_root, 2), 2);
    assert_int_equal(dsm_crowd_cores_at(g_root, 64), 64);
    assert_int_equal(dsm_crowd_cores_at(g_root, 0), 1);
}

/* v1 as on a host where no limit is set (quota -1, every CPU in the
 * cpuset), then with a quota of 1.5 CPUs on the process's group's parent
 * and a cpuset of one CPU. */
static void test_cgroup_v1(void **state)
{
    (void)state;
    put("proc/self/mountinfo", MOUNTS_V1);
    put("proc/self/cgroup", "9:name=systemd:/\n4:cpuset:/job\n2:cpu,cpuacct:/job/task\n0::/\n");
    put("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
    put("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
    put("sys/fs/cgroup/cpu,cpuacct/job/task/cpu.cfs_quota_us", "-1\n");
    put("sys/fs/cgroup/cpu,cpuacct/job/task/cpu.cfs_period_us", "100000\n");
    put("sys/fs/cgroup/cpuset/job/cpuset.cpus", "0-7\n");
    put("sys/fs/cgroup/cpuset/job/cpuset.effective_cpus", "0-7\n");
    assert_int_equal(dsm_crowd_cores_at(g_root, 8), 8);
    assert_int_equal(dsm_crowd_cores_at(g_root, 2), 2);   /* the online CPUs bound */
    /* the parent's quota binds the leaf too; rounded up */
    put("sys/fs/cgroup/cpu,cpuacct/job/cpu.cfs_quota_us", "150000\n");
    put("sys/fs/cgroup/cpu,cpuacct/job/cpu.cfs_period_us", "100000\n");
    assert_int_equal(dsm_crowd_cores_at(g_root, 8), 2);
    /* the effective cpuset, over the configured one */
    put("sys/fs/cgroup/cpuset/job/cpuset.effective_cpus", "3\n");
    assert_int_equal(dsm_crowd_cores_at(g_root, 8), 1);
}

/* v2: cpu.max at the leaf and above, the effective cpuset, and a mount whose
 * root is the process's own group (a container without its namespace). */
static void test_cgroup_v2(void **state)
{
    (void)state;
    put("proc/self/mountinfo", MOUNTS_V2);
    put("proc/self/cgroup", "0::/a/b\n");
    put("sys/fs/cgroup/a/b/cpu.max", "max 100000\n");
    put("sys/fs/cgroup/a/b/cpuset.cpus.effective", "0-5\n");
    assert_int_equal(dsm_crowd_cores_at(g_root, 8), 6);
    put("sys/fs/cgroup/a/cpu.max", "300000 100000\n");
    assert_int_equal(dsm_crowd_cores_at(g_root, 8), 3);
    put("sys/fs/cgroup/a/b/cpu.max", "50000 100000\n");   /* half a CPU: one core */
    assert_int_equal(dsm_crowd_cores_at(g_root, 8), 1);
    /* mounted at the group itself: the path below the mount's root */
    put("proc/self/mountinfo", "30 23 0:27 /a /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
    put("sys/fs/cgroup/b/cpu.max", "200000 100000\n");
    put("sys/fs/cgroup/b/cpuset.cpus.effective", "0-3\n");
    assert_int_equal(dsm_crowd_cores_at(g_root, 8), 2);
    /* malformed files bound nothing */
    put("sys/fs/cgroup/b/cpu.max", "garbage\n");
    put("sys/fs/cgroup/b/cpuset.cpus.effective", "\n");
    assert_int_equal(dsm_crowd_cores_at(g_root, 8), 8);
}

/* The verdict: more running threads than cores. A process pinned to one
 * core of an idle two-core host, running beside one other thread, is not
 * crowded: its cores are the host's two, not its affinity's one. */
static void test_loadavg_verdict(void **state)
{
    (void)state;
    unsigned cores = dsm_crowd_cores_at(g_root, 2);
    assert_int_equal(cores, 2);
    assert_false(dsm_crowd_loadavg_crowded("0.50 0.40 0.30 2/312 4242\n", cores));
    assert_true(dsm_crowd_loadavg_crowded("3.10 2.00 1.00 3/312 4242\n", cores));
    assert_false(dsm_crowd_loadavg_crowded("0.50 0.40 0.30 2/312 4242\n", 2));
    assert_true(dsm_crowd_loadavg_crowded("0.50 0.40 0.30 2/312 4242\n", 1));
    assert_false(dsm_crowd_loadavg_crowded("", 1));
    assert_false(dsm_crowd_loadavg_crowded("0.5 0.4", 1));
}

/* The real host: at least one core, at most the online CPUs. */
static void test_real_host(void **state)
{
    (void)state;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned cores = dsm_crowd_cores_at("", (unsigned)online);
    assert_true(cores >= 1);
    assert_true(cores <= (unsigned)online);
    dsm_crowd_t c;
    dsm_crowd_init(&c);
    assert_int_equal(c.cores, cores);
    dsm_crowd_fini(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_cpulist, make_root, remove_root),
        cmocka_unit_test_setup_teardown(test_online_cpus_without_cgroups, make_root, remove_root),
        cmocka_unit_test_setup_teardown(test_cgroup_v1, make_root, remove_root),
        cmocka_unit_test_setup_teardown(test_cgroup_v2, make_root, remove_root),
        cmocka_unit_test_setup_teardown(test_loadavg_verdict, make_root, remove_root),
        cmocka_unit_test_setup_teardown(test_real_host, make_root, remove_root),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
