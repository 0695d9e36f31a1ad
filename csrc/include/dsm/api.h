/* DSM_API marks what libdsm exports. The library is built with
 * -fvisibility=hidden, so a function without it stays inside libdsm.so
 * (still callable from the static library the tests and programs link).
 * DSM_CFFI is defined when pydsm's build preprocesses these headers into its
 * CFFI declarations: there the markers are empty.
 *
 * Part of the user API (dsm/dsm.h). */
#ifndef DSM_API_H
#define DSM_API_H

#if defined(DSM_CFFI)
#define DSM_API
#define DSM_PRINTF(fmt, first)
#else
#define DSM_API __attribute__((visibility("default")))
/* A printf-style function: argument `fmt` is the format, `first` the first
 * value (the compiler checks calls). */
#define DSM_PRINTF(fmt, first) __attribute__((format(printf, fmt, first)))
#endif

/* DSM_TSAN and DSM_ASAN: a ThreadSanitizer or AddressSanitizer build (GCC
 * says so one way, clang another), for the few places that tell a
 * sanitizer what it cannot see or whose figures it changes. */
#if defined(__SANITIZE_THREAD__)
#define DSM_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define DSM_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define DSM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DSM_ASAN 1
#endif
#endif

#endif
