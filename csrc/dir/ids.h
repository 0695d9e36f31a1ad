/* dir's ids in the name spaces of the layers below it: its block of
 * active-message handler ids (24..31 of the fabric's space, see
 * dsm/fabric.h) and its module slot on a node. */
#ifndef DSM_DIR_IDS_H
#define DSM_DIR_IDS_H

enum {
    DSM_AM_DIR_HOME = 24,     /* READ / WRITE / DROP, served by the home's directory thread */
    DSM_AM_DIR_CACHE = 25,    /* INV / RECALL, answered by a cacher's progress context */
    DSM_AM_DIR_LAST = 31,     /* 26..31 reserved for dir */
};

enum { DSM_DIR_MODULE = 2 };  /* dsm_node_set_module slot */

#endif
