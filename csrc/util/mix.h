/* The library's name for dsm/mix.h, which the SDK publishes (plugins
 * use it too). */
#ifndef DSM_UTIL_MIX_H
#define DSM_UTIL_MIX_H

#include "dsm/mix.h"

#endif
