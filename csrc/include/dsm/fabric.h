/* The fabric: the only layer that talks to UCX. Everything above it speaks in
 * (rank, region, offset): one-sided get/put/atomics, active messages with
 * request/reply, fence/flush, and a progress thread per fabric instance.
 *
 * Part of the SDK (dsm/sdk.h), for mechanism and plugin authors; dsm/dsm.h,
 * the user API, does not include it (the transport names a user picks are
 * in dsm/transport.h). */
#ifndef DSM_FABRIC_H
#define DSM_FABRIC_H

#include <stddef.h>
#include <stdint.h>
#include "dsm/api.h"
#include "dsm/status.h"
#include "dsm/stats.h"
#include "dsm/transport.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dsm_fabric dsm_fabric_t;

typedef struct dsm_fabric_config {
    dsm_transport_t transport;
    dsm_progress_mode_t progress;
    const char *net_device;    /* e.g. "lo" or "eth0" for tcp, "mlx5_0:1" for verbs; NULL = all */
    uint32_t op_timeout_ms;    /* blocking calls give up after this (0 = 5000) */
    const char *chaos;         /* chaos mode "SEED:SPEC" (csrc/fabric/chaos_spec.h); NULL: $DSM_CHAOS */
} dsm_fabric_config_t;

/* The mode a fabric on `transport` runs for `mode` (auto resolved). */
DSM_API dsm_progress_mode_t dsm_progress_resolve(dsm_progress_mode_t mode, dsm_transport_t transport);

/* Sets in the environment, where it does not already set them, the UCX
 * settings a fabric on `transport` runs with: UCX_PROTO_ENABLE=y, and over
 * tcp (or auto) segments of 256 KiB (UCX_TCP_{TX,RX}_SEG_SIZE); for a
 * transport without tcp it takes out the segment sizes it set before (UCX
 * warns of settings nothing reads), never the user's. A program that starts
 * UCX processes to compare against (ucx_perftest) calls it first, so that
 * they run as configured as the fabric does. */
DSM_API void dsm_fabric_ucx_env_defaults(dsm_transport_t transport);
/* Creates the UCX context and worker and starts the progress thread,
 * after dsm_fabric_ucx_env_defaults(config->transport). */
DSM_API dsm_status_t dsm_fabric_create(const dsm_fabric_config_t *config, dsm_fabric_t **out);
DSM_API void dsm_fabric_destroy(dsm_fabric_t *fabric);
/* Stop the progress thread and close the handlers: no handler and no
 * peer-error callback runs after this returns, and requests that still
 * arrive are refused with DSM_ERR_CLOSED (replies to this node's own
 * requests still complete).
 * Regions stay valid until they are unregistered, which lets an owner free
 * what handlers touch in the right order: stop, free, destroy.
 * dsm_fabric_destroy stops too. */
DSM_API void dsm_fabric_stop(dsm_fabric_t *fabric);

/* This worker's address, to hand to peers through the bootstrap. Owned by the fabric.
 * It names the version of the active messages this build speaks. */
DSM_API dsm_status_t dsm_fabric_address(dsm_fabric_t *fabric, const void **addr, size_t *len);
/* DSM_OK if a peer's address (as dsm_fabric_address gave it) is one this
 * build can talk to; DSM_ERR_PROTO if not, *version (if not NULL) the
 * active-message version it names (0: not a fabric address at all), beside
 * this build's *mine (if not NULL). No fabric needed: the coordinator checks
 * a joining node's address with it. */
DSM_API dsm_status_t dsm_fabric_address_check(const void *addr, size_t len, unsigned *version, unsigned *mine);
/* Whether UCX can use a peer's address: creates an endpoint to it and
 * closes it again. DSM_OK, or DSM_ERR_PROTO (not a fabric address) or
 * DSM_ERR_FABRIC (UCX refused it; dsm_last_error says why). Bytes that make
 * UCX abort abort the caller: only the address checker's own process calls
 * this on bytes nobody has proven yet (runtime/addr_check.h). */
