/* own's ids in the name spaces of the layers below it: its module
 * descriptor (dsm/module.h; the runtime assigns its node slot and handler
 * ids from the module table), its handlers' ids relative to its block, and
 * the function registry's kind of its task functions. */
#ifndef DSM_OWN_IDS_H
#define DSM_OWN_IDS_H

#include "dsm/module.h"

extern dsm_module_t dsm_own_module;

enum {
    DSM_OWN_AM_FREE,       /* free an object at its home, carrying its final colour */
    DSM_OWN_AM_LOCK,       /* lock a mutex at its home (answered when granted) */
    DSM_OWN_AM_UNLOCK,     /* unlock it (one-way) */
    DSM_OWN_AM_ALLOC,      /* allocate an object at its home (the home's colours) */
    DSM_OWN_AM_CHAN_SEND,  /* queue an item on a channel at its home */
    DSM_OWN_AM_CHAN_RECV,  /* take an item from a channel at its home (empty reply: none) */
    DSM_OWN_AM_COUNT,
};
#define DSM_AM_OWN_FREE dsm_module_am(&dsm_own_module, DSM_OWN_AM_FREE)
#define DSM_AM_OWN_LOCK dsm_module_am(&dsm_own_module, DSM_OWN_AM_LOCK)
#define DSM_AM_OWN_UNLOCK dsm_module_am(&dsm_own_module, DSM_OWN_AM_UNLOCK)
#define DSM_AM_OWN_ALLOC dsm_module_am(&dsm_own_module, DSM_OWN_AM_ALLOC)
#define DSM_AM_OWN_CHAN_SEND dsm_module_am(&dsm_own_module, DSM_OWN_AM_CHAN_SEND)
#define DSM_AM_OWN_CHAN_RECV dsm_module_am(&dsm_own_module, DSM_OWN_AM_CHAN_RECV)

/* The function registry's kind of own's task functions (dsm_register_closure). */
enum { DSM_OWN_CLOSURE_KIND = 4 };

#endif
