/* Encoding and checked decoding of control-plane messages, and the owned
 * copies of a member's published values that outlive a decoded message. */
#include "runtime/ctl_wire.h"

#include <stdlib.h>
#include <string.h>

#include "dsm/fabric.h"
#include "dsm/node.h"

dsm_status_t dsm_ctl_header_decode(const uint8_t *buf, size_t len, dsm_ctl_header_t *out)
{
    dsm_reader_t r = dsm_reader(buf, len);
    uint32_t magic = dsm_take_u32(&r);
    uint16_t version = dsm_take_u16(&r);
    uint16_t type = dsm_take_u16(&r);
    uint32_t length = dsm_take_u32(&r);
    uint32_t flags = dsm_take_u32(&r);
    out->version = r.ok && magic == DSM_CTL_MAGIC ? version : 0;
    if (!r.ok || magic != DSM_CTL_MAGIC || version != DSM_CTL_VERSION) return DSM_ERR_PROTO;
    if (flags & ~(uint32_t)DSM_CTL_FLAG_SEALED) return DSM_ERR_PROTO;
    size_t most = DSM_CTL_MAX_PAYLOAD + (flags & DSM_CTL_FLAG_SEALED ? DSM_CTL_SEAL_LEN : 0);
    if (type == 0 || type > DSM_CTL_TYPE_MAX || length > most) return DSM_ERR_PROTO;
    if ((flags & DSM_CTL_FLAG_SEALED) && length < DSM_CTL_SEAL_LEN) return DSM_ERR_PROTO;
    out->type = type;
    out->length = length;
    out->flags = flags;
    return DSM_OK;
}

size_t dsm_ctl_rx_capacity(size_t cap, size_t len, size_t max_payload)
{
    enum { SLACK = 4096, FIRST = 8192 };
    /* One whole frame plus room for one more read: a frame of exactly
     * max_payload fits; more than that unparsed is a frame too long. */
    size_t most = DSM_CTL_HEADER_LEN + max_payload + SLACK;
    if (len >= most) return 0;
    if (cap - len >= SLACK || cap >= most) return cap;
    size_t next = cap ? cap * 2 : FIRST;
    return next > most ? most : next;
}

static int key_ok(const char *key, size_t len)
{
    if (len == 0 || len > DSM_NODE_MAX_KEY) return 0;
    return memchr(key, 0, len) == NULL;
}

dsm_status_t dsm_ctl_values_check(const dsm_ctl_values_t *values)
{
    if (values->count > DSM_NODE_MAX_VALUES) return DSM_ERR_TOO_BIG;
    size_t total = 0;
    for (unsigned i = 0; i < values->count; i++) {
        const dsm_ctl_value_t *v = &values->v[i];
        if (!key_ok(v->key, v->key_len)) return DSM_ERR_INVALID;
        total += v->value_len;
        if (total > DSM_NODE_MAX_VALUE_BYTES) return DSM_ERR_TOO_BIG;
        for (unsigned j = 0; j < i; j++)
            if (values->v[j].key_len == v->key_len && memcmp(values->v[j].key, v->key, v->key_len) == 0)
                return DSM_ERR_EXISTS;
    }
    return DSM_OK;
}

const dsm_ctl_value_t *dsm_ctl_values_find(const dsm_ctl_values_t *values, const char *key)
{
    size_t len = strlen(key);
    for (unsigned i = 0; values && i < values->count; i++)
        if (values->v[i].key_len == len && memcmp(values->v[i].key, key, len) == 0) return &values->v[i];
    return NULL;
}

dsm_ctl_values_t *dsm_ctl_values_dup(const dsm_ctl_values_t *in)
{
    static const dsm_ctl_values_t empty;
    if (!in) in = &empty;
    size_t bytes = 0;
    for (unsigned i = 0; i < in->count; i++) bytes += (size_t)in->v[i].key_len + in->v[i].value_len;
    dsm_ctl_values_t *out = malloc(sizeof *out + bytes);
    if (!out) return NULL;
    memset(out, 0, sizeof *out);
    uint8_t *p = (uint8_t *)(out + 1);
    out->count = in->count;
    for (unsigned i = 0; i < in->count; i++) {
        const dsm_ctl_value_t *v = &in->v[i];
        memcpy(p, v->key, v->key_len);
        out->v[i].key = (const char *)p;
        out->v[i].key_len = v->key_len;
        p += v->key_len;
        if (v->value_len) memcpy(p, v->value, v->value_len);
        out->v[i].value = p;
        out->v[i].value_len = v->value_len;
        p += v->value_len;
    }
    return out;
}

