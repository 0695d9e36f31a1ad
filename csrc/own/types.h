/* The process-wide registry of object types (id, name, fixed size). */
#ifndef DSM_OWN_TYPES_H
#define DSM_OWN_TYPES_H

#include <stddef.h>
#include <stdint.h>

#include "dsm/status.h"

/* DSM_OK if `id` is registered and allows `size`; DSM_ERR_INVALID (logged) if not. */
dsm_status_t own_type_check(uint32_t id, uint64_t size);

#endif
