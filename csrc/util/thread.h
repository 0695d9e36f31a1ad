/* The library's name for dsm/thread.h, which the SDK publishes (plugins
 * use it too). */
#ifndef DSM_UTIL_THREAD_H
#define DSM_UTIL_THREAD_H

#include "dsm/thread.h"

#endif
