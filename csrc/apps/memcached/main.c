/* dsm-memcached: the delegation memcached server as a program (what
 * `pydsm serve memcached` runs). Parses the command line, then serves until
 * SIGINT or SIGTERM, printing "listening on HOST:PORT" once ready.
 * Usage: dsm-memcached [--host H] [--port P] [--workers W] [--trustees N]
 *                      [--shards S] */
#include <errno.h>
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
            "  --shards S    hash table shards (default 64)\n",
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

int main(int argc, char **argv)
{
    dsm_mc_config_t cfg = {.workers = 2};
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