static void take_values(dsm_reader_t *r, dsm_ctl_values_t *vs)
{
    vs->count = dsm_take_u16(r);
    if (vs->count > DSM_NODE_MAX_VALUES) { r->ok = 0; return; }
    for (unsigned i = 0; i < vs->count && r->ok; i++) {
        dsm_ctl_value_t *v = &vs->v[i];
        const uint8_t *p = dsm_take(r, 1);
        v->key_len = p ? p[0] : 0;
        v->key = (const char *)dsm_take(r, v->key_len);
        v->value_len = dsm_take_u16(r);
        v->value = dsm_take(r, v->value_len);
    }
    /* Bounds, key syntax, distinct keys: the same rules as dsm_node_publish. */
    if (r->ok && dsm_ctl_values_check(vs) != DSM_OK) r->ok = 0;
}

static void write_values(dsm_writer_t *w, const dsm_ctl_values_t *vs)
{
    dsm_write_u16(w, vs->count);
    for (unsigned i = 0; i < vs->count; i++) {
        uint8_t key_len = vs->v[i].key_len;
        dsm_write_bytes(w, &key_len, 1);
        dsm_write_bytes(w, vs->v[i].key, key_len);
        dsm_write_u16(w, vs->v[i].value_len);
        dsm_write_bytes(w, vs->v[i].value, vs->v[i].value_len);
    }
}

static void take_member(dsm_reader_t *r, dsm_ctl_member_t *m)
{
    m->rank = (int32_t)dsm_take_u32(r);
    m->kind = dsm_take_u16(r);
    m->flags = dsm_take_u16(r);
    m->addr_len = dsm_take_u32(r);
    m->addr = m->addr_len <= DSM_CTL_MAX_ADDR ? dsm_take(r, m->addr_len) : (r->ok = 0, NULL);
    take_values(r, &m->values);
    if (!r->ok) return;
    /* Ranks name table slots: anything outside the table is malformed. */
    if (m->kind > DSM_MEMBER_CLIENT || m->flags > (DSM_CTL_MEMBER_ACK_WANTED | DSM_CTL_MEMBER_READY_FLAG) || m->addr_len == 0 ||
        (m->rank != DSM_RANK_ANY && (m->rank < 0 || m->rank >= DSM_MAX_RANKS)))
        r->ok = 0;
}

static dsm_status_t write_member(dsm_writer_t *w, const dsm_ctl_member_t *m)
{
    dsm_status_t st = dsm_ctl_values_check(&m->values);
    if (st != DSM_OK) return DSM_ERR_INVALID;
    dsm_write_u32(w, (uint32_t)m->rank);
    dsm_write_u16(w, m->kind);
    dsm_write_u16(w, m->flags);
    dsm_write_u32(w, m->addr_len);
    dsm_write_bytes(w, m->addr, m->addr_len);
    write_values(w, &m->values);
    return DSM_OK;
}

dsm_status_t dsm_ctl_decode(uint16_t type, const uint8_t *payload, size_t len, dsm_ctl_msg_t *out)
{
    dsm_reader_t r = dsm_reader(payload, len);
    memset(out, 0, sizeof *out);
    out->type = type;
    const uint8_t *p;
    switch (type) {
    case DSM_CTL_CHALLENGE:
        if ((p = dsm_take(&r, DSM_CTL_NONCE_LEN))) memcpy(out->u.challenge.nonce, p, DSM_CTL_NONCE_LEN);
        out->u.challenge.transport = dsm_take_u16(&r);
        if (r.ok && out->u.challenge.transport > DSM_TRANSPORT_VERBS) r.ok = 0;
        break;
    case DSM_CTL_HELLO:
        if ((p = dsm_take(&r, DSM_CTL_MAC_LEN))) memcpy(out->u.hello.mac, p, DSM_CTL_MAC_LEN);
        out->u.hello.body = r.p;
        out->u.hello.body_len = r.left;
        if ((p = dsm_take(&r, DSM_CTL_NONCE_LEN))) memcpy(out->u.hello.nonce, p, DSM_CTL_NONCE_LEN);
        take_member(&r, &out->u.hello.self);
        break;
    case DSM_CTL_WELCOME:
        out->u.welcome.rank = (int32_t)dsm_take_u32(&r);
        if ((p = dsm_take(&r, DSM_CTL_MAC_LEN))) memcpy(out->u.welcome.mac, p, DSM_CTL_MAC_LEN);
        out->u.welcome.heartbeat_ms = dsm_take_u32(&r);
        out->u.welcome.peer_timeout_ms = dsm_take_u32(&r);
        if (r.ok && (out->u.welcome.rank < 0 || out->u.welcome.rank >= DSM_MAX_RANKS)) r.ok = 0;
        break;
    case DSM_CTL_REFUSE: {
        out->u.refuse.status = (int32_t)dsm_take_u32(&r);
        uint32_t n = dsm_take_u32(&r);
        if (n > DSM_CTL_MAX_REASON) { r.ok = 0; break; }
        if ((p = dsm_take(&r, n))) memcpy(out->u.refuse.reason, p, n);
        if (r.ok && (out->u.refuse.status >= 0 || out->u.refuse.status < -1000)) r.ok = 0;
        break;
    }
    case DSM_CTL_MEMBER:
        take_member(&r, &out->u.member);
        if (r.ok && out->u.member.rank == DSM_RANK_ANY) r.ok = 0;
        break;
    case DSM_CTL_DEAD:
    case DSM_CTL_LEFT:
    case DSM_CTL_LEFT_ACK:
    case DSM_CTL_SUSPECT:
    case DSM_CTL_MEMBER_ACK:
    case DSM_CTL_MEMBER_READY:
        out->u.dead.rank = dsm_take_u32(&r);
        if (r.ok && out->u.dead.rank >= DSM_MAX_RANKS) r.ok = 0;
        break;
    case DSM_CTL_BARRIER:
    case DSM_CTL_BARRIER_DONE:
        out->u.barrier.epoch = dsm_take_u64(&r);
        out->u.barrier.status = (int32_t)dsm_take_u32(&r);
        break;
    case DSM_CTL_READY:
    case DSM_CTL_HEARTBEAT:
    case DSM_CTL_LEAVE:
    case DSM_CTL_STOP:
    case DSM_CTL_TABLE_END:
        break;
    default:
        return DSM_ERR_PROTO;
    }
    /* Trailing bytes are as wrong as missing ones. */
    if (!r.ok || r.left != 0) return DSM_ERR_PROTO;
    return DSM_OK;
}

