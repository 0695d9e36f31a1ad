/* own's ids in the name spaces of the layers below it: its block of
 * active-message handler ids (16..23 of the fabric's space, see
 * dsm/fabric.h) and its module slot on a node. */
#ifndef DSM_OWN_IDS_H
#define DSM_OWN_IDS_H

enum {
    DSM_AM_OWN_FREE = 16,     /* free an object at its home, carrying its final colour */
    DSM_AM_OWN_LOCK = 17,     /* lock a mutex at its home (answered when granted) */
    DSM_AM_OWN_UNLOCK = 18,   /* unlock it (one-way) */
    DSM_AM_OWN_ALLOC = 21,    /* allocate an object at its home (the home's colours) */
    DSM_AM_OWN_CHAN_SEND = 22, /* queue an item on a channel at its home */
    DSM_AM_OWN_CHAN_RECV = 23, /* take an item from a channel at its home (empty reply: none) */
    DSM_AM_OWN_LAST = 23,     /* 19..20 reserved for own */
};

enum { DSM_OWN_MODULE = 1 };  /* dsm_node_set_module slot */

/* The function registry's kind of own's task functions (dsm_register_closure). */
enum { DSM_OWN_CLOSURE_KIND = 4 };

#endif
