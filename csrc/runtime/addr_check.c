/* The address checker (see addr_check.h): the coordinator's client of a
 * child process that tries each joiner's worker address with UCX, and the
 * child's serving loop. */
#include "runtime/addr_check.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dsm/log.h"
#include "dsm/runtime.h"
#include "util/bytes.h"
#include "util/clock.h"
#include "util/log.h"
#include "runtime/sock.h"

extern char **environ;

#define LOG "coord"

size_t dsm_addr_check_reply_encode(dsm_status_t status, const char *reason, uint8_t *out, size_t cap)
{
    size_t n = reason ? strnlen(reason, DSM_ADDR_CHECK_MAX_REASON) : 0;
    if (cap < 3 + n || status > 0 || status < INT8_MIN)
        return 0;
    out[0] = (uint8_t)(int8_t)status;
    dsm_put_u16(out + 1, (uint16_t)n);
    memcpy(out + 3, reason ? reason : "", n);
    return 3 + n;
}

int dsm_addr_check_reply_decode(const uint8_t *buf, size_t len, dsm_status_t *status, char *reason, size_t cap)
{
    dsm_reader_t r = dsm_reader(buf, len);
    const uint8_t *st = dsm_take(&r, 1);
    uint16_t n = dsm_take_u16(&r);
    const uint8_t *text = n <= DSM_ADDR_CHECK_MAX_REASON ? dsm_take(&r, n) : NULL;
    if (!r.ok || text == NULL || r.left != 0 || (int8_t)st[0] > 0 || cap == 0)
        return 0;
    *status = (dsm_status_t)(int8_t)st[0];
    size_t keep = n < cap - 1 ? n : cap - 1;
    for (size_t i = 0; i < keep; i++)   /* a reason is shown to people: printable only */
        reason[i] = text[i] >= 0x20 && text[i] < 0x7f ? (char)text[i] : '?';
    reason[keep] = '\0';
    return 1;
}

/* ------------------------------------------------------------ the client */

static char *find_program(const char *program)
{
    if (program && *program)
        return strdup(program);
    const char *env = getenv("DSM_ADDRESS_CHECKER");
    if (env && *env)
        return strdup(env);
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return NULL;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash == NULL || (size_t)(slash - exe) + sizeof "/dsmd" > sizeof exe)
        return NULL;
    strcpy(slash, "/dsmd");
    return access(exe, X_OK) == 0 ? strdup(exe) : NULL;
}

/* The environment without DSM_CHAOS: the checker's own fabric must not
 * inject faults (a chaos kill would read as a poisonous address). */
static char **child_environment(void)
{
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + 1, sizeof *env);
    if (env == NULL)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "DSM_CHAOS=", 10) != 0)
            env[k++] = environ[i];
    return env;
}

static void stop_child(dsm_addr_checker_t *ck, int *wait_status)
{
    if (ck->fd >= 0)
        close(ck->fd);
    ck->fd = -1;
    if (ck->pid > 0) {
        kill(ck->pid, SIGKILL);   /* a no-op on one that already died */
        int ws = 0;
        while (waitpid(ck->pid, &ws, 0) < 0 && errno == EINTR) {}
        if (wait_status)
            *wait_status = ws;
    }
    ck->pid = 0;
}

static dsm_status_t start_child(dsm_addr_checker_t *ck)
{
    if (ck->program == NULL)
        return DSM_ERR_UNSUPPORTED;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        snprintf(ck->unavailable, sizeof ck->unavailable, "socketpair: %s", strerror(errno));
        return DSM_ERR_IO;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, sv[1], DSM_ADDR_CHECK_FD);   /* dup2 clears close-on-exec */
    /* the verdict carries the reason; UCX's own lines (its warnings about
     * the environment, an assertion) would otherwise reach the host's stderr
     * bypassing its log */
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    char *argv[] = {ck->program, "--check-addresses", (char *)dsm_transport_name(ck->transport), NULL};
    char **env = child_environment();
    pid_t pid = 0;
    int err = env ? posix_spawn(&pid, ck->program, &fa, NULL, argv, env) : ENOMEM;
    free(env);
    posix_spawn_file_actions_destroy(&fa);
    close(sv[1]);
    if (err != 0) {
        close(sv[0]);
        snprintf(ck->unavailable, sizeof ck->unavailable, "cannot start %s: %s", ck->program, strerror(err));
        return DSM_ERR_IO;
    }
    ck->pid = pid;
    ck->fd = sv[0];
    return DSM_OK;
}

void dsm_addr_checker_init(dsm_addr_checker_t *ck, const char *program, dsm_transport_t transport)
{
    memset(ck, 0, sizeof *ck);
    ck->fd = -1;
    ck->transport = transport;
    ck->program = find_program(program);
    if (ck->program == NULL)
        snprintf(ck->unavailable, sizeof ck->unavailable,
                 "no address checker: no dsmd beside this program and DSM_ADDRESS_CHECKER is not set");
    else if (start_child(ck) != DSM_OK)
        DSM_WARN(LOG, "address checker: %s", ck->unavailable);
}

void dsm_addr_checker_close(dsm_addr_checker_t *ck)
{
    stop_child(ck, NULL);
    free(ck->program);
    ck->program = NULL;
}

/* dsm_sock_recv_all with what is left of the check's deadline: 1 if the
 * bytes came; else 0, with *timed_out set when the deadline passed. */
