/* Workload "kv": DRust's KV workload (apps/kvc.c) as a registered function,
 * run by name on every node of a cluster under one protocol parameter.
 * Params: protocol (own | dir | local), lock (own and dir: cas | deleg |
 * auto, the default: the kind dsm-bench-drust's mutex_deleg_vs_cas
 * measured the faster for the node's transport, cas over shm (a CPU atomic
 * on the shared mapping), deleg over tcp (fewer messages); local: spin, the
 * default, one exchange to lock and a store to unlock as own's lock,
 * boxed, the same lock holding its bucket's address as own's guarding mutex
 * does (guard=1), or local, a pthread mutex), buckets
 * (64), keys (256), ops per node (10000), get_pct (90),
 * theta_milli (990), seed (42), history (0, or the global address of
 * nodes * ops records of dsm_kvc_record_t, zeroed: each node writes the
 * record of each of its operations at rank_index * ops records, for a
 * linearizability check), timing (0; 1 for own and dir reports the ns
 * each phase of the operations took: t_acquire_ns, t_work_ns,
 * t_release_ns), checks (own's borrow checks on this node
 * for the run: 0 or 1; absent leaves the node's setting; the locks keep the
 * borrow rules either way), guard (own: 1, the default, keeps each bucket
 * inside its lock, Mutex<Box<T>>, so a lock's grant carries the bucket's
 * address and no owner record is read; 0 a box beside a mutex); rank_index
 * and nodes (from the driver).
 * own and dir need `directory`: the global address of 8 * (1 + 2 *
 * buckets) zeroed bytes that the nodes share (an arrival counter, then each
 * bucket's object and lock): every node creates the buckets b with b %
 * nodes == rank_index, publishes them there, waits for the others, runs its
 * stream, waits again; the node of rank_index 0 computes the checksum; the
 * buckets are dropped by their creators after a last wait. local is the
 * single-process original: it runs streams 0..streams-1 (param streams,
 * default 1) one after the other on plain memory. Results: ops,
 * ops_per_sec, seconds (the measured phase), gets, sets, checksum (low 48 bits, exact as a double; 0 on
 * every node but rank_index 0), and this node's counters of both
 * protocols (messages, bytes, cache_hits, cache_misses, moves,
 * invalidations, messages_per_op, bytes_per_op: apps/run_util.h) over
 * the measured phase. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps/coh.h"
#include "apps/kvc.h"
#include "apps/refuse.h"
#include "apps/run_util.h"
#include "apps/workloads.h"
#include "dsm/clock.h"

static const dsm_param_info_t kv_params[] = {
    {"protocol", "str", "own", "coherence: own (DRust), dir (GAM-style directory) or local (the original)"},
    {"lock", "str", "auto", "bucket locks: cas (one-sided) or deleg (at the home); for local, spin (one exchange to lock, a store to unlock: own's lock's shape), boxed (spin holding its bucket's address, as own's guarding mutex) or local (a pthread mutex); auto the faster in dsm-bench-drust's mutex_deleg_vs_cas for the node's transport (cas over shm, deleg otherwise; spin for local)"},
    {"buckets", "u64", "64", "hash buckets, each an object with its lock"},
    {"keys", "u64", "256", "distinct keys"},
    {"ops", "u64", "10000", "operations per node"},
    {"get_pct", "u64", "90", "percent of GETs (the rest are SETs)"},
    {"theta_milli", "u64", "990", "zipf skew of the keys, in thousandths"},
    {"seed", "u64", "42", "random seed"},
    {"checks", "u64", "2", "own's borrow checks for the run: 0 off, 1 on, 2 leave the node's setting"},
    {"guard", "u64", "1", "1 each bucket lives in its lock (Mutex<Box>: own's grant, or local's boxed lock, carries its address), 0 a box beside a mutex"},
    {"directory", "addr", "0", "8*(1+2*buckets) zeroed shared bytes for own and dir (0: pydsm's run makes one)"},
    {"streams", "u64", "1", "local only: key streams run one after the other"},
    {"timing", "u64", "0", "own and dir: 1 reports the ns the operations spent in each phase (t_acquire_ns: lock and bucket taken, t_work_ns, t_release_ns)"},
    {"history", "addr", "0", "own and dir: nodes*ops*56 zeroed shared bytes where each node records its operations (key, kind, the value seen, call and return times) for a linearizability check; 0 records nothing"},
};
/* The directory: an arrival counter, then each bucket's object and lock. */
static uint64_t kv_directory_bytes(uint64_t buckets) { return 8 * (1 + 2 * buckets); }

