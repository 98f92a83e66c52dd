//! Spawn into a cgroup at birth, at vfork speed (Linux, x86_64 and aarch64).
//!
//! `clone3(CLONE_INTO_CGROUP | CLONE_VFORK | CLONE_VM | CLONE_PIDFD)`: the
//! child shares the parent's memory (no page tables are copied, so the cost
//! does not grow with the parent's size), is created inside the command's
//! cgroup v2 directory (it never runs a single instruction outside it), and
//! the calling thread sleeps until the child has exec'd or exited.
//!
//! Because the child shares memory with every thread of the parent, it must
//! not allocate, take a lock, touch thread-locals (errno included: it shares
//! the calling thread's TLS pointer), unwind or panic. So everything it needs
//! is built before the clone ([`Prepared`], [`ChildArgs`]) and the child only
//! reads it and issues raw syscalls through inline assembly. Signals: no
//! handler of the parent may ever run in the child (it would run parent code
//! on the child's stack, in shared memory). Two guards: every signal is
//! blocked in the calling thread around the clone (the child inherits that
//! mask), and `CLONE_CLEAR_SIGHAND` gives the child a table in which every
//! caught signal is back to the default (Linux 5.5; CLONE_INTO_CGROUP needs
//! 5.7 anyway). The child resets SIGPIPE to the default as std does, and
//! empties its mask just before exec.
//!
//! `sys::spawn` uses this only for a containment that hands it a cgroup
//! directory ([`Containment::cgroup_fd`](crate::contain::Containment)). When
//! the kernel or a seccomp filter refuses clone3 (ENOSYS, EPERM, EINVAL,
//! E2BIG) it records that once per process and falls back to std's fork path
//! with a pre-exec write to `cgroup.procs`.
//!
//! Differences from std's `Command::spawn` that a caller can see: a script
//! without a `#!` line is not retried through `/bin/sh` (as with
//! `posix_spawnp`, which the process-group tier uses through std); the
//! child's signal mask is empty (std, since Rust 1.66, passes the calling
//! thread's mask on, and so do the process-group tier and the fallback).

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::raw::{c_char, c_int, c_ulong};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use linux_raw_sys::errno as en;
use linux_raw_sys::general as k;
use rustix::process::Pid;

use super::{ChildIo, SpawnSpec};

/// Crash safety for the cgroup tier (a keeper forked without exec).
#[path = "linux_keeper.rs"]
pub(crate) mod keeper;
/// The PID-namespace spawn (an init forked without exec, raw syscalls).
#[path = "linux_pidns.rs"]
pub(crate) mod pidns;

/// Master switch. With `false`, every cgroup spawn takes std's fork +
/// pre-exec path.
const CLONE3_ENABLED: bool = true;

/// Usable bytes of the child's stack. The child runs one small function
/// (a few hundred bytes of frame, also unoptimized); a guard page below it
/// turns an overflow into a fault of the child instead of a write into the
/// parent's memory.
const CHILD_STACK: usize = 64 * 1024;

/// The default search path when the child's environment has no `PATH`
/// (glibc's `execvp`, which std's fork path uses).
const DEFAULT_PATH: &str = "/bin:/usr/bin";

/// How the clone3 path is chosen. Hidden hook for tests and benchmarks, read
/// once per process from `CORRAL_CLONE3`: `off` always uses the fallback,
/// `require` makes an unsupported clone3 an error instead of a fallback.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Auto,
    Off,
    Require,
}

fn mode() -> Mode {
    static MODE: OnceLock<Mode> = OnceLock::new();
    *MODE.get_or_init(|| match std::env::var_os("CORRAL_CLONE3") {
        Some(v) if v == "off" || v == "0" => Mode::Off,
        Some(v) if v == "require" => Mode::Require,
        _ => Mode::Auto,
    })
}

/// Set once clone3 was refused in a way that means "not available here".
static UNSUPPORTED: AtomicBool = AtomicBool::new(false);

/// Whether `sys::spawn` should try [`spawn`] first.
pub(crate) fn usable() -> bool {
    CLONE3_ENABLED && mode() != Mode::Off && !UNSUPPORTED.load(Ordering::Relaxed)
}

