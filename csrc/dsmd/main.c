/* dsmd: the daemon that hosts one node. It takes its settings from flags or a
 * config file (same names, "key = value" lines), joins the coordinator (or
 * hosts it, for rank 0 of a deployed cluster), serves memory, messages and
 * spawned work, logs to stderr, and exits cleanly on SIGTERM.
 * Exit status: 0 stopped (SIGTERM or the coordinator stopped the cluster),
 * 1 bad usage, 2 could not start or join, 3 lost the coordinator, 4 ended
 * a cancelled workload that ignored its stop flag (see --cancel-grace-ms).
 *
 * A daemon that falls silent for longer than the peer timeout (paused with
 * SIGSTOP, swapped out, a debugger) is declared dead by the coordinator, and
 * the cluster carries on without it; when it runs again it finds itself
 * lost and exits with 3 (also when dropped while still joining). With
 * --rejoin it instead leaves its old node behind and joins again as a new
 * member (the same rank, fresh memory), retrying while the coordinator
 * cannot be reached. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dsm/sdk.h"

static volatile sig_atomic_t stop_requested;

static void on_signal(int sig) { (void)sig; stop_requested = 1; }

typedef struct settings {
    dsm_node_config_t node;
    dsm_compact_config_t compact; /* the CoRM store this daemon serves */
    uint64_t own_cache;       /* own's cache budget, bytes; UINT64_MAX: own's default */
    char *serve_coordinator;
    char *secret_file;
    char *plugin;
    char *secret;
    int log_level;
    int rejoin;
    int no_apps;              /* --no-apps: without the project's workloads */
    uint32_t cancel_grace_ms;
    uint32_t deleg_threads;   /* 0: no delegation runtime */
    int deleg_dedicated;      /* all but the last of them only serve */
} settings_t;

/* A cancelled workload gets this long to see its stop flag and return. */
enum { DEFAULT_CANCEL_GRACE_MS = 3000, EXIT_ENDED_WORKLOAD = 4 };

static void usage(FILE *out)
{
    fprintf(out,
        "usage: dsmd --coordinator HOST:PORT [options]\n"
        "  --coordinator HOST:PORT   where the cluster meets\n"
        "  --serve-coordinator H:P   also host the coordinator in this daemon\n"
        "  --rank N                  rank to claim (default: any free daemon rank)\n"
        "  --transport NAME          shm | tcp | verbs | auto (default auto)\n"
        "  --net-device DEV          network device for tcp/verbs (e.g. lo, mlx5_0:1)\n"
        "  --partition SIZE          memory served, e.g. 256MiB (default 256MiB)\n"
        "  --progress MODE           blocking | busy | hybrid (blocking, but polls 100 us\n"
        "                            after activity) | adaptive (hybrid, polling less as\n"
        "                            that stops paying, none on a crowded host) | auto\n"
        "                            (default: adaptive over tcp, blocking otherwise)\n"
        "  --heartbeat-ms N          heartbeat period (default 250)\n"
        "  --peer-timeout-ms N       silence before a peer is declared dead (default 3000)\n"
        "  --op-timeout-ms N         bound on blocking operations (default 5000)\n"
        "  --chaos SEED:SPEC         run the fabric in chaos mode, e.g. 7:all (default $DSM_CHAOS;\n"
        "                            \"\" for off); see the README, \"Chaos mode\"\n"
        "  --secret-file PATH        cluster secret (else $DSM_SECRET)\n"
        "  --plugin PATH.so          load registered functions (calls dsm_plugin_init)\n"
        "  --no-apps                 do not load the project's workloads (libdsm-apps.so, found\n"
        "                            beside dsmd or named by $DSM_APPS_PLUGIN)\n"
        "  --log-level N             0 errors .. 3 debug (default 2)\n"
        "  --rejoin                  when declared dead (e.g. paused past the peer timeout),\n"
        "                            join again as a new member instead of exiting with 3\n"
        "  --deleg-threads N         attach a delegation runtime of N threads, for workloads whose\n"
        "                            trustees live on several nodes (every node the same N)\n"
        "  --deleg-trustees KIND     shared (every thread serves and runs the workload, default)\n"
        "                            or dedicated (all but the last thread only serve)\n"
        "  --compact-store SIZE         memory of this daemon's CoRM store (default 16MiB)\n"
        "  --compact-block SIZE         its block size, a multiple of 4KiB up to 1MiB (default 4KiB)\n"
        "  --compact-workers N          its worker allocators, 1..16 (default 4)\n"
        "  --own-cache SIZE          own's cache budget on this daemon (default 64MiB)\n"
        "  --cancel-grace-ms N       a cancelled workload that has not returned after N ms\n"
        "                            (it ignores its stop flag) is ended by exiting with 4\n"
        "                            (default 3000; 0 never)\n"
        "  --config FILE             the same settings as key = value lines\n"
        "  --version                 print the version and exit (deployments compare it across hosts)\n"
        "  --check-addresses NAME    (internal) the coordinator's worker-address checker\n");
}

