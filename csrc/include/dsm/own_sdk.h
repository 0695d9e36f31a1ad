/* Ownership-guided coherence (DRust), the calls beyond the Box API of
 * dsm/own.h that workloads and mechanism authors use: the node's cache
 * budget and borrow checks, copies of a shared borrow, placement (tasks
 * where the data is, or where there is room), TBox groups, channels that
 * carry global pointers, and mutexes (Mutex<Box<T>> among them).
 *
 * Part of the SDK (dsm/sdk.h). */
#ifndef DSM_OWN_SDK_H
#define DSM_OWN_SDK_H

#include <stddef.h>
#include <stdint.h>
#include "dsm/api.h"
#include "dsm/status.h"
#include "dsm/node.h"
#include "dsm/heap.h"
#include "dsm/own.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Cache budget of this node in bytes (default 64 MiB): past it, copies no
 * borrow references are evicted. 0 keeps no unreferenced copy at all. */
DSM_API dsm_status_t dsm_own_set_cache_budget(dsm_node_t *node, uint64_t bytes);
DSM_API dsm_status_t dsm_own_set_checks(dsm_node_t *node, int on);

/* A copy of a shared borrow (Rust's `&T` is Copy): a node holding a borrow
 * hands out ref.g, ref.type and ref.size; any node reads the object through
 * them without the box's owner record: locally, or through its cache keyed
 * by the coloured address (a hit costs no message, a miss one read). The
 * copy must be released (dsm_own_ref_copy_release) before the lender's
 * borrow ends; the program keeps that order, as Rust's lifetimes would.
 * DSM_ERR_BAD_ADDR if no live object of that type and size is there. */
DSM_API dsm_status_t dsm_own_ref_copy(dsm_node_t *node, dsm_gaddr_t g, uint32_t type, size_t size,
                                      dsm_own_ref_t *out);
DSM_API dsm_status_t dsm_own_ref_copy_release(dsm_node_t *node, dsm_own_ref_t *ref);

/* ---- placement: tasks where the data is, or where there is room ----------
 * An own task is a dsm_fn_t registered with dsm_own_task_register (in the
 * runtime's function registry, under own's kind; every process registers
 * the same names). It runs through the runtime's spawn, wrapped by own's
 * trampoline "_own.task", and is joined (and cancelled) with dsm_join and
 * dsm_task_cancel; its user argument bytes reach it as given.
 *  - spawn_to: on the node that holds the box's object; the task reads the
 *    box with dsm_own_task_box(). The caller keeps the box: it must not
 *    move, drop or mutably borrow it until the join. With rank non-NULL
 *    the caller reads the box's record first and *rank says where the
 *    task runs. With rank NULL and the record on another node, the task
 *    goes there without that round trip, and that node runs it, or sends
 *    it on to the object's node if the object has moved (as DRust's
 *    spawn_to goes where the pointer names). A dropped, stale or forged
 *    box is DSM_ERR_BAD_ADDR (logged) and the task function never runs:
 *    from spawn_to when it can tell at once, else from the join.
 *  - spawn: here while this node runs fewer own tasks than its task slots
 *    (dsm_own_set_task_slots, default 1); otherwise on the most vacant node.
 * The controller's vacancy: fewest own tasks running, then most free heap
 * bytes, then the first listed member; it asks every member (one spawn of
 * "_own.load" each) when it places. dsm_own_box_alloc_on makes a box on node
 * `rank`, or on the most vacant node for DSM_OWN_VACANT (one ALLOC message to its home).
 * These spawns count in own's counters: a spawn's request (its envelope
 * and arguments) on the spawning node, its reply (the result) on the node
 * that ran it. */
DSM_API dsm_status_t dsm_own_task_register(const char *name, dsm_fn_t fn);
DSM_API dsm_status_t dsm_own_spawn_to(dsm_node_t *node, dsm_own_box_t box, const char *fn, const void *args,
                                      size_t len, dsm_task_t **out, uint32_t *rank);
DSM_API dsm_status_t dsm_own_spawn(dsm_node_t *node, const char *fn, const void *args, size_t len,
                                   dsm_task_t **out, uint32_t *rank);
