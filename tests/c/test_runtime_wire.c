/* Unit tests of the runtime's pure parts: control-message codec (round trips
 * and malformed input), HMAC authentication, the function registry, address
 * parsing and workload parameters. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "apps/workloads.h"
#include "runtime/auth.h"
#include "runtime/ctl_wire.h"
#include "runtime/node_internal.h"
#include "runtime/sock.h"
#include "runtime/spawn_wire.h"
#include "runtime/internal.h"
#include "dsm/plugin.h"

static dsm_status_t roundtrip(const dsm_ctl_msg_t *in, dsm_ctl_msg_t *out, dsm_writer_t *w)
{
    assert_int_equal(dsm_ctl_encode(in, w), DSM_OK);
    dsm_ctl_header_t h;
    assert_int_equal(dsm_ctl_header_decode(w->buf, w->len, &h), DSM_OK);
    assert_int_equal(h.type, in->type);
    assert_int_equal(h.length, w->len - DSM_CTL_HEADER_LEN);
    return dsm_ctl_decode(h.type, w->buf + DSM_CTL_HEADER_LEN, h.length, out);
}

static void test_member_roundtrip(void **state)
{
    (void)state;
    uint8_t addr[300], key[40];
    for (size_t i = 0; i < sizeof addr; i++) addr[i] = (uint8_t)i;
    memset(key, 7, sizeof key);
    dsm_ctl_msg_t in = {.type = DSM_CTL_MEMBER}, out;
    in.u.member = (dsm_ctl_member_t){.rank = 5, .kind = DSM_MEMBER_DAEMON, .flags = DSM_CTL_MEMBER_ACK_WANTED,
                                     .addr = addr, .addr_len = sizeof addr};
    in.u.member.values.count = 3;
    in.u.member.values.v[0] = (dsm_ctl_value_t){.key = "heap.partition", .key_len = 14, .value = key,
                                                .value_len = sizeof key};
    in.u.member.values.v[1] = (dsm_ctl_value_t){.key = "x", .key_len = 1, .value = NULL, .value_len = 0};
    in.u.member.values.v[2] = (dsm_ctl_value_t){.key = "0123456789abcdef0123456789abcde", .key_len = 31,
                                                .value = addr, .value_len = 3};
    dsm_writer_t w = {0};
    assert_int_equal(roundtrip(&in, &out, &w), DSM_OK);
    assert_int_equal(out.u.member.rank, 5);
    assert_int_equal(out.u.member.flags, DSM_CTL_MEMBER_ACK_WANTED);
    assert_int_equal(out.u.member.addr_len, sizeof addr);
    assert_memory_equal(out.u.member.addr, addr, sizeof addr);
    assert_int_equal(out.u.member.values.count, 3);
    const dsm_ctl_value_t *v = dsm_ctl_values_find(&out.u.member.values, "heap.partition");
    assert_non_null(v);
    assert_int_equal(v->value_len, sizeof key);
    assert_memory_equal(v->value, key, sizeof key);
    v = dsm_ctl_values_find(&out.u.member.values, "x");
    assert_non_null(v);
    assert_int_equal(v->value_len, 0);
    v = dsm_ctl_values_find(&out.u.member.values, "0123456789abcdef0123456789abcde");
    assert_non_null(v);
    assert_memory_equal(v->value, addr, 3);
    assert_null(dsm_ctl_values_find(&out.u.member.values, "heap"));
    /* An owned copy outlives the buffer it was decoded from. */
    dsm_ctl_values_t *copy = dsm_ctl_values_dup(&out.u.member.values);
    assert_non_null(copy);

    /* Every truncation of the payload is refused, never over-read. */
    dsm_ctl_msg_t junk;
    for (size_t cut = 0; cut < w.len - DSM_CTL_HEADER_LEN; cut++)
        assert_int_equal(dsm_ctl_decode(DSM_CTL_MEMBER, w.buf + DSM_CTL_HEADER_LEN, cut, &junk), DSM_ERR_PROTO);
    /* A trailing byte is as wrong as a missing one. */
    uint8_t longer[1024];
    size_t n = w.len - DSM_CTL_HEADER_LEN;
    memcpy(longer, w.buf + DSM_CTL_HEADER_LEN, n);
    longer[n] = 0;
    assert_int_equal(dsm_ctl_decode(DSM_CTL_MEMBER, longer, n + 1, &junk), DSM_ERR_PROTO);
    dsm_writer_free(&w);
    v = dsm_ctl_values_find(copy, "heap.partition");
    assert_non_null(v);
    assert_memory_equal(v->value, key, sizeof key);
    free(copy);
    /* No values at all is the common case (clients). */
    in.u.member.values.count = 0;
    assert_int_equal(roundtrip(&in, &out, &w), DSM_OK);
    assert_int_equal(out.u.member.values.count, 0);
    dsm_writer_free(&w);
}

