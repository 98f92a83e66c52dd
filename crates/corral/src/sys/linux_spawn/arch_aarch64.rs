//! The system-call instructions for aarch64: the only assembly of the raw
//! layer ([`super::raw`] re-exports it). Each function returns the
//! kernel's value: >= 0, or -errno.

use std::ffi::c_void;

use linux_raw_sys::general as k;

/// # Safety
/// As for the x86_64 version (`arch_x86_64.rs`).
#[inline(always)]
pub(super) unsafe fn syscall4(nr: u32, a0: usize, a1: usize, a2: usize, a3: usize) -> isize {
    let ret: isize;
    // SAFETY: the aarch64 Linux syscall convention: number in x8, arguments
    // in x0..x3, result in x0; `svc 0` preserves every other register. No
    // stack use; memory effects as the caller vouches.
    unsafe {
        core::arch::asm!(
            "svc 0",
            in("x8") nr as usize,
            inlateout("x0") a0 => ret,
            in("x1") a1,
            in("x2") a2,
            in("x3") a3,
            options(nostack, preserves_flags),
        );
    }
    ret
}

/// # Safety
/// Arguments valid for syscall `nr`.
#[inline(always)]
pub(super) unsafe fn syscall6(nr: u32, a: [usize; 6]) -> isize {
    let ret: isize;
    // SAFETY: the aarch64 syscall convention (x8, x0..x5, result in x0).
    unsafe {
        core::arch::asm!(
            "svc 0",
            in("x8") nr as usize,
            inlateout("x0") a[0] => ret,
            in("x1") a[1],
            in("x2") a[2],
            in("x3") a[3],
            in("x4") a[4],
            in("x5") a[5],
            options(nostack, preserves_flags),
        );
    }
    ret
}

/// As the x86_64 version.
///
/// # Safety
/// As the x86_64 version.
pub(super) unsafe fn clone3_with(
    args: &mut k::clone_args,
    entry: extern "C" fn(*const c_void) -> !,
    arg: *const c_void,
) -> isize {
    let ret: isize;
    // SAFETY: the syscall convention as in `syscall4`; `svc` preserves all
    // registers but x0, so `entry` and `arg` survive in the child. In the
    // parent (x0 != 0) execution continues at label 2. In the child (x0 ==
    // 0) sp is the top of the new stack (16-byte aligned: the stack is page
    // aligned and its size a multiple of the page size), or, with no stack
    // given, the caller's sp on the child's copy of this stack (16-byte
    // aligned by the ABI); the child clears
    // the frame pointer (end of backtraces; x29 is never an operand
    // register) and calls `entry`, which never returns (brk traps if it
    // did). x30 is not cleared: it may hold an operand, and `blr` sets it.
    unsafe {
        core::arch::asm!(
            "svc 0",
            "cbnz x0, 2f",
            "mov x29, xzr",
            "mov x0, {arg}",
            "blr {entry}",
            "brk #1",
            "2:",
            entry = in(reg) entry,
            arg = in(reg) arg,
            in("x8") k::__NR_clone3 as usize,
            inlateout("x0") args as *mut k::clone_args as usize => ret,
            in("x1") std::mem::size_of::<k::clone_args>(),
        );
    }
    ret
}
