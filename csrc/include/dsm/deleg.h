/* Delegation on one node (Trust<T>, thesis chapter 2): a runtime of OS
 * threads that each run fibers and serve as trustees, and trusts that reach
 * an entrusted property only through closures. (The key-value store and the
 * memcached server built on it are applications: csrc/apps.)
 *
 * Closures (decision, see specs/trust.md): a closure is a C function plus an
 * environment blob (its fixed-size "captured values") plus optional argument
 * bytes (apply_with). Local delegation never crosses a process, so requests
 * carry plain function and property pointers; anything that will cross a
 * process must use the runtime's function registry ids instead.
 *
 * Threads: dsm_deleg_rt_start() creates `threads` OS threads; the first
 * `dedicated` of them only serve (dedicated trustees), the others run the
 * user's main function in a fiber and serve requests in between (shared
 * trustees). Every runtime thread is a trustee; its index is its trustee id.
 *
 * Part of the SDK (dsm/sdk.h): a program reaches delegation through workloads (trust, kv,
 * memcached) and dsmd's --deleg-threads, whose code calls
 * these. */
#ifndef DSM_DELEG_H
#define DSM_DELEG_H

#include <stddef.h>
#include <stdint.h>

#include "dsm/api.h"
#include "dsm/node.h"
#include "dsm/status.h"
#include "dsm/transport.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dsm_deleg_rt dsm_deleg_rt_t;
typedef struct dsm_deleg_prop dsm_deleg_prop_t;
typedef struct dsm_deleg_ret dsm_deleg_ret_t;

/* A trust is a small value: copy it to hand it to another thread (a move: the
 * old copy must not be used afterwards), dsm_deleg_trust_clone() to share it.
 * Its weight is its share of the property's weighted reference count. */
typedef struct dsm_deleg_trust {
    dsm_deleg_prop_t *prop; /* private: the property, NULL for a remote trust */
    uint64_t weight;        /* private */
    uint64_t remote;        /* private: (node rank + 1, trustee, handle) of a remote trust, else 0 */
} dsm_deleg_trust_t;

typedef struct dsm_deleg_config {
    unsigned threads;       /* OS threads, >= 1 */
    unsigned dedicated;     /* how many of them only serve (< threads) */
    size_t stack_size;      /* fiber stack bytes (default 64 KiB) */
    int pin;                /* pin thread i to CPU (pin_first + i) % ncpu */
    unsigned pin_first;     /* with pin: thread 0's CPU (several runtimes in one process on one host) */
    int idle_sleep;         /* sleep on an eventfd when idle instead of spinning */
    /* With idle_sleep: how dsm_deleg_idle_wait and _idle_epoll wait, named
     * as the fabric's progress modes. BLOCKING (0) sleeps at once; HYBRID
     * polls linger_us first, so a client's next request costs no wake-up,
     * except on a host running more threads than cores; ADAPTIVE (or AUTO)
     * lingers as long as the next request has lately come within the
     * linger, shorter as the host gets crowded. BUSY is refused: that is
     * idle_sleep = 0. */
    dsm_progress_mode_t idle_progress;
    unsigned linger_us;     /* the longest linger (default 100 µs) */
    uint64_t initial_weight;/* reference weight of a new trust (default and at most 2^62; tests use small values) */
} dsm_deleg_config_t;

/* Main function of a client (non-dedicated) thread; `worker` counts client
 * threads from 0. Runs in a fiber, so it may block on apply(). */
typedef void (*dsm_deleg_main_fn)(void *arg, unsigned worker);

/* A closure. `property` is the entrusted object, `env` the environment bytes
 * given to apply (fixed size, known to the function), `args` the apply_with
 * bytes. The result, if any, is given with dsm_deleg_return(). */
typedef void (*dsm_deleg_fn)(dsm_deleg_ret_t *ret, void *property, const void *env,
                             const void *args, size_t args_len);

/* Continuation of apply_then/launch_then: runs on the client thread, in
 * delegated context (it may not block), with the result bytes. */
typedef void (*dsm_deleg_then_fn)(void *cb_arg, dsm_status_t status, const void *ret, size_t ret_len);

typedef void (*dsm_deleg_dtor_fn)(void *property);

/* Variable-size response: pass as ret_size to the *_then calls. */
#define DSM_DELEG_VARSIZE ((size_t)-1)
/* Largest environment copied into a request. */
#define DSM_DELEG_MAX_ENV 256