/* A member entry with addr {1,2,3,4} and the raw values list vals[0..n). */
static size_t raw_member(uint8_t *buf, const uint8_t *vals, size_t n)
{
    dsm_put_u32(buf, 1);       /* rank */
    dsm_put_u16(buf + 4, 0);   /* daemon */
    dsm_put_u16(buf + 6, 0);   /* flags */
    dsm_put_u32(buf + 8, 4);   /* addr_len */
    memcpy(buf + 12, "\1\2\3\4", 4);
    memcpy(buf + 16, vals, n);
    return 16 + n;
}

static void test_bad_member_values_refused(void **state)
{
    (void)state;
    static uint8_t buf[2 * DSM_NODE_MAX_VALUE_BYTES], vals[2 * DSM_NODE_MAX_VALUE_BYTES];
    dsm_ctl_msg_t out;
    /* Well formed: one pair "k" = "v". */
    const uint8_t good[] = {1, 0, 1, 'k', 1, 0, 'v'};
    size_t n = raw_member(buf, good, sizeof good);
    assert_int_equal(dsm_ctl_decode(DSM_CTL_MEMBER, buf, n, &out), DSM_OK);
    assert_int_equal(out.u.member.values.count, 1);
    /* A count the list does not hold. */
    const uint8_t short_list[] = {2, 0, 1, 'k', 1, 0, 'v'};
    n = raw_member(buf, short_list, sizeof short_list);
    assert_int_equal(dsm_ctl_decode(DSM_CTL_MEMBER, buf, n, &out), DSM_ERR_PROTO);
    /* More pairs than a node may publish (each pair empty-valued, distinct). */
    size_t k = 0;
    dsm_put_u16(vals, DSM_NODE_MAX_VALUES + 1);
    k = 2;
    for (int i = 0; i <= DSM_NODE_MAX_VALUES; i++) {
        vals[k++] = 2;
        vals[k++] = 'k';
        vals[k++] = (uint8_t)('a' + i);
        vals[k++] = 0;
        vals[k++] = 0;
    }
    n = raw_member(buf, vals, k);
    assert_int_equal(dsm_ctl_decode(DSM_CTL_MEMBER, buf, n, &out), DSM_ERR_PROTO);
    /* Exactly the maximum is fine. */
    dsm_put_u16(vals, DSM_NODE_MAX_VALUES);
    n = raw_member(buf, vals, k - 5);
    assert_int_equal(dsm_ctl_decode(DSM_CTL_MEMBER, buf, n, &out), DSM_OK);
    /* An empty key, a key too long, a key with a NUL. */
    const uint8_t empty_key[] = {1, 0, 0, 1, 0, 'v'};
    n = raw_member(buf, empty_key, sizeof empty_key);
    assert_int_equal(dsm_ctl_decode(DSM_CTL_MEMBER, buf, n, &out), DSM_ERR_PROTO);
    k = 0;
    vals[k++] = 1;
    vals[k++] = 0;
    vals[k++] = DSM_NODE_MAX_KEY + 1;
    memset(vals + k, 'k', DSM_NODE_MAX_KEY + 1);
    k += DSM_NODE_MAX_KEY + 1;
    vals[k++] = 0;
    vals[k++] = 0;
    n = raw_member(buf, vals, k);
    assert_int_equal(dsm_ctl_decode(DSM_CTL_MEMBER, buf, n, &out), DSM_ERR_PROTO);
    const uint8_t nul_key[] = {1, 0, 2, 'k', 0, 0, 0};
    n = raw_member(buf, nul_key, sizeof nul_key);
    assert_int_equal(dsm_ctl_decode(DSM_CTL_MEMBER, buf, n, &out), DSM_ERR_PROTO);
    /* The same key twice. */
    const uint8_t twice[] = {2, 0, 1, 'k', 0, 0, 1, 'k', 1, 0, 'v'};
    n = raw_member(buf, twice, sizeof twice);
    assert_int_equal(dsm_ctl_decode(DSM_CTL_MEMBER, buf, n, &out), DSM_ERR_PROTO);
    /* A value length past the end of the message. */
    const uint8_t overrun[] = {1, 0, 1, 'k', 0xff, 0x7f, 'v'};
    n = raw_member(buf, overrun, sizeof overrun);
    assert_int_equal(dsm_ctl_decode(DSM_CTL_MEMBER, buf, n, &out), DSM_ERR_PROTO);
    /* Values adding up to more than a node may publish, in two pairs. */
    k = 0;
    dsm_put_u16(vals, 2);
    k = 2;
    for (int i = 0; i < 2; i++) {
        vals[k++] = 1;
        vals[k++] = (uint8_t)('a' + i);
        uint16_t len = DSM_NODE_MAX_VALUE_BYTES / 2 + (i == 1);
        dsm_put_u16(vals + k, len);
        k += 2;
        memset(vals + k, 'v', len);
        k += len;
    }
    n = raw_member(buf, vals, k);
    assert_int_equal(dsm_ctl_decode(DSM_CTL_MEMBER, buf, n, &out), DSM_ERR_PROTO);
    /* One byte less is accepted. */
    dsm_put_u16(vals + k - (DSM_NODE_MAX_VALUE_BYTES / 2 + 1) - 2, DSM_NODE_MAX_VALUE_BYTES / 2);
    n = raw_member(buf, vals, k - 1);
    assert_int_equal(dsm_ctl_decode(DSM_CTL_MEMBER, buf, n, &out), DSM_OK);

    /* The encoder refuses what the decoder would. */
    dsm_ctl_msg_t in = {.type = DSM_CTL_MEMBER};
    uint8_t addr[4] = {1, 2, 3, 4};
    in.u.member = (dsm_ctl_member_t){.rank = 1, .addr = addr, .addr_len = 4};
    in.u.member.values.count = 2;
    in.u.member.values.v[0] = (dsm_ctl_value_t){.key = "k", .key_len = 1};
    in.u.member.values.v[1] = (dsm_ctl_value_t){.key = "k", .key_len = 1};
    dsm_writer_t w = {0};
    assert_int_equal(dsm_ctl_encode(&in, &w), DSM_ERR_INVALID);
    dsm_writer_free(&w);
    in.u.member.values.count = DSM_NODE_MAX_VALUES + 1;
    assert_int_equal(dsm_ctl_encode(&in, &w), DSM_ERR_INVALID);
    dsm_writer_free(&w);
}

