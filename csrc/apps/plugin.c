/* Loading workload plugins into this process (dsmd, or libdsm in the Python
 * driver): dlopen, then the plugin's dsm_plugin_init. A plugin links no
 * libdsm; its calls resolve against the process's copy of the API, so a
 * libdsm.so that was loaded privately (Python loads extensions with
 * RTLD_LOCAL) is first made global. */
#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dsm/workload.h"
#include "dsm/plugin.h"
#include "util/log.h"

enum { MAX_PLUGINS = 32 };

static pthread_mutex_t plugins_lock = PTHREAD_MUTEX_INITIALIZER;
static void *plugins[MAX_PLUGINS];
static size_t n_plugins;

/* The file holding this code, symlinks resolved, into buf (PATH_MAX):
 * libdsm.so, or a program that links libdsm statically (dsmd, whose name
 * dladdr gives as its argv[0]: maybe a symlink, maybe found on PATH). */
static const char *own_file(char *buf)
{
    Dl_info info;
    if (dladdr((void *)own_file, &info) && info.dli_fname && strchr(info.dli_fname, '/') &&
        realpath(info.dli_fname, buf))
        return buf;
    return realpath("/proc/self/exe", buf);
}

static void make_api_global(void)
{
    char buf[PATH_MAX];
    const char *self = own_file(buf);
    /* A program's own exports are global already; for libdsm.so this
     * reopens the loaded copy (RTLD_NOLOAD), only widening its scope. */
    if (self && dlopen(self, RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL) == NULL) (void)dlerror();
}

dsm_status_t dsm_plugin_load(const char *path)
{
    if (!path || !path[0]) return DSM_ERR_INVALID;
    pthread_mutex_lock(&plugins_lock);
    make_api_global();
    dsm_status_t st = DSM_OK;
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    size_t i = 0;
    while (lib && i < n_plugins && plugins[i] != lib) i++;
    if (!lib) {
        DSM_ERROR("plugin", "cannot load plugin %s: %s", path, dlerror());
        st = DSM_ERR_INVALID;
    } else if (i < n_plugins) {
        dlclose(lib);   /* loaded and initialised before: drop the extra reference */
    } else if (n_plugins == MAX_PLUGINS) {
        DSM_ERROR("plugin", "cannot load plugin %s: %d plugins are loaded already", path, MAX_PLUGINS);
        dlclose(lib);
        st = DSM_ERR_NOMEM;
    } else {
        dsm_status_t (*init)(void) = (dsm_status_t (*)(void))dlsym(lib, "dsm_plugin_init");
        if (!init) {
            DSM_ERROR("plugin", "plugin %s has no dsm_plugin_init()", path);
            dlclose(lib);
            st = DSM_ERR_INVALID;
        } else if ((st = init()) != DSM_OK) {
            /* Kept loaded: what it registered before failing points into it. */
            DSM_ERROR("plugin", "plugin %s failed to initialise: %s", path, dsm_strerror(st));
            plugins[n_plugins++] = lib;
        } else {
            plugins[n_plugins++] = lib;
        }
    }
    pthread_mutex_unlock(&plugins_lock);
    return st;
}

dsm_status_t dsm_plugin_load_apps(void)
{
    const char *env = getenv("DSM_APPS_PLUGIN");
    if (env && env[0]) return strcmp(env, "none") == 0 ? DSM_OK : dsm_plugin_load(env);
    char self[PATH_MAX], dir[PATH_MAX];
    if (!own_file(self)) return DSM_ERR_UNSUPPORTED;
    memcpy(dir, self, sizeof dir);
    /* Beside libdsm.so or dsmd in a build tree and in the Python package
     * (bin/dsmd, libdsm-apps.so one up); lib/ beside bin/ when installed. */
    static const char *const where[] = {"%s/libdsm-apps.so", "%s/../libdsm-apps.so", "%s/../lib/libdsm-apps.so",
                                        "%s/../lib64/libdsm-apps.so"};
    const char *d = dirname(dir);
    for (size_t i = 0; i < sizeof where / sizeof where[0]; i++) {
        char path[PATH_MAX + 32];
        snprintf(path, sizeof path, where[i], d);
        if (access(path, R_OK) == 0) return dsm_plugin_load(path);
    }
    DSM_ERROR("plugin", "no libdsm-apps.so beside %s (set DSM_APPS_PLUGIN to its path, or to 'none')", self);
    return DSM_ERR_UNSUPPORTED;
}
