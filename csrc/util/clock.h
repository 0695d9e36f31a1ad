/* The library's name for dsm/clock.h, which the SDK publishes (plugins
 * use it too). */
#ifndef DSM_UTIL_CLOCK_H
#define DSM_UTIL_CLOCK_H

#include "dsm/clock.h"

#endif