DSM_API dsm_status_t dsm_fabric_probe_address(dsm_fabric_t *fabric, const void *addr, size_t len);

/* Set this instance's own rank (carried in every active message). */
DSM_API void dsm_fabric_set_rank(dsm_fabric_t *fabric, uint32_t rank);

/* Peers. Ranks are < DSM_FABRIC_MAX_PEERS. */
enum { DSM_FABRIC_MAX_PEERS = 256, DSM_FABRIC_MAX_REGIONS = 16 };
/* Peers connect both ways: over tcp a target answers one-sided operations
 * (and every request) through its own endpoint to the initiator. The runtime
 * guarantees this before a member can be addressed (see node.c's join). An
 * address of another active-message version is refused (DSM_ERR_PROTO). */
DSM_API dsm_status_t dsm_fabric_connect(dsm_fabric_t *fabric, uint32_t rank, const void *addr, size_t len);
/* Mark a peer dead: pending and future operations on it fail with DSM_ERR_PEER_DEAD. */
DSM_API void dsm_fabric_peer_failed(dsm_fabric_t *fabric, uint32_t rank);
/* The same for a peer that left cleanly: logged as a departure, not a
 * failure. Returns once no thread of this fabric is inside a UCX call
 * toward it, so none will connect to it after. */
DSM_API void dsm_fabric_peer_left(dsm_fabric_t *fabric, uint32_t rank);
/* dsm_fabric_peer_left in two halves, for a caller that must not wait (a
 * thread may hold a peer for as long as an operation's timeout): leaving
 * marks it left and returns at once; busy is nonzero while a thread of this
 * fabric holds the departed peer (a mapping, a fence, an operation), zero
 * once none is inside a call toward it (a send under way, one UCX call, is
 * waited for before it says so). */
DSM_API void dsm_fabric_peer_leaving(dsm_fabric_t *fabric, uint32_t rank);
DSM_API int dsm_fabric_peer_busy(dsm_fabric_t *fabric, uint32_t rank);
/* DSM_OK if connected and alive, DSM_ERR_PEER_DEAD, or DSM_ERR_NO_PEER. */
DSM_API dsm_status_t dsm_fabric_peer_state(dsm_fabric_t *fabric, uint32_t rank);
/* Called (from the progress context) when UCX reports a peer error. */
typedef void (*dsm_peer_error_cb_t)(void *ctx, uint32_t rank);
DSM_API void dsm_fabric_on_peer_error(dsm_fabric_t *fabric, dsm_peer_error_cb_t cb, void *ctx);

/* Local regions: memory that peers may access one-sidedly. */
typedef struct dsm_region dsm_region_t;
DSM_API dsm_status_t dsm_fabric_region_register(dsm_fabric_t *fabric, void *base, size_t len, dsm_region_t **out);
/* A zero-filled region of `len` bytes allocated by UCX itself (base from
 * dsm_fabric_region_base; unregister frees it). Over shm the memory is UCX's
 * sysv/posix shared memory, which peers map directly, so their one-sided
 * operations are plain loads, stores and CPU atomics rather than a
 * process_vm_readv/writev system call (cma) as for registered user memory. */
DSM_API dsm_status_t dsm_fabric_region_alloc(dsm_fabric_t *fabric, size_t len, dsm_region_t **out);
/* Packed remote key for this region; owned by the region. */
DSM_API dsm_status_t dsm_fabric_region_key(dsm_region_t *region, const void **key, size_t *len);
DSM_API void *dsm_fabric_region_base(const dsm_region_t *region);
DSM_API size_t dsm_fabric_region_length(const dsm_region_t *region);
DSM_API void dsm_fabric_region_unregister(dsm_region_t *region);
/* Tell the fabric that pages of a registered region were remapped (CoRM).
 * A no-op where the transport reads page tables itself (shm/cma, tcp). On
 * verbs the region is registered anew (the ibv_rereg_mr analogue) and its
 * key changes: a key from dsm_fabric_region_key before the call is no longer
 * valid, and the owner republishes the new one to the peers, which take it
 * with dsm_fabric_remote_region_rekey. */
