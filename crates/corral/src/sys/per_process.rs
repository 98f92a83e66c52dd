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
//! free (its descriptors closed: what a fork used to do), else left alone
//! (never freed: a few descriptors stay open in the fork, close-on-exec).

use std::sync::atomic::{AtomicPtr, Ordering};
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
        let me = std::process::id();
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