/* --- runtime ------------------------------------------------------------- */
DSM_API dsm_status_t dsm_deleg_rt_create(const dsm_deleg_config_t *cfg, dsm_deleg_rt_t **out);
/* Runs the property destructors of nothing: live trusts are the caller's leak. */
DSM_API void dsm_deleg_rt_destroy(dsm_deleg_rt_t *rt);
/* Start the threads; returns at once. main_fn runs once per client thread. */
DSM_API dsm_status_t dsm_deleg_rt_start(dsm_deleg_rt_t *rt, dsm_deleg_main_fn main_fn, void *arg);
/* Wait until every main function and every fiber finished and every request
 * was answered (termination detection), then join the threads. */
DSM_API dsm_status_t dsm_deleg_rt_join(dsm_deleg_rt_t *rt);
/* start + join. */
DSM_API dsm_status_t dsm_deleg_rt_run(dsm_deleg_rt_t *rt, dsm_deleg_main_fn main_fn, void *arg);
DSM_API unsigned dsm_deleg_rt_threads(const dsm_deleg_rt_t *rt);

/* Index of the current runtime thread (its trustee id), or -1 outside. */
DSM_API int dsm_deleg_self(void);

/* --- fibers -------------------------------------------------------------- */
/* Spawn a fiber on the current runtime thread (FIFO ready queue). */
DSM_API dsm_status_t dsm_deleg_spawn(void (*fn)(void *), void *arg);
/* Let the other fibers and the delegation work of this thread run. */
DSM_API void dsm_deleg_yield(void);
/* Block the calling fiber until this thread has at most `max` requests
 * outstanding (issued and not yet completed): how an asynchronous client
 * keeps a window of requests in flight without spinning its thread (§3.2.4:
 * a full queue makes the caller yield). DSM_ERR_STATE outside a fiber or in
 * delegated context. */
DSM_API dsm_status_t dsm_deleg_wait_outstanding(uint64_t max);

/* --- trusts -------------------------------------------------------------- */
/* Entrust `property` to trustee `trustee` (a thread index); the trustee owns
 * it from now on and calls dtor (may be NULL) when the last trust drops.
 * latched: the property is a Latch<T> (required by launch). Callable before
 * start (the property is then published by thread creation) or from any
 * runtime thread. */
DSM_API dsm_status_t dsm_deleg_entrust(dsm_deleg_rt_t *rt, unsigned trustee, void *property,
                               dsm_deleg_dtor_fn dtor, int latched, dsm_deleg_trust_t *out);
/* Split the weight of src into a new trust (no message). When src's weight is
 * exhausted this refills it synchronously, which is DSM_ERR_STATE in delegated
 * context unless the trustee is local. */
DSM_API dsm_status_t dsm_deleg_trust_clone(dsm_deleg_trust_t *src, dsm_deleg_trust_t *out);
/* Drop: sends "subtract my weight" asynchronously (allowed anywhere). */
DSM_API dsm_status_t dsm_deleg_trust_drop(dsm_deleg_trust_t *t);

/* --- delegation ---------------------------------------------------------- */
/* Synchronous. Copies the result into ret (capacity ret_cap); *ret_len gets
 * the result's full length (may exceed ret_cap: truncated). ret_len NULL means
 * a fixed-size result of exactly ret_cap bytes. DSM_ERR_STATE (and a log line)
 * from delegated context or outside a fiber. */
DSM_API dsm_status_t dsm_deleg_apply(dsm_deleg_trust_t *t, dsm_deleg_fn fn, const void *env, size_t env_len,
                             void *ret, size_t ret_cap, size_t *ret_len);
DSM_API dsm_status_t dsm_deleg_apply_with(dsm_deleg_trust_t *t, dsm_deleg_fn fn, const void *env, size_t env_len,
                                  const void *args, size_t args_len, void *ret, size_t ret_cap,
                                  size_t *ret_len);
/* Asynchronous; returns at once, allowed in delegated context. ret_size is the
 * fixed result size or DSM_DELEG_VARSIZE. then may be NULL. */
DSM_API dsm_status_t dsm_deleg_apply_then(dsm_deleg_trust_t *t, dsm_deleg_fn fn, const void *env, size_t env_len,
                                  const void *args, size_t args_len, size_t ret_size,
                                  dsm_deleg_then_fn then, void *cb_arg);
/* Run the closure in a temporary fiber on the trustee, holding the property's
 * latch; the closure may block (apply, launch). Needs a latched property. */
DSM_API dsm_status_t dsm_deleg_launch(dsm_deleg_trust_t *t, dsm_deleg_fn fn, const void *env, size_t env_len,
                              const void *args, size_t args_len, void *ret, size_t ret_cap,
                              size_t *ret_len);
