// The exported dlsym and dlopen are thin thunks, because glibc answers both
// relative to the code that called them: dlsym(RTLD_NEXT, ...) searches after
// the caller's object, dlopen of a bare name searches the caller's RUNPATH.
// A C wrapper would make libpinshim the caller. The thunks tail-jump to the
// real functions, so glibc sees the program's own return address; only
// lookups of driver symbols ("cu...") through a handle or RTLD_DEFAULT take
// the C path, where pinshim hands back its wrappers.

    .text

// void* dlsym(void* handle, const char* name)
    .globl  dlsym
    .type   dlsym, @function
dlsym:
    .cfi_startproc
    testq   %rsi, %rsi
    je      .Ldlsym_real
    cmpq    $-1, %rdi                 // RTLD_NEXT: always the real lookup
    je      .Ldlsym_real
    movzwl  (%rsi), %eax
    cmpl    $0x7563, %eax             // "cu", little-endian
    jne     .Ldlsym_real
    jmp     pinshim_dlsym_driver_symbol
.Ldlsym_real:
    movq    pinshim_real_dlsym(%rip), %rax
    testq   %rax, %rax
    jne     1f
    pushq   %rdi
    pushq   %rsi
    subq    $8, %rsp                  // keep the stack 16-byte aligned
    .cfi_adjust_cfa_offset 24
    call    pinshim_resolve_real_dlsym
    addq    $8, %rsp
    popq    %rsi
    popq    %rdi
    .cfi_adjust_cfa_offset -24
    testq   %rax, %rax
    je      2f
1:
    jmp     *%rax
2:
    ret                               // no dlsym at all: return null
    .cfi_endproc
    .size   dlsym, .-dlsym

// void* dlopen(const char* file, int mode)
    .globl  dlopen
    .type   dlopen, @function
dlopen:
    .cfi_startproc
    pushq   %rdi
    pushq   %rsi
    subq    $8, %rsp
    .cfi_adjust_cfa_offset 24
    call    pinshim_before_dlopen     // notes the flags, returns the real dlopen
    addq    $8, %rsp
    popq    %rsi
    popq    %rdi
    .cfi_adjust_cfa_offset -24
    testq   %rax, %rax
    je      2f
    jmp     *%rax
2:
    ret
    .cfi_endproc
    .size   dlopen, .-dlopen

    .section .note.GNU-stack,"",@progbits
