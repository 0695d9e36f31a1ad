/* The floor an active-message round trip pays (on shm, or over tcp) with
 * UCX configured as the fabric must configure it, and none of our code: a
 * raw UCX ping-pong with a multi-threaded worker (the fabric shares its
 * worker with a progress thread), the wake-up feature (blocking progress),
 * a 16-byte header (ours: handler, kind, source rank, request id, status)
 * and the reply sent from the receive callback. ucx_perftest's am_lat runs
 * a single-threaded worker without wake-up, an 8-byte header and replies
 * from its main loop; beside both, am_8B_latency/shm's gap splits into what
 * UCX costs configured our way and what our code adds. ucx_perftest's
 * receivers never read the payload; in the delivering variant each side
 * copies out the bytes it received, and the target echoes them, as any
 * echo that delivers its data must: that floor is what a 4 KiB round trip
 * costs with the data moved. The rate floor streams messages the target
 * only counts, each group closed by one it answers, as am_8B_rate's posts
 * and echo are. The target answers only a message whose header starts with
 * 1. The two processes meet over a socketpair and are pinned like the
 * others. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ucp/api/ucp.h>

#include "bench/busy.h"
#include "bench/fabric/pair.h"
#include "bench/fabric/ucx_floor.h"
#include "bench/report.h"
#include "util/clock.h"

enum { FLOOR_AM_ID = 7, FLOOR_HEADER = 16 };
#define FLOOR_TARGET_FLAG "--ucx-floor-target"

typedef struct floor_side {
    ucp_context_h ctx;
    ucp_worker_h worker;
    ucp_ep_h ep;
    uint8_t header[FLOOR_HEADER];   /* byte 0: 0, not answered */
    uint8_t ask[FLOOR_HEADER];      /* byte 0: 1, answered */
    uint8_t payload[4096];   /* up to am_4096B_latency's size */
    size_t len;
    int replies;            /* the target answers from its callback */
    int delivers;           /* the callback copies out what arrived (the target's reply is that copy) */
    volatile long received;
    dsm_bench_post_clock_t *posts;   /* the sender's, for the rate (may be NULL) */
} floor_side_t;

/* The header and payload live as long as the side, so a send UCX could not
 * finish at once (copy-in beyond the short protocol's 92 bytes, a full FIFO)
 * is left to complete on its own. */
static int floor_send(floor_side_t *s, const uint8_t *header)
{
    ucp_request_param_t p = {.op_attr_mask = 0};
    ucs_status_ptr_t sp = ucp_am_send_nbx(s->ep, FLOOR_AM_ID, header, FLOOR_HEADER, s->payload, s->len, &p);
    if (UCS_PTR_IS_ERR(sp))
        return -1;
    if (sp != NULL)
        ucp_request_free(sp);
    return 0;
}

static ucs_status_t floor_recv(void *arg, const void *header, size_t header_length, void *data, size_t length,
                               const ucp_am_recv_param_t *param)
{
    (void)param;
    floor_side_t *s = arg;
    if (s->delivers)
        memcpy(s->payload, data, length < sizeof s->payload ? length : sizeof s->payload);
    s->received++;
    if (s->replies && header_length > 0 && ((const uint8_t *)header)[0] == 1)
        (void)floor_send(s, s->header);
    return UCS_OK;
}

