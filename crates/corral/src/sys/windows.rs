//! Windows half of the platform layer: the root process handle (the
//! identity), pipes read and written by one thread each (anonymous pipes
//! cannot be polled), and the one `WaitForMultipleObjects` that the
//! lifecycle sleeps in.
//!
//! Spawning is a custom `CreateProcessW` with `STARTUPINFOEXW`:
//! `PROC_THREAD_ATTRIBUTE_HANDLE_LIST` names the only handles the child
//! inherits (its three standard handles), and `PROC_THREAD_ATTRIBUTE_JOB_LIST`
//! puts it in the job before it runs any code. Where the job-list attribute
//! is refused, the child is created suspended, assigned, and its primary
//! thread (from `PROCESS_INFORMATION.hThread`, never found by scanning) is
//! resumed; if the assignment fails the still-suspended child is terminated
//! and the spawn is a containment failure: nothing ran.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::windows::ffi::OsStrExt;
use std::os::windows::io::{AsRawHandle, FromRawHandle, OwnedHandle, RawHandle};
use std::path::{Path, PathBuf};
use std::ptr::{null, null_mut};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use windows_sys::Win32::Foundation::{
    DuplicateHandle, DUPLICATE_SAME_ACCESS, ERROR_ACCESS_DENIED, ERROR_BROKEN_PIPE,
    ERROR_INVALID_PARAMETER, ERROR_NOT_SUPPORTED, HANDLE, INVALID_HANDLE_VALUE,
    STATUS_CONTROL_C_EXIT, WAIT_FAILED, WAIT_OBJECT_0,
};
use windows_sys::Win32::Storage::FileSystem::{
    CreateFileW, ReadFile, WriteFile, FILE_GENERIC_READ, FILE_GENERIC_WRITE, FILE_SHARE_READ,
    FILE_SHARE_WRITE, OPEN_EXISTING,
};
use windows_sys::Win32::System::Console::{
    GetStdHandle, STD_ERROR_HANDLE, STD_INPUT_HANDLE, STD_OUTPUT_HANDLE,
};
use windows_sys::Win32::System::JobObjects::AssignProcessToJobObject;
use windows_sys::Win32::System::Pipes::CreatePipe;
use windows_sys::Win32::System::Threading::{
    CreateEventW, CreateProcessW, DeleteProcThreadAttributeList, GetCurrentProcess,
    GetExitCodeProcess, InitializeProcThreadAttributeList, ResetEvent, ResumeThread, SetEvent,
    TerminateProcess, UpdateProcThreadAttribute, WaitForMultipleObjects, WaitForSingleObject,
    CREATE_NEW_PROCESS_GROUP, CREATE_SUSPENDED, CREATE_UNICODE_ENVIRONMENT,
    EXTENDED_STARTUPINFO_PRESENT, INFINITE, LPPROC_THREAD_ATTRIBUTE_LIST, PROCESS_INFORMATION,
    PROC_THREAD_ATTRIBUTE_HANDLE_LIST, PROC_THREAD_ATTRIBUTE_JOB_LIST, STARTF_USESTDHANDLES,
    STARTUPINFOEXW,
};

use super::{ChildIo, Interest, Placement, Ready, SpawnError, SpawnSpec};
use crate::cancel::Wake;
use crate::report::RootStatus;
use crate::Signal;

/// The exit code every member gets from `TerminateJobObject` (and the root
/// from [`Root::kill`]). A root that ends with it is reported as killed
/// (`Signaled(KILL)`), never as a program's own exit code.
pub(crate) const JOB_KILL_EXIT_CODE: u32 = 0xC0DE_0009;

/// Test seam: when this environment variable is set and its value occurs in
/// the command line, the job assignment is forced through the suspended
/// fallback and made to fail, so tests can prove that nothing runs.
pub(crate) const FAULT_ASSIGN_ENV: &str = "CORRAL_TEST_FAIL_JOB_ASSIGN";

fn last_error() -> io::Error {
    io::Error::last_os_error()
}

/// Wraps a handle returned by a call that gives null or
/// `INVALID_HANDLE_VALUE` on failure.
fn owned(h: HANDLE) -> io::Result<OwnedHandle> {
    if h.is_null() || h == INVALID_HANDLE_VALUE {
        return Err(last_error());
    }
    // SAFETY: `h` is a valid handle just returned to us by the OS, and
    // nothing else owns it.
    Ok(unsafe { OwnedHandle::from_raw_handle(h as RawHandle) })
}

fn raw(h: &impl AsRawHandle) -> HANDLE {
    h.as_raw_handle() as HANDLE
}

