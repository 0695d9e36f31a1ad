/* A spin-wait hint to the CPU (pause on x86-64, yield on AArch64). */
#ifndef DSM_UTIL_RELAX_H
#define DSM_UTIL_RELAX_H

static inline void dsm_cpu_relax(void)
{
#if defined(__x86_64__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

#endif