/* "256MiB", "1GiB", "64M", "4096" -> bytes. */
static int parse_size(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s) return -1;
    uint64_t mult = 1;
    if (*end) {
        static const struct { const char *suffix; uint64_t mult; } units[] = {
            {"K", 1ull << 10}, {"KiB", 1ull << 10}, {"KB", 1000}, {"M", 1ull << 20}, {"MiB", 1ull << 20},
            {"MB", 1000000}, {"G", 1ull << 30}, {"GiB", 1ull << 30}, {"GB", 1000000000}, {"B", 1}};
        mult = 0;
        for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
            if (strcmp(end, units[i].suffix) == 0) mult = units[i].mult;
        if (!mult) return -1;
    }
    if (v > UINT64_MAX / mult) return -1;
    *out = v * mult;
    return 0;
}

static int parse_u32(const char *s, uint32_t *out)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || end == s || *end || v > UINT32_MAX) return -1;
    *out = (uint32_t)v;
    return 0;
}

static int load_config(settings_t *s, const char *path);

/* Replace an owned string setting (a setting given twice keeps the last). */
static void set_string(char **field, const char *value)
{
    free(*field);
    *field = strdup(value);
}

static void settings_free(settings_t *s)
{
    free((char *)s->node.coordinator);
    free((char *)s->node.net_device);
    free((char *)s->node.chaos);
    free(s->serve_coordinator);
    free(s->secret_file);
    free(s->plugin);
    free(s->secret);
}

/* Apply one setting; returns 0, or -1 after printing why. */
static int apply(settings_t *s, const char *key, const char *value)
{
    int bad = 0;
    if (!strcmp(key, "coordinator")) set_string((char **)&s->node.coordinator, value);
    else if (!strcmp(key, "serve-coordinator")) set_string(&s->serve_coordinator, value);
    else if (!strcmp(key, "rank")) {
        uint32_t r = 0;
        bad = parse_u32(value, &r) || r >= DSM_MAX_DAEMONS;
        s->node.rank = (int32_t)r;
    } else if (!strcmp(key, "transport")) bad = dsm_transport_parse(value, &s->node.transport) != DSM_OK;
    else if (!strcmp(key, "net-device")) set_string((char **)&s->node.net_device, value);
    else if (!strcmp(key, "partition")) bad = parse_size(value, &s->node.partition_size);
    else if (!strcmp(key, "progress")) bad = dsm_progress_parse(value, &s->node.progress) != DSM_OK;
    else if (!strcmp(key, "heartbeat-ms")) bad = parse_u32(value, &s->node.heartbeat_ms);
    else if (!strcmp(key, "peer-timeout-ms")) bad = parse_u32(value, &s->node.peer_timeout_ms);
    else if (!strcmp(key, "op-timeout-ms")) bad = parse_u32(value, &s->node.op_timeout_ms);
    else if (!strcmp(key, "chaos")) set_string((char **)&s->node.chaos, value);
    else if (!strcmp(key, "cancel-grace-ms")) bad = parse_u32(value, &s->cancel_grace_ms);
    else if (!strcmp(key, "own-cache")) bad = parse_size(value, &s->own_cache);
    else if (!strcmp(key, "compact-store")) bad = parse_size(value, &s->compact.range_size) || s->compact.range_size == 0;
    else if (!strcmp(key, "compact-block")) {
        uint64_t block = 0;
        bad = parse_size(value, &block) || block == 0 || block % 4096 || block > (1u << 20);
        s->compact.block_size = (uint32_t)block;
    } else if (!strcmp(key, "compact-workers"))
        bad = parse_u32(value, &s->compact.workers) || s->compact.workers < 1 || s->compact.workers > DSM_COMPACT_MAX_WORKERS;
    else if (!strcmp(key, "deleg-threads")) bad = parse_u32(value, &s->deleg_threads) || s->deleg_threads > 64;
    else if (!strcmp(key, "deleg-trustees")) {
        s->deleg_dedicated = !strcmp(value, "dedicated");
        bad = !s->deleg_dedicated && strcmp(value, "shared") != 0;
    }
    else if (!strcmp(key, "secret-file")) set_string(&s->secret_file, value);
    else if (!strcmp(key, "plugin")) set_string(&s->plugin, value);
    else if (!strcmp(key, "log-level")) {
        uint32_t level = 0;
        bad = parse_u32(value, &level) || level > 3;
        s->log_level = (int)level;
    } else if (!strcmp(key, "rejoin")) {
        /* a flag on the command line; "rejoin = yes|no" in a config file */
        s->rejoin = !value || !strcmp(value, "1") || !strcmp(value, "yes") || !strcmp(value, "true");
        bad = value && !s->rejoin && strcmp(value, "0") && strcmp(value, "no") && strcmp(value, "false");
    } else if (!strcmp(key, "no-apps")) s->no_apps = 1;
    else if (!strcmp(key, "config")) return load_config(s, value);
    else {
        fprintf(stderr, "dsmd: unknown setting '%s'\n", key);
        return -1;
    }
    if (bad) fprintf(stderr, "dsmd: bad value '%s' for --%s\n", value, key);
    return bad ? -1 : 0;
}

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t') s++;
    char *end = s + strlen(s);
    while (end > s && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\n' || end[-1] == '\r')) *--end = '\0';
    return s;
}