/// A new unnamed event.
fn event(manual_reset: bool) -> io::Result<OwnedHandle> {
    // SAFETY: no security attributes, no name; the result is checked.
    owned(unsafe { CreateEventW(null(), manual_reset as i32, 0, null()) })
}

/// The root process. Its open process handle is the identity: the pid
/// cannot be reused while the handle is open.
pub(crate) struct Root {
    process: Option<OwnedHandle>,
    pid: u32,
    exited: Option<RootStatus>,
}

/// Maps a process exit code to the root's status: corral's job-kill code is
/// a kill, `STATUS_CONTROL_C_EXIT` is an interrupt (CTRL_C/CTRL_BREAK),
/// every other value (NTSTATUS crash codes included) is the exit code as the
/// OS reports it, as a signed 32-bit number.
pub(crate) fn status_from_exit_code(code: u32) -> RootStatus {
    if code == JOB_KILL_EXIT_CODE {
        RootStatus::Signaled(Signal::KILL)
    } else if code == STATUS_CONTROL_C_EXIT as u32 {
        RootStatus::Signaled(Signal::INT)
    } else {
        RootStatus::Exited(code as i32)
    }
}

impl Root {
    pub(crate) fn id(&self) -> u32 {
        self.pid
    }

    /// The run's termination started (nothing to tell: the job kills the
    /// tree when the last handle closes).
    pub(crate) fn terminating(&mut self) {}

    /// The process handle (full access, as `CreateProcessW` gave it).
    pub(crate) fn handle(&self) -> Option<HANDLE> {
        self.process.as_ref().map(raw)
    }

    /// The root's exit status if it has exited; the handle stays open.
    /// As on Unix: nothing to do here (`peek_exit` always asks).
    pub(crate) fn look_for_exit(&self) {}

    pub(crate) fn peek_exit(&mut self) -> io::Result<Option<RootStatus>> {
        if self.exited.is_some() {
            return Ok(self.exited);
        }
        let Some(h) = self.handle() else {
            return Ok(None);
        };
        // SAFETY: `h` is our open process handle; a zero timeout only polls.
        let w = unsafe { WaitForSingleObject(h, 0) };
        if w == WAIT_FAILED {
            return Err(last_error());
        }
        if w != WAIT_OBJECT_0 {
            return Ok(None);
        }
        let mut code = 0u32;
        // SAFETY: `h` is open; `code` is a valid out pointer.
        if unsafe { GetExitCodeProcess(h, &mut code) } == 0 {
            return Err(last_error());
        }
        self.exited = Some(status_from_exit_code(code));
        Ok(self.exited)
    }

    /// Lets go of the identity: closes the process handle (after the last
    /// `TerminateJobObject`). Never blocks.
    pub(crate) fn reap(&mut self) -> io::Result<()> {
        self.process = None;
        Ok(())
    }

    /// Terminates the root alone (used when containment could not be set
    /// up; the handle is still open, so this cannot hit another process).
    pub(crate) fn kill(&mut self) {
        if let Some(h) = self.handle() {
            // SAFETY: `h` is our open process handle.
            unsafe { TerminateProcess(h, JOB_KILL_EXIT_CODE) };
        }
    }

    /// The root's exit is watched through its process handle, which the
    /// spawn already holds: nothing can be missing.
    pub(crate) fn exit_watch_error(&mut self) -> Option<io::Error> {
        None
    }

    /// The job holds the tree if corral dies (`KILL_ON_JOB_CLOSE`).
    pub(crate) fn crash_safety(&self) -> crate::report::CrashSafety {
        crate::report::CrashSafety::Held
    }
}

/// Bytes a reader thread buffers before it stops reading (back-pressure),
/// and bytes of stdin queued for the writer thread.
const PIPE_BUFFER: usize = 256 * 1024;

#[derive(Default)]
struct PipeState {
    data: VecDeque<u8>,
    /// The reader saw end of file (or an error, kept in `error`).
    eof: bool,
    error: Option<io::Error>,
    /// Our end was dropped: the thread stops.
    closed: bool,
}

struct PipeShared {
    state: Mutex<PipeState>,
    cv: Condvar,
    /// Manual-reset. Reader: data or end of file is there. Writer: there is
    /// room in the queue or the pipe broke. Set and reset under `state`'s
    /// lock so that it always matches the state.
    ready: OwnedHandle,
}

impl PipeShared {
    fn lock(&self) -> std::sync::MutexGuard<'_, PipeState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set_ready(&self, on: bool) {
        // SAFETY: `ready` is an event handle we own.
        unsafe {
            if on {
                SetEvent(raw(&self.ready));
            } else {
                ResetEvent(raw(&self.ready));
            }
        }
    }
}

