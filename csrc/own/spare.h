/* Spare heap slots of a node, per thread: owner records and objects own
 * freed on this node, a few kept per thread for the next allocation of the
 * same size there instead of going back to the heap (a box made, sent and
 * dropped per item, as a pipeline does, then costs no heap call). An
 * object's spare carries the colour its next object starts at (its final
 * colour + 1), so the ABA rule holds as the colour memory would keep it;
 * a slot whose colour would wrap never becomes a spare. A record's spare
 * carries its next generation the same way (per slot, with no shared
 * counter to bump). Internal. */
#ifndef DSM_OWN_SPARE_H
#define DSM_OWN_SPARE_H

#include <stdint.h>

enum { OWN_SPARES = 8 };

typedef struct own_spare_obj {
    uint64_t addr, len;     /* stripped address; header + payload bytes */
    uint16_t colour;        /* the next object's start colour */
} own_spare_obj_t;

/* One thread slot's spares (one writer: the slot's holder), on 128-byte
 * blocks of their own: two holders' counts must share no cache line. */
typedef struct own_spares {
    _Alignas(128) own_spare_obj_t obj[OWN_SPARES];
    uint64_t rec[OWN_SPARES];   /* stripped address, coloured with the next generation */
    uint32_t nobj, nrec;
} own_spares_t;

/* Keep an object's slot (1), or not (0: no list). A full list makes room
 * by giving back its oldest spare in *evicted (2), for the caller to free
 * to the heap: spares of a size no longer asked for (a thread slot's
 * earlier holder ran another workload) must not keep every later free
 * out. */
int own_spare_obj_put(own_spares_t *s, uint64_t addr, uint64_t len, uint16_t colour, own_spare_obj_t *evicted);
/* Keep a record's slot (1), or not (0: the list is full; free it to the
 * heap). Records are all one size, so a full list is always of use. */
int own_spare_rec_put(own_spares_t *s, uint64_t addr);
/* Take a spare of exactly len bytes (1; the newest such), or none (0). */
int own_spare_obj_take(own_spares_t *s, uint64_t len, own_spare_obj_t *out);
int own_spare_rec_take(own_spares_t *s, uint64_t *addr);

#endif