static int load_config(settings_t *s, const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "dsmd: cannot read config %s: %s\n", path, strerror(errno));
        return -1;
    }
    char line[1024];
    int lineno = 0, rc = 0;
    while (rc == 0 && fgets(line, sizeof line, f)) {
        lineno++;
        char *l = trim(line);
        if (!*l || *l == '#') continue;
        char *eq = strchr(l, '=');
        if (!eq) {
            fprintf(stderr, "dsmd: %s:%d: expected key = value\n", path, lineno);
            rc = -1;
            break;
        }
        *eq = '\0';
        rc = apply(s, trim(l), trim(eq + 1));
    }
    fclose(f);
    return rc;
}

static char *read_secret(const settings_t *s)
{
    if (s->secret_file) {
        FILE *f = fopen(s->secret_file, "r");
        if (!f) {
            fprintf(stderr, "dsmd: cannot read secret file %s: %s\n", s->secret_file, strerror(errno));
            return NULL;
        }
        char buf[512] = {0};
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = '\0';
        return strdup(trim(buf));
    }
    const char *env = getenv("DSM_SECRET");
    return env && *env ? strdup(env) : NULL;
}

/* A user-chosen secret short or repetitive enough to guess is warned
 * about: the coordinator slows guessing, it cannot make "abc" safe. */
static void warn_weak_secret(const char *secret)
{
    enum { MIN_LEN = 16, MIN_DISTINCT = 8 };
    unsigned char seen[256] = {0};
    size_t len = strlen(secret), distinct = 0;
    for (size_t i = 0; i < len; i++)
        if (!seen[(unsigned char)secret[i]]++) distinct++;
    if (len < MIN_LEN || distinct < MIN_DISTINCT)
        fprintf(stderr,
                "dsmd: warning: the cluster secret is weak (%zu characters, %zu distinct); use at least %d random "
                "ones, e.g. from `openssl rand -hex 16`\n",
                len, distinct, MIN_LEN);
}

/* What the node's fabric did over 100 ms, printed beside an overdue
 * workload: a workload still issuing operations ignored its flag, one whose
 * operations stopped flowing was stuck on a peer. */
static void report_traffic(dsm_node_t *node)
{
    dsm_stats_t a, b;
    dsm_node_stats(node, &a);
    usleep(100000);
    dsm_node_stats(node, &b);
    fprintf(stderr,
            "dsmd: rank %u: in the last 100 ms: %llu messages sent, %llu received, %llu waits (%llu slept), "
            "%llu errors, %llu progress wake-ups\n",
            dsm_node_rank(node), (unsigned long long)(b.am_sent - a.am_sent),
            (unsigned long long)(b.am_recv - a.am_recv), (unsigned long long)(b.waits - a.waits),
            (unsigned long long)(b.wait_sleeps - a.wait_sleeps), (unsigned long long)(b.errors - a.errors),
            (unsigned long long)(b.progress_wakeups - a.progress_wakeups));
}