/// Why [`spawn`] did not start the program.
#[derive(Debug)]
pub(crate) enum Clone3Error {
    /// clone3 with these flags is not available in this process (old kernel,
    /// seccomp). Recorded: [`usable`] is false from now on. Nothing was
    /// started and the caller's descriptors are untouched: fall back.
    Unsupported,
    /// The description could not be built, or a resource for the spawn
    /// could not be had (NUL byte in an argument, no descriptors left, ...).
    Setup(io::Error),
    /// clone3 itself failed: the cgroup refused the child, or the process
    /// or memory limits were hit.
    Clone(io::Error),
    /// The child was created but could not run the program; this is the
    /// errno of the step that failed (setpgid, chdir, dup, execve). The
    /// child has been reaped.
    Exec(io::Error),
}

// ---------------------------------------------------------------------------
// The description, built in the parent (ordinary Rust; unit-tested).

fn cstring(s: &OsStr) -> io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("nul byte found in provided data: {s:?}"),
        )
    })
}

/// The child's environment: the parent's (unless cleared) with the changes
/// applied in order. A changed variable keeps its place; a new one is added
/// at the end.
fn child_env(
    env_clear: bool,
    parent: impl IntoIterator<Item = (OsString, OsString)>,
    changes: &[(OsString, Option<OsString>)],
) -> Vec<(OsString, OsString)> {
    let mut vars: Vec<(OsString, OsString)> = if env_clear {
        Vec::new()
    } else {
        parent.into_iter().collect()
    };
    for (key, value) in changes {
        match value {
            Some(v) => match vars.iter_mut().find(|(k, _)| k == key) {
                Some(slot) => slot.1 = v.clone(),
                None => vars.push((key.clone(), v.clone())),
            },
            None => vars.retain(|(k, _)| k != key),
        }
    }
    vars
}

/// `KEY=VALUE` strings for `envp`.
fn env_block(vars: &[(OsString, OsString)]) -> io::Result<Vec<CString>> {
    vars.iter()
        .map(|(k, v)| {
            let mut kv = Vec::with_capacity(k.len() + v.len() + 1);
            kv.extend_from_slice(k.as_bytes());
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            cstring(OsStr::from_bytes(&kv))
        })
        .collect()
}

/// The paths `execve` is tried on, in order, as `execvp` does: the program
/// itself when it contains a `/`; otherwise the program in each `PATH`
/// entry (an empty entry is the current directory). `path` is the child's
/// `PATH` (its environment is what `execvp` searches); `None` uses the
/// default. An empty program name has no candidate (ENOENT).
fn path_candidates(program: &OsStr, path: Option<&OsStr>) -> Vec<OsString> {
    let name = program.as_bytes();
    if name.is_empty() {
        return Vec::new();
    }
    if name.contains(&b'/') {
        return vec![program.to_owned()];
    }
    let path = path.map_or(DEFAULT_PATH.as_bytes(), OsStr::as_bytes);
    path.split(|&b| b == b':')
        .map(|dir| {
            if dir.is_empty() {
                program.to_owned()
            } else {
                let mut p = Vec::with_capacity(dir.len() + name.len() + 1);
                p.extend_from_slice(dir);
                if !dir.ends_with(b"/") {
                    p.push(b'/');
                }
                p.extend_from_slice(name);
                OsString::from(OsStr::from_bytes(&p))
            }
        })
        .collect()
}

/// What the search does after `execve` failed on one candidate with
/// `errno`, as glibc's `execvp` does.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Step {
    /// Not there: try the next candidate.
    Next,
    /// There but not executable: try the next, and report EACCES if no
    /// other candidate works.
    NextDenied,
    /// A real failure of this program: stop and report it.
    Stop,
}

// Runs in the child: no allocation, no panic.
#[inline(always)]
fn step(errno: i32) -> Step {
    const ENOENT: i32 = en::ENOENT as i32;
    const ENOTDIR: i32 = en::ENOTDIR as i32;
    const ESTALE: i32 = en::ESTALE as i32;
    const ENODEV: i32 = en::ENODEV as i32;
    const ETIMEDOUT: i32 = en::ETIMEDOUT as i32;
    const EACCES: i32 = en::EACCES as i32;
    match errno {
        ENOENT | ENOTDIR | ESTALE | ENODEV | ETIMEDOUT => Step::Next,
        EACCES => Step::NextDenied,
        _ => Step::Stop,
    }
}

/// The errno reported after every candidate failed without a `Stop`.
#[inline(always)]
fn exhausted_errno(last: i32, denied: bool) -> i32 {
    if denied {
        en::EACCES as i32
    } else {
        last
    }
}