DSM_API dsm_status_t dsm_fabric_region_remapped(dsm_region_t *region, size_t offset, size_t len);

/* Remote regions: a peer's region `region_id`, learned through the bootstrap. */
DSM_API dsm_status_t dsm_fabric_remote_region_add(dsm_fabric_t *fabric, uint32_t rank, uint32_t region_id,
                                          uint64_t remote_base, uint64_t len,
                                          const void *key, size_t key_len);
/* A peer registered region `region_id` anew (dsm_fabric_region_remapped on
 * verbs): use its new packed key from now on. DSM_ERR_BAD_ADDR for a region
 * never added, DSM_ERR_PROTO for a key UCX refuses (the old one stays);
 * operations already under way finish with the old key. UCX cannot check a
 * packed key's bytes: take keys only from the region's owner. */
DSM_API dsm_status_t dsm_fabric_remote_region_rekey(dsm_fabric_t *fabric, uint32_t rank, uint32_t region_id,
                                                    const void *key, size_t key_len);
/* Whether one-sided operations on a peer's region travel as messages to the
 * peer (emulated: tcp, and auto for a region not mapped here), where a layer
 * above may do better with one request of its own than with several
 * operations; 0 if direct, by RDMA, or unknown. */
DSM_API int dsm_fabric_remote_emulated(dsm_fabric_t *fabric, uint32_t rank, uint32_t region_id);

/* A completion handle for a non-blocking operation; caller-owned, must stay
 * valid until the operation completes (dsm_fabric_wait/test says so). Finish
 * every handle with dsm_fabric_wait, or dsm_fabric_test until it returns 1:
 * they release the transport's request (polling `done` alone does not). */
typedef struct dsm_op {
    volatile int done;
    dsm_status_t status;
    uint32_t rank;
    uint64_t result;   /* the old value, for atomics */
    void *request;     /* fabric-private */
    dsm_fabric_t *fabric;
    uint64_t operand;  /* fabric-private: UCX reads atomic operands lazily, so they live here */
} dsm_op_t;

/* Non-blocking one-sided operations. Offsets and lengths are checked against
 * the remote region: out of bounds gives DSM_ERR_BAD_ADDR and nothing is sent. */
DSM_API dsm_status_t dsm_fabric_get_nb(dsm_fabric_t *f, uint32_t rank, uint32_t region, uint64_t offset,
                               void *dst, size_t len, dsm_op_t *op);
DSM_API dsm_status_t dsm_fabric_put_nb(dsm_fabric_t *f, uint32_t rank, uint32_t region, uint64_t offset,
                               const void *src, size_t len, dsm_op_t *op);
/* 64-bit atomics; offset must be 8-byte aligned. The old value lands in op->result. */
DSM_API dsm_status_t dsm_fabric_fetch_add_nb(dsm_fabric_t *f, uint32_t rank, uint32_t region, uint64_t offset,
                                     uint64_t value, dsm_op_t *op);
DSM_API dsm_status_t dsm_fabric_cas_nb(dsm_fabric_t *f, uint32_t rank, uint32_t region, uint64_t offset,
                               uint64_t expected, uint64_t desired, dsm_op_t *op);
DSM_API dsm_status_t dsm_fabric_swap_nb(dsm_fabric_t *f, uint32_t rank, uint32_t region, uint64_t offset,
                                uint64_t value, dsm_op_t *op);
/* How one-sided work done without the fabric's operations is counted (see
 * dsm_fabric_remote_unmap, dsm_fabric_count_ops). */
