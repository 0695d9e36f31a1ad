/* Workload "socialnet": DRust's SocialNet in miniature, a pipeline of three
 * services passing references to posts through channels that carry global
 * pointers (own's channels): compose (makes each post: a user id, a tag
 * and `text` bytes), text (rewrites the text in place and tags the post
 * with its hash: a mutable borrow) and timeline (reads the post into the
 * timeline's checksum, then frees it). Service s runs on the node of
 * rank_index ((s + 1) % 3) % nodes (the timeline on rank_index 0), in
 * service order on a node with several, and the channel into service s
 * lives on its node. A node with several services runs them one post at
 * a time, in service order.
 *  - own: a post is a box and travels by ownership transfer (chan_post,
 *    one message as DRust's channel, and chan_recv): the text service's
 *    write moves it there, the timeline's read caches it, its drop frees
 *    it where it is.
 *  - dir: a post is a directory object homed at compose; its handle
 *    travels as a plain word; the text service's write takes it exclusive
 *    (invalidating), the timeline's read recalls it.
 *  - local: the original, as the paper's is: the services pass each post
 *    by value, as DeathStarBench's RPCs do (DRust's port changed those
 *    call sites to pass references): a hop serialises the post into a byte
 *    stream to the next service (a socket pair: the services are one
 *    process here) and the next service reads it into a post of its own;
 *    the sender frees its copy. The serialisation is the post's bytes as
 *    they are, no encoding: the cheapest form the original could take.
 *    values=0 instead passes pointers through in-process FIFOs (malloc,
 *    pointer, free: DRust's port on plain memory, the stricter anchor);
 *    fused=1 runs the three services as one loop over one buffer.
 *  - own with boxes=0 (one node only): the pointer original's posts
 *    (malloc, pointers, free) through own's channels as plain words: what
 *    the channels alone cost, the ceiling of own's one-node figure against
 *    that original.
 * Params: posts (200), text (256 bytes), values (1; 0 only for local),
 * fused (0; local only), boxes (1; 0 only for own on one node), timing
 * (0; 1 for own and dir reports each phase's ns: t_NAME_ns); the
 * common ones (protocol, seed, checks, directory: 24 zeroed bytes).
 * Results: ops (service steps this node ran), posts, ops_per_sec, seconds,
 * checksum (rank_index 0 and local), round_trips_waited and
 * round_trip_wait_ns (own and dir: the round trips this node's services
 * waited on in the measured phase, and the time the fabric's took) and
 * the counters. */
#include <errno.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "apps/refuse.h"
#include "apps/run_util.h"
#include "apps/workloads.h"
#include "dsm/clock.h"

enum { SN_TYPE = 0x534e, SN_HEADER = 16, SN_WAIT_MS = 120000 };   /* "SN" */

typedef struct sn {
    const dsm_apps_run_t *r;
    uint64_t posts, text;
    uint64_t chan[2];   /* into text (service 1) and timeline (service 2) */
    uint64_t steps, sum;
    int own;            /* protocol own: posts travel as boxes */
    int bare;           /* own with boxes=0: posts are process memory, their pointers words */
    int timing;         /* timing=1: where each step's time goes, in tns */
    uint64_t tns[7];    /* ns in each of sn_phase_names' phases */
} sn_t;

/* The phases of a step that timing=1 reports (as t_NAME_ns results). */
enum { SN_T_ALLOC, SN_T_ACQUIRE, SN_T_WORK, SN_T_RELEASE, SN_T_SEND, SN_T_RECV, SN_T_DROP, SN_T_COUNT };
static const char *const sn_phase_names[SN_T_COUNT] = {"alloc", "acquire", "work", "release", "send", "recv", "drop"};

/* The clock when timing, else 0 (the phases then add nothing). */
static uint64_t tick(const sn_t *s) { return s->timing ? dsm_now_ns() : 0; }
/* Add the time since *t to phase `which`, and restart *t. */
static void lap(sn_t *s, int which, uint64_t *t)
{
    uint64_t now = tick(s);
    s->tns[which] += now - *t;
    *t = now;
}

