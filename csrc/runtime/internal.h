/* The runtime's calls that only the runtime itself (and the tests, which
 * link the static library) make: libdsm does not export them. */
#ifndef DSM_RUNTIME_INTERNAL_H
#define DSM_RUNTIME_INTERNAL_H

#include <stdint.h>

#include "dsm/coord.h"
#include "dsm/module.h"
#include "dsm/runtime.h"

/* Give state slot `id` directly (dsm_node_add_module does it for a module
 * of the table); DSM_ERR_EXISTS for a slot already taken, DSM_ERR_STATE once
 * joined. */
dsm_status_t dsm_node_set_module(dsm_node_t *node, int id, void *state, dsm_module_destroy_t destroy);
/* The registry id of the task `name` (DSM_ERR_NO_HANDLER if none). */
dsm_status_t dsm_lookup(const char *name, uint32_t *id);

/* Assign the table's slots and handler ids (once per process; dsm_node_create
 * calls it). DSM_ERR_TOO_BIG if the table needs more slots than
 * DSM_NODE_MAX_MODULES or more ids than the modules' range holds,
 * DSM_ERR_EXISTS if two modules declare one name or one published key. */
dsm_status_t dsm_modules_assign(void);
/* The table's list, "name:count name:count ...", as published at join. */
const char *dsm_modules_signature(void);
/* The module named `name` in the table, or NULL. */
const dsm_module_t *dsm_module_find(const char *name);

/* Number of live members, and of live daemons. */
uint32_t dsm_coord_members(dsm_coord_t *coord, uint32_t *daemons);
/* Joins refused so far (bad secret, malformed, rank taken). */
uint64_t dsm_coord_refused(dsm_coord_t *coord);
/* Members that said LEAVE and wait for the others' acknowledgements. */
uint32_t dsm_coord_leaving(dsm_coord_t *coord);

#endif
