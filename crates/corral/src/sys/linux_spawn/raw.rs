//! The raw-syscall layer shared by the three children that run without
//! exec in corral's memory or without its runtime: the clone3 child
//! ([`super::child`]), the PID-namespace init ([`super::pidns`]) and the
//! keeper ([`super::keeper`]). Nothing here allocates, locks, touches
//! thread-locals or can panic. The instructions themselves are per
//! architecture (`arch_x86_64.rs`, `arch_aarch64.rs`).

use std::os::raw::c_ulong;

use linux_raw_sys::general as k;

pub(super) use super::arch::{clone3_with, syscall4, syscall6};

/// `rt_sigprocmask(SIG_SETMASK, set, old)` for the calling thread.
///
/// # Safety
/// `old` is null or points to writable 8 bytes.
#[inline(always)]
pub(super) unsafe fn set_sigmask(set: &u64, old: *mut u64) -> isize {
    // SAFETY: `set` is a valid 8-byte sigset (the kernel's size on both
    // arches: _NSIG / 8), `old` is null or writable as the caller promises.
    unsafe {
        syscall4(
            k::__NR_rt_sigprocmask,
            k::SIG_SETMASK as usize,
            set as *const u64 as usize,
            old as usize,
            SIGSET_SIZE,
        )
    }
}

/// Adds SIGPIPE to the calling thread's blocked signals (`SIG_BLOCK`): a
/// write to a pipe or socket without a reader then fails with EPIPE only,
/// and the kernel's thread-directed SIGPIPE stays pending on this thread
/// (dropped when it exits) instead of acting on the whole process.
pub(super) fn block_sigpipe() {
    let set: u64 = 1 << (k::SIGPIPE - 1);
    // SAFETY: `set` is a valid 8-byte sigset, no old mask is asked for;
    // blocking one signal in the calling thread touches no memory of ours.
    unsafe {
        syscall4(
            k::__NR_rt_sigprocmask,
            k::SIG_BLOCK as usize,
            &set as *const u64 as usize,
            0,
            SIGSET_SIZE,
        );
    }
}

pub(super) const SIGSET_SIZE: usize = (k::_NSIG / 8) as usize;
pub(super) const SIG_DFL: usize = 0;
pub(super) const SIG_IGN: usize = 1;

/// The SIGPIPE handler the program starts with: ignored when asked
/// (`Command::sigpipe_ignored`), else the default action.
pub(super) fn sigpipe_handler(ignored: bool) -> usize {
    if ignored {
        SIG_IGN
    } else {
        SIG_DFL
    }
}

/// The kernel's `struct sigaction` (not libc's): handler, flags, restorer,
/// mask. The handler is kept as a plain address (SIG_DFL is 0, not a
/// function).
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct KernelSigaction {
    pub(super) handler: usize,
    pub(super) flags: c_ulong,
    pub(super) restorer: usize,
    pub(super) mask: u64,
}

// The layout must be the kernel's on both arches.
const _: () =
    assert!(std::mem::size_of::<KernelSigaction>() == std::mem::size_of::<k::kernel_sigaction>());
const _: () = assert!(std::mem::size_of::<u64>() == SIGSET_SIZE);

#[inline(always)]
pub(super) fn errno_of(r: isize) -> i32 {
    // r is in -4095..=-1 here.
    r.wrapping_neg() as i32
}

#[inline(always)]
pub(super) unsafe fn exit_now(code: usize) -> ! {
    loop {
        // SAFETY: exit_group takes no pointer.
        unsafe {
            syscall4(k::__NR_exit_group, code, 0, 0, 0);
        }
    }
}