typedef enum dsm_count_kind { DSM_COUNT_GET = 0, DSM_COUNT_PUT = 1, DSM_COUNT_ATOMIC = 2 } dsm_count_kind_t;
/* A peer's region mapped into this process (shm: UCX's shared memory of a
 * peer on this host), for a layer that does its own loads, stores and SEQ_CST
 * CPU atomics on it (they mix with the fabric's, which are the same); *len
 * gets the region's length. NULL if the region is not mapped here, the peer
 * is not alive, or a fence still has operations to order (the caller takes
 * the fabric's operations instead). On success the mapping is held until
 * dsm_fabric_remote_unmap on the same thread (holds nest): hold it only for
 * the access, never across a blocking call. A hold takes no reference on
 * the peer (it marks the thread; an endpoint close waits for the marks
 * before it unmaps), so a peer found dead meanwhile is still safe to touch. */
DSM_API uint8_t *dsm_fabric_remote_map(dsm_fabric_t *f, uint32_t rank, uint32_t region, uint64_t *len);
/* ThreadSanitizer builds: a CPU atomic on `mapped` (in a mapping from
 * dsm_fabric_remote_map) is that memory at a second address, which TSan
 * cannot relate to the owner's own atomics on the word. Bracket it with
 * DSM_FABRIC_TSAN_MAPPED_ATOMIC(p, 0) before and (p, 1) after, and TSan
 * orders it as one at the owner's address. Nothing in other builds. */
#ifdef DSM_TSAN
void dsm_fabric_tsan_mapped_atomic(const void *mapped, int after);
#define DSM_FABRIC_TSAN_MAPPED_ATOMIC(p, after) dsm_fabric_tsan_mapped_atomic((p), (after))
#else
#define DSM_FABRIC_TSAN_MAPPED_ATOMIC(p, after) ((void)0)
#endif
/* Let go of a hold from dsm_fabric_remote_map, counting the n operations of
 * `bytes` bytes in all done through it (as dsm_fabric_count_ops; n may be 0). */
DSM_API void dsm_fabric_remote_unmap(dsm_fabric_t *f, uint32_t rank, dsm_count_kind_t kind, uint64_t n,
                                     uint64_t bytes);
/* Count one-sided work a layer above did without the fabric's operations
 * (inside a request of its own): n operations of `bytes` bytes in all
 * (ignored for atomics), so that dsm_fabric_stats shows what the fabric's
 * operations would have. */
DSM_API void dsm_fabric_count_ops(dsm_fabric_t *f, dsm_count_kind_t kind, uint64_t n, uint64_t bytes);

/* Requests in bulk: between begin and end (calls nest), the one-sided
 * operations the calling thread issues on `f` that travel as messages (see
 * dsm_fabric_remote_emulated) may wait in the thread's batch and leave as one
 * message per peer, answered the same way: at end, or before, when the
 * thread waits, tests, polls or sends anything, or its batch is full. Each
 * op completes on its own as ever. For a window of operations over tcp,
 * where each message costs a system call on both sides. */
DSM_API void dsm_fabric_batch_begin(dsm_fabric_t *f);
DSM_API void dsm_fabric_batch_end(dsm_fabric_t *f);

/* Progress until the op completes, its peer dies, or the op timeout passes. */
DSM_API dsm_status_t dsm_fabric_wait(dsm_op_t *op);
/* The same with a timeout of its own (0: the op timeout), as
 * dsm_fabric_am_request takes one: for requests in flight together whose
 * answers may take longer than the op timeout. */
DSM_API dsm_status_t dsm_fabric_wait_for(dsm_op_t *op, uint32_t timeout_ms);
/* 1 if complete (then op->status holds the result), 0 if not; progresses once. */
DSM_API int dsm_fabric_test(dsm_op_t *op);
/* dsm_fabric_test for a waiter that cannot block: 1 also when the op's peer
 * is dead, or the op is still incomplete timeout_ms (0: the op timeout)
 * after since_ns (dsm_now_ns), which ends it as dsm_fabric_wait would
 * (DSM_ERR_TIMEOUT, and the peer declared failed). */
