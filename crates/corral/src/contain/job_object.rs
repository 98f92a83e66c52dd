//! Job Object containment (Windows).
//!
//! One anonymous job per command, created before the spawn; the child is
//! born in it (`PROC_THREAD_ATTRIBUTE_JOB_LIST`, or suspended + assigned;
//! see `sys::windows`). Every descendant is in the job too (no breakaway
//! limit is set). The job handle is the identity: it is never inherited,
//! and every signal goes through it until [`release`](Attached::release).
//!
//! * `JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE` is set while the command runs, so
//!   if corral itself dies the OS closes the handle and kills the tree. It
//!   is lifted just before a release that keeps survivors (a clean exit
//!   under `KeepOnSuccess`/`Keep`), so kept processes live on.
//! * `signal(KILL)` is `TerminateJobObject` with [`JOB_KILL_EXIT_CODE`]; a
//!   graceful first signal is `CTRL_BREAK_EVENT` to the root's process group
//!   (the root is created with `CREATE_NEW_PROCESS_GROUP`). Without a
//!   console that is impossible; the grace then runs out and the kill
//!   follows.
//! * "The tree is empty" is `ActiveProcesses == 0` from the job's
//!   accounting. The completion port's `ACTIVE_PROCESS_ZERO` message is only
//!   a hint (Windows does not guarantee delivery, and Wine sends no
//!   `EXIT_PROCESS` for killed members).

use std::io;
use std::os::windows::io::{AsHandle, AsRawHandle, FromRawHandle, OwnedHandle, RawHandle};
use std::ptr::{null, null_mut};

use windows_sys::Win32::Foundation::{HANDLE, INVALID_HANDLE_VALUE};
use windows_sys::Win32::System::Console::{
    GenerateConsoleCtrlEvent, GetConsoleProcessList, CTRL_BREAK_EVENT,
};
use windows_sys::Win32::System::JobObjects::{
    CreateJobObjectW, IsProcessInJob, JobObjectAssociateCompletionPortInformation,
    JobObjectBasicAccountingInformation, JobObjectBasicProcessIdList,
    JobObjectExtendedLimitInformation, QueryInformationJobObject, SetInformationJobObject,
    TerminateJobObject, JOBOBJECT_ASSOCIATE_COMPLETION_PORT,
    JOBOBJECT_BASIC_ACCOUNTING_INFORMATION, JOBOBJECT_EXTENDED_LIMIT_INFORMATION,
    JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
};
use windows_sys::Win32::System::IO::{
    CreateIoCompletionPort, GetQueuedCompletionStatus, OVERLAPPED,
};

use super::{AttachFailed, Attached, Containment, Mechanism, OsOp, Tracer};
use crate::sys::{Root, JOB_KILL_EXIT_CODE};
use crate::Signal;

/// `JOB_OBJECT_MSG_ACTIVE_PROCESS_ZERO` (winnt.h).
const MSG_ACTIVE_PROCESS_ZERO: u32 = 4;

