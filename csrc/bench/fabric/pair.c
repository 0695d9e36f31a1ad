/* How the fabric bench's processes meet: length-prefixed blobs over a
 * socketpair, what our side publishes, and the targets' echo. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "bench/fabric/pair.h"

void dsm_bench_send_blob(int fd, const void *p, uint32_t len)
{
    if (write(fd, &len, 4) != 4 || (len && write(fd, p, len) != (ssize_t)len)) {
        perror("write");
        exit(1);
    }
}

void *dsm_bench_recv_blob(int fd, uint32_t *len)
{
    if (read(fd, len, 4) != 4) {
        perror("read");
        exit(1);
    }
    uint8_t *p = malloc(*len ? *len : 1);
    size_t got = 0;
    while (p != NULL && got < *len) {
        ssize_t n = read(fd, p + got, *len - got);
        if (n <= 0) {
            perror("read");
            exit(1);
        }
        got += (size_t)n;
    }
    if (p == NULL) {
        perror("malloc");
        exit(1);
    }
    return p;
}

void dsm_bench_publish(int fd, dsm_fabric_t *f, dsm_region_t *region)
{
    const void *addr, *key;
    size_t addr_len, key_len;
    dsm_fabric_address(f, &addr, &addr_len);
    dsm_fabric_region_key(region, &key, &key_len);
    uint64_t base = (uintptr_t)dsm_fabric_region_base(region);
    dsm_bench_send_blob(fd, addr, (uint32_t)addr_len);
    dsm_bench_send_blob(fd, key, (uint32_t)key_len);
    dsm_bench_send_blob(fd, &base, 8);
}

void dsm_bench_echo_handler(void *ctx, const dsm_am_msg_t *msg)
{
    dsm_fabric_am_reply(ctx, msg->src_rank, msg->request_id, DSM_OK, msg->data, msg->len);
}