DSM_API int dsm_fabric_test_for(dsm_op_t *op, uint64_t since_ns, uint32_t timeout_ms);

/* A pause in a poll for something a peer will send (a channel item, a
 * counter a rendezvous waits on): like sleeping *pause_ns and then doubling
 * it up to max_ns, but the thread attends the worker meanwhile, so what
 * arrives is served at once, by this thread, and ends the pause. A node
 * whose only thread polls this way answers its peers without waiting for
 * the thread's next request or its progress thread's next look. Returns
 * how many events were handled (0: the pause passed with none). */
DSM_API unsigned dsm_fabric_backoff(dsm_fabric_t *f, long *pause_ns, long max_ns);

/* A thread that polls anyway (a delegation runtime's) can take over the
 * worker's progress: between poller_begin and poller_end the progress thread
 * stands down (no wake-up per message on a small host), and the poller calls
 * dsm_fabric_poll in its loop; it returns how many events it handled. Handlers
 * then run on the poller. A poller that sleeps must end first. */
DSM_API void dsm_fabric_poller_begin(dsm_fabric_t *f);
DSM_API void dsm_fabric_poller_end(dsm_fabric_t *f);
DSM_API unsigned dsm_fabric_poll(dsm_fabric_t *f);

/* A lane: a thread's own endpoints to the peers (one per peer, opened at
 * its first use beside the endpoint the node's threads share: on verbs its
 * own queue pair, on tcp its own connection), so threads that send to one
 * peer do not queue on one endpoint. While a lane is bound to a thread, the
 * thread's active messages and one-sided operations on the lane's fabric go
 * through it (an operation on a region mapped into this process needs no
 * endpoint and is a load or store as before); a flush or fence covers its
 * own endpoint and the shared one. Completions, replies and peer failures
 * work as on the shared endpoint, and a peer that reconnects gets a new lane
 * endpoint at the next use. One thread uses a lane at a time (binding it
 * elsewhere once the last is done with it is fine); close it before its
 * fabric goes (destroy closes, and logs, any still open). */
typedef struct dsm_lane dsm_lane_t;
DSM_API dsm_status_t dsm_fabric_lane_open(dsm_fabric_t *f, dsm_lane_t **out);
/* Bind `lane` to the calling thread (NULL: unbind); one lane per thread. */
DSM_API void dsm_fabric_lane_bind(dsm_lane_t *lane);
/* Closes the lane's endpoints (bounded by a second) and frees it. */
DSM_API void dsm_fabric_lane_close(dsm_lane_t *lane);
/* Opens the lane's endpoint to `rank` now, if it has none to the peer's
 * current incarnation, and waits until UCX has wired it up (a flush: the peer
 * has answered). A lane connected before a run opens nothing during it: UCX
 * 1.13 aborts a process whose peer dies while it still owes that peer a
 * wire-up reply. Call it from the lane's thread, or before any thread uses
 * the lane. DSM_OK also when the shared endpoint serves the lane (no address
 * to open a second one to); the peer's failure otherwise. */
DSM_API dsm_status_t dsm_fabric_lane_connect(dsm_lane_t *lane, uint32_t rank);

/* Blocking helpers (the calling thread progresses the worker while it waits). */
DSM_API dsm_status_t dsm_fabric_get(dsm_fabric_t *f, uint32_t rank, uint32_t region, uint64_t offset,
                            void *dst, size_t len);
DSM_API dsm_status_t dsm_fabric_put(dsm_fabric_t *f, uint32_t rank, uint32_t region, uint64_t offset,
                            const void *src, size_t len);
DSM_API dsm_status_t dsm_fabric_fetch_add(dsm_fabric_t *f, uint32_t rank, uint32_t region, uint64_t offset,
                                  uint64_t value, uint64_t *old);