/// Everything the child needs, as C strings and NULL-terminated pointer
/// arrays. The pointer arrays point into the `CString`s owned here (their
/// heap buffers do not move when the struct does).
struct Prepared {
    _argv: Vec<CString>,
    argv: Vec<*const c_char>,
    _envp: Vec<CString>,
    envp: Vec<*const c_char>,
    _candidates: Vec<CString>,
    candidates: Vec<*const c_char>,
    cwd: Option<CString>,
}

fn pointers(strings: &[CString]) -> Vec<*const c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

impl Prepared {
    fn new(
        spec: &SpawnSpec<'_>,
        parent_env: impl IntoIterator<Item = (OsString, OsString)>,
    ) -> io::Result<Prepared> {
        let mut argv = Vec::with_capacity(spec.args.len() + 1);
        argv.push(cstring(spec.program)?);
        for a in spec.args {
            argv.push(cstring(a)?);
        }
        let vars = child_env(spec.env_clear, parent_env, spec.env);
        let envp = env_block(&vars)?;
        let path = vars
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.as_os_str());
        let candidates = path_candidates(spec.program, path)
            .iter()
            .map(|c| cstring(c))
            .collect::<io::Result<Vec<_>>>()?;
        let candidates = skip_missing(candidates);
        let cwd = spec.cwd.map(|d| cstring(d.as_os_str())).transpose()?;
        Ok(Prepared {
            argv: pointers(&argv),
            _argv: argv,
            envp: pointers(&envp),
            _envp: envp,
            // The child walks `candidates` by count; the NULL at the end is
            // never read but keeps the shape of the other arrays.
            candidates: pointers(&candidates),
            _candidates: candidates,
            cwd,
        })
    }
}

/// Drops absolute candidates that do not exist. A failed `execve` in the
/// child costs far more than an `access(2)` here, and a PATH can be long.
/// Relative candidates are kept (they resolve against the child's working
/// directory), and so is everything when nothing would be left, so the
/// child still reports the error `execvp` would.
fn skip_missing(candidates: Vec<CString>) -> Vec<CString> {
    if candidates.len() < 2 {
        return candidates;
    }
    // Only "does not exist" drops a candidate: any other error (a symlink
    // loop, a name too long, a denied directory) is what execvp would stop
    // at or remember, so the child must still meet it. Checked with the
    // effective ids, as execve uses.
    let exists = |c: &CString| {
        !c.as_bytes().starts_with(b"/")
            || !matches!(
                rustix::fs::accessat(
                    rustix::fs::CWD,
                    c.as_c_str(),
                    rustix::fs::Access::EXISTS,
                    rustix::fs::AtFlags::EACCESS,
                ),
                Err(rustix::io::Errno::NOENT | rustix::io::Errno::NOTDIR)
            )
    };
    if !candidates.iter().any(exists) {
        return candidates;
    }
    candidates.into_iter().filter(exists).collect()
}

// ---------------------------------------------------------------------------
// Raw syscalls. Return the kernel's value: >= 0, or -errno.