static void test_bad_values_refused(void **state)
{
    (void)state;
    uint8_t addr[4] = {1, 2, 3, 4};
    dsm_ctl_msg_t in = {.type = DSM_CTL_MEMBER}, out;
    in.u.member = (dsm_ctl_member_t){.rank = 300, .addr = addr, .addr_len = 4};
    dsm_writer_t w = {0};
    assert_int_equal(roundtrip(&in, &out, &w), DSM_ERR_PROTO); /* rank outside the table */
    dsm_writer_free(&w);

    in.u.member.rank = 1;
    in.u.member.addr_len = 0;
    assert_int_equal(roundtrip(&in, &out, &w), DSM_ERR_PROTO); /* no worker address */
    dsm_writer_free(&w);

    in.u.member.addr_len = 4;
    in.u.member.flags = DSM_CTL_MEMBER_ACK_WANTED | DSM_CTL_MEMBER_READY_FLAG;
    assert_int_equal(roundtrip(&in, &out, &w), DSM_OK);
    assert_int_equal(out.u.member.flags, DSM_CTL_MEMBER_ACK_WANTED | DSM_CTL_MEMBER_READY_FLAG);
    dsm_writer_free(&w);
    in.u.member.flags = 4;
    assert_int_equal(roundtrip(&in, &out, &w), DSM_ERR_PROTO); /* an unknown flag */
    dsm_writer_free(&w);

    /* The messages that carry one rank: one in range round-trips, one past
     * the limit is refused. */
    static const uint16_t rank_types[] = {DSM_CTL_DEAD, DSM_CTL_LEFT, DSM_CTL_LEFT_ACK, DSM_CTL_SUSPECT,
                                          DSM_CTL_MEMBER_ACK, DSM_CTL_MEMBER_READY};
    for (size_t i = 0; i < sizeof rank_types / sizeof rank_types[0]; i++) {
        dsm_ctl_msg_t m = {.type = rank_types[i]};
        m.u.dead.rank = 3;
        assert_int_equal(roundtrip(&m, &out, &w), DSM_OK);
        assert_int_equal(out.type, rank_types[i]);
        assert_int_equal(out.u.dead.rank, 3);
        dsm_writer_free(&w);
        m.u.dead.rank = 999;
        assert_int_equal(roundtrip(&m, &out, &w), DSM_ERR_PROTO);
        dsm_writer_free(&w);
    }

    dsm_ctl_msg_t refuse = {.type = DSM_CTL_REFUSE};
    refuse.u.refuse.status = DSM_ERR_AUTH;
    strcpy(refuse.u.refuse.reason, "wrong cluster secret");
    assert_int_equal(roundtrip(&refuse, &out, &w), DSM_OK);
    assert_int_equal(out.u.refuse.status, DSM_ERR_AUTH);
    assert_string_equal(out.u.refuse.reason, "wrong cluster secret");
    dsm_writer_free(&w);
}

