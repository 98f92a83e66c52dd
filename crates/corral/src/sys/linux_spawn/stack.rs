//! The stack of a child that runs in corral's memory (the clone3 child,
//! the PID-namespace init, the keeper).

use std::io;

use super::CHILD_STACK;

/// The child's stack: an anonymous mapping with a guard page at the bottom.
pub(super) struct Stack {
    base: *mut std::ffi::c_void,
    len: usize,
    guard: usize,
}

// SAFETY: a `Stack` owns its mapping alone (nothing else holds the address
// once no child runs on it, which its users ensure before they let go of
// it); moving that ownership to another thread is sound.
unsafe impl Send for Stack {}

impl Stack {
    pub(super) fn new() -> io::Result<Stack> {
        Stack::with_size(CHILD_STACK)
    }

    pub(super) fn with_size(usable: usize) -> io::Result<Stack> {
        use rustix::mm::{MapFlags, MprotectFlags, ProtFlags};
        let guard = rustix::param::page_size();
        let len = usable.div_ceil(guard) * guard + guard;
        // SAFETY: a fresh private anonymous mapping at an address of the
        // kernel's choice; it aliases nothing.
        let base = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE | MapFlags::STACK,
            )?
        };
        let stack = Stack { base, len, guard };
        // SAFETY: the first page of the mapping just made, which nothing
        // uses yet.
        unsafe { rustix::mm::mprotect(base, guard, MprotectFlags::empty())? };
        Ok(stack)
    }

    /// Lowest usable address and usable size (clone3 starts the child at
    /// `low + size`).
    pub(super) fn usable(&self) -> (u64, u64) {
        (
            self.base as u64 + self.guard as u64,
            (self.len - self.guard) as u64,
        )
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`; it is dropped
        // only after clone3 returned, when the child no longer uses it (it
        // exec'd into a new address space or exited: CLONE_VFORK).
        unsafe {
            let _ = rustix::mm::munmap(self.base, self.len);
        }
    }
}