DSM_API dsm_status_t dsm_fabric_cas(dsm_fabric_t *f, uint32_t rank, uint32_t region, uint64_t offset,
                            uint64_t expected, uint64_t desired, uint64_t *old);
DSM_API dsm_status_t dsm_fabric_swap(dsm_fabric_t *f, uint32_t rank, uint32_t region, uint64_t offset,
                             uint64_t value, uint64_t *old);

/* Ordering and completion. fence: operations issued after it are performed
 * after those before it (to that peer / to all). flush: everything issued
 * before it is complete at the target. Where one-sided operations are
 * emulated with messages (tcp), each completes only on the target's reply,
 * so flush waits for the replies of the operations issued before it, and
 * fence does the same (stronger than needed); from inside a handler, where
 * waiting is not allowed, a fence with such operations outstanding returns
 * DSM_ERR_STATE. */
DSM_API dsm_status_t dsm_fabric_fence(dsm_fabric_t *f, uint32_t rank);
DSM_API dsm_status_t dsm_fabric_fence_all(dsm_fabric_t *f);
DSM_API dsm_status_t dsm_fabric_flush(dsm_fabric_t *f, uint32_t rank);
DSM_API dsm_status_t dsm_fabric_flush_all(dsm_fabric_t *f);

/* Active messages. Handler ids are < DSM_AM_MAX_HANDLERS, except
 * DSM_AM_RMA_HANDLER, which the fabric keeps for itself: over tcp (and auto,
 * for regions not mapped into this process) get/put/atomics are requests to
 * that handler on the target, which checks them against its own registered
 * regions and does them on its memory, rather than UCX's software emulation
 * of RMA (UCX 1.13 aborts the process when a peer dies with one of those
 * outstanding). dsm_fabric_am_register refuses it; its messages show in the
 * AM counters (am_sent/am_recv and the per-handler ones for this id), and
 * the operations in gets/puts/atomics/bytes as well. The wire header
 * {magic, version, handler, length, source rank, request id} is checked on
 * arrival and a bad one is dropped, counted and logged. Handlers run on the
 * progress context: they must not block (hand long work to a thread). */
enum { DSM_AM_MAX_PAYLOAD = 16 * 1024 * 1024 };
enum { DSM_AM_RMA_HANDLER = DSM_AM_MAX_HANDLERS - 1 };
/* Who owns which handler ids, the fabric knowing none of them:
 *   1..7   runtime (dsm/runtime.h)
 *   8..55  the modules, in blocks the runtime assigns from the module table
 *          (dsm/module.h: table order, each module's count)
 *   56..62 DSM_AM_USER_FIRST..LAST: programs, tests and benchmarks
 *   63     the fabric's emulated RMA (DSM_AM_RMA_HANDLER)
 * Ids claimed twice are caught at run time: dsm_fabric_am_register refuses
 * an id that is already registered (DSM_ERR_EXISTS). Fabric region ids: the
 * heap's partition 0, compact's store range 1, deleg's remote slot area 3,
 * chan's arena 4
 * (mheap lives in heap partitions and needs none). */
enum { DSM_AM_USER_FIRST = 56, DSM_AM_USER_LAST = DSM_AM_RMA_HANDLER - 1 };
typedef struct dsm_am_msg {
    uint32_t src_rank;
    uint16_t handler;
    uint16_t flags;          /* fabric-private */
    uint64_t request_id;     /* nonzero if the sender waits for a reply */
    const void *data;        /* valid only during the handler call */
    size_t len;
} dsm_am_msg_t;
typedef void (*dsm_am_handler_t)(void *ctx, const dsm_am_msg_t *msg);

/* A NULL fn unregisters. An id that already has a handler is refused with
 * DSM_ERR_EXISTS (and a log line): ids are owned, never shared. */
