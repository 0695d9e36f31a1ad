/* The applications built into libdsm: workloads that dsmd and the Python
 * driver run by name through the function registry. */
#ifndef DSM_APPS_H
#define DSM_APPS_H

#include "dsm/api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Register the built-in workloads ("fetch_add", "echo", ...) in the function
 * registry of this process. */
DSM_API void dsm_register_builtin_workloads(void);

#ifdef __cplusplus
}
#endif
#endif
