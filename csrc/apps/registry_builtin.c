/* Registers the project's workloads: the entry point of the apps plugin
 * (libdsm-apps.so), which dsmd and the Python driver load by default. */
#include "apps/workloads.h"

dsm_status_t dsm_apps_register(void)
{
    const dsm_workload_info_t *const all[] = {&dsm_fetch_add_info, &dsm_echo_info,      &dsm_kv_info,
                                              &dsm_gemm_info,      &dsm_dataframe_info, &dsm_socialnet_info,
                                              &dsm_semeru_info,    &dsm_sssp_info,      &dsm_chan_ops_info};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        dsm_status_t st = dsm_register_workload(all[i]);
        if (st != DSM_OK) return st;
    }
    return dsm_dataframe_register_tasks();
}

/* The plugin's entry point (dsm/workload.h): each plugin declares its own. */
DSM_API dsm_status_t dsm_plugin_init(void);
dsm_status_t dsm_plugin_init(void) { return dsm_apps_register(); }
