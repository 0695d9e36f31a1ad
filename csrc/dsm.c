/* The library's front door: start a node with every module of the module
 * table (dsm/module.h) attached. */
#include <string.h>

#include "dsm/sdk.h"
#include "dsm/module.h"

/* DSM_VERSION comes from the top-level VERSION file (CMakeLists.txt), the
 * one version of the C core, the Python package and its metadata. */
#ifndef DSM_VERSION
#error "DSM_VERSION must be defined by the build (CMakeLists.txt reads the VERSION file)"
#endif
const char *dsm_version(void) { return DSM_VERSION; }

dsm_status_t dsm_start_with(const dsm_node_config_t *config, const dsm_compact_config_t *compact_config,
                            const dsm_deleg_config_t *deleg, dsm_node_t **out, dsm_deleg_rt_t **rt_out)
{
    if (deleg && !rt_out) return DSM_ERR_INVALID;
    dsm_node_t *node = NULL;
    dsm_deleg_rt_t *rt = NULL;
    dsm_status_t st = dsm_node_create(config, &node);
    if (st != DSM_OK) return st;
    /* A CoRM store on every node that serves memory (its pages are
     * committed only as objects arrive); clients attach to reach them. */
    dsm_compact_config_t compact;
    if (compact_config)
        compact = *compact_config;
    else
        dsm_compact_config_init(&compact);
    if (config->partition_size == 0) compact.range_size = 0;
    if (deleg && (st = dsm_deleg_rt_create(deleg, &rt)) != DSM_OK) goto fail;
    /* The modules' arguments by name; one that needs an argument and has
     * none here (deleg without a runtime) is left out. */
    const struct {
        const char *name;
        void *arg;
    } args[] = {{"compact", &compact}, {"deleg", rt}};
    for (size_t i = 0; i < dsm_module_count; i++) {
        dsm_module_t *m = dsm_module_table[i];
        void *arg = NULL;
        for (size_t j = 0; j < sizeof args / sizeof args[0]; j++)
            if (strcmp(args[j].name, m->name) == 0) arg = args[j].arg;
        if (m->needs_arg && !arg) continue;
        if ((st = m->attach(node, arg)) != DSM_OK) goto fail;
    }
    if ((st = dsm_node_join(node)) != DSM_OK) goto fail;
    *out = node;
    if (rt_out) *rt_out = rt;
    return DSM_OK;
fail:
    dsm_node_destroy(node);
    dsm_deleg_rt_destroy(rt);
    return st;
}

dsm_status_t dsm_start_deleg(const dsm_node_config_t *config, const dsm_deleg_config_t *deleg,
                             dsm_node_t **out, dsm_deleg_rt_t **rt_out)
{
    return dsm_start_with(config, NULL, deleg, out, rt_out);
}

dsm_status_t dsm_start(const dsm_node_config_t *config, dsm_node_t **out)
{
    return dsm_start_deleg(config, NULL, out, NULL);
}
