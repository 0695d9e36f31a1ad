/* The library's name for libdsm's logging macros, which dsm/log.h
 * publishes (plugins log with them too). */
#ifndef DSM_UTIL_LOG_H
#define DSM_UTIL_LOG_H

#include "dsm/log.h"

#endif