/// # Safety
/// The caller must pass arguments valid for syscall `nr` (pointers to
/// memory of the size and mutability the syscall expects).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn syscall4(nr: u32, a0: usize, a1: usize, a2: usize, a3: usize) -> isize {
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
/// As for the x86_64 version.
#[cfg(target_arch = "aarch64")]
#[inline(always)]
unsafe fn syscall4(nr: u32, a0: usize, a1: usize, a2: usize, a3: usize) -> isize {
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

/// `rt_sigprocmask(SIG_SETMASK, set, old)` for the calling thread.
///
/// # Safety
/// `old` is null or points to writable 8 bytes.
#[inline(always)]
unsafe fn set_sigmask(set: &u64, old: *mut u64) -> isize {
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

const SIGSET_SIZE: usize = (k::_NSIG / 8) as usize;
const SIG_DFL: usize = 0;

/// The kernel's `struct sigaction` (not libc's): handler, flags, restorer,
/// mask. The handler is kept as a plain address (SIG_DFL is 0, not a
/// function).
#[repr(C)]
#[derive(Clone, Copy)]
struct KernelSigaction {
    handler: usize,
    flags: c_ulong,
    restorer: usize,
    mask: u64,
}

// The layout must be the kernel's on both arches.
const _: () =
    assert!(std::mem::size_of::<KernelSigaction>() == std::mem::size_of::<k::kernel_sigaction>());
const _: () = assert!(std::mem::size_of::<u64>() == SIGSET_SIZE);

// ---------------------------------------------------------------------------
// The child.

/// What the child reads. Lives on the parent's stack for the whole clone
/// (the parent thread is suspended until the child exec'd or exited).
#[repr(C)]
struct ChildArgs {
    argv: *const *const c_char,
    envp: *const *const c_char,
    candidates: *const *const c_char,
    n_candidates: usize,
    /// NULL: keep the parent's directory.
    cwd: *const c_char,
    /// Descriptor to install as 0, 1, 2; -1 keeps the inherited one.
    /// None of them is in 0..=2 unless it is already at its own place.
    stdio: [c_int; 3],
    /// Write end of the close-on-exec error pipe.
    err_fd: c_int,
}

/// The child's whole life: runs on its own stack, in the parent's memory,
/// right after clone3 returned 0. Never returns.
extern "C" fn child_main(args: *const ChildArgs) -> ! {
    // SAFETY: `args` points to the parent's `ChildArgs`, alive and unchanged
    // until the child exec's or exits (the parent thread is suspended by
    // CLONE_VFORK and nothing else knows the address). Every pointer in it
    // is valid as documented on `ChildArgs`. `child_exec` only issues raw
    // syscalls and reads that memory.
    unsafe {
        let a = &*args;
        let errno = child_exec(a);
        let bytes = errno.to_ne_bytes();
        loop {
            let r = syscall4(
                k::__NR_write,
                a.err_fd as usize,
                bytes.as_ptr() as usize,
                bytes.len(),
                0,
            );
            if r != -(en::EINTR as isize) {
                break;
            }
        }
    }
    // exit_group does not return; the loop only gives the function its
    // `!` type without a panic path.
    loop {
        // SAFETY: exit_group takes no pointer; it ends this child only (it
        // is its own thread group: no CLONE_THREAD).
        unsafe {
            syscall4(k::__NR_exit_group, 127, 0, 0, 0);
        }
    }
}

#[inline(always)]
fn errno_of(r: isize) -> i32 {
    // r is in -4095..=-1 here.
    r.wrapping_neg() as i32
}

/// Sets the child up and execs. Returns the errno to report when it could
/// not; on success it does not return.
///
/// # Safety
/// Only in the child made by `clone3_vfork`, with `a` as described on
/// [`ChildArgs`].
#[inline(never)]
unsafe fn child_exec(a: &ChildArgs) -> i32 {
    // SAFETY: (the whole body) each syscall gets pointers into `a` (valid, see
    // `ChildArgs`) or into this frame's locals, with the sizes the kernel
    // expects. No allocation, lock, TLS access or panic path is used: the
    // one loop is bounded by a count from `a`, arithmetic is wrapping,
    // arrays are read through raw pointers or iterators.
    unsafe {
        // 1. Signal dispositions. CLONE_CLEAR_SIGHAND already reset every
        //    caught signal to the default in the child's own copy of the
        //    table (the parent's handlers are untouched), so no handler of
        //    the parent can ever run here. Ignored signals stay ignored
        //    across exec, except SIGPIPE, which Rust programs ignore and std
        //    resets for the child.
        let dfl = KernelSigaction {
            handler: SIG_DFL,
            flags: 0,
            restorer: 0,
            mask: 0,
        };
        let r = syscall4(
            k::__NR_rt_sigaction,
            k::SIGPIPE as usize,
            &dfl as *const KernelSigaction as usize,
            0,
            SIGSET_SIZE,
        );
        if r < 0 {
            return errno_of(r);
        }

        // 2. Leader of a new process group (pgid = pid).
        let r = syscall4(k::__NR_setpgid, 0, 0, 0, 0);
        if r < 0 {
            return errno_of(r);
        }

        // 3. Working directory.
        if !a.cwd.is_null() {
            let r = syscall4(k::__NR_chdir, a.cwd as usize, 0, 0, 0);
            if r < 0 {
                return errno_of(r);
            }
        }

        // 4. Standard streams. A source already at its place only loses
        //    close-on-exec; the parent moved any other source out of 0..=2,
        //    so no dup3 here overwrites a source still to be installed.
        for (target, &src) in a.stdio.iter().enumerate() {
            if src < 0 {
                continue;
            }
            let r = if src as usize == target {
                syscall4(k::__NR_fcntl, src as usize, k::F_SETFD as usize, 0, 0)
            } else {
                syscall4(k::__NR_dup3, src as usize, target, 0, 0)
            };
            if r < 0 {
                return errno_of(r);
            }
        }

        // 5. An empty signal mask for the program: a caller thread that
        //    blocks SIGTERM must not hand that on to a tree that corral will
        //    signal. Dispositions are all default or ignore now, so a signal
        //    that arrives from here on is handled by the kernel alone.
        let empty: u64 = 0;
        let r = set_sigmask(&empty, std::ptr::null_mut());
        if r < 0 {
            return errno_of(r);
        }

        // 6. Exec, trying each candidate as execvp does.
        let mut last = en::ENOENT as i32;
        let mut denied = false;
        let mut i: usize = 0;
        while i < a.n_candidates {
            let path = *a.candidates.add(i);
            let r = syscall4(
                k::__NR_execve,
                path as usize,
                a.argv as usize,
                a.envp as usize,
                0,
            );
            // execve returned: it failed.
            let e = errno_of(r);
            match step(e) {
                Step::Next => last = e,
                Step::NextDenied => {
                    last = e;
                    denied = true;
                }
                Step::Stop => return e,
            }
            i = i.wrapping_add(1);
        }
        exhausted_errno(last, denied)
    }
}

/// clone3 with a child that starts on `args.stack` and calls
/// `child_main(child_arg)` at once. Returns the kernel's value (child pid
/// or -errno) in the parent only.
///
/// # Safety
/// `args` must request CLONE_VM | CLONE_VFORK with a valid, otherwise
/// unused stack, and `child_arg` must stay valid until the child exec'd or
/// exited (guaranteed by CLONE_VFORK while the caller's frame lives).
#[cfg(target_arch = "x86_64")]
unsafe fn clone3_vfork(args: &mut k::clone_args, child_arg: *const ChildArgs) -> isize {
    let ret: isize;
    let entry: extern "C" fn(*const ChildArgs) -> ! = child_main;
    // SAFETY: the syscall convention as in `syscall4`. `entry` and
    // `child_arg` sit in registers the kernel preserves (rcx and r11 are
    // declared clobbered with early `out`, so they cannot hold inputs).
    // In the parent (rax != 0) execution falls through to label 2 with
    // nothing else changed. In the child (rax == 0) the kernel has set rsp
    // to the top of the new stack; the child never returns into Rust code
    // of this frame: it zeroes the frame pointer (end of backtraces),
    // aligns the stack to 16 bytes as the C ABI requires at a call, and
    // calls `child_main`, which never returns (ud2 traps if it did).
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
            arg = in(reg) child_arg,
            inlateout("rax") k::__NR_clone3 as isize => ret,
            in("rdi") args as *mut k::clone_args,
            in("rsi") std::mem::size_of::<k::clone_args>(),
            out("rcx") _,
            out("r11") _,
        );
    }
    ret
}