static int run(settings_t *s, int argc, char **argv)
{
    static const struct option options[] = {
        {"coordinator", required_argument, 0, 0}, {"serve-coordinator", required_argument, 0, 0},
        {"rank", required_argument, 0, 0}, {"transport", required_argument, 0, 0},
        {"net-device", required_argument, 0, 0}, {"partition", required_argument, 0, 0},
        {"progress", required_argument, 0, 0}, {"heartbeat-ms", required_argument, 0, 0},
        {"peer-timeout-ms", required_argument, 0, 0}, {"op-timeout-ms", required_argument, 0, 0},
        {"chaos", required_argument, 0, 0},
        {"secret-file", required_argument, 0, 0}, {"plugin", required_argument, 0, 0},
        {"log-level", required_argument, 0, 0}, {"config", required_argument, 0, 0},
        {"rejoin", no_argument, 0, 0}, {"no-apps", no_argument, 0, 0}, {"cancel-grace-ms", required_argument, 0, 0},
        {"deleg-threads", required_argument, 0, 0}, {"deleg-trustees", required_argument, 0, 0},
        {"compact-store", required_argument, 0, 0}, {"compact-block", required_argument, 0, 0},
        {"compact-workers", required_argument, 0, 0}, {"own-cache", required_argument, 0, 0},
        {"help", no_argument, 0, 'h'}, {"version", no_argument, 0, 'V'}, {0, 0, 0, 0}};
    int index, c;
    while ((c = getopt_long(argc, argv, "h", options, &index)) != -1) {
        if (c == 'h') { usage(stdout); return 0; }
        if (c == 'V') { printf("dsmd %s\n", dsm_version()); return 0; }
        if (c != 0 || apply(s, options[index].name, optarg) != 0) { usage(stderr); return 1; }
    }
    if (optind < argc) {
        fprintf(stderr, "dsmd: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 1;
    }
    if (s->log_level >= 0) dsm_set_log_level(s->log_level);
    if (!s->node.coordinator) {
        fprintf(stderr, "dsmd: --coordinator is required\n");
        usage(stderr);
        return 1;
    }
    if (!(s->secret = read_secret(s))) {
        fprintf(stderr, "dsmd: no cluster secret: set DSM_SECRET or pass --secret-file\n");
        return 1;
    }
    warn_weak_secret(s->secret);
    s->node.secret = s->secret;
    s->node.kind = DSM_MEMBER_DAEMON;
    if (s->deleg_dedicated && s->deleg_threads < 2) {
        fprintf(stderr, "dsmd: --deleg-trustees dedicated needs --deleg-threads 2 or more (one runs the workload)\n");
        return 1;
    }
    if (s->compact.range_size < s->compact.block_size) {
        fprintf(stderr, "dsmd: --compact-store (%llu bytes) must hold at least one --compact-block (%u bytes)\n",
                (unsigned long long)s->compact.range_size, s->compact.block_size);
        return 1;
    }
    dsm_deleg_config_t deleg = {.threads = s->deleg_threads,
                                .dedicated = s->deleg_dedicated ? s->deleg_threads - 1 : 0};

    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    /* The project's workloads are a plugin too, loaded first. */
    if (!s->no_apps && dsm_plugin_load_apps() != DSM_OK) {
        fprintf(stderr, "dsmd: %s\n", dsm_last_error());
        return 2;
    }
    if (s->plugin && dsm_plugin_load(s->plugin) != DSM_OK) {
        fprintf(stderr, "dsmd: %s\n", dsm_last_error());
        return 2;
    }

    dsm_coord_t *coord = NULL;
    if (s->serve_coordinator) {
        dsm_coord_config_t cc = {.bind = s->serve_coordinator, .secret = s->secret,
                                 .peer_timeout_ms = s->node.peer_timeout_ms, .transport = s->node.transport};
        dsm_status_t st = dsm_coord_start(&cc, &coord);
        if (st != DSM_OK) {
            fprintf(stderr, "dsmd: cannot host the coordinator on %s: %s\n", s->serve_coordinator,
                    dsm_strerror(st));
            return 2;
        }
    }
    int why = DSM_NODE_OPEN, lost_before = 0;
    for (;;) {
        dsm_node_t *node;
        dsm_deleg_rt_t *rt = NULL;
        dsm_status_t st = dsm_start_with(&s->node, &s->compact, s->deleg_threads ? &deleg : NULL, &node, &rt);
        if (st != DSM_OK && s->rejoin && !stop_requested &&
            (st == DSM_ERR_TIMEOUT || st == DSM_ERR_IO || st == DSM_ERR_CLOSED || st == DSM_ERR_RANK_TAKEN)) {
            /* the coordinator may be unreachable or restarting, may not have
             * dropped the old member yet, or dropped this one mid-join: try
             * again */
            fprintf(stderr, "dsmd: joining %s failed (%s); retrying\n", s->node.coordinator, dsm_strerror(st));
            sleep(1);
            continue;
        }
        if (st == DSM_ERR_CLOSED && !stop_requested) {
            /* dropped while joining (declared dead before it was done) */
            fprintf(stderr, "dsmd: lost %s while joining\n", s->node.coordinator);
            why = DSM_NODE_LOST;
            break;
        }
        if (st != DSM_OK) {
            fprintf(stderr, "dsmd: cannot join %s: %s\n", s->node.coordinator, dsm_strerror(st));
            dsm_coord_stop(coord);
            return 2;
        }
        if (s->own_cache != UINT64_MAX && (st = dsm_own_set_cache_budget(node, s->own_cache)) != DSM_OK)
            fprintf(stderr, "dsmd: cannot set own's cache budget: %s\n", dsm_strerror(st));
        if (lost_before) fprintf(stderr, "dsmd: rejoined as rank %u\n", dsm_node_rank(node));
        why = DSM_NODE_OPEN;
        while (!stop_requested && (why = dsm_node_closed(node)) == DSM_NODE_OPEN) {
            dsm_node_wait_closed(node, 200);
            char what[256];
            if (s->cancel_grace_ms && dsm_node_overdue_job(node, s->cancel_grace_ms, what, sizeof what)) {
                /* Its thread cannot be stopped from outside; ending the
                 * process is the one safe way. Peers see the node die, so
                 * the caller's join fails at once instead of waiting. */
                fprintf(stderr, "dsmd: rank %u: %s; exiting to end it\n", dsm_node_rank(node), what);
                report_traffic(node);
                fflush(stderr);
                _exit(EXIT_ENDED_WORKLOAD);
            }
        }
        if (stop_requested) fprintf(stderr, "dsmd: rank %u stopping on signal\n", dsm_node_rank(node));
        /* Workloads still running are asked to stop, and dsm_node_destroy
         * waits for them: one that ignores its flag would hold it forever,
         * so it is ended with the process after the grace, as after a cancel. */
        while (dsm_node_stop_jobs(node) > 0) {
            char what[256];
            if (s->cancel_grace_ms && dsm_node_overdue_job(node, s->cancel_grace_ms, what, sizeof what)) {
                fprintf(stderr, "dsmd: rank %u: stopping, but %s; exiting to end it\n", dsm_node_rank(node), what);
                fflush(stderr);
                _exit(EXIT_ENDED_WORKLOAD);
            }
            usleep(20000);
        }
        uint32_t rank = dsm_node_rank(node);
        dsm_node_destroy(node);
        dsm_deleg_rt_destroy(rt);
        if (why == DSM_NODE_LOST && !stop_requested)
            fprintf(stderr, "dsmd: rank %u lost the cluster (declared dead, or the coordinator silent past the "
                    "peer timeout)%s\n", rank, s->rejoin ? "; rejoining as a new member" : "; exiting");
        if (why != DSM_NODE_LOST || stop_requested || !s->rejoin) break;
        lost_before = 1;
    }
    dsm_coord_stop(coord);
    return why == DSM_NODE_LOST && !stop_requested ? 3 : 0;
}

/* dsmd --check-addresses TRANSPORT: the coordinator's address checker,
 * serving on the socket it was given as fd 3 (dsm_addr_checker_main). */
static int check_addresses(const char *transport_name)
{
    dsm_transport_t transport;
    if (dsm_transport_parse(transport_name, &transport) != DSM_OK) {
        fprintf(stderr, "dsmd: unknown transport '%s'\n", transport_name);
        return 2;
    }
    return dsm_addr_checker_main(transport);
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--check-addresses") == 0)
        return check_addresses(argv[2]);
    settings_t s = {.log_level = -1, .cancel_grace_ms = DEFAULT_CANCEL_GRACE_MS, .own_cache = UINT64_MAX};
    dsm_node_config_init(&s.node);
    s.node.partition_size = 256ull << 20;
    dsm_compact_config_init(&s.compact);
    int rc = run(&s, argc, argv);
    settings_free(&s);
    return rc;
}