DSM_API dsm_status_t dsm_fabric_am_register(dsm_fabric_t *f, uint16_t handler, dsm_am_handler_t fn, void *ctx);
/* Fire and forget: returns once the payload buffer may be reused. */
DSM_API dsm_status_t dsm_fabric_am_send(dsm_fabric_t *f, uint32_t rank, uint16_t handler,
                                const void *data, size_t len);
/* Fire and forget without waiting: the message leaves at once or is copied
 * and sent in the background, so a handler may call it (where blocking
 * sends are refused): a handler that must tell a third node something, as
 * a directory home its sharers. Nothing confirms delivery; a peer known
 * dead gives DSM_ERR_PEER_DEAD. Not for DSM_AM_RMA_HANDLER. */
DSM_API dsm_status_t dsm_fabric_am_post(dsm_fabric_t *f, uint32_t rank, uint16_t handler,
                                        const void *data, size_t len);
/* Send and wait for the reply. The reply's status is returned; its payload is
 * copied into reply[0..cap) and *reply_len set to its full length (a longer
 * reply gives DSM_ERR_TOO_BIG). timeout_ms 0 means the fabric's op timeout. */
DSM_API dsm_status_t dsm_fabric_am_request(dsm_fabric_t *f, uint32_t rank, uint16_t handler,
                                   const void *req, size_t req_len,
                                   void *reply, size_t cap, size_t *reply_len, uint32_t timeout_ms);
/* Send a request without waiting: the reply's payload lands in
 * reply[0..cap) and completes `op` (dsm_fabric_wait / dsm_fabric_test), whose
 * status is the reply's (DSM_ERR_TOO_BIG for a reply longer than cap) and
 * op->result the reply's length. req is copied before the call returns.
 * Like an emulated one-sided operation it fails when its peer does and
 * times out with the op timeout (over tcp dsm_fabric_flush waits for it
 * too; elsewhere only its own wait does). Not for DSM_AM_RMA_HANDLER. */
DSM_API dsm_status_t dsm_fabric_am_request_nb(dsm_fabric_t *f, uint32_t rank, uint16_t handler,
                                              const void *req, size_t req_len, void *reply, size_t cap,
                                              dsm_op_t *op);
/* Answer a request; may be called from the handler or later from any thread. */
DSM_API dsm_status_t dsm_fabric_am_reply(dsm_fabric_t *f, uint32_t dst_rank, uint64_t request_id,
                                 dsm_status_t status, const void *data, size_t len);

/* Counters of this instance (a consistent-enough snapshot, relaxed reads). */
DSM_API void dsm_fabric_stats(dsm_fabric_t *f, dsm_stats_t *out);
/* The kernel's id of this instance's progress thread (0 until it runs and
 * once it stopped): for tools that read its counters in /proc (how long it
 * waited for a CPU). */
DSM_API int dsm_fabric_progress_tid(dsm_fabric_t *f);
/* Time the waited round trips (round_trip_wait_ns) while on: calls nest,
 * each on undone by an off. Off by default, as the two clock reads per
 * wait are a few percent of a round trip over shm. */
DSM_API void dsm_fabric_time_waits(dsm_fabric_t *f, int on);
/* Fix how long this instance's waiters spin before they sleep on the
 * worker's event fd (us >= 0; 0: they sleep at once), or give it back to
 * its default (us < 0: $DSM_WAIT_SPIN_US, else the adaptive spin). For a
 * benchmark that measures a round trip in each wait mode: the adaptive
 * spin's state would otherwise choose the mode. */
DSM_API void dsm_fabric_fix_wait_spin(dsm_fabric_t *f, int32_t us);
/* Whether the progress thread stands down for this instance's waiters now
 * (a state, not a count: tests wait for it instead of sleeping). */
DSM_API int dsm_fabric_progress_parked(dsm_fabric_t *f);

#ifdef __cplusplus
}
#endif
#endif
