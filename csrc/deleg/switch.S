/* Fiber context switch for x86-64 (System V) and aarch64 (AAPCS64): save the
 * callee-saved registers on the current stack, store the stack pointer, load
 * the other one and restore. No signal mask, no syscall (unlike swapcontext).
 *
 *   void dsm_deleg_ctx_switch(void **save_sp, void *new_sp);
 *   dsm_deleg_ctx_trampoline: first "return address" of a new fiber; calls
 *   entry(fiber) with entry/fiber preloaded in callee-saved registers.
 * The frame layouts here must match ctx_init() in fiber.c. */

#if defined(__x86_64__)
        .text
        .globl  dsm_deleg_ctx_switch
        .hidden dsm_deleg_ctx_switch
        .type   dsm_deleg_ctx_switch,@function
        .p2align 4
dsm_deleg_ctx_switch:
        pushq   %rbp
        pushq   %rbx
        pushq   %r12
        pushq   %r13
        pushq   %r14
        pushq   %r15
        subq    $8, %rsp
        stmxcsr (%rsp)           /* SSE control word is callee-saved */
        fnstcw  4(%rsp)          /* so is the x87 control word */
        movq    %rsp, (%rdi)
        movq    %rsi, %rsp
        ldmxcsr (%rsp)
        fldcw   4(%rsp)
        addq    $8, %rsp
        popq    %r15
        popq    %r14
        popq    %r13
        popq    %r12
        popq    %rbx
        popq    %rbp
        ret
        .size   dsm_deleg_ctx_switch,.-dsm_deleg_ctx_switch

        .globl  dsm_deleg_ctx_trampoline
        .hidden dsm_deleg_ctx_trampoline
        .type   dsm_deleg_ctx_trampoline,@function
        .p2align 4
dsm_deleg_ctx_trampoline:
        movq    %r12, %rdi       /* the fiber */
        callq   *%r13            /* entry(fiber): never returns */
        ud2
        .size   dsm_deleg_ctx_trampoline,.-dsm_deleg_ctx_trampoline

#elif defined(__aarch64__)
        .text
        .globl  dsm_deleg_ctx_switch
        .hidden dsm_deleg_ctx_switch
        .type   dsm_deleg_ctx_switch,%function
        .p2align 4
dsm_deleg_ctx_switch:
        sub     sp, sp, #160
        stp     x19, x20, [sp, #0]
        stp     x21, x22, [sp, #16]
        stp     x23, x24, [sp, #32]
        stp     x25, x26, [sp, #48]
        stp     x27, x28, [sp, #64]
        stp     x29, x30, [sp, #80]
        stp     d8, d9, [sp, #96]
        stp     d10, d11, [sp, #112]
        stp     d12, d13, [sp, #128]
        stp     d14, d15, [sp, #144]
        mov     x9, sp
        str     x9, [x0]
        mov     sp, x1
        ldp     x19, x20, [sp, #0]
        ldp     x21, x22, [sp, #16]
        ldp     x23, x24, [sp, #32]
        ldp     x25, x26, [sp, #48]
        ldp     x27, x28, [sp, #64]
        ldp     x29, x30, [sp, #80]
        ldp     d8, d9, [sp, #96]
        ldp     d10, d11, [sp, #112]
        ldp     d12, d13, [sp, #128]
        ldp     d14, d15, [sp, #144]
        add     sp, sp, #160
        ret
        .size   dsm_deleg_ctx_switch,.-dsm_deleg_ctx_switch

        .globl  dsm_deleg_ctx_trampoline
        .hidden dsm_deleg_ctx_trampoline
        .type   dsm_deleg_ctx_trampoline,%function
        .p2align 4
dsm_deleg_ctx_trampoline:
        mov     x0, x19          /* the fiber */
        blr     x20              /* entry(fiber): never returns */
        brk     #0
        .size   dsm_deleg_ctx_trampoline,.-dsm_deleg_ctx_trampoline
#else
#error "deleg: no fiber context switch for this architecture"
#endif

        .section .note.GNU-stack,"",%progbits