/// Our end of a pipe, served by one thread: a reader that fills a bounded
/// buffer, or a writer that drains a bounded queue.
pub(crate) struct PipeEnd {
    shared: Arc<PipeShared>,
    reader: bool,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// What a non-blocking read gave.
pub(crate) enum ReadResult {
    Data(usize),
    Eof,
    WouldBlock,
}

impl PipeEnd {
    fn reader(pipe: OwnedHandle) -> io::Result<PipeEnd> {
        let shared = Arc::new(PipeShared {
            state: Mutex::new(PipeState::default()),
            cv: Condvar::new(),
            ready: event(true)?,
        });
        let sh = shared.clone();
        let thread = std::thread::Builder::new()
            .name("corral-pipe-read".into())
            .spawn(move || read_loop(pipe, &sh))?;
        Ok(PipeEnd {
            shared,
            reader: true,
            thread: Some(thread),
        })
    }

    fn writer(pipe: OwnedHandle) -> io::Result<PipeEnd> {
        let shared = Arc::new(PipeShared {
            state: Mutex::new(PipeState::default()),
            cv: Condvar::new(),
            ready: event(true)?,
        });
        shared.set_ready(true);
        let sh = shared.clone();
        let thread = std::thread::Builder::new()
            .name("corral-pipe-write".into())
            .spawn(move || write_loop(pipe, &sh))?;
        Ok(PipeEnd {
            shared,
            reader: false,
            thread: Some(thread),
        })
    }

    pub(crate) fn read(&self, buf: &mut [u8]) -> io::Result<ReadResult> {
        let mut st = self.shared.lock();
        if !st.data.is_empty() {
            let n = buf.len().min(st.data.len());
            for (d, s) in buf.iter_mut().zip(st.data.drain(..n)) {
                *d = s;
            }
            if st.data.is_empty() && !st.eof {
                self.shared.set_ready(false);
            }
            self.shared.cv.notify_all();
            return Ok(ReadResult::Data(n));
        }
        if st.eof {
            return match st.error.take() {
                Some(e) => Err(e),
                None => Ok(ReadResult::Eof),
            };
        }
        self.shared.set_ready(false);
        Ok(ReadResult::WouldBlock)
    }

    /// Whether the reader thread saw end of file: nothing more can arrive,
    /// whatever is still queued.
    pub(crate) fn writers_gone(&self) -> bool {
        self.shared.lock().eof
    }

    /// Queues what fits now; `Ok(0)` when the queue is full.
    pub(crate) fn write(&self, buf: &[u8]) -> io::Result<usize> {
        let mut st = self.shared.lock();
        if st.eof {
            return Err(st
                .error
                .take()
                .unwrap_or_else(|| io::ErrorKind::BrokenPipe.into()));
        }
        let n = buf.len().min(PIPE_BUFFER.saturating_sub(st.data.len()));
        st.data.extend(&buf[..n]);
        if st.data.len() >= PIPE_BUFFER {
            self.shared.set_ready(false);
        }
        self.shared.cv.notify_all();
        Ok(n)
    }

    fn is_ready(&self) -> bool {
        // SAFETY: `ready` is an event handle we own; a zero timeout only
        // polls (and a manual-reset event is not consumed).
        unsafe { WaitForSingleObject(raw(&self.shared.ready), 0) == WAIT_OBJECT_0 }
    }
}

impl Drop for PipeEnd {
    fn drop(&mut self) {
        let mut st = self.shared.lock();
        st.closed = true;
        self.shared.cv.notify_all();
        drop(st);
        if let Some(t) = self.thread.take() {
            if self.reader {
                // A reader blocked in ReadFile on a pipe still held open by
                // someone outside the tree: cancel the read. If that is not
                // possible the thread ends when the pipe's last writer goes.
                // SAFETY: the JoinHandle keeps the thread handle open.
                unsafe {
                    windows_sys::Win32::System::IO::CancelSynchronousIo(raw(&t));
                }
            }
            // A writer drains what was queued, then closes the pipe (the
            // child's end of file); neither thread is joined here.
            drop(t);
        }
    }
}

fn read_loop(pipe: OwnedHandle, sh: &PipeShared) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        {
            let mut st = sh.lock();
            while st.data.len() >= PIPE_BUFFER && !st.closed {
                st = sh.cv.wait(st).unwrap_or_else(|e| e.into_inner());
            }
            if st.closed {
                return;
            }
        }
        let mut n = 0u32;
        // SAFETY: `pipe` is our open read end; `buf` is valid for its length;
        // synchronous read (no OVERLAPPED).
        let ok = unsafe {
            ReadFile(
                raw(&pipe),
                buf.as_mut_ptr(),
                buf.len() as u32,
                &mut n,
                null_mut(),
            )
        };
        let err = (ok == 0).then(last_error);
        let mut st = sh.lock();
        match err {
            None if n > 0 => st.data.extend(&buf[..n as usize]),
            None => {} // a zero-byte message; keep reading
            Some(e) => {
                st.eof = true;
                if e.raw_os_error() != Some(ERROR_BROKEN_PIPE as i32) {
                    st.error = Some(e);
                }
            }
        }
        sh.set_ready(true);
        if st.eof {
            return;
        }
    }
}