static int floor_open(floor_side_t *s, int fd, const char *tls, size_t len, int replies, int delivers)
{
    memset(s, 0, sizeof *s);
    s->ask[0] = 1;
    s->len = len;
    s->replies = replies;
    s->delivers = delivers;
    ucp_config_t *cfg;
    if (ucp_config_read(NULL, NULL, &cfg) != UCS_OK)
        return -1;
    ucp_config_modify(cfg, "TLS", tls);
    if (strcmp(tls, "tcp") == 0)
        ucp_config_modify(cfg, "NET_DEVICES", "lo");   /* as the bench's fabric */
    if (getenv("UCX_USE_MT_MUTEX") == NULL)
        ucp_config_modify(cfg, "USE_MT_MUTEX", "y");   /* as the fabric's worker lock */
    ucp_params_t pp = {
        .field_mask = UCP_PARAM_FIELD_FEATURES,
        .features = UCP_FEATURE_RMA | UCP_FEATURE_AMO64 | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP,
    };
    ucs_status_t st = ucp_init(&pp, cfg, &s->ctx);
    ucp_config_release(cfg);
    if (st != UCS_OK)
        return -1;
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_MULTI};
    ucp_address_t *addr;
    size_t addr_len;
    if (ucp_worker_create(s->ctx, &wp, &s->worker) != UCS_OK ||
        ucp_worker_get_address(s->worker, &addr, &addr_len) != UCS_OK)
        return -1;
    dsm_bench_send_blob(fd, addr, (uint32_t)addr_len);
    ucp_worker_release_address(s->worker, addr);
    uint32_t peer_len;
    void *peer = dsm_bench_recv_blob(fd, &peer_len);
    ucp_ep_params_t ep = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS, .address = peer};
    ucp_am_handler_param_t hp = {
        .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                      UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS,
        .id = FLOOR_AM_ID, .cb = floor_recv, .arg = s, .flags = UCP_AM_FLAG_WHOLE_MSG,
    };
    int rc = ucp_ep_create(s->worker, &ep, &s->ep) == UCS_OK &&
                 ucp_worker_set_am_recv_handler(s->worker, &hp) == UCS_OK ? 0 : -1;
    free(peer);
    return rc;
}

/* Called once the other side has stopped sending (see the stop handshake
 * in dsm_bench_ucx_floor_am_us). */
static void floor_close(floor_side_t *s)
{
    if (s->ep) {
        ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = UCP_EP_CLOSE_FLAG_FORCE};
        ucs_status_ptr_t sp = ucp_ep_close_nbx(s->ep, &p);
        if (UCS_PTR_IS_PTR(sp)) {
            while (ucp_request_check_status(sp) == UCS_INPROGRESS)
                ucp_worker_progress(s->worker);
            ucp_request_free(sp);
        }
    }
    if (s->worker)
        ucp_worker_destroy(s->worker);
    if (s->ctx)
        ucp_cleanup(s->ctx);
}

/* Sends a message the target answers and waits for the `sent`-th answer;
 * 0, or -1 when the send fails or no answer comes within 10 s (a
 * group takes milliseconds; over tcp a lost connection would wait for
 * ever, and the figure is then reported without its anchor). */
static int floor_ask(floor_side_t *s, long sent)
{
    if (floor_send(s, s->ask) != 0)
        return -1;
    uint64_t t0 = dsm_now_ns();
    for (unsigned spins = 0; s->received < sent; spins++) {
        ucp_worker_progress(s->worker);
        if ((spins & 1023) == 1023 && dsm_now_ns() - t0 > 10ull * 1000000000ull)
            return -1;
    }
    return 0;
}

/* The latency: µs per round trip, the median over groups. */
static double measure_rtt(floor_side_t *s, int group, int groups)
{
    double *v = malloc(sizeof(double) * (size_t)groups), result = -1;
    long sent = 0;
    int ok = v != NULL;
    for (int i = 0; ok && i < group * (groups / 10 + 1); i++)   /* warm-up, as ours */
        ok = floor_ask(s, ++sent) == 0;
    for (int g = 0; ok && g < groups; g++) {
        uint64_t t0 = dsm_now_ns();
        for (int i = 0; ok && i < group; i++)
            ok = floor_ask(s, ++sent) == 0;
        v[g] = (double)(dsm_now_ns() - t0) / 1e3 / group;
    }
    if (ok)
        result = dsm_report_median(v, (size_t)groups);
    free(v);
    return result;
}

/* The rate: messages per second over all groups, each group `group`
 * messages the target counts, then one it answers (not counted, as
 * am_8B_rate's echo is not). */