DSM_API dsm_status_t dsm_deleg_launch_then(dsm_deleg_trust_t *t, dsm_deleg_fn fn, const void *env, size_t env_len,
                                   const void *args, size_t args_len, dsm_deleg_then_fn then,
                                   void *cb_arg);

/* Inside a closure: give the result (copied). A fixed-size result is
 * truncated or zero-padded to the size the client asked for. */
DSM_API void dsm_deleg_return(dsm_deleg_ret_t *ret, const void *data, size_t len);
/* Inside a closure: reserve len result bytes to fill in place (NULL on OOM). */
DSM_API void *dsm_deleg_return_reserve(dsm_deleg_ret_t *ret, size_t len);

/* --- hints and idle waits, for structures and servers built on trusts ----- */
/* A property's prefetch hook: the trustee calls it for every hinted request
 * of a batch (pass 0, then pass 1 over the batch) before any closure of the
 * batch runs, so the batch's cache misses are taken together (e.g. a hash
 * table's bucket in pass 0, the item it points to in pass 1). Only loads and
 * prefetches: the closures have not run yet. */
typedef void (*dsm_deleg_prefetch_fn)(void *property, uint64_t hint, int pass);
/* Set (or clear, with NULL) the hook of t's property; call before the first
 * request on it, e.g. right after entrust. */
DSM_API void dsm_deleg_trust_set_prefetch(dsm_deleg_trust_t *t, dsm_deleg_prefetch_fn fn);
/* dsm_deleg_apply_then with a hint: the first 8 bytes of env are handed to
 * the property's prefetch hook. With env_len < 8 or no hook it is a plain
 * apply_then. */
DSM_API dsm_status_t dsm_deleg_apply_then_hinted(dsm_deleg_trust_t *t, dsm_deleg_fn fn, const void *env,
                                         size_t env_len, const void *args, size_t args_len, size_t ret_size,
                                         dsm_deleg_then_fn then, void *cb_arg);
/* On a runtime thread with idle_sleep: sleep until a request arrives,
 * extra_fd (may be -1) becomes readable or timeout_ms passes, unless this
 * thread has work pending (then return at once). Outside the runtime: poll
 * extra_fd. For main functions that wait on sockets between requests. */
DSM_API void dsm_deleg_idle_wait(int extra_fd, int timeout_ms);
/* The same for a main function whose loop is an epoll set: epoll_wait on
 * ep, blocking up to timeout_ms only when dsm_deleg_idle_wait would sleep
 * (else it only polls), a request or response for this thread also ending
 * the wait. The thread's wake-up joins ep on the first call (one epoll set
 * per thread) and its events are not returned: the return value and evs
 * are epoll_wait's, the caller's events only. One system call where
 * dsm_deleg_idle_wait and a poll of ep after it take three or four.
 * Outside the runtime: a plain epoll_wait. */
struct epoll_event;
DSM_API int dsm_deleg_idle_epoll(int ep, struct epoll_event *evs, int max, int timeout_ms);
/* What the calling runtime thread has done since the runtime started:
 * requests it handed to another thread's trustee (its own trustee's run
 * inline and are not counted), requests it served for other threads, and
 * wake-ups it gave threads asleep in the idle wait (an eventfd write each).
 * Zeros outside the runtime. */
typedef struct dsm_deleg_counters {
    uint64_t handed, served, wakeups;
} dsm_deleg_counters_t;
DSM_API void dsm_deleg_counters(dsm_deleg_counters_t *out);
/* Wake every runtime thread from dsm_deleg_idle_wait or _idle_epoll (e.g.
 * after setting a flag their main functions poll, before
 * dsm_deleg_rt_join). */
DSM_API void dsm_deleg_rt_wake(dsm_deleg_rt_t *rt);

/* --- across nodes (Gossamer, thesis chapter 3) ----------------------------
 * A runtime attached to a node (dsm_start_deleg, dsm_start_with: created,
 * not started; every attached node runs the same number of threads) serves
 * trusts of other nodes' runtimes, and its trusts may name trustees on
 * other nodes: apply, apply_with,
 * apply_then, launch, clone and drop work the same on them. What crosses
 * nodes is a closure's registered id (the runtime's function registry: the
 * same binary or plugin on every node, ASLR on), its environment and its
 * argument bytes; a closure used on a remote trust must be registered with
 * dsm_deleg_register on every node (DSM_ERR_NO_HANDLER otherwise). Errors
 * of the trustee (unknown closure, a property that does not exist, a
 * malformed request) come back as the request's status. */