static void test_header_checks(void **state)
{
    (void)state;
    dsm_ctl_msg_t hb = {.type = DSM_CTL_HEARTBEAT};
    dsm_writer_t w = {0};
    assert_int_equal(dsm_ctl_encode(&hb, &w), DSM_OK);
    dsm_ctl_header_t h;
    assert_int_equal(dsm_ctl_header_decode(w.buf, w.len, &h), DSM_OK);
    assert_int_equal(dsm_ctl_header_decode(w.buf, DSM_CTL_HEADER_LEN - 1, &h), DSM_ERR_PROTO);
    uint8_t bad[DSM_CTL_HEADER_LEN];
    memcpy(bad, w.buf, sizeof bad);
    bad[0] ^= 0xff; /* magic */
    assert_int_equal(dsm_ctl_header_decode(bad, sizeof bad, &h), DSM_ERR_PROTO);
    assert_int_equal(h.version, 0);   /* not ours: no version to name */
    memcpy(bad, w.buf, sizeof bad);
    bad[4] = DSM_CTL_VERSION + 1; /* version */
    assert_int_equal(dsm_ctl_header_decode(bad, sizeof bad, &h), DSM_ERR_PROTO);
    assert_int_equal(h.version, DSM_CTL_VERSION + 1);   /* named, so a refusal can say which */
    assert_int_equal(dsm_ctl_header_decode(w.buf, w.len, &h), DSM_OK);
    assert_int_equal(h.version, DSM_CTL_VERSION);
    memcpy(bad, w.buf, sizeof bad);
    bad[6] = 200; /* type */
    assert_int_equal(dsm_ctl_header_decode(bad, sizeof bad, &h), DSM_ERR_PROTO);
    memcpy(bad, w.buf, sizeof bad);
    dsm_put_u32(bad + 8, DSM_CTL_MAX_PAYLOAD + 1); /* oversized */
    assert_int_equal(dsm_ctl_header_decode(bad, sizeof bad, &h), DSM_ERR_PROTO);
    dsm_writer_free(&w);
}

