/* dir's ids in the name spaces of the layers below it: its module
 * descriptor (dsm/module.h; the runtime assigns its node slot and handler
 * ids from the module table) and its handlers' ids relative to its block. */
#ifndef DSM_DIR_IDS_H
#define DSM_DIR_IDS_H

#include "dsm/module.h"

extern dsm_module_t dsm_dir_module;

enum {
    DSM_DIR_AM_HOME,     /* READ / WRITE / DROP requests, and the answers (ACK / DATA) to the home's posts */
    DSM_DIR_AM_CACHE,    /* INV / RECALL, posted by a home */
    DSM_DIR_AM_COUNT,
};
#define DSM_AM_DIR_HOME dsm_module_am(&dsm_dir_module, DSM_DIR_AM_HOME)
#define DSM_AM_DIR_CACHE dsm_module_am(&dsm_dir_module, DSM_DIR_AM_CACHE)

#endif