/* Whether posts travel as boxes (own, but not with boxes=0). */
static int boxed(const sn_t *s) { return s->own && !s->bare; }
/* Where service s runs: the timeline (s = 2) on rank_index 0, which reports the checksum. */
static uint64_t service_node(int s, uint64_t nodes) { return (uint64_t)((s + 1) % 3) % nodes; }

/* The services' work on a post's bytes. The parameters are copied into
 * locals first: a byte store through `post` may alias `*s` as far as the
 * compiler knows, so reading them through `s` inside the loop reloads them
 * per byte, except where `post` is known fresh (the original's malloc),
 * which made the original's loops cheaper than the same loops in own. Not
 * inlined, so every protocol runs the very same code: inlined into own's
 * step and the original's loop, the two copies were compiled differently,
 * and own's ran 9% slower at 4096-byte posts with no own call inside. */
static __attribute__((noinline)) void compose(const sn_t *s, uint64_t p, uint8_t *post)
{
    const uint64_t seed = s->r->seed, text = s->text;
    uint64_t user = dsm_hash64(seed ^ p) % 1000, tag = 0;
    memcpy(post, &user, 8);
    memcpy(post + 8, &tag, 8);
    for (uint64_t i = 0; i < text; i++)
        post[SN_HEADER + i] = (uint8_t)(dsm_hash64(seed + p * 131 + i) % 95 + 32);
}
static __attribute__((noinline)) void rewrite(const sn_t *s, uint8_t *post)
{
    const uint64_t text = s->text;
    uint64_t h = 14695981039346656037ull;
    for (uint64_t i = 0; i < text; i++) {
        uint8_t c = post[SN_HEADER + i];
        post[SN_HEADER + i] = (c >= 'a' && c <= 'z') ? (uint8_t)(c - 32) : c;
        h = (h ^ post[SN_HEADER + i]) * 1099511628211ull;
    }
    memcpy(post + 8, &h, 8);
}
static __attribute__((noinline)) uint64_t fold(const uint8_t *post)
{
    uint64_t user, tag;
    memcpy(&user, post, 8);
    memcpy(&tag, post + 8, 8);
    return dsm_hash64(tag + user);
}

/* Posted (DRust's channel is a one-way queue): services() flushes at the
 * end, so a post the receiving home refused fails the run. */
static dsm_status_t post_send(sn_t *s, int c, uint64_t h)
{
    return boxed(s) ? dsm_own_chan_post(s->r->node, s->chan[c], &h) : dsm_own_chan_post_word(s->r->node, s->chan[c], h);
}
static dsm_status_t post_recv(sn_t *s, int c, uint64_t *h)
{
    return boxed(s) ? dsm_own_chan_recv(s->r->node, s->chan[c], SN_WAIT_MS, h)
                    : dsm_own_chan_recv_word(s->r->node, s->chan[c], SN_WAIT_MS, h);
}

/* Service `which`'s step on post p with boxes=0: the original's post
 * (malloc, a pointer, free) through own's channels as a plain word. The
 * words are trusted as pointers: the run is on one node, and its channels
 * carry only what its own steps put there (a cluster member that pushed a
 * word into them would be one holding the cluster's secret). */
static dsm_status_t step_bare(sn_t *s, int which, uint64_t p)
{
    uint64_t h = 0;
    dsm_status_t st;
    if (which == 0) {
        uint8_t *post = malloc(SN_HEADER + s->text);
        if (post == NULL)
            return DSM_ERR_NOMEM;
        compose(s, p, post);
        if ((st = post_send(s, 0, (uint64_t)(uintptr_t)post)) != DSM_OK) {
            free(post);
            return st;
        }
    } else if (which == 1) {
        if ((st = post_recv(s, 0, &h)) != DSM_OK)
            return st;
        rewrite(s, (uint8_t *)(uintptr_t)h);
        if ((st = post_send(s, 1, h)) != DSM_OK) {
            free((void *)(uintptr_t)h);
            return st;
        }
    } else {
        if ((st = post_recv(s, 1, &h)) != DSM_OK)
            return st;
        s->sum += fold((const uint8_t *)(uintptr_t)h);
        free((void *)(uintptr_t)h);
    }
    s->steps++;
    return DSM_OK;
}