static void test_hello_mac(void **state)
{
    (void)state;
    uint8_t addr[16] = {9};
    dsm_ctl_msg_t hello = {.type = DSM_CTL_HELLO}, out;
    memset(hello.u.hello.nonce, 3, DSM_CTL_NONCE_LEN);
    hello.u.hello.self = (dsm_ctl_member_t){.rank = DSM_RANK_ANY, .kind = DSM_MEMBER_CLIENT,
                                            .addr = addr, .addr_len = sizeof addr};
    uint8_t challenge[DSM_CTL_NONCE_LEN];
    assert_int_equal(dsm_auth_nonce(challenge, sizeof challenge), DSM_OK);
    dsm_writer_t body = {0};
    dsm_ctl_encode_hello_body(&hello, &body);
    assert_int_equal(dsm_auth_mac("s3cret", "dsm-join-v1", challenge, sizeof challenge, body.buf, body.len,
                                  hello.u.hello.mac), DSM_OK);
    dsm_writer_t w = {0};
    assert_int_equal(roundtrip(&hello, &out, &w), DSM_OK);
    assert_int_equal(out.u.hello.self.rank, DSM_RANK_ANY);
    uint8_t expect[32];
    dsm_auth_mac("s3cret", "dsm-join-v1", challenge, sizeof challenge, out.u.hello.body, out.u.hello.body_len, expect);
    assert_true(dsm_auth_equal(expect, out.u.hello.mac, 32));
    dsm_auth_mac("wrong", "dsm-join-v1", challenge, sizeof challenge, out.u.hello.body, out.u.hello.body_len, expect);
    assert_false(dsm_auth_equal(expect, out.u.hello.mac, 32));
    /* Tampering with the body (the worker address's last byte, just before
     * the empty value list's u16 count) breaks the mac. */
    ((uint8_t *)w.buf)[w.len - 3] ^= 1;
    dsm_ctl_header_t h;
    dsm_ctl_header_decode(w.buf, w.len, &h);
    assert_int_equal(dsm_ctl_decode(h.type, w.buf + DSM_CTL_HEADER_LEN, h.length, &out), DSM_OK);
    dsm_auth_mac("s3cret", "dsm-join-v1", challenge, sizeof challenge, out.u.hello.body, out.u.hello.body_len, expect);
    assert_false(dsm_auth_equal(expect, out.u.hello.mac, 32));
    dsm_writer_free(&w);
    dsm_writer_free(&body);
}

static dsm_status_t fn_a(dsm_node_t *n, const void *a, size_t l, void *r, size_t c, size_t *rl)
{
    (void)n; (void)a; (void)l; (void)r; (void)c; (void)rl;
    return DSM_OK;
}
static dsm_status_t fn_b(dsm_node_t *n, const void *a, size_t l, void *r, size_t c, size_t *rl)
{
    (void)n; (void)a; (void)l; (void)r; (void)c; (void)rl;
    return DSM_ERR_INVALID;
}

static void test_registry(void **state)
{
    (void)state;
    uint32_t id;
    assert_int_equal(dsm_lookup("test.a", &id), DSM_ERR_NO_HANDLER);
    assert_int_equal(dsm_register("test.a", fn_a), DSM_OK);
    assert_int_equal(dsm_register("test.a", fn_a), DSM_OK);       /* idempotent */
    assert_int_equal(dsm_register("test.a", fn_b), DSM_ERR_EXISTS); /* a different function */
    assert_int_equal(dsm_register("", fn_a), DSM_ERR_INVALID);
    assert_int_equal(dsm_lookup("test.a", &id), DSM_OK);
    assert_int_equal(id, dsm_registry_id("test.a"));
    assert_ptr_equal(dsm_registry_find(id, NULL), fn_a);
    assert_null(dsm_registry_find(dsm_registry_id("test.missing"), NULL));
    int seen = 0;
    for (uint32_t i = 0; dsm_registered_name(i); i++) seen += strcmp(dsm_registered_name(i), "test.a") == 0;
    assert_int_equal(seen, 1);
}

static void test_sock_parse(void **state)
{
    (void)state;
    char host[64];
    uint16_t port;
    assert_int_equal(dsm_sock_parse("127.0.0.1:4000", host, sizeof host, &port), DSM_OK);
    assert_string_equal(host, "127.0.0.1");
    assert_int_equal(port, 4000);
    assert_int_equal(dsm_sock_parse("[::1]:80", host, sizeof host, &port), DSM_OK);
    assert_string_equal(host, "::1");
    assert_int_equal(dsm_sock_parse("nohost", host, sizeof host, &port), DSM_ERR_INVALID);
    assert_int_equal(dsm_sock_parse("h:99999", host, sizeof host, &port), DSM_ERR_INVALID);
    assert_int_equal(dsm_sock_parse("h:12x", host, sizeof host, &port), DSM_ERR_INVALID);
}