/* The box the calling task was spawned to (0 outside a spawn_to task). */
DSM_API dsm_own_box_t dsm_own_task_box(void);
DSM_API dsm_status_t dsm_own_set_task_slots(dsm_node_t *node, uint32_t slots);

/* ---- TBox groups: members that move together -------------------------------
 * A group is one box whose object holds `count` members of sizes[] laid out
 * contiguously with self-relative offsets: a remote mutable borrow moves the
 * whole group in one read (one batch), a shared one caches it whole. The
 * type must be registered with size 0 (any size). Borrowing a member
 * borrows the group: moving, dropping or mutably borrowing a group one of
 * whose members is borrowed is DSM_ERR_STATE (with checks on). A member
 * index past the count is DSM_ERR_INVALID. Release with the tbox calls. */
typedef struct dsm_own_tbox_ref {
    dsm_own_ref_t group;    /* the whole group's borrow */
    const void *data;       /* the member */
    size_t size;
    uint32_t member;
} dsm_own_tbox_ref_t;
typedef struct dsm_own_tbox_mut {
    dsm_own_mut_t group;
    void *data;
    size_t size;
    uint32_t member;
} dsm_own_tbox_mut_t;
DSM_API dsm_status_t dsm_own_tbox_new(dsm_node_t *node, uint32_t type, uint32_t count, const size_t *sizes,
                                  dsm_own_box_t *out);
DSM_API dsm_status_t dsm_own_tbox_borrow(dsm_node_t *node, dsm_own_box_t group, uint32_t member, dsm_own_tbox_ref_t *out);
DSM_API dsm_status_t dsm_own_tbox_release(dsm_node_t *node, dsm_own_tbox_ref_t *ref);
DSM_API dsm_status_t dsm_own_tbox_borrow_mut(dsm_node_t *node, dsm_own_box_t group, uint32_t member, dsm_own_tbox_mut_t *out);
DSM_API dsm_status_t dsm_own_tbox_release_mut(dsm_node_t *node, dsm_own_tbox_mut_t *mut);
/* Another member of a group already borrowed (no further message). */
DSM_API dsm_status_t dsm_own_tbox_member(const dsm_own_tbox_ref_t *whole, uint32_t member, const void **data, size_t *size);
DSM_API dsm_status_t dsm_own_tbox_member_mut(const dsm_own_tbox_mut_t *whole, uint32_t member, void **data, size_t *size);

/* ---- channels that carry global pointers -----------------------------------
 * A FIFO homed on the node that creates it; items are global pointers,
 * never serialised objects. dsm_own_chan_send transfers a box: it travels
 * as its owner (the object's coloured address, type and size; the object
 * stays where it is), the sender's record dies and *box becomes 0 (on
 * failure *box is the caller's live handle, possibly a new one); refused
 * with DSM_ERR_STATE if the box is borrowed. dsm_own_chan_recv makes a
 * record for the received owner on this node and gives its handle. A box
 * costs the messages of a word (a request to a remote home) plus, when
 * the sender's record is remote, its claim and tombstone. The _word forms
 * carry any other global pointer (a directory object, an address) as is. A receive waits up to timeout_ms
 * (0: 60 s; DSM_ERR_TIMEOUT), or until the calling task is asked to stop
 * (DSM_ERR_CANCELLED); receiving a word as a box or the reverse is
 * DSM_ERR_STATE and leaves the item queued. A forged channel is
 * DSM_ERR_BAD_ADDR. Free (on the home, empty) with dsm_own_chan_free. */
typedef uint64_t dsm_own_chan_t;
DSM_API dsm_status_t dsm_own_chan_new(dsm_node_t *node, dsm_own_chan_t *out);
DSM_API dsm_status_t dsm_own_chan_send(dsm_node_t *node, dsm_own_chan_t chan, dsm_own_box_t *box);
DSM_API dsm_status_t dsm_own_chan_recv(dsm_node_t *node, dsm_own_chan_t chan, uint32_t timeout_ms, dsm_own_box_t *box);
DSM_API dsm_status_t dsm_own_chan_send_word(dsm_node_t *node, dsm_own_chan_t chan, uint64_t word);
DSM_API dsm_status_t dsm_own_chan_recv_word(dsm_node_t *node, dsm_own_chan_t chan, uint32_t timeout_ms,
                                            uint64_t *word);
