/* libFuzzer target for a memory server's tracer and compactor
 * (mheap/trace.h), which read a region image that one-sided writes may be
 * changing and roots from the CPU server: any image, bump pointer and roots
 * must give a trace and a compaction that stay inside the region, keep
 * their accounting sane and leave a region that parses. The input: a 2-byte
 * bp (in 8-byte words), a root count byte, roots (2-byte word offsets), the
 * rest copied into the region image from its header on. With bit 1 of the
 * root count, a second region (the same bytes, the next region's addresses,
 * traced from the same word offsets) is evacuated together with the first,
 * into it (co-location). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mheap/layout.h"
#include "mheap/msg.h"
#include "mheap/trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { REGION = 1 << 20, BASE = 0 };
static uint8_t mem[REGION], mem2[REGION], scratch[REGION];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static dsm_mheap_types_t types;
    static dsm_mheap_rtrace_t t, t2;
    static int ready;
    if (!ready) {
        static const uint32_t refs[] = {0, 8};
        const dsm_mheap_type_t ty[] = {{.size = 24, .nrefs = 2, .ref_offsets = refs},
                                       {.size = 8, .nrefs = 0, .ref_offsets = NULL}};
        if (dsm_mheap_types_build(ty, 2, REGION - DSM_MHEAP_REGION_HDR, &types) != DSM_OK ||
            dsm_mheap_rtrace_init(&t, REGION) != DSM_OK || dsm_mheap_rtrace_init(&t2, REGION) != DSM_OK)
            abort();
        ready = 1;
    }
    if (size < 3)
        return 0;
    uint64_t ustart = DSM_MHEAP_UBASE;
    uint32_t bp = (uint32_t)(data[0] | data[1] << 8) * 8u;
    uint32_t nroots = data[2];
    size_t at = 3;
    uint8_t roots[256 * 8];
    for (uint32_t i = 0; i < nroots; i++) {
        uint64_t r = at + 2 <= size ? ustart + (uint64_t)(data[at] | data[at + 1] << 8) * 8u : 0;
        at += 2;
        for (int k = 0; k < 8; k++)
            roots[8 * i + k] = (uint8_t)(r >> (8 * k));
    }
    memset(mem, 0, 8u * 65536 + DSM_MHEAP_REGION_HDR);   /* everything a bp can cover: runs stay independent */
    if (at < size) {
        size_t n = size - at < 65536 ? size - at : 65536;
        memcpy(mem + DSM_MHEAP_REGION_HDR, data + at, n);
    }
    dsm_mheap_rtrace_reset(&t);
    dsm_mheap_rtrace_mark(&t, mem, ustart, bp, &types, data[2] & 1, roots, nroots);
    if (t.live_bytes > REGION || t.norder > REGION / 16)
        abort();
    (void)dsm_mheap_rtrace_mark_new(&t, mem, bp / 2 & ~7u, bp < REGION ? bp : REGION, &types);
    dsm_writer_t pairs = {0};
    uint32_t new_bp = 0, dangling = 0;
    uint32_t cbp = bp < REGION ? bp : REGION;
    int two = (data[2] & 2) != 0;
    dsm_status_t st;
    if (two) {
        memcpy(mem2, mem, 8u * 65536 + DSM_MHEAP_REGION_HDR);
        uint8_t roots2[256 * 8];
        for (uint32_t i = 0; i < nroots; i++)
            dsm_put_u64(roots2 + 8 * i, dsm_get_u64(roots + 8 * i) + REGION);
        dsm_mheap_rtrace_reset(&t2);
        dsm_mheap_rtrace_mark(&t2, mem2, ustart + REGION, cbp, &types, 0, roots2, nroots);
        dsm_mheap_evac_src_t src[2] = {{.t = &t, .mem = mem, .ustart = ustart, .bp = cbp},
                                       {.t = &t2, .mem = mem2, .ustart = ustart + REGION, .bp = cbp}};
        st = dsm_mheap_rtrace_evacuate(src, 2, &types, scratch, &pairs, &new_bp, &dangling);
        if (st == DSM_OK && pairs.len != (size_t)(t.norder + t2.norder) * DSM_MHEAP_EVAC_PAIR)
            abort();
    } else {
        st = dsm_mheap_rtrace_compact(&t, mem, ustart, cbp, &types, scratch, &pairs, &new_bp, &dangling);
    }
    if (st == DSM_OK) {
        if (new_bp < DSM_MHEAP_REGION_HDR || new_bp > REGION || pairs.len % DSM_MHEAP_EVAC_PAIR)
            abort();
        /* The compacted region parses from the header to new_bp. */
        for (uint32_t off = DSM_MHEAP_REGION_HDR; off < new_bp;) {
            uint32_t s = dsm_mheap_object_at(mem, off, new_bp, &types);
            if (s == 0)
                abort();
            off += s;
        }
    }
    dsm_writer_free(&pairs);
    return 0;
}
