/* chan's ids in the name spaces of the layers below it: its module
 * descriptor (dsm/module.h), its handlers' ids relative to its block, and
 * its fabric region. */
#ifndef DSM_CHAN_IDS_H
#define DSM_CHAN_IDS_H

#include "dsm/module.h"

extern dsm_module_t dsm_chan_module;

enum {
    DSM_CHAN_AM_JOIN,    /* an endpoint's descriptors; answered with CONNECT or a status */
    DSM_CHAN_AM_LEAVE,   /* an endpoint went; answered, so none is in flight at teardown */
    DSM_CHAN_AM_COUNT,
};
#define DSM_AM_CHAN_JOIN dsm_module_am(&dsm_chan_module, DSM_CHAN_AM_JOIN)
#define DSM_AM_CHAN_LEAVE dsm_module_am(&dsm_chan_module, DSM_CHAN_AM_LEAVE)

enum { DSM_CHAN_REGION = 4 };   /* fabric region id of every node's channel arena */

#endif