DSM_API dsm_status_t dsm_own_chan_free(dsm_node_t *node, dsm_own_chan_t chan);
/* Posted sends (DRust's channel, a one-way queue): as dsm_own_chan_send and
 * _send_word, but a remote home's answer is not awaited: DSM_OK once the
 * item is on its way (a home on this node takes it at once, refusals
 * included). A home that refuses a posted item (a freed or forged
 * channel, a full one) keeps it for the sender. dsm_own_chan_flush waits
 * until the home has handled every item the calling thread posted on chan
 * before it: DSM_OK if none of them is kept there, else the refusal of the
 * oldest, whose item comes back, a box in *box (a new handle of this node)
 * or a word in *word (the other 0); flush again for the next. */
DSM_API dsm_status_t dsm_own_chan_post(dsm_node_t *node, dsm_own_chan_t chan, dsm_own_box_t *box);
DSM_API dsm_status_t dsm_own_chan_post_word(dsm_node_t *node, dsm_own_chan_t chan, uint64_t word);
DSM_API dsm_status_t dsm_own_chan_flush(dsm_node_t *node, dsm_own_chan_t chan, dsm_own_box_t *box, uint64_t *word);

/* Mutexes serialised at their home node (the node that creates one), built
 * two ways, chosen at creation:
 *  - DSM_OWN_MUTEX_DELEG: lock is a request to the home, which grants it at
 *    once or queues it (FIFO) and answers when the mutex is handed over;
 *    unlock is a one-way message. A waiter costs nothing while it waits.
 *  - DSM_OWN_MUTEX_CAS: lock is a one-sided compare-and-swap on the mutex
 *    word, tried again (yielding) while it is held; unlock a one-sided swap.
 * The kind travels in the handle's colour bits, so one mutex never mixes the
 * two. The heap's remote writes (an owner update, a payload) complete at
 * their target before they return, hence before the unlock is sent. A lock
 * waits at most 60 s (DSM_ERR_TIMEOUT). A holder that dies keeps its mutex
 * (fate sharing). */
typedef uint64_t dsm_own_mutex_t;
enum { DSM_OWN_MUTEX_DELEG = 1, DSM_OWN_MUTEX_CAS = 2 };
DSM_API dsm_status_t dsm_own_mutex_new(dsm_node_t *node, int kind, dsm_own_mutex_t *out);
DSM_API dsm_status_t dsm_own_mutex_lock(dsm_node_t *node, dsm_own_mutex_t m);
/* DSM_ERR_STATE if this node does not hold it (checked at the home; for a
 * remote DELEG mutex the home logs it, the unlock being one-way). */
DSM_API dsm_status_t dsm_own_mutex_unlock(dsm_node_t *node, dsm_own_mutex_t m);
/* On the home node only (DSM_ERR_INVALID elsewhere); the mutex must be free.
 * A DELEG mutex whose last holder was remote may still await that holder's
 * one-way unlock: free waits for it (at most a second), so freeing right
 * after every node's unlock returned is well-defined. DSM_ERR_STATE (and a
 * warning) when it is still held. */
DSM_API dsm_status_t dsm_own_mutex_free(dsm_node_t *node, dsm_own_mutex_t m);

/* Mutex<Box<T>>: a mutex that owns one box, as DRust keeps a box inside a
 * Mutex. The home keeps the object's current coloured address with the
 * mutex, so a lock holder needs no owner record: the delegated kind's grant
 * carries the address in the lock's reply, and when a mutable borrow
 * changed it (a move here, or a colour bump) the new address rides the
 * unlock message; the CAS kind keeps it in the lock word while the mutex is
 * free, so the lock (a one-sided swap) reads it and the unlock (a swap)
 * writes it back. Coherence is Algorithms 1-3 unchanged:
 * a shared borrow of a remote object goes through the cache keyed by the
 * coloured address (a hit costs nothing), a mutable one moves the object
 * here and ends with colour + 1.
 *
 * Borrows through a guard are checked against the guard (always, at no
 * cost: the mutex already excludes other holders): borrow_mut while
 * borrowed, a borrow while mutably borrowed, a borrow without the lock, or
 * an unlock with a borrow live give DSM_ERR_STATE and change nothing. A
 * guard belongs to the thread that locked. */
