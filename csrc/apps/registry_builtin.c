/* Registers the built-in workloads that dsmd and the Python driver run by name. */
#include "apps/workloads.h"

void dsm_register_builtin_workloads(void)
{
    dsm_register("fetch_add", dsm_workload_fetch_add);
    dsm_register("echo", dsm_workload_echo);
    dsm_register("kv", dsm_workload_kv);
}