static int recv_by(int fd, uint8_t *buf, size_t len, uint64_t deadline_ns, int *timed_out)
{
    uint64_t now = dsm_now_ns();
    dsm_status_t st = now >= deadline_ns
                          ? DSM_ERR_TIMEOUT
                          : dsm_sock_recv_all(fd, buf, len, (uint32_t)((deadline_ns - now) / 1000000 + 1));
    *timed_out = st == DSM_ERR_TIMEOUT;
    return st == DSM_OK;
}

dsm_status_t dsm_addr_checker_check(dsm_addr_checker_t *ck, const void *addr, size_t len, uint32_t timeout_ms,
                                    char *why, size_t why_cap)
{
    if (len == 0 || len > DSM_ADDR_CHECK_MAX_ADDR) {
        snprintf(why, why_cap, "its worker address of %zu bytes is out of range", len);
        return DSM_ERR_PROTO;
    }
    if (ck->pid == 0 && start_child(ck) != DSM_OK) {
        snprintf(why, why_cap, "the coordinator cannot check worker addresses (%s)", ck->unavailable);
        return DSM_ERR_UNSUPPORTED;
    }
    uint8_t head[4];
    dsm_put_u32(head, (uint32_t)len);
    uint64_t deadline = dsm_now_ns() + (uint64_t)timeout_ms * 1000000u;
    int timed_out = 0;
    uint8_t reply[DSM_ADDR_CHECK_REPLY_MAX];
    int answered = send(ck->fd, head, sizeof head, MSG_NOSIGNAL) == (ssize_t)sizeof head &&
                   send(ck->fd, addr, len, MSG_NOSIGNAL) == (ssize_t)len &&
                   recv_by(ck->fd, reply, 3, deadline, &timed_out) &&
                   recv_by(ck->fd, reply + 3, dsm_get_u16(reply + 1) <= DSM_ADDR_CHECK_MAX_REASON
                                                     ? dsm_get_u16(reply + 1) : 0, deadline, &timed_out);
    dsm_status_t verdict;
    char reason[DSM_ADDR_CHECK_MAX_REASON + 1];
    if (answered && dsm_addr_check_reply_decode(reply, 3 + dsm_get_u16(reply + 1), &verdict, reason, sizeof reason)) {
        if (verdict == DSM_OK)
            return DSM_OK;
        if (verdict == DSM_ERR_FABRIC && ck->transport == DSM_TRANSPORT_AUTO)
            return DSM_OK;   /* the checker's transports may not be the joiner's: unreachable is no proof */
        snprintf(why, why_cap, "its worker address is not usable: %s", reason);
        return verdict;
    }
    int ws = 0;
    stop_child(ck, &ws);   /* the next check starts a new one */
    if (timed_out)
        snprintf(why, why_cap, "its worker address got no verdict from the address checker within %u ms", timeout_ms);
    else if (WIFSIGNALED(ws))
        snprintf(why, why_cap, "its worker address made UCX abort (the address checker died of signal %d)",
                 WTERMSIG(ws));
    else
        snprintf(why, why_cap, "its worker address made the address checker exit (status %d)",
                 WIFEXITED(ws) ? WEXITSTATUS(ws) : -1);
    return DSM_ERR_PROTO;
}

/* ------------------------------------------------------------- the child */

int dsm_addr_checker_serve(int fd, dsm_transport_t transport)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);   /* never outlive the coordinator's process */
    if (getppid() == 1)
        return 1;
    dsm_fabric_config_t cfg = {.transport = transport, .progress = DSM_PROGRESS_BLOCKING};
    dsm_fabric_t *fabric = NULL;
    dsm_status_t st = dsm_fabric_create(&cfg, &fabric);
    static uint8_t addr[DSM_ADDR_CHECK_MAX_ADDR];
    for (;;) {
        uint8_t head[4];
        if (dsm_sock_recv_all(fd, head, sizeof head, DSM_SOCK_FOREVER) != DSM_OK)
            break;
        uint32_t len = dsm_get_u32(head);
        if (len == 0 || len > sizeof addr || dsm_sock_recv_all(fd, addr, len, DSM_SOCK_FOREVER) != DSM_OK)
            break;
        dsm_status_t verdict = st;
        const char *reason = "the checker has no fabric";
        if (st == DSM_OK) {
            dsm_clear_last_error();
            verdict = dsm_fabric_probe_address(fabric, addr, len);
            reason = dsm_last_error();
        }
        uint8_t reply[DSM_ADDR_CHECK_REPLY_MAX];
        size_t n = dsm_addr_check_reply_encode(verdict, verdict == DSM_OK ? "" : reason, reply, sizeof reply);
        if (n == 0 || send(fd, reply, n, MSG_NOSIGNAL) != (ssize_t)n)
            break;
    }
    dsm_fabric_destroy(fabric);
    return 0;
}

int dsm_addr_checker_main(dsm_transport_t transport)
{
    /* hold nothing of the parent's but the socket (spawned without exec's
     * close-on-exec everywhere, e.g. from a Python driver) */
    for (int fd = DSM_ADDR_CHECK_FD + 1; fd < 1024; fd++)
        close(fd);
    return dsm_addr_checker_serve(DSM_ADDR_CHECK_FD, transport);
}