fn write_loop(pipe: OwnedHandle, sh: &PipeShared) {
    loop {
        let chunk: Vec<u8> = {
            let mut st = sh.lock();
            while st.data.is_empty() && !st.closed {
                st = sh.cv.wait(st).unwrap_or_else(|e| e.into_inner());
            }
            if st.data.is_empty() {
                return; // closed and drained: dropping `pipe` gives EOF
            }
            let n = st.data.len().min(64 * 1024);
            st.data.iter().take(n).copied().collect()
        };
        let mut done = 0usize;
        while done < chunk.len() {
            let mut n = 0u32;
            // SAFETY: `pipe` is our open write end; the slice is valid.
            let ok = unsafe {
                WriteFile(
                    raw(&pipe),
                    chunk[done..].as_ptr(),
                    (chunk.len() - done) as u32,
                    &mut n,
                    null_mut(),
                )
            };
            if ok == 0 {
                let mut st = sh.lock();
                st.eof = true;
                st.error = Some(last_error());
                st.data.clear();
                sh.set_ready(true);
                return;
            }
            done += n as usize;
        }
        let mut st = sh.lock();
        st.data.drain(..chunk.len());
        sh.set_ready(true);
    }
}

/// A new pipe: (our end, the child's end). `child_writes` says which
/// direction. Neither end is inheritable; spawn makes an inheritable copy of
/// the child's end for the handle list.
pub(crate) fn pipe(child_writes: bool) -> io::Result<(PipeEnd, std::fs::File)> {
    let mut r: HANDLE = null_mut();
    let mut w: HANDLE = null_mut();
    // SAFETY: valid out pointers; null security attributes (not inheritable).
    if unsafe { CreatePipe(&mut r, &mut w, null(), 0) } == 0 {
        return Err(last_error());
    }
    let (r, w) = (owned(r)?, owned(w)?);
    if child_writes {
        Ok((PipeEnd::reader(r)?, std::fs::File::from(w)))
    } else {
        Ok((PipeEnd::writer(w)?, std::fs::File::from(r)))
    }
}

/// An inheritable duplicate of `h` for the child's handle list.
fn inheritable(h: HANDLE) -> io::Result<OwnedHandle> {
    let mut out: HANDLE = null_mut();
    // SAFETY: duplicating a handle of our own process into our own process;
    // `out` is a valid out pointer.
    let ok = unsafe {
        let me = GetCurrentProcess();
        DuplicateHandle(me, h, me, &mut out, 0, 1, DUPLICATE_SAME_ACCESS)
    };
    if ok == 0 {
        return Err(last_error());
    }
    owned(out)
}

fn wide(s: &OsStr) -> Vec<u16> {
    s.encode_wide().chain(Some(0)).collect()
}

/// The child's handle for one standard stream (inheritable), or None when
/// the caller has no such stream.
fn std_handle(io: &ChildIo, which: u32, write: bool) -> io::Result<Option<OwnedHandle>> {
    match io {
        ChildIo::File(f) => inheritable(raw(f)).map(Some),
        ChildIo::Inherit => {
            // SAFETY: GetStdHandle has no preconditions.
            let h = unsafe { GetStdHandle(which) };
            if h.is_null() || h == INVALID_HANDLE_VALUE {
                return Ok(None);
            }
            Ok(inheritable(h).ok())
        }
        ChildIo::Null => {
            let name = wide(OsStr::new("NUL"));
            let access = if write {
                FILE_GENERIC_WRITE
            } else {
                FILE_GENERIC_READ
            };
            // SAFETY: `name` is NUL-terminated; null security attributes.
            let h = unsafe {
                CreateFileW(
                    name.as_ptr(),
                    access,
                    FILE_SHARE_READ | FILE_SHARE_WRITE,
                    null(),
                    OPEN_EXISTING,
                    0,
                    null_mut(),
                )
            };
            inheritable(raw(&owned(h)?)).map(Some)
        }
    }
}

