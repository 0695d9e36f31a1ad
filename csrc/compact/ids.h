/* The compact module's ids in the name spaces of the layers below it: its
 * module descriptor (dsm/module.h; the runtime assigns its node slot and
 * handler ids from the module table), its handlers' ids relative to its
 * block, the fabric region id of every node's store range, and the key
 * under which a node publishes its store at join. */
#ifndef DSM_COMPACT_IDS_H
#define DSM_COMPACT_IDS_H

#include "dsm/module.h"

extern dsm_module_t dsm_compact_module;

enum {
    DSM_COMPACT_AM_REQ,      /* alloc/free/read/write/release (compact/wire.h) */
    DSM_COMPACT_AM_COMPACT,  /* run a compaction round (served on the store's thread) */
    DSM_COMPACT_AM_REMAP,    /* server -> peers that map its memfd: remap these blocks */
    DSM_COMPACT_AM_COUNT,
};
#define DSM_AM_COMPACT_REQ dsm_module_am(&dsm_compact_module, DSM_COMPACT_AM_REQ)
#define DSM_AM_COMPACT_COMPACT dsm_module_am(&dsm_compact_module, DSM_COMPACT_AM_COMPACT)
#define DSM_AM_COMPACT_REMAP dsm_module_am(&dsm_compact_module, DSM_COMPACT_AM_REMAP)

enum { DSM_COMPACT_REGION = 1 };  /* fabric region id of a node's store range */

#define DSM_COMPACT_PUBLISH_KEY "compact.store"

#endif
