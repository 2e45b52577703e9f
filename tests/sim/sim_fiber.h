/*
 * sim_fiber.h — the simulated GPU's fibers: one stack per CUDA thread, switched by hand (tests only).
 *
 * sim_fiber_switch(&save, to) saves the callee-saved registers and the floating-point control
 * words on the current stack, stores the stack pointer in *save and resumes the context whose
 * stack pointer is `to` (a context saved the same way, or one made by sim_fiber_make). Nothing
 * else (no signal mask, no system call): a switch costs a few nanoseconds, so a block of 1024
 * threads can meet at every barrier. x86-64 System V only; other machines build with
 * ucontext-free fallbacks missing, and the Makefile does not build the simulator there.
 */
#ifndef ST_SIM_FIBER_H
#define ST_SIM_FIBER_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if !defined(__x86_64__)
#error "the simulated GPU's fibers are written for x86-64"
#endif

void sim_fiber_switch(void **save, void *to) __attribute__((visibility("hidden")));

__asm__(".text\n"
        ".globl sim_fiber_switch\n"
        ".hidden sim_fiber_switch\n"
        ".type sim_fiber_switch,@function\n"
        "sim_fiber_switch:\n"
        "    pushq %rbp\n"
        "    pushq %rbx\n"
        "    pushq %r12\n"
        "    pushq %r13\n"
        "    pushq %r14\n"
        "    pushq %r15\n"
        "    subq $8, %rsp\n"
        "    stmxcsr (%rsp)\n"
        "    fnstcw 4(%rsp)\n"
        "    movq %rsp, (%rdi)\n"
        "    movq %rsi, %rsp\n"
        "    ldmxcsr (%rsp)\n"
        "    fldcw 4(%rsp)\n"
        "    addq $8, %rsp\n"
        "    popq %r15\n"
        "    popq %r14\n"
        "    popq %r13\n"
        "    popq %r12\n"
        "    popq %rbx\n"
        "    popq %rbp\n"
        "    ret\n"
        ".size sim_fiber_switch, .-sim_fiber_switch\n");

/* A context on the stack [lo, lo + size) that starts in entry(), which must never return. The
 * frame, from the saved stack pointer up: control words, r15 r14 r13 r12 rbx rbp, entry, a zero
 * return address (entry sees rsp = 8 mod 16, as after a call). */
static inline void *sim_fiber_make(char *lo, size_t size, void (*entry)(void)) {
    uintptr_t top = ((uintptr_t)lo + size) & ~(uintptr_t)15;
    uint64_t *sp = (uint64_t *)(top - 72);
    uint32_t ctl[2] = {0x1f80u, 0x037fu};   /* MXCSR default; x87 control word default */
    memcpy(&sp[0], ctl, 8);
    for (int i = 1; i <= 6; i++) sp[i] = 0;
    memcpy(&sp[7], &entry, sizeof entry);
    sp[8] = 0;
    return sp;
}

#endif