static void test_params(void **state)
{
    (void)state;
    const char *args = "iters=500\ncounter=0x10000000040\nbad=12z\n";
    int bad = 0;
    assert_int_equal(dsm_param_u64(args, strlen(args), "iters", 1, &bad), 500);
    assert_int_equal(dsm_param_u64(args, strlen(args), "counter", 0, &bad), 0x10000000040ull);
    assert_int_equal(dsm_param_u64(args, strlen(args), "threads", 7, &bad), 7);
    assert_int_equal(bad, 0);
    dsm_param_u64(args, strlen(args), "bad", 0, &bad);
    assert_int_equal(bad, 1);
    /* Placement: 2 nodes x 2 threads on 4 CPUs. */
    static const struct { const char *args; unsigned thread; long cpus; int cpu; } cases[] = {
        {"pin=compact\nthreads=2\nrank_index=1\nnodes=2\n", 0, 4, 2},
        {"pin=compact\nthreads=2\nrank_index=1\nnodes=2\n", 1, 4, 3},
        {"pin=scatter\nthreads=2\nrank_index=1\nnodes=2\n", 0, 4, 1},
        {"pin=scatter\nthreads=2\nrank_index=1\nnodes=2\n", 1, 4, 3},
        {"pin=compact\nthreads=2\nrank_index=1\nnodes=2\n", 1, 2, 1}, /* wraps */
        {"threads=2\n", 1, 4, -1},                                     /* default: none */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int cpu = -7;
        assert_int_equal(dsm_workload_cpu(cases[i].args, strlen(cases[i].args), cases[i].thread, cases[i].cpus, &cpu),
                         DSM_OK);
        assert_int_equal(cpu, cases[i].cpu);
    }
    int cpu;
    assert_int_equal(dsm_workload_cpu("pin=diagonal\n", 13, 0, 4, &cpu), DSM_ERR_INVALID);
    const char *outside = "pin=compact\nrank_index=3\nnodes=2\n";
    assert_int_equal(dsm_workload_cpu(outside, strlen(outside), 0, 4, &cpu), DSM_ERR_INVALID);
    char out[64];
    size_t len = 0;
    assert_int_equal(dsm_result_add(out, sizeof out, &len, "ops_per_sec", 1.5e6, "ops/s"), DSM_OK);
    assert_int_equal(dsm_result_add(out, 20, &len, "way_too_long_a_name", 1, "x"), DSM_ERR_TOO_BIG);
    assert_memory_equal(out, "ops_per_sec 1500000 ops/s\n", len);   /* %.15g: exact to 15 digits */
}

/* A spawn's header, its acknowledgement, a result's header and a token
 * round-trip; the notice bit rides the spawn's token only; short headers,
 * tokens of 0 and tokens of another length are refused. */