typedef struct dsm_own_guard {
    dsm_own_mutex_t mutex;
    dsm_gaddr_t g;          /* the guarded object's coloured address now */
    uint64_t size;
    uint32_t type;
    uint32_t borrows;       /* live shared borrows through this guard */
    uint32_t mut;           /* 1 while a mutable borrow through it is live */
    uint32_t changed;       /* 1 once g changed: the unlock carries it home */
    uint32_t live;          /* 1 while the lock is held */
    uint32_t pad;
} dsm_own_guard_t;

/* On the mutex's home, with the mutex free and guarding nothing: `box`
 * (not borrowed) moves into the mutex; the box handle is dead afterwards,
 * and *out is the mutex's guarding handle (it has a bit set in its colour:
 * every node uses it from now on; dsm_own_mutex_lock and _unlock refuse
 * it with DSM_ERR_INVALID). dsm_own_mutex_free of a guarding mutex drops
 * the object too. */
DSM_API dsm_status_t dsm_own_mutex_adopt(dsm_node_t *node, dsm_own_mutex_t m, dsm_own_box_t box, dsm_own_mutex_t *out);
/* Lock a guarding mutex; *guard names the guarded object (DSM_ERR_STATE,
 * lock not taken, for a mutex that guards nothing). */
DSM_API dsm_status_t dsm_own_mutex_lock_guard(dsm_node_t *node, dsm_own_mutex_t m, dsm_own_guard_t *guard);
DSM_API dsm_status_t dsm_own_guard_borrow(dsm_node_t *node, dsm_own_guard_t *guard, dsm_own_ref_t *out);
DSM_API dsm_status_t dsm_own_guard_release(dsm_node_t *node, dsm_own_guard_t *guard, dsm_own_ref_t *ref);
DSM_API dsm_status_t dsm_own_guard_borrow_mut(dsm_node_t *node, dsm_own_guard_t *guard, dsm_own_mut_t *out);
DSM_API dsm_status_t dsm_own_guard_release_mut(dsm_node_t *node, dsm_own_guard_t *guard, dsm_own_mut_t *mut);
/* Unlock, carrying the object's new address if it changed. */
DSM_API dsm_status_t dsm_own_mutex_unlock_guard(dsm_node_t *node, dsm_own_guard_t *guard);
/* Lock and take a shared borrow in one call (Rust's `*m.lock()`), and end
 * it and unlock in one: the same checks, refusals and messages as the
 * calls they join (a failed borrow gives the lock back; the unlock is
 * tried after a failed release, and refused while a borrow through the
 * guard is live; the first error is returned), with one node lookup each; a CAS mutex and its
 * object both on this node cost one swap and a header compare, then a
 * check and a store. */
DSM_API dsm_status_t dsm_own_mutex_lock_borrow(dsm_node_t *node, dsm_own_mutex_t m, dsm_own_guard_t *guard,
                                               dsm_own_ref_t *out);
DSM_API dsm_status_t dsm_own_guard_release_unlock(dsm_node_t *node, dsm_own_guard_t *guard, dsm_own_ref_t *ref);
/* The same for a mutable borrow (`*m.lock() = v`): lock and borrow_mut in
 * one call (a failed borrow gives the lock back), release_mut and unlock
 * in one (a failed release leaves the borrow and the lock held); locally,
 * one swap and a header compare, then a check and a store that carries the
 * object's new colour. */
DSM_API dsm_status_t dsm_own_mutex_lock_borrow_mut(dsm_node_t *node, dsm_own_mutex_t m, dsm_own_guard_t *guard,
                                                   dsm_own_mut_t *out);
DSM_API dsm_status_t dsm_own_guard_release_mut_unlock(dsm_node_t *node, dsm_own_guard_t *guard, dsm_own_mut_t *mut);


#ifdef __cplusplus
}
#endif
#endif
