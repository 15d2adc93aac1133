//! The helper program's root: the process entry the kernel jumps to, with no C library to
//! set anything up. Compiled by `link-confine`'s build script (see the library's
//! documentation), not by Cargo.
#![no_std]
#![no_main]
// The memory functions below are what the compiler calls for copies and comparisons; without
// this, it could compile their loops into calls to themselves.
#![no_builtins]

// The entry: the kernel leaves argc, then argv and envp, at the stack pointer.
#[cfg(target_arch = "x86_64")]
core::arch::global_asm!(
    ".globl _start",
    "_start:",
    "mov rdi, rsp",
    "and rsp, -16",
    "call {start}",
    "ud2",
    start = sym start,
);

#[cfg(target_arch = "aarch64")]
core::arch::global_asm!(
    ".globl _start",
    "_start:",
    "mov x0, sp",
    "bl {start}",
    "brk #0",
    start = sym start,
);

/// # Safety
/// Called once, by `_start`, with the stack pointer the kernel left.
unsafe extern "C" fn start(stack: *const usize) -> ! {
    // SAFETY: the kernel's layout: argc, argc pointers and a NULL, the environment's
    // pointers and a NULL.
    unsafe {
        let argc = *stack;
        let argv = stack.add(1) as *mut *const core::ffi::c_char;
        let envp = argv.add(argc + 1) as *const *const core::ffi::c_char;
        link_sandbox_helper::main(argc, argv, envp)
    }
}

/// A bug in the helper: exit as a refusal (nothing ran), never run the command.
#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    link_sandbox_helper::abort()
}

// What a C library would provide and compiled code calls: byte loops, for a program that
// copies a few kilobytes in all.

/// # Safety
/// As C's `memcpy`.
#[no_mangle]
unsafe extern "C" fn memcpy(dest: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    for i in 0..n {
        // SAFETY: as the caller promised.
        unsafe { *dest.add(i) = *src.add(i) };
    }
    dest
}

/// # Safety
/// As C's `memmove`.
#[no_mangle]
unsafe extern "C" fn memmove(dest: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    if (dest as usize) < (src as usize) {
        // SAFETY: as the caller promised; forwards, each byte read before it is written.
        return unsafe { memcpy(dest, src, n) };
    }
    for i in (0..n).rev() {
        // SAFETY: as the caller promised; backwards, for the same reason.
        unsafe { *dest.add(i) = *src.add(i) };
    }
    dest
}

/// # Safety
/// As C's `memset`.
#[no_mangle]
unsafe extern "C" fn memset(dest: *mut u8, byte: i32, n: usize) -> *mut u8 {
    for i in 0..n {
        // SAFETY: as the caller promised.
        unsafe { *dest.add(i) = byte as u8 };
    }
    dest
}

/// # Safety
/// As C's `memcmp`.
#[no_mangle]
unsafe extern "C" fn memcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    for i in 0..n {
        // SAFETY: as the caller promised.
        let (x, y) = unsafe { (*a.add(i), *b.add(i)) };
        if x != y {
            return x as i32 - y as i32;
        }
    }
    0
}

/// # Safety
/// As C's `bcmp`.
#[no_mangle]
unsafe extern "C" fn bcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    // SAFETY: as the caller promised.
    unsafe { memcmp(a, b, n) }
}

/// # Safety
/// As C's `strlen`.
#[no_mangle]
unsafe extern "C" fn strlen(s: *const u8) -> usize {
    let mut n = 0;
    // SAFETY: as the caller promised, up to and including the NUL.
    while unsafe { *s.add(n) } != 0 {
        n += 1;
    }
    n
}