/* Service `which`'s step on post p. */
static dsm_status_t step(sn_t *s, int which, uint64_t p)
{
    const dsm_apps_run_t *r = s->r;
    uint64_t h = 0, t = tick(s);
    dsm_status_t st;
    if (s->bare)
        return step_bare(s, which, p);
    if (which == 0) {
        dsm_coh_mut_t m;
        if ((st = r->ops->alloc(r->node, SN_TYPE, SN_HEADER + s->text, &h)) != DSM_OK)
            return st;
        lap(s, SN_T_ALLOC, &t);
        if ((st = r->ops->borrow_mut(r->node, h, &m)) != DSM_OK)
            return st;
        lap(s, SN_T_ACQUIRE, &t);
        compose(s, p, m.data);
        lap(s, SN_T_WORK, &t);
        if ((st = r->ops->release_mut(r->node, &m)) != DSM_OK)
            return st;
        lap(s, SN_T_RELEASE, &t);
        if ((st = post_send(s, 0, h)) != DSM_OK)
            return st;
        lap(s, SN_T_SEND, &t);
    } else if (which == 1) {
        dsm_coh_mut_t m;
        if ((st = post_recv(s, 0, &h)) != DSM_OK)
            return st;
        lap(s, SN_T_RECV, &t);
        if ((st = r->ops->borrow_mut(r->node, h, &m)) != DSM_OK)
            return st;
        lap(s, SN_T_ACQUIRE, &t);
        rewrite(s, m.data);
        lap(s, SN_T_WORK, &t);
        if ((st = r->ops->release_mut(r->node, &m)) != DSM_OK)
            return st;
        lap(s, SN_T_RELEASE, &t);
        if ((st = post_send(s, 1, h)) != DSM_OK)
            return st;
        lap(s, SN_T_SEND, &t);
    } else {
        dsm_coh_ref_t ref;
        if ((st = post_recv(s, 1, &h)) != DSM_OK)
            return st;
        lap(s, SN_T_RECV, &t);
        if ((st = r->ops->borrow(r->node, h, &ref)) != DSM_OK)
            return st;
        lap(s, SN_T_ACQUIRE, &t);
        s->sum += fold(ref.data);
        lap(s, SN_T_WORK, &t);
        if ((st = r->ops->release(r->node, &ref)) != DSM_OK)
            return st;
        lap(s, SN_T_RELEASE, &t);
        if ((st = r->ops->drop(r->node, h)) != DSM_OK)
            return st;
        lap(s, SN_T_DROP, &t);
    }
    s->steps++;
    return DSM_OK;
}

/* The services this node runs, one post at a time through all of them in
 * service order (as the original does): a post made and dropped on one
 * node leaves its slot for the next. */
static dsm_status_t services(sn_t *s)
{
    const dsm_stop_t *stop = dsm_spawn_stop();
    for (uint64_t p = 0; p < s->posts; p++) {
        if (dsm_stop_requested(stop))
            return DSM_ERR_CANCELLED;
        for (int which = 0; which < 3; which++)
            if (service_node(which, s->r->nodes) == s->r->index) {
                dsm_status_t st = step(s, which, p);
                if (st != DSM_OK)
                    return st;
            }
    }
    /* Every post this node's services sent on is queued at its receiver; a
     * refused one comes back (dropped here) and the run fails with it. */
    for (int which = 0; which < 2; which++) {
        if (service_node(which, s->r->nodes) != s->r->index)
            continue;
        dsm_own_box_t box;
        uint64_t word;
        dsm_status_t st = dsm_own_chan_flush(s->r->node, s->chan[which], &box, &word);
        if (st != DSM_OK) {
            if ((box || word) && !s->bare)
                (void)s->r->ops->drop(s->r->node, box ? box : word);
            return st;
        }
    }
    return DSM_OK;
}