fn owned(h: HANDLE) -> io::Result<OwnedHandle> {
    if h.is_null() || h == INVALID_HANDLE_VALUE {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a valid handle just returned by the OS, owned by nobody else.
    Ok(unsafe { OwnedHandle::from_raw_handle(h as RawHandle) })
}

fn check(ok: i32) -> io::Result<()> {
    if ok == 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Whether this process is attached to a console (so CTRL_BREAK can be
/// generated at all).
pub(crate) fn has_console() -> bool {
    let mut pids = [0u32; 4];
    // SAFETY: `pids` is valid for its length.
    unsafe { GetConsoleProcessList(pids.as_mut_ptr(), pids.len() as u32) > 0 }
}

/// The job and its completion port (dropped in this order: the port
/// first).
struct Handles {
    port: Option<OwnedHandle>,
    job: OwnedHandle,
}

/// A job made for one command, before its root exists: the root is born
/// in it.
pub(crate) struct JobObject {
    handles: Handles,
    tracer: Tracer,
}

/// The attached job: the root is in it.
struct Job {
    handles: Handles,
    root_pid: u32,
    /// A KILL was sent: survivors at release must not be kept.
    killed: bool,
    /// The port said the job became empty (a hint only).
    zero_hint: bool,
    tracer: Tracer,
}

impl JobObject {
    /// Creates the job, sets `KILL_ON_JOB_CLOSE` and attaches a completion
    /// port.
    pub(crate) fn new(tracer: Tracer) -> io::Result<JobObject> {
        // SAFETY: anonymous job, default security (not inheritable).
        let job = owned(unsafe { CreateJobObjectW(null(), null()) })?;
        let mut handles = Handles { port: None, job };
        handles.set_kill_on_close(true)?;
        let port = owned(
            // SAFETY: a new completion port not bound to any file.
            unsafe { CreateIoCompletionPort(INVALID_HANDLE_VALUE, null_mut(), 0, 1) },
        );
        if let Ok(port) = port {
            let info = JOBOBJECT_ASSOCIATE_COMPLETION_PORT {
                CompletionKey: null_mut(),
                CompletionPort: port.as_raw_handle() as HANDLE,
            };
            // SAFETY: `info` is a valid struct of the size passed.
            let ok = unsafe {
                SetInformationJobObject(
                    handles.raw_job(),
                    JobObjectAssociateCompletionPortInformation,
                    (&info as *const JOBOBJECT_ASSOCIATE_COMPLETION_PORT).cast(),
                    std::mem::size_of_val(&info) as u32,
                )
            };
            // The port is only a hint: without it accounting still decides.
            if ok != 0 {
                handles.port = Some(port);
            }
        }
        Ok(JobObject { handles, tracer })
    }
}

impl Handles {
    fn raw_job(&self) -> HANDLE {
        self.job.as_raw_handle() as HANDLE
    }

    /// Sets or lifts `KILL_ON_JOB_CLOSE`. (Wine reads the limit flags back
    /// as 0, so they are never verified by reading them.)
    fn set_kill_on_close(&mut self, on: bool) -> io::Result<()> {
        // SAFETY: plain data; all-zero is "no limits".
        let mut info: JOBOBJECT_EXTENDED_LIMIT_INFORMATION = unsafe { std::mem::zeroed() };
        if on {
            info.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE;
        }
        // SAFETY: `info` is a valid struct of the size passed.
        check(unsafe {
            SetInformationJobObject(
                self.raw_job(),
                JobObjectExtendedLimitInformation,
                (&info as *const JOBOBJECT_EXTENDED_LIMIT_INFORMATION).cast(),
                std::mem::size_of_val(&info) as u32,
            )
        })
    }

    /// Drains the completion port without waiting; whether it said
    /// ACTIVE_PROCESS_ZERO.
    fn drain_port(&self) -> bool {
        let Some(port) = &self.port else {
            return false;
        };
        let mut zero = false;
        loop {
            let (mut msg, mut key, mut ov) = (0u32, 0usize, null_mut::<OVERLAPPED>());
            // SAFETY: valid out pointers; zero timeout.
            let ok = unsafe {
                GetQueuedCompletionStatus(
                    port.as_raw_handle() as HANDLE,
                    &mut msg,
                    &mut key,
                    &mut ov,
                    0,
                )
            };
            if ok == 0 {
                return zero;
            }
            if msg == MSG_ACTIVE_PROCESS_ZERO {
                zero = true;
            }
        }
    }

    fn active_processes(&self) -> io::Result<u32> {
        // SAFETY: plain data, filled by the call.
        let mut info: JOBOBJECT_BASIC_ACCOUNTING_INFORMATION = unsafe { std::mem::zeroed() };
        // SAFETY: `info` is writable for the size passed.
        check(unsafe {
            QueryInformationJobObject(
                self.raw_job(),
                JobObjectBasicAccountingInformation,
                (&mut info as *mut JOBOBJECT_BASIC_ACCOUNTING_INFORMATION).cast(),
                std::mem::size_of_val(&info) as u32,
                null_mut(),
            )
        })?;
        Ok(info.ActiveProcesses)
    }

    fn pid_list(&self, room: usize) -> io::Result<Vec<u32>> {
        // Header: two u32 counts, then `room` ULONG_PTR ids.
        let mut buf = vec![0usize; room + 1];
        // SAFETY: `buf` is writable for the size passed, and is aligned for
        // JOBOBJECT_BASIC_PROCESS_ID_LIST.
        check(unsafe {
            QueryInformationJobObject(
                self.raw_job(),
                JobObjectBasicProcessIdList,
                buf.as_mut_ptr().cast(),
                (buf.len() * std::mem::size_of::<usize>()) as u32,
                null_mut(),
            )
        })?;
        let listed = (buf[0] >> 32) as usize; // NumberOfProcessIdsInList
        Ok(buf[1..1 + listed.min(room)]
            .iter()
            .map(|&p| p as u32)
            .collect())
    }
}

impl Containment for JobObject {
    fn mechanism(&self) -> Mechanism {
        Mechanism::JobObject
    }

    fn placement(&mut self) -> io::Result<crate::sys::Placement<'_>> {
        Ok(crate::sys::Placement {
            job: self.handles.job.as_handle(),
        })
    }

    /// Confirms that the root really is in the job (`IsProcessInJob` needs
    /// `PROCESS_QUERY_INFORMATION`; our handle has full access). If not,
    /// the job is released, never signalled.
    fn attach(self: Box<Self>, root: &Root) -> Result<Box<dyn Attached>, AttachFailed> {
        let JobObject { handles, tracer } = *self;
        let inside = match root.handle() {
            None => Err(io::Error::other("root handle already closed")),
            Some(h) => {
                let mut inside = 0;
                // SAFETY: both handles are open; `inside` is a valid out
                // pointer.
                check(unsafe { IsProcessInJob(h, handles.raw_job(), &mut inside) }).and_then(|()| {
                    match inside {
                        0 => Err(io::Error::other("the root is not in the job object")),
                        _ => Ok(()),
                    }
                })
            }
        };
        let job = Box::new(Job {
            handles,
            root_pid: root.id(),
            killed: false,
            zero_hint: false,
            tracer,
        });
        match inside {
            Ok(()) => Ok(job),
            Err(e) => Err(AttachFailed::new(e, job)),
        }
    }
}

impl Attached for Job {
    fn mechanism(&self) -> Mechanism {
        Mechanism::JobObject
    }

    fn signal(&mut self, sig: Signal) -> io::Result<()> {
        let job = self.handles.raw_job();
        self.tracer.record(OsOp::SignalTree {
            via: Mechanism::JobObject,
            target: job as u64,
            signal: sig,
        });
        if sig == Signal::KILL {
            self.killed = true;
            // SAFETY: `job` is our open job handle.
            return check(unsafe { TerminateJobObject(job, JOB_KILL_EXIT_CODE) });
        }
        // Graceful: CTRL_BREAK to the root's process group. Where that is
        // impossible (no console, or the call fails as it does under Wine),
        // the grace runs out and TerminateJobObject follows; this is not a
        // cleanup failure.
        if has_console() {
            // SAFETY: no pointers; the group id is the root's pid.
            unsafe { GenerateConsoleCtrlEvent(CTRL_BREAK_EVENT, self.root_pid) };
        }
        Ok(())
    }

    fn members(&mut self) -> io::Result<Vec<u32>> {
        if self.handles.drain_port() {
            self.zero_hint = true;
        }
        let active = self.handles.active_processes()?;
        if active == 0 {
            return Ok(Vec::new());
        }
        // The port's "empty" message is a hint; accounting said otherwise.
        self.zero_hint = false;
        let mut room = active as usize + 8;
        loop {
            let pids = self.handles.pid_list(room)?;
            if pids.len() < room {
                return Ok(pids);
            }
            room *= 2;
        }
    }

    /// `KILL_ON_JOB_CLOSE`: the job's handle closes when this process dies.
    fn crash_safety(&self, _root: &Root) -> crate::report::CrashSafety {
        crate::report::CrashSafety::Held
    }

    /// The leftovers are counted before the handle closes (after it, the
    /// job cannot be asked), only when some are left.
    fn release(mut self: Box<Self>, root: &mut Root) -> super::Released {
        let mut res = Ok(());
        let pid = root.id();
        let active = self.handles.active_processes();
        let kept = match active {
            Ok(0) => Ok(0),
            _ => self
                .members()
                .map(|m| m.into_iter().filter(|&p| p != pid).count()),
        };
        // Kept survivors must outlive the job handle: lift KILL_ON_JOB_CLOSE
        // first. After a kill, the flag stays so that closing the handle
        // kills any straggler as well.
        if !self.killed && active.map_or(true, |n| n > 0) {
            res = self.handles.set_kill_on_close(false);
        }
        if let Err(e) = root.reap() {
            res = res.and(Err(e));
        }
        self.tracer.record(OsOp::Reaped { pid });
        let Job {
            handles, tracer, ..
        } = *self;
        drop(handles);
        tracer.record(OsOp::Released {
            via: Mechanism::JobObject,
        });
        super::Released::counted(res, kept)
    }
}

/// Builds the job for one command (the `contain::select` arm on Windows).
pub(crate) fn select(tracer: Tracer) -> Result<super::Selected, crate::Error> {
    let tree = JobObject::new(tracer).map_err(|e| {
        crate::Error::containment_io(Mechanism::JobObject, "could not create the job object", e)
    })?;
    let note = (!has_console()).then(|| {
        "no console: graceful stop (CTRL_BREAK) is unavailable, the grace ends in TerminateJobObject"
            .to_string()
    });
    Ok(super::Selected {
        tree: Box::new(tree),
        note,
    })
}
