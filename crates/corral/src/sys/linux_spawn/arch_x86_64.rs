//! The system-call instructions for x86_64: the only assembly of the raw
//! layer ([`super::raw`] re-exports it). Each function returns the
//! kernel's value: >= 0, or -errno.

use std::ffi::c_void;

use linux_raw_sys::general as k;

/// # Safety
/// The caller must pass arguments valid for syscall `nr` (pointers to
/// memory of the size and mutability the syscall expects).
#[inline(always)]
pub(super) unsafe fn syscall4(nr: u32, a0: usize, a1: usize, a2: usize, a3: usize) -> isize {
    let ret: isize;
    // SAFETY: the x86_64 Linux syscall convention: number in rax, arguments
    // in rdi, rsi, rdx, r10; the kernel clobbers rcx and r11 and returns in
    // rax. No stack use. Memory effects are the syscall's, which the caller
    // vouches for (the block is not `nomem`, so the compiler assumes any
    // memory may be read or written).
    unsafe {
        core::arch::asm!(
            "syscall",
            inlateout("rax") nr as isize => ret,
            in("rdi") a0,
            in("rsi") a1,
            in("rdx") a2,
            in("r10") a3,
            lateout("rcx") _,
            lateout("r11") _,
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
    // SAFETY: the x86_64 syscall convention (rdi, rsi, rdx, r10, r8, r9);
    // rcx and r11 clobbered; memory effects are the syscall's.
    unsafe {
        core::arch::asm!(
            "syscall",
            inlateout("rax") nr as isize => ret,
            in("rdi") a[0],
            in("rsi") a[1],
            in("rdx") a[2],
            in("r10") a[3],
            in("r8") a[4],
            in("r9") a[5],
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack, preserves_flags),
        );
    }
    ret
}

/// clone3 with a child that starts on `args.stack` and calls `entry(arg)`
/// at once; `entry` never returns. Returns the kernel's value (child pid or
/// -errno) in the parent only. Without CLONE_VM, `args.stack` may be 0: the
/// child then runs on its copy of the caller's stack, below this frame.
///
/// # Safety
/// `args` must name a mapped, otherwise unused stack that stays mapped
/// while the child runs on it (or none, without CLONE_VM), and `arg` must stay valid while the child
/// reads it (with CLONE_VM | CLONE_VFORK: until it exec'd or exited, which
/// the caller's frame outlives). With CLONE_VM the child shares this
/// process's memory: `entry` must not allocate, lock, touch thread-locals
/// or unwind.
pub(super) unsafe fn clone3_with(
    args: &mut k::clone_args,
    entry: extern "C" fn(*const c_void) -> !,
    arg: *const c_void,
) -> isize {
    let ret: isize;
    // SAFETY: the syscall convention as in `syscall4`. `entry` and `arg`
    // sit in registers the kernel preserves (rcx and r11 are declared
    // clobbered with early `out`, so they cannot hold inputs). In the
    // parent (rax != 0) execution falls through to label 2 with nothing
    // else changed. In the child (rax == 0) the kernel has set rsp to the
    // top of the new stack (or left it, on the child's copy of this stack:
    // the asm may push, so nothing of the frame lives below rsp); the child never returns into Rust code of this
    // frame: it zeroes the frame pointer (end of backtraces), aligns the
    // stack to 16 bytes as the C ABI requires at a call, and calls `entry`,
    // which never returns (ud2 traps if it did).
    unsafe {
        core::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "xor ebp, ebp",
            "mov rdi, {arg}",
            "and rsp, -16",
            "call {entry}",
            "ud2",
            "2:",
            entry = in(reg) entry,
            arg = in(reg) arg,
            inlateout("rax") k::__NR_clone3 as isize => ret,
            in("rdi") args as *mut k::clone_args,
            in("rsi") std::mem::size_of::<k::clone_args>(),
            out("rcx") _,
            out("r11") _,
        );
    }
    ret
}