/* The original, as a single-process C program writes it, the services in
 * turn on one thread. By value (the paper's): each hop serialises the post
 * into the next service's stream, which reads it into a post of its own.
 * By pointer (values=0): compose mallocs each post and passes its pointer
 * through a FIFO to text, which rewrites it in place and passes it on to
 * timeline, which folds and frees it (the queues need no lock). With
 * `fused` the three services are one loop over one buffer: no pipeline, no
 * allocation (the floor, reported beside it). */
enum { SN_QUEUE = 4 };
typedef struct sn_queue {
    uint8_t *post[SN_QUEUE];
    unsigned head, n;
} sn_queue_t;

static void queue_push(sn_queue_t *q, uint8_t *post)
{
    q->post[(q->head + q->n++) % SN_QUEUE] = post;
}
static uint8_t *queue_pop(sn_queue_t *q)
{
    uint8_t *post = q->post[q->head];
    q->head = (q->head + 1) % SN_QUEUE;
    q->n--;
    return post;
}

/* One hop of the paper's original: the post serialised into the stream to
 * the next service (end 0 of the pair), read back out of it (end 1) into a
 * post the next service owns; the sender's copy is freed. The services
 * run in turn on one thread, so the stream carries a chunk at a time, each
 * read before the next is written: a chunk fits any socket's buffer, so a
 * write never waits for the read that only this thread could do. */
enum { SN_HOP_CHUNK = 32 << 10 };
static dsm_status_t hop_by_value(const int fd[2], uint8_t **post, size_t len)
{
    uint8_t *next = malloc(len);
    if (next == NULL)
        return DSM_ERR_NOMEM;
    for (size_t at = 0; at < len;) {
        size_t chunk = len - at < SN_HOP_CHUNK ? len - at : SN_HOP_CHUNK, done;
        for (done = 0; done < chunk;) {
            ssize_t n = write(fd[0], *post + at + done, chunk - done);
            if (n < 0 && errno != EINTR)
                goto fail;
            done += n > 0 ? (size_t)n : 0;
        }
        for (done = 0; done < chunk;) {
            ssize_t n = read(fd[1], next + at + done, chunk - done);
            if (n == 0 || (n < 0 && errno != EINTR))
                goto fail;
            done += n > 0 ? (size_t)n : 0;
        }
        at += chunk;
    }
    free(*post);
    *post = next;
    return DSM_OK;
fail:
    free(next);
    return DSM_ERR_IO;
}

static dsm_status_t original(sn_t *s, int fused, int values)
{
    const dsm_stop_t *stop = dsm_spawn_stop();
    const size_t len = SN_HEADER + s->text;
    uint8_t *buf = fused ? malloc(len) : NULL;
    sn_queue_t q[2] = {{{0}, 0, 0}, {{0}, 0, 0}};
    int fd[2][2] = {{-1, -1}, {-1, -1}};   /* into text (service 1) and timeline (service 2) */
    dsm_status_t st = DSM_OK;
    if (fused && buf == NULL)
        return DSM_ERR_NOMEM;
    if (!fused && values)
        for (int c = 0; c < 2 && st == DSM_OK; c++)
            if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fd[c]) != 0)
                st = DSM_ERR_IO;
    for (uint64_t p = 0; p < s->posts && st == DSM_OK; p++) {
        if (dsm_stop_requested(stop)) {
            st = DSM_ERR_CANCELLED;
            break;
        }
        if (fused) {
            compose(s, p, buf);
            rewrite(s, buf);
            s->sum += fold(buf);
        } else if (values) {
            uint8_t *post = malloc(len);
            if (post == NULL) {
                st = DSM_ERR_NOMEM;
                break;
            }
            compose(s, p, post);
            if ((st = hop_by_value(fd[0], &post, len)) == DSM_OK) {
                rewrite(s, post);
                if ((st = hop_by_value(fd[1], &post, len)) == DSM_OK)
                    s->sum += fold(post);
            }
            free(post);
        } else {
            uint8_t *post = malloc(len);
            if (post == NULL) {
                st = DSM_ERR_NOMEM;
                break;
            }
            compose(s, p, post);
            queue_push(&q[0], post);
            post = queue_pop(&q[0]);
            rewrite(s, post);
            queue_push(&q[1], post);
            post = queue_pop(&q[1]);
            s->sum += fold(post);
            free(post);
        }
        s->steps += 3;
    }
    for (int c = 0; c < 2; c++)
        for (int e = 0; e < 2; e++)
            if (fd[c][e] >= 0)
                close(fd[c][e]);
    free(buf);
    return st;
}

