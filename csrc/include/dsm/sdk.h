/* libdsm's SDK: the user API (dsm/dsm.h) and what plugin and mechanism
 * authors call besides: the fabric (dsm/fabric.h: regions, one-sided
 * operations, active messages), the runtime's calls for mechanisms and
 * hosts (dsm/runtime.h: two-phase start, join-time values, module state,
 * closures, a daemon's jobs), the module table (dsm/module.h) and the
 * helpers that write workloads (dsm/plugin.h: registration, arguments,
 * results), 64-bit mixing (dsm/mix.h) and LOCO's channel objects
 * (dsm/chan.h), which Python does not call yet. Two header-only helpers that
 * need POSIX are SDK headers a plugin includes by name: dsm/clock.h and
 * dsm/thread.h. libdsm and dsmd export all of it; a plugin built against the
 * installed headers includes this one.
 *
 * Part of the SDK. */
#ifndef DSM_SDK_H
#define DSM_SDK_H

#include "dsm/dsm.h"
#include "dsm/fabric.h"
#include "dsm/runtime.h"
#include "dsm/module.h"
#include "dsm/plugin.h"
#include "dsm/mix.h"
#include "dsm/chan.h"

#endif
