//! State that belongs to one process, under a lock that a fork cannot
//! inherit held.
//!
//! A fork of the host (without exec: Python's `multiprocessing`, a
//! pre-fork server) gets a copy of the parent's memory as it was at the
//! fork, locks included. A `std::sync::Mutex` taken at that moment by
//! another thread of the parent stays taken in the fork forever (the
//! thread that would let it go does not exist there): the fork's first
//! run waited for it without end
//! (`adversarial_crash::a_fork_taken_while_other_threads_run_commands_can_run_its_own_*`).
//! [`PerProcess`] keeps its state keyed by the pid that made it: a process
//! that finds its parent's makes its own and never waits for the other
//! one's lock. The inherited state is dropped in the fork when its lock was
//! free (its descriptors closed), else left alone
//! (never freed: a few descriptors stay open in the fork, close-on-exec).

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};

struct Inner<T> {
    owner: u32,
    state: Mutex<T>,
}

/// A `Mutex<T>` per process (see the module docs). `make` gives the state
/// a process starts with (it may ask for `std::process::id()`).
pub(crate) struct PerProcess<T: 'static> {
    cur: AtomicPtr<Inner<T>>,
    make: fn() -> T,
}

impl<T: 'static> PerProcess<T> {
    pub(crate) const fn new(make: fn() -> T) -> PerProcess<T> {
        PerProcess {
            cur: AtomicPtr::new(std::ptr::null_mut()),
            make,
        }
    }

    /// This process's state, locked (a poisoned lock is taken as it is).
    pub(crate) fn lock(&'static self) -> MutexGuard<'static, T> {
        let me = pid();
        loop {
            let cur = self.cur.load(Ordering::Acquire);
            // SAFETY: a non-null pointer in `cur` came from Box::into_raw
            // and is never freed (see below).
            if let Some(p) = unsafe { cur.as_ref() } {
                if p.owner == me {
                    return p.state.lock().unwrap_or_else(|e| e.into_inner());
                }
            }
            let new = Box::into_raw(Box::new(Inner {
                owner: me,
                state: Mutex::new((self.make)()),
            }));
            if self
                .cur
                .compare_exchange(cur, new, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                // Another thread of this process published one first.
                // SAFETY: `new` came from Box::into_raw above and was never
                // published.
                drop(unsafe { Box::from_raw(new) });
                continue;
            }
            // SAFETY: as above; only the thread that replaced it gets here,
            // and no thread of this process locks a state it does not own.
            if let Some(old) = unsafe { cur.as_ref() } {
                // The parent's (this is a fork). Free at the fork: its
                // contents are consistent, let them go (the box itself stays:
                // a thread of this process may still be looking at it).
                let inherited = match old.state.try_lock() {
                    Ok(mut g) => Some(std::mem::replace(&mut *g, (self.make)())),
                    Err(TryLockError::Poisoned(p)) => {
                        Some(std::mem::replace(&mut *p.into_inner(), (self.make)()))
                    }
                    // Held by a thread of the parent: left as it is.
                    Err(TryLockError::WouldBlock) => None,
                };
                drop(inherited);
            }
        }
    }
}

/// Set by [`ask_every_time`].
static ASK_EVERY_TIME: AtomicBool = AtomicBool::new(false);

/// From now on [`pid`] asks the kernel at each use: a one-shot process
/// (`one_shot_process`) asks some 30 times in all, fewer than the cached
/// page (a mapping, an `madvise`, two page faults: some 25 us at its start)
/// would pay for.
pub(crate) fn ask_every_time() {
    ASK_EVERY_TIME.store(true, Ordering::Relaxed);
}

/// This process's id, without a system call on every use: cached in a page
/// the kernel empties in a fork's copy (`MADV_WIPEONFORK`, Linux 4.14), so
/// a fork reads 0 and asks again. Where that page cannot be had, asked
/// every time; and after [`ask_every_time`].
pub(crate) fn pid() -> u32 {
    if ASK_EVERY_TIME.load(Ordering::Relaxed) {
        return std::process::id();
    }
    static PAGE: AtomicPtr<AtomicU32> = AtomicPtr::new(std::ptr::null_mut());
    let mut page = PAGE.load(Ordering::Acquire);
    if page.is_null() {
        page = map_wipe_on_fork();
        if page.is_null() {
            return std::process::id();
        }
        if let Err(other) = PAGE.compare_exchange(
            std::ptr::null_mut(),
            page,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            // Another thread mapped one first: keep that one (this one is
            // left mapped; it happens at most once per racing thread).
            page = other;
        }
    }
    // SAFETY: `page` points to a mapped, zero-initialised, never unmapped
    // page (4096 bytes, aligned), so an `AtomicU32` at its start is valid
    // for the whole life of the process and of its forks.
    let cached = unsafe { &*page };
    match cached.load(Ordering::Relaxed) {
        0 => {
            let id = std::process::id();
            cached.store(id, Ordering::Relaxed);
            id
        }
        id => id,
    }
}

/// One anonymous page marked wipe-on-fork, or null.
fn map_wipe_on_fork() -> *mut AtomicU32 {
    use rustix::mm::{madvise, mmap_anonymous, munmap, Advice, MapFlags, ProtFlags};
    const LEN: usize = 4096;
    // SAFETY: a fresh private anonymous mapping at an address of the
    // kernel's choosing: no existing memory is affected.
    let Ok(p) = (unsafe {
        mmap_anonymous(
            std::ptr::null_mut(),
            LEN,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::PRIVATE,
        )
    }) else {
        return std::ptr::null_mut();
    };
    // SAFETY: `p` is the mapping just made, `LEN` bytes long.
    if unsafe { madvise(p, LEN, Advice::LinuxWipeOnFork) }.is_err() {
        // SAFETY: unmapping the mapping just made, never handed out.
        let _ = unsafe { munmap(p, LEN) };
        return std::ptr::null_mut();
    }
    p.cast()
}

#[cfg(test)]
mod tests {
    use super::pid;

    #[test]
    fn pid_is_this_process_and_a_fork_sees_its_own() {
        assert_eq!(pid(), std::process::id());
        assert_eq!(pid(), std::process::id());
        // A fork (no exec) must read its own pid, not the cached parent's.
        // SAFETY: the child only calls async-signal-safe functions
        // (getpid, reading a mapped page, write, _exit); no allocation.
        let child = unsafe { libc::fork() };
        assert!(child >= 0);
        if child == 0 {
            // SAFETY: getpid has no preconditions.
            let ok = pid() == unsafe { libc::getpid() } as u32;
            // SAFETY: ends the forked child at once, running nothing of
            // the parent's (no destructors, no atexit handlers).
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waiting for the child just forked.
        unsafe { libc::waitpid(child, &mut status, 0) };
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "{status}"
        );
    }
}