/// Appends one argument quoted so that `CommandLineToArgvW` (and the MSVC
/// C runtime) gives it back unchanged.
pub(crate) fn quote_arg(arg: &OsStr, out: &mut Vec<u16>) {
    let a: Vec<u16> = arg.encode_wide().collect();
    let needs = a.is_empty()
        || a.iter().any(|&c| {
            c == b' ' as u16 || c == b'\t' as u16 || c == b'"' as u16 || c == b'\n' as u16
        });
    if !needs {
        out.extend_from_slice(&a);
        return;
    }
    out.push(b'"' as u16);
    let mut backslashes = 0usize;
    for &c in &a {
        if c == b'\\' as u16 {
            backslashes += 1;
        } else {
            if c == b'"' as u16 {
                // Double the backslashes before a quote, then escape it.
                out.extend(std::iter::repeat_n(b'\\' as u16, backslashes + 1));
            }
            backslashes = 0;
        }
        out.push(c);
    }
    // Backslashes before the closing quote are doubled.
    out.extend(std::iter::repeat_n(b'\\' as u16, backslashes));
    out.push(b'"' as u16);
}

/// The command line: the program as given (quoted), then each argument.
pub(crate) fn command_line(program: &OsStr, args: &[OsString]) -> Vec<u16> {
    let mut out = Vec::new();
    // The program name is parsed by different rules (no backslash escapes),
    // so it is always quoted and may not contain a quote.
    out.push(b'"' as u16);
    out.extend(program.encode_wide());
    out.push(b'"' as u16);
    for a in args {
        out.push(b' ' as u16);
        quote_arg(a, &mut out);
    }
    out.push(0);
    out
}

/// The child's environment: the parent's (unless cleared) with the changes,
/// sorted case-insensitively as Windows expects.
fn environment(spec: &SpawnSpec<'_>) -> Vec<(OsString, OsString)> {
    let key = |k: &OsStr| k.to_string_lossy().to_uppercase();
    let mut env: Vec<(OsString, OsString)> = if spec.env_clear {
        Vec::new()
    } else {
        std::env::vars_os().collect()
    };
    for (k, v) in spec.env {
        let kk = key(k);
        env.retain(|(e, _)| key(e) != kk);
        if let Some(v) = v {
            env.push((k.clone(), v.clone()));
        }
    }
    env.sort_by_key(|(k, _)| key(k));
    env
}

fn env_block(env: &[(OsString, OsString)]) -> Vec<u16> {
    let mut out = Vec::new();
    for (k, v) in env {
        out.extend(k.encode_wide());
        out.push(b'=' as u16);
        out.extend(v.encode_wide());
        out.push(0);
    }
    if env.is_empty() {
        out.push(0);
    }
    out.push(0);
    out
}

/// Resolves the program like std does for a bare name: the child's `PATH`
/// (when it was changed), then the parent's, with `.exe` appended when the
/// name has no extension. A name with a path separator is used as is (plus
/// `.exe` when it has no extension and does not exist as given).
fn resolve(
    program: &OsStr,
    env: &[(OsString, OsString)],
    cwd: Option<&Path>,
) -> io::Result<PathBuf> {
    let p = Path::new(program);
    let with_exe = |p: &Path| -> PathBuf {
        if p.extension().is_none() {
            let mut s = p.as_os_str().to_owned();
            s.push(".exe");
            PathBuf::from(s)
        } else {
            p.to_owned()
        }
    };
    let has_sep = program
        .encode_wide()
        .any(|c| c == b'/' as u16 || c == b'\\' as u16);
    if has_sep || p.is_absolute() {
        let base = match cwd {
            Some(d) if p.is_relative() => d.join(p),
            _ => p.to_owned(),
        };
        if base.is_file() {
            return Ok(base);
        }
        return Ok(with_exe(&base));
    }
    let child_path = env
        .iter()
        .find(|(k, _)| k.to_string_lossy().eq_ignore_ascii_case("PATH"))
        .map(|(_, v)| v.clone());
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(pp) = &child_path {
        dirs.extend(std::env::split_paths(pp));
    }
    if let Some(exe_dir) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_owned))
    {
        dirs.push(exe_dir);
    }
    if let Some(pp) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&pp));
    }
    for d in dirs {
        let c = with_exe(&d.join(p));
        if c.is_file() {
            return Ok(c);
        }
    }
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        format!("program not found: {}", p.display()),
    ))
}

/// An initialised `PROC_THREAD_ATTRIBUTE_LIST`, deleted on drop. The values
/// it points to must outlive it (the caller keeps them).
struct AttrList {
    buf: Vec<usize>,
}

