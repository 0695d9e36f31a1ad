/* The compact module's ids in the name spaces of the layers below it: its
 * active-message handlers (40..47 of the fabric's space, see dsm/fabric.h),
 * its module slot, the fabric region id of every node's store range, and the
 * key under which a node publishes its store at join. */
#ifndef DSM_COMPACT_IDS_H
#define DSM_COMPACT_IDS_H

enum {
    DSM_AM_CORM_REQ = 40,      /* alloc/free/read/write/release (compact/wire.h) */
    DSM_AM_CORM_COMPACT = 41,  /* run a compaction round (served on the store's thread) */
    DSM_AM_CORM_REMAP = 42,    /* server -> peers that map its memfd: remap these blocks */
    DSM_AM_CORM_LAST = 47,     /* 43..47 reserved */
};

enum { DSM_CORM_MODULE = 4 };  /* dsm_node_set_module slot */
enum { DSM_CORM_REGION = 1 };  /* fabric region id of a node's store range */

#define DSM_CORM_PUBLISH_KEY "compact.store"

#endif
