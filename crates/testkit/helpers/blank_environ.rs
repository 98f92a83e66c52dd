//! `corral-blank-environ`: a process whose `/proc/PID/environ` reads empty
//! for a while, as a process's does for a moment while it is in `execve`
//! (the new address space has no environment yet). The environment itself
//! is untouched; only the range the kernel shows is emptied, with
//! `prctl(PR_SET_MM, PR_SET_MM_MAP, ...)` (the current layout with
//! `env_end = env_start`; needs a kernel with `CONFIG_CHECKPOINT_RESTORE`,
//! no capability), and restored later.
//!
//! Usage: `corral-blank-environ NAME` (normally exec'd by the testkit's
//! `$H` script, which already wrote `NAME.pid`):
//!
//! 1. waits until the testkit's watch pinned it (`NAME.pinned`; the watch
//!    recognises a helper by its environment);
//! 2. empties the shown environment and writes `NAME.blank` (or
//!    `NAME.failed` with the error, and exits 3);
//! 3. waits until its parent changes (it was re-parented: its parent died),
//!    then 300 ms more, and restores the environment (`NAME.restored`);
//! 4. exits 1 s later (within 30 s of its start in any case).
//!
//! Built by the testkit's build script with the host `rustc`; no
//! dependencies.

use std::path::PathBuf;
use std::time::{Duration, Instant};

extern "C" {
    fn prctl(option: i32, arg2: u64, arg3: u64, arg4: u64, arg5: u64) -> i32;
    fn getppid() -> i32;
    fn sbrk(increment: isize) -> *mut u8;
}

const PR_SET_MM: i32 = 35;
const PR_SET_MM_MAP: u64 = 14;

/// `struct prctl_mm_map` of `<linux/prctl.h>`.
#[repr(C)]
struct MmMap {
    start_code: u64,
    end_code: u64,
    start_data: u64,
    end_data: u64,
    start_brk: u64,
    brk: u64,
    start_stack: u64,
    arg_start: u64,
    arg_end: u64,
    env_start: u64,
    env_end: u64,
    auxv: u64,
    auxv_size: u32,
    exe_fd: u32,
}

/// This process's memory map as `/proc/self/stat` shows it (fields 26-28
/// and 45-51) and the current break.
fn mm_map() -> Option<MmMap> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    // `rest` starts at field 3.
    let f: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| -> Option<u64> { f.get(n - 3)?.parse().ok() };
    // SAFETY: sbrk(0) only returns the current break.
    let brk = unsafe { sbrk(0) } as u64;
    Some(MmMap {
        start_code: field(26)?,
        end_code: field(27)?,
        start_stack: field(28)?,
        start_data: field(45)?,
        end_data: field(46)?,
        start_brk: field(47)?,
        brk,
        arg_start: field(48)?,
        arg_end: field(49)?,
        env_start: field(50)?,
        env_end: field(51)?,
        auxv: 0,
        auxv_size: 0,
        exe_fd: u32::MAX,
    })
}

/// Sets what the kernel shows as the end of this process's environment
/// (`PR_SET_MM_MAP`: no capability needed, unlike the single-field form).
fn set_env_end(map: &mut MmMap, end: u64) -> Result<(), std::io::Error> {
    map.env_end = end;
    // SAFETY: prctl reads `map` (of the size given) and only changes what
    // the kernel reports as this process's memory layout; every value but
    // `env_end` is the current one, and the memory itself is not touched.
    let r = unsafe {
        prctl(
            PR_SET_MM,
            PR_SET_MM_MAP,
            map as *const MmMap as u64,
            std::mem::size_of::<MmMap>() as u64,
            0,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn mark(dir: &std::path::Path, file: String, text: &str) {
    let tmp = dir.join(format!("{file}.tmp"));
    if std::fs::write(&tmp, text).is_ok() {
        let _ = std::fs::rename(&tmp, dir.join(file));
    }
}

fn main() {
    let start = Instant::now();
    let deadline = start + Duration::from_secs(30);
    let name = std::env::args().nth(1).unwrap_or_else(|| "blank".into());
    let Some(dir) = std::env::var_os("CORRAL_TEST_DIR").map(PathBuf::from) else {
        std::process::exit(2);
    };
    while !dir.join(format!("{name}.pinned")).exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
    let mut map = match mm_map() {
        Some(m) => m,
        None => {
            mark(&dir, format!("{name}.failed"), "no memory map in /proc/self/stat");
            std::process::exit(3);
        }
    };
    let end = map.env_end;
    let start_of_env = map.env_start;
    match set_env_end(&mut map, start_of_env) {
        Ok(()) => {}
        Err(e) => {
            mark(&dir, format!("{name}.failed"), &e.to_string());
            std::process::exit(3);
        }
    };
    // SAFETY: getppid cannot fail and has no preconditions.
    let parent = unsafe { getppid() };
    mark(&dir, format!("{name}.blank"), "");
    // SAFETY: as above.
    while unsafe { getppid() } == parent && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_millis(300));
    let _ = set_env_end(&mut map, end);
    mark(&dir, format!("{name}.restored"), "");
    std::thread::sleep(Duration::from_secs(1));
}