static void test_spawn_wire(void **state)
{
    (void)state;
    uint8_t b[DSM_SPAWN_HEADER_LEN + 2] = {0};
    dsm_spawn_header_t h = {.fn_id = 0xabcd1234u, .token = 77, .notify = 1}, got;
    dsm_spawn_header_encode(b, &h);
    assert_int_equal(b[11], 0x80);   /* the notice bit: the token's top bit, little-endian */
    assert_int_equal(dsm_spawn_header_decode(b, sizeof b, &got), DSM_OK);
    assert_int_equal(got.fn_id, h.fn_id);
    assert_int_equal(got.token, 77);
    assert_int_equal(got.notify, 1);
    h.notify = 0;
    dsm_spawn_header_encode(b, &h);
    assert_int_equal(dsm_spawn_header_decode(b, DSM_SPAWN_HEADER_LEN, &got), DSM_OK);
    assert_int_equal(got.notify, 0);
    assert_int_equal(dsm_spawn_header_decode(b, DSM_SPAWN_HEADER_LEN - 1, &got), DSM_ERR_PROTO);
    h.token = 0;
    dsm_spawn_header_encode(b, &h);
    assert_int_equal(dsm_spawn_header_decode(b, sizeof b, &got), DSM_ERR_PROTO);
    uint8_t t[DSM_SPAWN_TOKEN_LEN + 1] = {0};
    uint64_t token = 0;
    dsm_spawn_token_encode(t, 77);
    assert_int_equal(dsm_spawn_token_decode(t, DSM_SPAWN_TOKEN_LEN, &token), DSM_OK);
    assert_int_equal(token, 77);
    assert_int_equal(dsm_spawn_token_decode(t, DSM_SPAWN_TOKEN_LEN + 1, &token), DSM_ERR_PROTO);
    assert_int_equal(dsm_spawn_token_decode(t, 3, &token), DSM_ERR_PROTO);
    t[7] = 0x80;
    assert_int_equal(dsm_spawn_token_decode(t, DSM_SPAWN_TOKEN_LEN, &token), DSM_ERR_PROTO);
    memset(t, 0, sizeof t);
    assert_int_equal(dsm_spawn_token_decode(t, DSM_SPAWN_TOKEN_LEN, &token), DSM_ERR_PROTO);
    /* an acknowledgement: OK with exactly the token, or an error and no
     * bytes (that error comes back); anything else is PROTO */
    uint8_t a[DSM_SPAWN_TOKEN_LEN + 1] = {0};
    dsm_spawn_ack_encode(a, 41);
    token = 0;
    assert_int_equal(dsm_spawn_ack_decode(DSM_OK, a, DSM_SPAWN_TOKEN_LEN, &token), DSM_OK);
    assert_int_equal(token, 41);
    assert_int_equal(dsm_spawn_ack_decode(DSM_OK, a, DSM_SPAWN_TOKEN_LEN + 1, &token), DSM_ERR_PROTO);
    assert_int_equal(dsm_spawn_ack_decode(DSM_OK, a, 0, &token), DSM_ERR_PROTO);
    assert_int_equal(dsm_spawn_ack_decode(DSM_ERR_BUSY, NULL, 0, &token), DSM_ERR_BUSY);
    assert_int_equal(dsm_spawn_ack_decode(DSM_ERR_NO_HANDLER, NULL, 0, &token), DSM_ERR_NO_HANDLER);
    assert_int_equal(dsm_spawn_ack_decode(DSM_ERR_BUSY, a, DSM_SPAWN_TOKEN_LEN, &token), DSM_ERR_PROTO);
    assert_int_equal(dsm_spawn_ack_decode((dsm_status_t)1, NULL, 0, &token), DSM_ERR_PROTO);
    assert_int_equal(dsm_spawn_ack_decode((dsm_status_t)-65, NULL, 0, &token), DSM_ERR_PROTO);
    /* a result header: token and status round-trip; short
     * headers, tokens of 0 or with the top bit and positive or out-of-range
     * statuses are refused */
    uint8_t r[DSM_SPAWN_RESULT_HEADER_LEN + 4] = {0};
    dsm_status_t st = DSM_OK;
    dsm_spawn_result_encode(r, 99, DSM_ERR_BUSY);
    assert_int_equal(dsm_spawn_result_decode(r, sizeof r, &token, &st), DSM_OK);
    assert_int_equal(token, 99);
    assert_int_equal(st, DSM_ERR_BUSY);
    dsm_spawn_result_encode(r, 99, DSM_OK);
    assert_int_equal(dsm_spawn_result_decode(r, DSM_SPAWN_RESULT_HEADER_LEN, &token, &st), DSM_OK);
    assert_int_equal(st, DSM_OK);
    assert_int_equal(dsm_spawn_result_decode(r, DSM_SPAWN_RESULT_HEADER_LEN - 1, &token, &st), DSM_ERR_PROTO);
    dsm_spawn_result_encode(r, 0, DSM_OK);
    assert_int_equal(dsm_spawn_result_decode(r, sizeof r, &token, &st), DSM_ERR_PROTO);
    dsm_spawn_result_encode(r, 1ull << 63, DSM_OK);
    assert_int_equal(dsm_spawn_result_decode(r, sizeof r, &token, &st), DSM_ERR_PROTO);
    dsm_spawn_result_encode(r, 5, (dsm_status_t)1);
    assert_int_equal(dsm_spawn_result_decode(r, sizeof r, &token, &st), DSM_ERR_PROTO);
    dsm_spawn_result_encode(r, 5, (dsm_status_t)-65);
    assert_int_equal(dsm_spawn_result_decode(r, sizeof r, &token, &st), DSM_ERR_PROTO);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_member_roundtrip), cmocka_unit_test(test_bad_member_values_refused),
        cmocka_unit_test(test_bad_values_refused),
        cmocka_unit_test(test_header_checks),    cmocka_unit_test(test_hello_mac),
        cmocka_unit_test(test_registry),         cmocka_unit_test(test_sock_parse),
        cmocka_unit_test(test_params),           cmocka_unit_test(test_spawn_wire),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