DSM_API dsm_status_t dsm_deleg_register(const char *name, dsm_deleg_fn fn);
/* A trust as bytes for another node: a share of t's weight (t keeps the
 * rest), to hand over by any means (spawn arguments, a message); the
 * receiver imports it into its own attached runtime. Importing on the
 * trustee's own node gives a local trust. An import on a node other than
 * the exporter's tells the trustee's node that the weight sits there now
 * (one request, answered before it returns), so that the node's death
 * returns it; DSM_ERR_BAD_ADDR if the property is gone (a trust exported
 * by a node that died, whose share was written off with the last of it). */
enum { DSM_DELEG_TRUST_WIRE = 24 };
DSM_API dsm_status_t dsm_deleg_trust_export(dsm_deleg_trust_t *t, void *out, size_t cap);
DSM_API dsm_status_t dsm_deleg_trust_import(dsm_deleg_rt_t *rt, const void *in, size_t len, dsm_deleg_trust_t *out);
/* An export for the node of rank `rank`, of t held on this node's runtime
 * rt: the trustee's node counts the weight as that node's before this
 * returns (one request), so that it comes back if that node dies, before,
 * during or after its import (with dsm_deleg_trust_export, an importer that
 * dies before its import told the trustee's node leaves the weight in the
 * exporter's share). DSM_ERR_NO_PEER if that node is gone (t keeps its
 * weight). The bytes import anywhere; on `rank` without a request. */
DSM_API dsm_status_t dsm_deleg_trust_export_to(dsm_deleg_rt_t *rt, dsm_deleg_trust_t *t, uint32_t rank, void *out,
                                               size_t cap);
/* Fate sharing, what a run that lost a node reports: the node that died, and
 * the trust of this node's requests it left unanswered (its trustee thread
 * and property handle on the dead node; -1 and 0 when none was waiting). */
typedef struct dsm_deleg_loss {
    int32_t rank;          /* the node that died, -1: the last run lost none */
    int32_t trustee;       /* a trustee of it with requests of this node unanswered, or -1 */
    uint32_t handle;       /* that trust's property handle on the dead node, or 0 */
    uint64_t unanswered;   /* requests of this node to the dead node left unanswered */
} dsm_deleg_loss_t;
/* dsm_deleg_rt_join of an attached runtime returns once the application has
 * finished on every attached node (every main function and fiber done, every
 * request answered, cluster-wide); DSM_ERR_PEER_DEAD (after stopping this
 * runtime, whatever its fibers were waiting for) if an attached node dies
 * first: fate sharing. Such a runtime does not start again until recovered;
 * the node and the cluster stay usable.
 * What the last run of an attached runtime lost (rank -1: it lost none). */
DSM_API void dsm_deleg_rt_loss(const dsm_deleg_rt_t *rt, dsm_deleg_loss_t *out);
/* After a run that lost a node (dsm_deleg_rt_join gave DSM_ERR_PEER_DEAD):
 * make the runtime runnable again with the nodes that remain and any that
 * join. Waits (at most timeout_ms) until every other live attached node has
 * stopped its run too, then clears this node's slots, requests and fibers of
 * the lost run, and writes off the dead node's share of this node's
 * properties: one that only the dead node still held is freed here (its
 * destructor runs). After a node died between runs, it does the latter
 * alone (so does the next start). Every surviving node recovers before any
 * of them starts again. */
DSM_API dsm_status_t dsm_deleg_rt_recover(dsm_deleg_rt_t *rt, uint32_t timeout_ms);
/* The runtime attached to node (dsmd --deleg-threads attaches one), or NULL. */
DSM_API dsm_deleg_rt_t *dsm_deleg_node_rt(dsm_node_t *node);
/* The live attached nodes other than this one: their ranks in ranks[0..cap)
 * (ascending); returns how many there are. */
DSM_API uint32_t dsm_deleg_peers(dsm_deleg_rt_t *rt, uint32_t *ranks, uint32_t cap);
/* A notice board per attached node, to hand things (exported trusts) to the
 * other nodes before a run: set it between runs (at most 4096 bytes); a
 * peer's board for the coming run is read with board_get, which waits (at
 * most timeout_ms) until that node has set it. DSM_ERR_TOO_BIG when it
 * exceeds cap (*len: its length). */
DSM_API dsm_status_t dsm_deleg_board_set(dsm_deleg_rt_t *rt, const void *bytes, size_t len);
DSM_API dsm_status_t dsm_deleg_board_get(dsm_deleg_rt_t *rt, uint32_t rank, void *out, size_t cap, size_t *len,
                                         uint32_t timeout_ms);

#ifdef __cplusplus
}
#endif
#endif
