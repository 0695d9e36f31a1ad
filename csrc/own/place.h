/* own's per-node placement state, shared by spawn.c (tasks and the
 * controller) and chan.c (channels homed on this node). */
#ifndef DSM_OWN_PLACE_H
#define DSM_OWN_PLACE_H

#include <stdint.h>

#include "util/spin.h"

enum { OWN_CHAN_BUCKETS = 64 };

typedef struct own_chan own_chan_t;
typedef struct own_refused own_refused_t;

struct own_place {
    uint32_t running;       /* own tasks running on this node now (atomic) */
    uint32_t slots;         /* tasks this node runs before spawn places elsewhere */
    dsm_spin_t lock;        /* the channels (their critical sections are a few stores) */
    own_chan_t *chans[OWN_CHAN_BUCKETS];
    own_refused_t *refused;   /* posted items refused here, oldest first, kept for their senders' flushes */
    uint32_t nrefused;
};

/* chan.c: frees the channels homed here, and the refused items kept. */
void own_chans_destroy(struct own_place *p);

#endif