/// As the x86_64 version.
///
/// # Safety
/// As the x86_64 version.
#[cfg(target_arch = "aarch64")]
unsafe fn clone3_vfork(args: &mut k::clone_args, child_arg: *const ChildArgs) -> isize {
    let ret: isize;
    let entry: extern "C" fn(*const ChildArgs) -> ! = child_main;
    // SAFETY: the syscall convention as in `syscall4`; `svc` preserves all
    // registers but x0, so `entry` and `child_arg` survive in the child.
    // In the parent (x0 != 0) execution continues at label 2. In the child
    // (x0 == 0) sp is the top of the new stack (16-byte aligned: the stack
    // is page aligned and its size a multiple of the page size); the child
    // clears the frame pointer (end of backtraces; x29 is never an operand
    // register) and calls `child_main`, which never returns (brk traps if it
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
            arg = in(reg) child_arg,
            in("x8") k::__NR_clone3 as usize,
            inlateout("x0") args as *mut k::clone_args as usize => ret,
            in("x1") std::mem::size_of::<k::clone_args>(),
        );
    }
    ret
}

/// The child's stack: an anonymous mapping with a guard page at the bottom.
struct Stack {
    base: *mut std::ffi::c_void,
    len: usize,
    guard: usize,
}

impl Stack {
    fn new() -> io::Result<Stack> {
        Stack::with_size(CHILD_STACK)
    }