static const dsm_param_info_t sn_params[] = {
    DSM_APPS_RUN_PARAMS("24 zeroed shared bytes"
                       " for own and dir (0: pydsm's run makes one)"),
    {"posts", "u64", "200", "posts through the pipeline"},
    {"text", "u64", "256", "bytes of text per post"},
    {"values", "u64", "1", "local only: 1 passes posts by value (serialised through a socket pair, as the paper's original's RPCs); 0 passes pointers through in-process queues"},
    {"fused", "u64", "0", "local only: 1 runs the services as one loop over one buffer (no pipeline)"},
    {"boxes", "u64", "1", "own on one node only: 0 passes plain pointers to process memory through own's channels"},
    {"timing", "u64", "0", "own and dir: 1 reports the ns each step spent in each phase (t_alloc_ns, t_acquire_ns, t_work_ns, t_release_ns, t_send_ns, t_recv_ns, t_drop_ns)"},
};
/* The directory: an arrival counter and the two channels' words. */
enum { SN_DIRECTORY_BYTES = 24 };

static uint64_t sn_scratch(const char *param, const void *args, size_t len, uint64_t nodes)
{
    (void)nodes;
    return dsm_apps_directory_scratch(param, args, len, SN_DIRECTORY_BYTES);
}

const dsm_workload_info_t dsm_socialnet_info = {
    "socialnet", "DRust's SocialNet (a pipeline of services passing references through channels)",
    dsm_workload_socialnet, sn_params, sizeof sn_params / sizeof sn_params[0], sn_scratch};

