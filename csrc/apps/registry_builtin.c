/* Registers the built-in workloads that dsmd and the Python driver run by name. */
#include "apps/workloads.h"

void dsm_register_builtin_workloads(void)
{
    dsm_register_workload(&dsm_fetch_add_info);
    dsm_register_workload(&dsm_echo_info);
    dsm_register_workload(&dsm_kv_info);
    dsm_register_workload(&dsm_gemm_info);
    dsm_register_workload(&dsm_dataframe_info);
    dsm_register_workload(&dsm_socialnet_info);
    (void)dsm_dataframe_register_tasks();
    dsm_register_workload(&dsm_semeru_info);
    dsm_register_workload(&dsm_sssp_info);
}