impl AttrList {
    fn new(count: u32) -> io::Result<AttrList> {
        let mut size = 0usize;
        // SAFETY: the documented size query: null list, valid out pointer.
        unsafe { InitializeProcThreadAttributeList(null_mut(), count, 0, &mut size) };
        let mut buf = vec![0usize; size.div_ceil(std::mem::size_of::<usize>()) + 1];
        // SAFETY: `buf` has at least `size` bytes and pointer alignment.
        if unsafe {
            InitializeProcThreadAttributeList(buf.as_mut_ptr().cast(), count, 0, &mut size)
        } == 0
        {
            return Err(last_error());
        }
        Ok(AttrList { buf })
    }

    fn ptr(&mut self) -> LPPROC_THREAD_ATTRIBUTE_LIST {
        self.buf.as_mut_ptr().cast()
    }

    /// # Safety
    /// `value` must point to `size` valid bytes that outlive the list.
    unsafe fn set(&mut self, attr: u32, value: *const HANDLE, size: usize) -> io::Result<()> {
        // SAFETY: the list is initialised; the caller guarantees `value`.
        let ok = unsafe {
            UpdateProcThreadAttribute(
                self.ptr(),
                0,
                attr as usize,
                value.cast(),
                size,
                null_mut(),
                null(),
            )
        };
        if ok == 0 {
            return Err(last_error());
        }
        Ok(())
    }
}

impl Drop for AttrList {
    fn drop(&mut self) {
        // SAFETY: the list was initialised in `new`.
        unsafe { DeleteProcThreadAttributeList(self.ptr()) };
    }
}

/// Starts the root inside the containment's job (see the module docs).
pub(crate) fn spawn(spec: SpawnSpec<'_>, placement: Placement<'_>) -> Result<Root, SpawnError> {
    if *spec.setup != crate::spec::ChildSetup::default() {
        return Err(SpawnError::Spawn(io::Error::new(
            io::ErrorKind::Unsupported,
            "arg0, user and group ids, groups, umask, sessions and descriptors to keep are Unix options",
        )));
    }
    let job = placement.job.as_raw_handle() as HANDLE;
    let env = environment(&spec);
    let app = resolve(spec.program, &env, spec.cwd).map_err(SpawnError::Spawn)?;
    let mut cmdline = command_line(spec.program, spec.args);
    let fault = std::env::var_os(FAULT_ASSIGN_ENV).is_some_and(|m| {
        !m.is_empty() && String::from_utf16_lossy(&cmdline).contains(&*m.to_string_lossy())
    });
    let mut block = env_block(&env);
    // The parent's copies of the child's ends close when `spec` drops at
    // the end of this function; our inheritable duplicates close with
    // `launch`.
    let launch = Launch {
        app: wide(app.as_os_str()),
        cwd: spec.cwd.map(|d| wide(d.as_os_str())),
        stdio: inheritable_stdio(&spec).map_err(SpawnError::Spawn)?,
    };
    let (pi, via_job_list) =
        launch.create_in_job(&mut cmdline, &mut block, (!fault).then_some(job))?;
    let process = owned(pi.hProcess).map_err(SpawnError::Spawn)?;
    let thread = owned(pi.hThread).map_err(SpawnError::Spawn)?;
    if !via_job_list {
        assign_and_resume(&process, &thread, if fault { null_mut() } else { job })?;
    }
    drop(thread);
    drop(launch);
    drop(spec);
    Ok(Root {
        process: Some(process),
        pid: pi.dwProcessId,
        exited: None,
    })
}

/// Inheritable duplicates of the child's three standard handles.
fn inheritable_stdio(spec: &SpawnSpec<'_>) -> io::Result<[Option<OwnedHandle>; 3]> {
    let stdio = [
        std_handle(&spec.stdin, STD_INPUT_HANDLE, false),
        std_handle(&spec.stdout, STD_OUTPUT_HANDLE, true),
        std_handle(&spec.stderr, STD_ERROR_HANDLE, true),
    ];
    let mut handles: [Option<OwnedHandle>; 3] = [None, None, None];
    for (slot, h) in handles.iter_mut().zip(stdio) {
        *slot = h?;
    }
    Ok(handles)
}

/// What `CreateProcessW` is given besides the command line and the
/// environment block: the program, the directory (UTF-16, NUL-terminated)
/// and the only handles the child inherits.
struct Launch {
    app: Vec<u16>,
    cwd: Option<Vec<u16>>,
    stdio: [Option<OwnedHandle>; 3],
}