dsm_status_t dsm_ctl_encode_hello_body(const dsm_ctl_msg_t *msg, dsm_writer_t *w)
{
    dsm_write_bytes(w, msg->u.hello.nonce, DSM_CTL_NONCE_LEN);
    dsm_status_t st = write_member(w, &msg->u.hello.self);
    if (st != DSM_OK) return st;
    return w->ok ? DSM_OK : DSM_ERR_NOMEM;
}

dsm_status_t dsm_ctl_encode(const dsm_ctl_msg_t *msg, dsm_writer_t *w)
{
    size_t start = w->len;
    uint8_t header[DSM_CTL_HEADER_LEN] = {0};
    dsm_write_bytes(w, header, sizeof header);
    switch (msg->type) {
    case DSM_CTL_CHALLENGE:
        dsm_write_bytes(w, msg->u.challenge.nonce, DSM_CTL_NONCE_LEN);
        dsm_write_u16(w, msg->u.challenge.transport);
        break;
    case DSM_CTL_HELLO:
        dsm_write_bytes(w, msg->u.hello.mac, DSM_CTL_MAC_LEN);
        if (dsm_ctl_encode_hello_body(msg, w) == DSM_ERR_INVALID) return DSM_ERR_INVALID;
        break;
    case DSM_CTL_WELCOME:
        dsm_write_u32(w, (uint32_t)msg->u.welcome.rank);
        dsm_write_bytes(w, msg->u.welcome.mac, DSM_CTL_MAC_LEN);
        dsm_write_u32(w, msg->u.welcome.heartbeat_ms);
        dsm_write_u32(w, msg->u.welcome.peer_timeout_ms);
        break;
    case DSM_CTL_REFUSE: {
        size_t n = strnlen(msg->u.refuse.reason, DSM_CTL_MAX_REASON);
        dsm_write_u32(w, (uint32_t)msg->u.refuse.status);
        dsm_write_u32(w, (uint32_t)n);
        dsm_write_bytes(w, msg->u.refuse.reason, n);
        break;
    }
    case DSM_CTL_MEMBER:
        if (write_member(w, &msg->u.member) != DSM_OK) return DSM_ERR_INVALID;
        break;
    case DSM_CTL_DEAD:
    case DSM_CTL_LEFT:
    case DSM_CTL_LEFT_ACK:
    case DSM_CTL_SUSPECT:
    case DSM_CTL_MEMBER_ACK:
    case DSM_CTL_MEMBER_READY:
        dsm_write_u32(w, msg->u.dead.rank);
        break;
    case DSM_CTL_BARRIER:
    case DSM_CTL_BARRIER_DONE:
        dsm_write_u64(w, msg->u.barrier.epoch);
        dsm_write_u32(w, (uint32_t)msg->u.barrier.status);
        break;
    case DSM_CTL_READY:
    case DSM_CTL_HEARTBEAT:
    case DSM_CTL_LEAVE:
    case DSM_CTL_STOP:
    case DSM_CTL_TABLE_END:
        break;
    default:
        return DSM_ERR_INVALID;
    }
    if (!w->ok) return DSM_ERR_NOMEM;
    size_t payload = w->len - start - DSM_CTL_HEADER_LEN;
    if (payload > DSM_CTL_MAX_PAYLOAD) return DSM_ERR_TOO_BIG;
    uint8_t *h = w->buf + start;
    dsm_put_u32(h, DSM_CTL_MAGIC);
    dsm_put_u16(h + 4, DSM_CTL_VERSION);
    dsm_put_u16(h + 6, msg->type);
    dsm_put_u32(h + 8, (uint32_t)payload);
    dsm_put_u32(h + 12, 0);
    return DSM_OK;
}