static uint64_t kv_scratch(const char *param, const void *args, size_t len, uint64_t nodes)
{
    (void)nodes;
    dsm_kvc_config_t cfg;
    dsm_kvc_config_default(&cfg);
    int bad = 0;
    uint64_t buckets = dsm_param_u64(args, len, "buckets", cfg.buckets, &bad);
    return bad ? 0 : dsm_apps_directory_scratch(param, args, len, kv_directory_bytes(buckets));
}

const dsm_workload_info_t dsm_kv_info = {
    "kv", "DRust's key-value workload (zipf GET/SET on a hash table) under own, dir or the original",
    dsm_workload_kv, kv_params, sizeof kv_params / sizeof kv_params[0], kv_scratch};

dsm_status_t dsm_workload_kv(dsm_node_t *node, const void *args, size_t len, void *ret, size_t cap,
                             size_t *ret_len)
{
    dsm_status_t begin = dsm_workload_begin(&dsm_kv_info, args, len, ret, cap, ret_len);
    if (begin != DSM_OK)
        return begin;
    int bad = 0;
    char proto[16] = "own", lockname[16] = "";
    dsm_param_str(args, len, "protocol", proto, sizeof proto, &bad);
    int bad_lock = 0;
    dsm_param_str(args, len, "lock", lockname, sizeof lockname, &bad_lock);
    dsm_kvc_config_t cfg;
    dsm_kvc_config_default(&cfg);
    uint64_t buckets = dsm_param_u64(args, len, "buckets", cfg.buckets, &bad);
    uint64_t keys = dsm_param_u64(args, len, "keys", cfg.keys, &bad);
    uint64_t get_pct = dsm_param_u64(args, len, "get_pct", cfg.get_pct, &bad);
    cfg.theta = (double)dsm_param_u64(args, len, "theta_milli", 990, &bad) / 1000.0;
    cfg.seed = dsm_param_u64(args, len, "seed", cfg.seed, &bad);
    uint64_t nops = dsm_param_u64(args, len, "ops", 10000, &bad);
    uint64_t index = dsm_param_u64(args, len, "rank_index", 0, &bad);
    uint64_t nodes = dsm_param_u64(args, len, "nodes", 1, &bad);
    uint64_t streams = dsm_param_u64(args, len, "streams", 1, &bad);
    dsm_gaddr_t directory = dsm_param_u64(args, len, "directory", 0, &bad);
    uint64_t checks = dsm_param_u64(args, len, "checks", 2, &bad);
    uint64_t guard = dsm_param_u64(args, len, "guard", 1, &bad);
    dsm_gaddr_t history = dsm_param_u64(args, len, "history", 0, &bad);
    uint64_t timing = dsm_param_u64(args, len, "timing", 0, &bad);
    const dsm_workload_info_t *w = &dsm_kv_info;
    /* dsm_workload_begin has checked the numbers; what is left is a value
     * out of range, or a name not known. */
    const dsm_coh_ops_t *ops = bad ? NULL : dsm_coh_ops(proto);
    if (ops == NULL)
        return dsm_apps_refuse_param(w, args, len, "protocol", ret, cap, ret_len, "own, dir or local");
    int local = strcmp(proto, "local") == 0;
    if (lockname[0] == '\0' || strcmp(lockname, "auto") == 0)
        snprintf(lockname, sizeof lockname, "%s",
                 local ? "spin" : node && dsm_node_config(node)->transport == DSM_TRANSPORT_SHM ? "cas" : "deleg");
    const dsm_coh_lock_ops_t *locks = bad_lock ? NULL : dsm_coh_locks(lockname);
    if (locks == NULL || local != locks->process)
        return dsm_apps_refuse_param(w, args, len, "lock", ret, cap, ret_len, "%s for protocol %s",
                                     local ? "spin, boxed, local or auto" : "cas, deleg or auto", proto);
    /* a bucket holds at most 1 MiB of entries (dsm_kvc_new) */
    uint64_t max_slots = (1u << 20) / (8 * (1ull + cfg.value_words));
    if (buckets == 0 || buckets > (1u << 20))
        return dsm_apps_refuse_param(w, args, len, "buckets", ret, cap, ret_len, "1..%u", 1u << 20);
    if (keys == 0 || keys > buckets * max_slots)
        return dsm_apps_refuse_param(w, args, len, "keys", ret, cap, ret_len, "1..%llu (%llu per bucket)",
                                     (unsigned long long)(buckets * max_slots), (unsigned long long)max_slots);
    if (get_pct > 100)
        return dsm_apps_refuse_param(w, args, len, "get_pct", ret, cap, ret_len, "0..100");
    if (nodes == 0 || nodes > DSM_MAX_RANKS)
        return dsm_apps_refuse_param(w, args, len, "nodes", ret, cap, ret_len, "1..%d", DSM_MAX_RANKS);
    if (index >= nodes)
        return dsm_apps_refuse_param(w, args, len, "rank_index", ret, cap, ret_len, "below nodes (%llu)",
                                     (unsigned long long)nodes);
    if (streams == 0 || streams > 1024)
        return dsm_apps_refuse_param(w, args, len, "streams", ret, cap, ret_len, "1..1024");
    if (checks > 2)
        return dsm_apps_refuse_param(w, args, len, "checks", ret, cap, ret_len, "0, 1 or 2");
    if (guard > 1)
        return dsm_apps_refuse_param(w, args, len, "guard", ret, cap, ret_len, "0 or 1");
    if (timing > 1 || (timing && local))
        return dsm_apps_refuse_param(w, args, len, "timing", ret, cap, ret_len, "0 or 1 (1 only for own and dir)");
    if (history != 0 && (local || history % 8 != 0 || nops > (1u << 20)))
        return dsm_apps_refuse_param(w, args, len, "history", ret, cap, ret_len,
                                     "0, or an 8-byte aligned global address for protocol own or dir with at most "
                                     "%u ops per node", 1u << 20);
    if (!local && (directory == 0 || node == NULL))
        return dsm_apps_refuse_param(w, args, len, "directory", ret, cap, ret_len,
                                     "the global address of 8*(1+2*buckets) = %llu zeroed shared bytes for protocol "
                                     "%s, run on a daemon (pydsm's run makes one when none is given)",
                                     (unsigned long long)kv_directory_bytes(buckets), proto);
    if (!local) {
        dsm_status_t fresh = dsm_apps_directory_fresh(w, node, directory, nodes, kv_directory_bytes(buckets), args, len,
                                                      ret, cap, ret_len);
        if (fresh != DSM_OK)
            return fresh;
    }
    cfg.buckets = (uint32_t)buckets;
    cfg.keys = (uint32_t)keys;
    cfg.slots = (cfg.keys + cfg.buckets - 1) / cfg.buckets;
    cfg.get_pct = (uint32_t)get_pct;
    cfg.guard = guard != 0;
    cfg.timing = (uint32_t)timing;
    if (checks < 2 && node && dsm_own_set_checks(node, (int)checks) != DSM_OK)
        return DSM_ERR_STATE;

    dsm_kvc_t *t;
    dsm_status_t st = dsm_kvc_new(ops, locks, &cfg, &t);
    if (st != DSM_OK)
        return st;
    dsm_kvc_record_t *records = NULL;
    if (history != 0 && (records = calloc(nops, sizeof *records)) == NULL) {
        dsm_kvc_destroy(t);
        return DSM_ERR_NOMEM;
    }
    dsm_kvc_record(t, records, nops);
    dsm_kvc_result_t res = {0};
    uint64_t sum = 0;
    /* the counters over the measured phase only (not the loading, the
       checksum's pass over every bucket or the drops) */
    dsm_coh_stats_t before = {0}, after = {0};
    dsm_apps_wire_t wire0 = {0, 0, 0, 0}, wire1 = {0, 0, 0, 0};   /* the fabric's counters over the measured phase */
    double seconds = 0;
    if (local) {
        for (uint32_t b = 0; b < cfg.buckets && st == DSM_OK; b++)
            st = dsm_kvc_create_bucket(t, NULL, b);
        double start = dsm_now_s();
        for (uint64_t s = 0; s < streams && st == DSM_OK; s++)
            st = dsm_kvc_run(t, NULL, (uint32_t)s, nops, &res);
        seconds = dsm_now_s() - start;
        if (st == DSM_OK)
            st = dsm_kvc_checksum(t, NULL, &sum);
        for (uint32_t b = 0; b < cfg.buckets; b++)
            (void)dsm_kvc_drop_bucket(t, NULL, b);
    } else {
        /* Create and publish this node's buckets. */
        for (uint32_t b = (uint32_t)index; b < cfg.buckets && st == DSM_OK; b += (uint32_t)nodes) {
            uint64_t h[2];
            if ((st = dsm_kvc_create_bucket(t, node, b)) == DSM_OK) {
                dsm_kvc_get_bucket(t, b, &h[0], &h[1]);
                st = dsm_write(node, directory + 8 + 16 * (uint64_t)b, h, 16);
            }
        }
        dsm_status_t rs = dsm_apps_rendezvous(node, directory, 1, nodes);
        st = st != DSM_OK ? st : rs;
        for (uint32_t b = 0; b < cfg.buckets && st == DSM_OK; b++) {
            uint64_t h[2];
            if ((st = dsm_read(node, directory + 8 + 16 * (uint64_t)b, h, 16)) == DSM_OK)
                st = dsm_kvc_set_bucket(t, b, h[0], h[1]);
        }
        dsm_apps_counters(node, &before);
        dsm_apps_wire(node, &wire0);
        double start = dsm_now_s();
        if (st == DSM_OK)
            st = dsm_kvc_run(t, node, (uint32_t)index, nops, &res);
        seconds = dsm_now_s() - start;
        dsm_apps_wire(node, &wire1);
        dsm_apps_counters(node, &after);
        if (st == DSM_OK && records != NULL)
            st = dsm_write(node, history + index * nops * sizeof *records, records,
                           dsm_kvc_recorded(t) * sizeof *records);
        rs = dsm_apps_rendezvous(node, directory, 2, nodes);
        st = st != DSM_OK ? st : rs;
        if (st == DSM_OK && index == 0)
            st = dsm_kvc_checksum(t, node, &sum);
        rs = dsm_apps_rendezvous(node, directory, 3, nodes);
        st = st != DSM_OK ? st : rs;
        for (uint32_t b = (uint32_t)index; b < cfg.buckets; b += (uint32_t)nodes)
            (void)dsm_kvc_drop_bucket(t, node, b);
    }
    dsm_kvc_destroy(t);
    free(records);
    if (st != DSM_OK)
        return st;
    if (res.torn || res.not_found)
        return DSM_ERR_STATE;
    double n = (double)(res.gets + res.sets);
    if (seconds <= 0)
        seconds = 1e-9;
    if ((st = dsm_result_add(ret, cap, ret_len, "ops", n, "ops")) != DSM_OK ||
        (st = dsm_result_add(ret, cap, ret_len, "ops_per_sec", n / seconds, "ops/s")) != DSM_OK ||
        (st = dsm_result_add(ret, cap, ret_len, "seconds", seconds, "s")) != DSM_OK ||
        (st = dsm_result_add(ret, cap, ret_len, "gets", (double)res.gets, "ops")) != DSM_OK ||
        (st = dsm_result_add(ret, cap, ret_len, "sets", (double)res.sets, "ops")) != DSM_OK ||
        (st = dsm_result_add_kind(ret, cap, ret_len, "checksum", (double)(sum & ((1ull << 48) - 1)), "",
                                  DSM_FIGURE_FIRST)) != DSM_OK)
        return st;
    static const char *const phase[DSM_KVC_T_COUNT] = {"t_acquire_ns", "t_work_ns", "t_release_ns"};
    for (int i = 0; i < DSM_KVC_T_COUNT && timing; i++)
        if ((st = dsm_result_add_kind(ret, cap, ret_len, phase[i], (double)res.ns[i], "ns", DSM_FIGURE_TOTAL)) !=
            DSM_OK)
            return st;
    if (timing && (st = dsm_apps_report_wire(&wire0, &wire1, ret, cap, ret_len)) != DSM_OK)
        return st;
    return dsm_apps_report_between(&before, &after, n, ret, cap, ret_len);
}