dsm_status_t dsm_workload_socialnet(dsm_node_t *node, const void *args, size_t len, void *ret, size_t cap,
                                    size_t *ret_len)
{
    const dsm_workload_info_t *w = &dsm_socialnet_info;
    dsm_status_t st = dsm_workload_begin(w, args, len, ret, cap, ret_len);
    dsm_apps_run_t r;
    if (st != DSM_OK || (st = dsm_apps_run_begin(&r, w, node, args, len, SN_DIRECTORY_BYTES, ret, cap, ret_len)) != DSM_OK)
        return st;
    int bad = 0;   /* dsm_workload_begin has checked the numbers */
    sn_t s = {.r = &r, .own = strcmp(r.proto, "own") == 0};
    s.posts = dsm_param_u64(args, len, "posts", 200, &bad);
    s.text = dsm_param_u64(args, len, "text", 256, &bad);
    uint64_t fused = dsm_param_u64(args, len, "fused", 0, &bad);
    uint64_t values = dsm_param_u64(args, len, "values", 1, &bad);
    uint64_t boxes = dsm_param_u64(args, len, "boxes", 1, &bad);
    uint64_t timing = dsm_param_u64(args, len, "timing", 0, &bad);
    if (s.posts == 0)
        return dsm_apps_refuse_param(w, args, len, "posts", ret, cap, ret_len, "at least 1");
    if (s.text == 0 || s.text > (1u << 20))
        return dsm_apps_refuse_param(w, args, len, "text", ret, cap, ret_len, "1..2^20 bytes");
    if (fused > 1 || (fused && !r.local))
        return dsm_apps_refuse_param(w, args, len, "fused", ret, cap, ret_len, "0 or 1 (1 only for protocol local)");
    if (values > 1 || (!values && !r.local))
        return dsm_apps_refuse_param(w, args, len, "values", ret, cap, ret_len, "1 or 0 (0 only for protocol local)");
    /* pointers to one process's memory mean nothing on another node */
    if (boxes > 1 || (boxes == 0 && (!s.own || r.nodes != 1)))
        return dsm_apps_refuse_param(w, args, len, "boxes", ret, cap, ret_len,
                                     "1, or 0 only for protocol own on one node");
    s.bare = boxes == 0;
    if (timing > 1 || (timing && r.local))
        return dsm_apps_refuse_param(w, args, len, "timing", ret, cap, ret_len, "0 or 1 (1 only for own and dir)");
    s.timing = timing == 1;
    if ((st = dsm_apps_run_fresh(&r, w, args, len, ret, cap, ret_len)) != DSM_OK)
        return st;
    if ((st = dsm_own_type_register(SN_TYPE, "socialnet.post", 0)) != DSM_OK)
        return st;
    double start = dsm_now_s(), seconds;
    dsm_apps_wire_t wire0 = {0, 0, 0, 0}, wire1 = {0, 0, 0, 0};
    int wire = 0;   /* the wire counters over the services, reported with timing */
    if (r.local) {
        st = original(&s, (int)fused, (int)values);
        seconds = dsm_now_s() - start;
    } else {
        /* Each service's inbound channel on its node. */
        for (int c = 0; c < 2 && st == DSM_OK; c++)
            if (service_node(c + 1, r.nodes) == r.index)
                st = dsm_own_chan_new(r.node, &s.chan[c]);
        uint64_t made[2] = {s.chan[0], s.chan[1]};
        dsm_status_t ms = dsm_apps_share(&r, s.chan, 2, 1);
        st = st != DSM_OK ? st : ms;
        dsm_apps_wire_begin(r.node, &wire0);
        start = dsm_now_s();
        if (st == DSM_OK)
            st = services(&s);
        seconds = dsm_now_s() - start;
        dsm_apps_wire_end(r.node, &wire1);
        wire = 1;
        ms = dsm_apps_meet(&r, 2);
        st = st != DSM_OK ? st : ms;
        for (int c = 0; c < 2; c++)
            if (made[c])
                (void)dsm_own_chan_free(r.node, made[c]);
    }
    if (st != DSM_OK)
        return st;
    if (seconds <= 0)
        seconds = 1e-9;
    double ops = (double)s.steps;
    uint64_t sum = r.index == 0 ? s.sum : 0;
    if ((st = dsm_result_add(ret, cap, ret_len, "ops", ops, "steps")) != DSM_OK ||
        (st = dsm_result_add(ret, cap, ret_len, "posts", (double)s.posts, "posts")) != DSM_OK ||
        (st = dsm_result_add(ret, cap, ret_len, "ops_per_sec", ops / seconds, "steps/s")) != DSM_OK ||
        (st = dsm_result_add(ret, cap, ret_len, "seconds", seconds, "s")) != DSM_OK ||
        (st = dsm_result_add_kind(ret, cap, ret_len, "checksum", (double)(sum & ((1ull << 48) - 1)), "",
                                  DSM_FIGURE_FIRST)) != DSM_OK)
        return st;
    for (int i = 0; i < SN_T_COUNT && s.timing; i++) {
        char name[32];
        snprintf(name, sizeof name, "t_%s_ns", sn_phase_names[i]);
        if ((st = dsm_result_add_kind(ret, cap, ret_len, name, (double)s.tns[i], "ns", DSM_FIGURE_TOTAL)) != DSM_OK)
            return st;
    }
    if (s.timing && wire && (st = dsm_apps_report_wire(&wire0, &wire1, ret, cap, ret_len)) != DSM_OK)
        return st;
    if (wire && (st = dsm_apps_report_waited(&wire0, &wire1, ret, cap, ret_len)) != DSM_OK)
        return st;
    return dsm_apps_report_counters(&r, ops, ret, cap, ret_len);
}