    fn with_size(usable: usize) -> io::Result<Stack> {
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
    fn usable(&self) -> (u64, u64) {
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

/// The descriptor the child installs as `target`, or -1 to inherit.
/// Opens /dev/null for `Null`; moves a source that sits in 0..=2 at another
/// place above 2 (it could be overwritten by an earlier dup3 otherwise).
/// Descriptors made here are pushed to `keep` (closed after the clone).
fn child_fd(io: &ChildIo, target: i32, keep: &mut Vec<OwnedFd>) -> io::Result<c_int> {
    let fd = match io {
        ChildIo::Inherit => return Ok(-1),
        ChildIo::Null => {
            use rustix::fs::{Mode, OFlags};
            let null =
                rustix::fs::open("/dev/null", OFlags::RDWR | OFlags::CLOEXEC, Mode::empty())?;
            let raw = null.as_raw_fd();
            keep.push(null);
            raw
        }
        ChildIo::File(f) => f.as_raw_fd(),
    };
    if (0..=2).contains(&fd) && fd != target {
        // SAFETY: `fd` is open for the duration of this call (owned by the
        // spec or by `keep`).
        let src = unsafe { BorrowedFd::borrow_raw(fd) };
        let moved = rustix::io::fcntl_dupfd_cloexec(src, 3)?;
        let raw = moved.as_raw_fd();
        keep.push(moved);
        return Ok(raw);
    }
    Ok(fd)
}

/// Errnos that mean "clone3 (or CLONE_INTO_CGROUP, CLONE_CLEAR_SIGHAND) is
/// not available to this process": kernel before 5.3 (ENOSYS) or 5.7
/// (E2BIG/EINVAL for the larger struct or an unknown flag), or a seccomp
/// filter (ENOSYS, EPERM).
fn means_unsupported(errno: i32) -> bool {
    [en::ENOSYS, en::EPERM, en::EINVAL, en::E2BIG]
        .iter()
        .any(|&e| e as i32 == errno)
}

/// Starts the program of `spec` inside the cgroup whose directory is
/// `cgroup`, as the leader of a new process group. Returns its pid and a
/// pidfd (close-on-exec). The caller keeps ownership of the spec's
/// descriptors (close them after a success; reuse them after
/// `Unsupported`).
pub(crate) fn spawn(
    spec: &SpawnSpec<'_>,
    cgroup: BorrowedFd<'_>,
) -> Result<(Pid, OwnedFd), Clone3Error> {
    let prepared = Prepared::new(spec, std::env::vars_os()).map_err(Clone3Error::Setup)?;
    let mut keep = Vec::new();
    let stdio = [
        child_fd(&spec.stdin, 0, &mut keep).map_err(Clone3Error::Setup)?,
        child_fd(&spec.stdout, 1, &mut keep).map_err(Clone3Error::Setup)?,
        child_fd(&spec.stderr, 2, &mut keep).map_err(Clone3Error::Setup)?,
    ];
    // Non-blocking: with CLONE_VFORK the child has exec'd or exited by the
    // time clone3 returns, so its report (if any) is already in the pipe. A
    // process that another thread forked meanwhile may hold a copy of the
    // write end; waiting for end of file would wait for that process.
    let (err_r, mut err_w) = rustix::pipe::pipe_with(
        rustix::pipe::PipeFlags::CLOEXEC | rustix::pipe::PipeFlags::NONBLOCK,
    )
    .map_err(|e| Clone3Error::Setup(e.into()))?;
    if err_w.as_raw_fd() <= 2 {
        // Only when this process runs with 0, 1 or 2 closed: keep the
        // report channel out of the way of the dup3 onto 0..=2.
        err_w =
            rustix::io::fcntl_dupfd_cloexec(&err_w, 3).map_err(|e| Clone3Error::Setup(e.into()))?;
    }
    let stack = Stack::new().map_err(Clone3Error::Setup)?;
    let (stack_low, stack_size) = stack.usable();

    let child_args = ChildArgs {
        argv: prepared.argv.as_ptr(),
        envp: prepared.envp.as_ptr(),
        candidates: prepared.candidates.as_ptr(),
        n_candidates: prepared.candidates.len() - 1,
        cwd: prepared
            .cwd
            .as_ref()
            .map_or(std::ptr::null(), |c| c.as_ptr()),
        stdio,
        err_fd: err_w.as_raw_fd(),
    };
    let mut pidfd: c_int = -1;
    let mut args = k::clone_args {
        flags: (k::CLONE_VM | k::CLONE_VFORK | k::CLONE_PIDFD) as u64
            | k::CLONE_CLEAR_SIGHAND
            | k::CLONE_INTO_CGROUP,
        pidfd: &mut pidfd as *mut c_int as u64,
        child_tid: 0,
        parent_tid: 0,
        exit_signal: k::SIGCHLD as u64,
        stack: stack_low,
        stack_size,
        tls: 0,
        set_tid: 0,
        set_tid_size: 0,
        cgroup: cgroup.as_raw_fd() as u64,
    };

    let all: u64 = !0;
    let mut old_mask: u64 = 0;
    // SAFETY: `old_mask` is a writable 8-byte sigset. Blocking everything in
    // this thread only delays delivery; the mask is restored below on every
    // path (nothing between here and there can panic or return).
    let r = unsafe { set_sigmask(&all, &mut old_mask) };
    if r < 0 {
        return Err(Clone3Error::Setup(io::Error::from_raw_os_error(errno_of(
            r,
        ))));
    }
    // SAFETY: `args` asks for CLONE_VM | CLONE_VFORK with the stack of
    // `stack` (mapped, unused, unmapped only after this returns); the child
    // reads `child_args` and what it points to (`prepared`, `stdio`
    // descriptors in `spec` and `keep`, `err_w`), all alive until the end
    // of this function, and this thread is suspended until the child exec'd
    // or exited. All signals are blocked in this thread, so the child starts
    // with them blocked and no handler can run on its stack before it
    // resets the dispositions.
    let ret = unsafe { clone3_vfork(&mut args, &child_args) };
    // SAFETY: restores the mask saved above (a valid sigset).
    unsafe {
        set_sigmask(&old_mask, std::ptr::null_mut());
    }
    // The child is done with all of these (exec'd or exited).
    drop(err_w);
    drop(stack);
    drop(keep);

    if ret < 0 {
        let errno = errno_of(ret);
        if means_unsupported(errno) && mode() != Mode::Require {
            // Only a kernel without clone3 (ENOSYS) or without these
            // clone_args (E2BIG) is a property of the process; EPERM (an
            // LSM, seccomp) and EINVAL (e.g. a thread that unshared its pid
            // namespace) may concern this call only: fall back for it alone.
            if errno == en::ENOSYS as i32 || errno == en::E2BIG as i32 {
                UNSUPPORTED.store(true, Ordering::Relaxed);
            }
            return Err(Clone3Error::Unsupported);
        }
        return Err(Clone3Error::Clone(io::Error::from_raw_os_error(errno)));
    }
    // SAFETY: clone3 succeeded with CLONE_PIDFD, so the kernel stored a new
    // close-on-exec pidfd that nothing else owns.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    let pid = Pid::from_raw(ret as i32).ok_or_else(|| {
        Clone3Error::Setup(io::Error::other("clone3 returned pid 0 in the parent"))
    })?;

    // End of file: the child exec'd (its copy of the write end was closed
    // on exec) or died without a word; either way it is running or a
    // zombie we own. Four bytes: the errno of the step that failed.
    let mut buf = [0u8; 4];
    let mut got = 0;
    let failure = loop {
        match rustix::io::read(&err_r, &mut buf[got..]) {
            Ok(0) => break None,
            Ok(n) => {
                got += n;
                if got == buf.len() {
                    break Some(io::Error::from_raw_os_error(i32::from_ne_bytes(buf)));
                }
            }
            Err(rustix::io::Errno::INTR) => continue,
            // Nothing there (and a foreign fork still holds the write end):
            // the child exec'd.
            Err(rustix::io::Errno::AGAIN) if got == 0 => break None,
            Err(e) => {
                break Some(io::Error::other(format!(
                    "reading the spawn error pipe: {e}"
                )))
            }
        }
    };
    match failure {
        None if got == 0 => Ok((pid, pidfd)),
        failure => {
            let e = failure.unwrap_or_else(|| io::Error::other("short spawn error report"));
            // The child exits by itself after reporting; kill it in case it
            // did not report (short read), then reap it: it is ours.
            if got != buf.len() {
                let _ = rustix::process::pidfd_send_signal(
                    pidfd.as_fd(),
                    rustix::process::Signal::KILL,
                );
            }
            let _ = rustix::process::waitid(
                rustix::process::WaitId::Pid(pid),
                rustix::process::WaitIdOptions::EXITED,
            );
            Err(Clone3Error::Exec(e))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn os(s: &str) -> OsString {
        OsString::from(s)
    }

    #[test]
    fn env_changes_apply_in_order_and_keep_places() {
        let parent = vec![(os("A"), os("1")), (os("B"), os("2")), (os("C"), os("3"))];
        let changes = vec![
            (os("B"), Some(os("two"))),
            (os("D"), Some(os("4"))),
            (os("A"), None),
            (os("D"), Some(os("four"))),
            (os("E"), None),
        ];
        let got = child_env(false, parent.clone(), &changes);
        assert_eq!(
            got,
            vec![
                (os("B"), os("two")),
                (os("C"), os("3")),
                (os("D"), os("four"))
            ]
        );
        let cleared = child_env(true, parent, &[(os("X"), Some(os("y")))]);
        assert_eq!(cleared, vec![(os("X"), os("y"))]);
    }

    #[test]
    fn env_block_is_key_equals_value_and_rejects_nul() {
        let b = env_block(&[(os("K"), os("v=w")), (os("E"), os(""))]).unwrap();
        assert_eq!(b[0].as_bytes(), b"K=v=w");
        assert_eq!(b[1].as_bytes(), b"E=");
        let bad = env_block(&[(os("K"), os("a\0b"))]).unwrap_err();
        assert_eq!(bad.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn path_search_order_matches_execvp() {
        let c = path_candidates(OsStr::new("ls"), Some(OsStr::new("/a:/b/::rel")));
        assert_eq!(c, vec![os("/a/ls"), os("/b/ls"), os("ls"), os("rel/ls")]);
        // A slash anywhere: no search.
        assert_eq!(
            path_candidates(OsStr::new("./x"), Some(OsStr::new("/a"))),
            vec![os("./x")]
        );
        assert_eq!(path_candidates(OsStr::new("d/x"), None), vec![os("d/x")]);
        // No PATH: glibc's default.
        assert_eq!(
            path_candidates(OsStr::new("sh"), None),
            vec![os("/bin/sh"), os("/usr/bin/sh")]
        );
        // An empty PATH is one empty entry: the current directory.
        assert_eq!(
            path_candidates(OsStr::new("sh"), Some(OsStr::new(""))),
            vec![os("sh")]
        );
        assert!(path_candidates(OsStr::new(""), None).is_empty());
    }

    #[test]
    fn exec_errors_map_like_execvp() {
        assert_eq!(step(en::ENOENT as i32), Step::Next);
        assert_eq!(step(en::ENOTDIR as i32), Step::Next);
        assert_eq!(step(en::EACCES as i32), Step::NextDenied);
        assert_eq!(step(en::ENOEXEC as i32), Step::Stop);
        assert_eq!(step(en::E2BIG as i32), Step::Stop);
        assert_eq!(exhausted_errno(en::ENOENT as i32, true), en::EACCES as i32);
        assert_eq!(exhausted_errno(en::ENOENT as i32, false), en::ENOENT as i32);
        assert!(means_unsupported(en::ENOSYS as i32));
        assert!(means_unsupported(en::E2BIG as i32));
        assert!(!means_unsupported(en::EAGAIN as i32));
        assert!(!means_unsupported(en::EACCES as i32));
    }

    #[test]
    fn prepared_description_is_nul_terminated_and_uses_the_child_path() {
        let args = [os("a b"), OsString::from_vec(vec![0xff, b'x'])];
        let env = [(os("PATH"), Some(os("/p1:/p2")))];
        let spec = SpawnSpec {
            program: OsStr::new("prog"),
            args: &args,
            env: &env,
            env_clear: true,
            cwd: Some(Path::new("/tmp")),
            stdin: ChildIo::Null,
            stdout: ChildIo::Null,
            stderr: ChildIo::Null,
        };
        let p = Prepared::new(&spec, Vec::new()).unwrap();
        assert_eq!(p.argv.len(), 4);
        assert!(p.argv[3].is_null());
        assert_eq!(p._argv[0].as_bytes(), b"prog");
        assert_eq!(p._argv[2].as_bytes(), &[0xff, b'x']);
        assert_eq!(p.envp.len(), 2);
        assert_eq!(p._envp[0].as_bytes(), b"PATH=/p1:/p2");
        assert_eq!(p._candidates[0].as_bytes(), b"/p1/prog");
        assert_eq!(p._candidates[1].as_bytes(), b"/p2/prog");
        assert!(p.candidates[2].is_null());
        assert_eq!(p.cwd.as_ref().unwrap().as_bytes(), b"/tmp");

        let nul = [os("a\0b")];
        let spec = SpawnSpec { args: &nul, ..spec };
        let e = Prepared::new(&spec, Vec::new()).err().unwrap();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }

    use std::os::unix::ffi::OsStringExt;

    #[test]
    fn missing_absolute_candidates_are_skipped_but_never_all() {
        let c = |v: &[&str]| {
            v.iter()
                .map(|s| CString::new(*s).unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            skip_missing(c(&["/nonexistent-corral/x", "rel/x", "/bin/sh"])),
            c(&["rel/x", "/bin/sh"])
        );
        let none = c(&["/nonexistent-corral/a", "/nonexistent-corral/b"]);
        assert_eq!(skip_missing(none.clone()), none);
    }
}
