/* dsm-memcached: the delegation memcached server as a program (what
 * `pydsm serve memcached` runs). Parses the command line, then serves until
 * SIGINT or SIGTERM, printing "listening on HOST:PORT" once ready.
 * Usage: dsm-memcached [--host H] [--port P] [--workers W] [--trustees N]
 *                      [--shards S] [--memory MB] [--max-conns N] [-I SIZE]
 *                      [--progress MODE] */
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps/mc_server.h"
#include "dsm/status.h"

static void usage(FILE *out, const char *prog)
{
    fprintf(out,
            "usage: %s [--host H] [--port P] [--workers W] [--trustees N] [--shards S]\n"
            "  --host H      IPv4 address to listen on (default 127.0.0.1)\n"
            "  --port P      TCP port (default 0: pick a free one)\n"
            "  --workers W   socket worker threads, also shared trustees (default 2)\n"
            "  --trustees N  extra dedicated trustee threads (default 0: shared mode)\n"
            "  --shards S    hash table shards (default 64)\n"
            "  --memory MB   item memory before least-recently-used items are evicted (default 64)\n"
            "  --max-conns N open connections; more are refused (default 1024)\n"
            "  -I SIZE       largest item, bytes or with k/m (default 1m; 1k..128m)\n"
            "  --progress M  how an idle worker waits for its next request: blocking (sleep at once),\n"
            "                hybrid (poll 100 us first), adaptive (poll while that pays; default)\n",
            prog);
}

/* The value of option argv[i] as an unsigned in [min, max], or -1 (with a
 * message) when it is missing or not such a number. */
static long number_arg(int argc, char **argv, int i, long min, long max)
{
    if (i + 1 >= argc) {
        fprintf(stderr, "%s: %s needs a value\n", argv[0], argv[i]);
        return -1;
    }
    const char *s = argv[i + 1];
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max) {
        fprintf(stderr, "%s: %s wants a number in %ld..%ld, got '%s'\n", argv[0], argv[i], min, max, s);
        return -1;
    }
    return v;
}

/* memcached's -I: bytes, or a number with k or m. */
static long size_arg(int argc, char **argv, int i)
{
    if (i + 1 >= argc) {
        fprintf(stderr, "%s: %s needs a value\n", argv[0], argv[i]);
        return -1;
    }
    const char *s = argv[i + 1];
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (*end == 'k' || *end == 'K') v *= 1024, end++;
    else if (*end == 'm' || *end == 'M') v *= 1024 * 1024, end++;
    if (errno || end == s || *end || v < 1024 || v > (128l << 20)) {
        fprintf(stderr, "%s: %s wants a size in 1k..128m, got '%s'\n", argv[0], argv[i], s);
        return -1;
    }
    return v;
}

int main(int argc, char **argv)
{
    dsm_mc_config_t cfg = {.workers = 2, .progress = DSM_PROGRESS_ADAPTIVE};
    /* Large values come from mmap and go back to the system when evicted or
     * deleted, rather than staying in a worker's arena: the memory limit is
     * then one the system sees. */
    mallopt(M_MMAP_THRESHOLD, 128 * 1024);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        long v = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout, argv[0]);
            return 0;
        } else if (!strcmp(a, "--host")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "%s: --host needs a value\n", argv[0]);
                return 2;
            }
            cfg.host = argv[++i];
        } else if (!strcmp(a, "--port")) {
            if ((v = number_arg(argc, argv, i++, 0, 65535)) < 0) return 2;
            cfg.port = (uint16_t)v;
        } else if (!strcmp(a, "--workers")) {
            if ((v = number_arg(argc, argv, i++, 1, 1024)) < 0) return 2;
            cfg.workers = (unsigned)v;
        } else if (!strcmp(a, "--trustees")) {
            if ((v = number_arg(argc, argv, i++, 0, 1024)) < 0) return 2;
            cfg.trustees = (unsigned)v;
        } else if (!strcmp(a, "--shards")) {
            if ((v = number_arg(argc, argv, i++, 1, 1 << 20)) < 0) return 2;
            cfg.shards = (unsigned)v;
        } else if (!strcmp(a, "--memory") || !strcmp(a, "-m")) {
            if ((v = number_arg(argc, argv, i++, 1, 1 << 20)) < 0) return 2;
            cfg.memory = (size_t)v << 20;
        } else if (!strcmp(a, "--max-conns") || !strcmp(a, "-c")) {
            if ((v = number_arg(argc, argv, i++, 1, 1 << 20)) < 0) return 2;
            cfg.max_conns = (unsigned)v;
        } else if (!strcmp(a, "-I") || !strcmp(a, "--item-max")) {
            if ((v = size_arg(argc, argv, i++)) < 0) return 2;
            cfg.item_max = (size_t)v;
        } else if (!strcmp(a, "--progress")) {
            dsm_progress_mode_t m;
            if (i + 1 >= argc || dsm_progress_parse(argv[i + 1], &m) != DSM_OK || m == DSM_PROGRESS_BUSY ||
                m == DSM_PROGRESS_AUTO) {
                fprintf(stderr, "%s: --progress wants blocking, hybrid or adaptive, got '%s'\n", argv[0],
                        i + 1 < argc ? argv[i + 1] : "");
                return 2;
            }
            cfg.progress = m;
            i++;
        } else {
            fprintf(stderr, "%s: unknown argument '%s'\n", argv[0], a);
            usage(stderr, argv[0]);
            return 2;
        }
    }
    dsm_status_t st = dsm_mc_serve(&cfg);
    if (st != DSM_OK) {
        fprintf(stderr, "%s: %s\n", argv[0], dsm_strerror(st));
        return 1;
    }
    return 0;
}