static double measure_rate(floor_side_t *s, int group, int groups)
{
    long asked = 0;
    uint64_t total_ns = 0;
    for (int g = -(groups / 10 + 1); g < groups; g++) {   /* warm-up groups first */
        uint64_t t0 = dsm_now_ns(), cpu0 = dsm_thread_cpu_ns();
        for (int i = 0; i < group; i++)
            if (floor_send(s, s->header) != 0)
                return -1;
        if (g >= 0 && s->posts)
            dsm_bench_post_clock_add(s->posts, t0, cpu0, (uint64_t)group);
        if (floor_ask(s, ++asked) != 0)
            return -1;
        if (g >= 0)
            total_ns += dsm_now_ns() - t0;
    }
    return total_ns ? (double)group * groups / ((double)total_ns / 1e9) : -1;
}

/* The target: answers from its callback until told to stop. */
static int target_serve(int fd, const char *tls, int cpu_target, size_t len, int delivers)
{
    dsm_bench_pin(cpu_target);
    floor_side_t t;
    int rc = 1;
    if (floor_open(&t, fd, tls, len, 1, delivers) == 0) {
        char c = 1;
        if (write(fd, &c, 1) == 1) {
            int stop = 0;
            while (!stop) {
                for (int i = 0; i < 4096; i++)
                    ucp_worker_progress(t.worker);
                stop = recv(fd, &c, 1, MSG_DONTWAIT) == 1;
            }
            rc = write(fd, &c, 1) == 1 ? 0 : 1;
        }
    }
    floor_close(&t);
    return rc;
}

int dsm_bench_ucx_floor_target_main(int argc, char **argv)
{
    if (argc != 7 || strcmp(argv[1], FLOOR_TARGET_FLAG) != 0)
        return -1;
    return target_serve(atoi(argv[2]), argv[3], atoi(argv[4]), strtoul(argv[5], NULL, 10), atoi(argv[6]));
}

/* A target started and pinned to cpu_target, answering from its callback,
 * and `measure` run against it from the calling process. The target is
 * this program run anew, not a fork of this process: a child forked after
 * UCX started lacks UCX's async thread, and over tcp its connections are
 * then refused. */
static double floor_run(const char *tls, int cpu_target, size_t len, int group, int groups, int delivers,
                        double (*measure)(floor_side_t *, int, int), dsm_bench_post_clock_t *posts)
{
    if (len > sizeof ((floor_side_t *)0)->payload || group < 1 || groups < 1)
        return -1;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
        return -1;
    char fd[16], cpu[16], size[32], deliver[4];
    snprintf(fd, sizeof fd, "%d", sv[1]);
    snprintf(cpu, sizeof cpu, "%d", cpu_target);
    snprintf(size, sizeof size, "%zu", len);
    snprintf(deliver, sizeof deliver, "%d", delivers ? 1 : 0);
    pid_t child = fork();
    if (child < 0)
        return -1;
    if (child == 0) {
        close(sv[0]);
        execl("/proc/self/exe", "dsm-bench-floor-target", FLOOR_TARGET_FLAG, fd, tls, cpu, size, deliver,
              (char *)NULL);
        _exit(127);
    }
    close(sv[1]);
    floor_side_t s;
    double result = -1;
    char c;
    if (floor_open(&s, sv[0], tls, len, 0, delivers) == 0 && read(sv[0], &c, 1) == 1) {
        s.posts = posts;
        result = measure(&s, group, groups);
        /* tell the target to stop, and let it drain before closing */
        if (write(sv[0], &c, 1) == 1) {
            while (recv(sv[0], &c, 1, MSG_DONTWAIT) != 1)
                ucp_worker_progress(s.worker);
        }
    }
    floor_close(&s);
    close(sv[0]);
    waitpid(child, NULL, 0);
    return result;
}

double dsm_bench_ucx_floor_am_us(const char *tls, int cpu_target, size_t len, int group, int groups, int delivers)
{
    return floor_run(tls, cpu_target, len, group, groups, delivers, measure_rtt, NULL);
}

double dsm_bench_ucx_floor_am_rate(const char *tls, int cpu_target, size_t len, int group, int groups,
                                   dsm_bench_post_clock_t *posts)
{
    return floor_run(tls, cpu_target, len, group, groups, 0, measure_rate, posts);
}