impl Launch {
    /// Creates the child in `job` (`None`: create it suspended, for the
    /// caller to assign). A refused job-list attribute falls back to
    /// suspended; the second value says whether the child is in the job.
    fn create_in_job(
        &self,
        cmdline: &mut [u16],
        block: &mut [u16],
        job: Option<HANDLE>,
    ) -> Result<(PROCESS_INFORMATION, bool), SpawnError> {
        if job.is_none() {
            let pi = self
                .create(cmdline, block, None)
                .map_err(SpawnError::Spawn)?;
            return Ok((pi, false));
        }
        match self.create(cmdline, block, job) {
            Ok(pi) => Ok((pi, true)),
            Err(e)
                if [
                    ERROR_INVALID_PARAMETER,
                    ERROR_NOT_SUPPORTED,
                    ERROR_ACCESS_DENIED,
                ]
                .iter()
                .any(|&c| e.raw_os_error() == Some(c as i32)) =>
            {
                // The job-list attribute was refused (older Windows) or the
                // job could not take the child at creation: fall back to
                // create-suspended-then-assign, which tells the two apart.
                let pi = self
                    .create(cmdline, block, None)
                    .map_err(SpawnError::Spawn)?;
                Ok((pi, false))
            }
            Err(e) => Err(SpawnError::Spawn(e)),
        }
    }

    /// One `CreateProcessW`: the child put in `job` by the job-list
    /// attribute, or created suspended without one.
    fn create(
        &self,
        cmdline: &mut [u16],
        block: &mut [u16],
        job: Option<HANDLE>,
    ) -> io::Result<PROCESS_INFORMATION> {
        let list: Vec<HANDLE> = self.stdio.iter().flatten().map(raw).collect();
        let jobs: [HANDLE; 1] = [job.unwrap_or(null_mut())];
        let mut attrs = AttrList::new(2)?;
        if !list.is_empty() {
            // SAFETY: `list` outlives `attrs` (both live in this call).
            unsafe {
                attrs.set(
                    PROC_THREAD_ATTRIBUTE_HANDLE_LIST,
                    list.as_ptr(),
                    list.len() * std::mem::size_of::<HANDLE>(),
                )?
            };
        }
        let mut flags =
            CREATE_UNICODE_ENVIRONMENT | EXTENDED_STARTUPINFO_PRESENT | CREATE_NEW_PROCESS_GROUP;
        if job.is_some() {
            // SAFETY: `jobs` outlives `attrs`.
            unsafe {
                attrs.set(
                    PROC_THREAD_ATTRIBUTE_JOB_LIST,
                    jobs.as_ptr(),
                    std::mem::size_of::<HANDLE>(),
                )?
            };
        } else {
            flags |= CREATE_SUSPENDED;
        }
        // SAFETY: STARTUPINFOEXW is plain data; all-zero is its empty value.
        let mut si: STARTUPINFOEXW = unsafe { std::mem::zeroed() };
        si.StartupInfo.cb = std::mem::size_of::<STARTUPINFOEXW>() as u32;
        si.StartupInfo.dwFlags = STARTF_USESTDHANDLES;
        let h = |i: usize| self.stdio[i].as_ref().map_or(null_mut(), raw);
        si.StartupInfo.hStdInput = h(0);
        si.StartupInfo.hStdOutput = h(1);
        si.StartupInfo.hStdError = h(2);
        si.lpAttributeList = attrs.ptr();
        // SAFETY: PROCESS_INFORMATION is plain data, filled by the call.
        let mut pi: PROCESS_INFORMATION = unsafe { std::mem::zeroed() };
        // SAFETY: every string is NUL-terminated and alive for the call; the
        // command line buffer is writable as CreateProcessW requires; the
        // environment block is double-NUL-terminated UTF-16 (flag set);
        // `si` and the attribute list are initialised; `pi` is writable.
        let ok = unsafe {
            CreateProcessW(
                self.app.as_ptr(),
                cmdline.as_mut_ptr(),
                null(),
                null(),
                1,
                flags,
                block.as_mut_ptr().cast(),
                self.cwd.as_ref().map_or(null(), |c| c.as_ptr()),
                &si.StartupInfo,
                &mut pi,
            )
        };
        if ok == 0 {
            return Err(last_error());
        }
        Ok(pi)
    }
}

/// Puts a child created suspended in the job `target` and resumes its
/// primary thread; a child that cannot be assigned is terminated before it
/// ran any code (a containment failure).
fn assign_and_resume(
    process: &OwnedHandle,
    thread: &OwnedHandle,
    target: HANDLE,
) -> Result<(), SpawnError> {
    // SAFETY: `process` is the suspended child's handle; `target` is our
    // job handle (or null under the fault seam, which fails).
    if unsafe { AssignProcessToJobObject(target, raw(process)) } == 0 {
        let e = last_error();
        // SAFETY: the child is still suspended: it has run no code.
        unsafe { TerminateProcess(raw(process), JOB_KILL_EXIT_CODE) };
        // SAFETY: wait (bounded) for it to be gone before returning.
        unsafe { WaitForSingleObject(raw(process), 5000) };
        return Err(SpawnError::Contain(crate::error::io_context(
            "could not assign the suspended child to the job object",
            e,
        )));
    }
    // The primary thread, exactly: the one CreateProcessW returned.
    // SAFETY: `thread` is the child's primary thread handle.
    if unsafe { ResumeThread(raw(thread)) } == u32::MAX {
        let e = last_error();
        // SAFETY: as above; the child cannot run.
        unsafe { TerminateProcess(raw(process), JOB_KILL_EXIT_CODE) };
        return Err(SpawnError::Spawn(e));
    }
    Ok(())
}

/// Wakes the wait from another thread: an auto-reset event.
pub(crate) struct EventWaker(OwnedHandle);

impl Wake for EventWaker {
    fn wake(&self) {
        // SAFETY: an event handle we own.
        unsafe { SetEvent(raw(&self.0)) };
    }
}

/// The sleeping point of the lifecycle.
pub(crate) struct Poller {
    waker: Arc<EventWaker>,
}

impl Poller {
    pub(crate) fn new() -> io::Result<Poller> {
        Ok(Poller {
            waker: Arc::new(EventWaker(event(false)?)),
        })
    }

    pub(crate) fn waker(&self) -> Arc<dyn Wake> {
        self.waker.clone()
    }

    /// The root's process handle is waited on: its exit wakes the wait.
    pub(crate) fn root_exit_wakes(_root: &Root) -> bool {
        true
    }

    /// Sleeps until an output has data or end of file, stdin has room, the
    /// root exits, the waker fires, or `timeout` passes.
    pub(crate) fn wait(
        &mut self,
        root: &Root,
        interest: Interest<'_>,
        timeout: Option<Duration>,
    ) -> io::Result<Ready> {
        let Interest { outputs, stdin } = interest;
        let mut hs: Vec<HANDLE> = Vec::with_capacity(5);
        hs.push(raw(&self.waker.0));
        if root.exited.is_none() {
            if let Some(h) = root.handle() {
                hs.push(h);
            }
        }
        for p in outputs.iter().flatten().chain(stdin.iter()) {
            hs.push(raw(&p.shared.ready));
        }
        let ms = match timeout {
            None => INFINITE,
            // Round up, so a timer is never woken for just before it is due.
            Some(d) => d
                .as_nanos()
                .div_ceil(1_000_000)
                .min(u128::from(INFINITE - 1)) as u32,
        };
        // SAFETY: every handle in `hs` is open for the duration of the call
        // (owned by self, root or the pipe ends borrowed here).
        let w = unsafe { WaitForMultipleObjects(hs.len() as u32, hs.as_ptr(), 0, ms) };
        if w == WAIT_FAILED {
            return Err(last_error());
        }
        let mut ready = Ready::default();
        for (i, o) in outputs.iter().enumerate() {
            ready.readable[i] = o.is_some_and(|p| p.is_ready());
        }
        ready.stdin_writable = stdin.is_some_and(|p| p.is_ready());
        Ok(ready)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(args: &[&str]) -> String {
        let args: Vec<OsString> = args.iter().map(OsString::from).collect();
        let v = command_line(OsStr::new("p"), &args);
        String::from_utf16_lossy(&v[..v.len() - 1])
    }

    #[test]
    fn quotes_for_command_line_to_argv() {
        assert_eq!(q(&["a", "b c", ""]), r#""p" a "b c" """#);
        assert_eq!(q(&[r#"a"b"#]), r#""p" "a\"b""#);
        assert_eq!(q(&[r"a\\b c\"]), r#""p" "a\\b c\\""#);
        assert_eq!(q(&[r"a\b"]), r#""p" a\b"#);
        assert_eq!(q(&[r#"x\"y z"#]), r#""p" "x\\\"y z""#);
    }

    #[test]
    fn job_kill_code_is_not_an_exit() {
        assert_eq!(
            status_from_exit_code(JOB_KILL_EXIT_CODE),
            RootStatus::Signaled(Signal::KILL)
        );
        assert_eq!(status_from_exit_code(3), RootStatus::Exited(3));
        assert_eq!(
            status_from_exit_code(0xC000_0005),
            RootStatus::Exited(0xC000_0005_u32 as i32)
        );
    }
}
