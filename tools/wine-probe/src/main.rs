//! wine-probe: finds out which Windows job-object and process-creation
//! features the Wine in use really implements, so corral's Windows backend
//! (and its tests under Wine) can rely on the right ones.
//!
//! Build for x86_64-pc-windows-gnu and run under wine (see docs/wine-probe.md):
//!
//!     wine-probe.exe            run every probe, print one RESULT line each
//!     wine-probe.exe child ...  internal: the child processes the probes start
//!
//! Every wait has a timeout and a watchdog ends the whole run, so a missing
//! feature shows up as a FAILS line, never as a hang.

#[cfg(not(windows))]
fn main() {
    eprintln!(
        "wine-probe is a Windows program: build it with \
         --target x86_64-pc-windows-gnu and run it under wine"
    );
    std::process::exit(2);
}

#[cfg(windows)]
fn main() {
    win::main()
}

#[cfg(windows)]
mod win {
    use std::ffi::c_void;
    use std::mem::{size_of, zeroed};
    use std::ptr::{null, null_mut};
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Mutex;
    use std::time::{Duration, Instant};

    use windows_sys::core::BOOL;
    use windows_sys::Win32::Foundation::{
        CloseHandle, GetHandleInformation, GetLastError, SetHandleInformation, HANDLE,
        HANDLE_FLAG_INHERIT, INVALID_HANDLE_VALUE, WAIT_OBJECT_0, WAIT_TIMEOUT,
    };
    use windows_sys::Win32::System::Console::{
        AllocConsole, FreeConsole, GenerateConsoleCtrlEvent, GetConsoleProcessList, GetStdHandle,
        SetConsoleCtrlHandler, SetStdHandle, CTRL_BREAK_EVENT, STD_ERROR_HANDLE, STD_INPUT_HANDLE,
        STD_OUTPUT_HANDLE,
    };
    use windows_sys::Win32::System::JobObjects::{
        AssignProcessToJobObject, CreateJobObjectW, IsProcessInJob,
        JobObjectAssociateCompletionPortInformation, JobObjectBasicAccountingInformation,
        JobObjectBasicProcessIdList, JobObjectExtendedLimitInformation, QueryInformationJobObject,
        SetInformationJobObject, TerminateJobObject, JOBOBJECTINFOCLASS,
        JOBOBJECT_ASSOCIATE_COMPLETION_PORT, JOBOBJECT_BASIC_ACCOUNTING_INFORMATION,
        JOBOBJECT_EXTENDED_LIMIT_INFORMATION, JOB_OBJECT_LIMIT_BREAKAWAY_OK,
        JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
    };
    use windows_sys::Win32::System::SystemServices::{
        JOB_OBJECT_MSG_ABNORMAL_EXIT_PROCESS, JOB_OBJECT_MSG_ACTIVE_PROCESS_ZERO,
        JOB_OBJECT_MSG_EXIT_PROCESS, JOB_OBJECT_MSG_NEW_PROCESS,
    };
    use windows_sys::Win32::System::Threading::{
        CreateEventW, CreateProcessW, DeleteProcThreadAttributeList, ExitProcess,
        GetCurrentProcess, GetExitCodeProcess, InitializeProcThreadAttributeList, OpenEventW,
        OpenProcess, ResumeThread, SetEvent, Sleep, TerminateProcess, UpdateProcThreadAttribute,
        WaitForSingleObject, CREATE_BREAKAWAY_FROM_JOB, CREATE_NEW_PROCESS_GROUP, CREATE_SUSPENDED,
        EVENT_MODIFY_STATE, EXTENDED_STARTUPINFO_PRESENT, PROCESS_INFORMATION,
        PROCESS_QUERY_INFORMATION, PROCESS_QUERY_LIMITED_INFORMATION, PROCESS_TERMINATE,
        PROC_THREAD_ATTRIBUTE_HANDLE_LIST, PROC_THREAD_ATTRIBUTE_JOB_LIST, STARTUPINFOEXW,
        STARTUPINFOW,
    };
    use windows_sys::Win32::System::IO::{
        CreateIoCompletionPort, GetQueuedCompletionStatus, OVERLAPPED,
    };

    const SYNCHRONIZE: u32 = 0x0010_0000;
    const STILL_ACTIVE: u32 = 259;
    const ERROR_ACCESS_DENIED: u32 = 5;
    /// Whole-run limit; the probes themselves take a few seconds.
    const WATCHDOG_SECS: u64 = 120;

    // ------------------------------------------------------------------
    // Small helpers
    // ------------------------------------------------------------------

    fn wide(s: &str) -> Vec<u16> {
        s.encode_utf16().chain(std::iter::once(0)).collect()
    }

    fn last_error() -> u32 {
        unsafe { GetLastError() }
    }

    /// An owned kernel handle, closed on drop.
    struct Handle(HANDLE);
    impl Handle {
        fn new(h: HANDLE) -> Result<Handle, u32> {
            if h.is_null() || h == INVALID_HANDLE_VALUE {
                Err(last_error())
            } else {
                Ok(Handle(h))
            }
        }
        fn raw(&self) -> HANDLE {
            self.0
        }
    }
    impl Drop for Handle {
        fn drop(&mut self) {
            unsafe { CloseHandle(self.0) };
        }
    }

    /// A job handle that, unless released, terminates its members on drop so a
    /// failed probe leaves nothing running.
    struct Job(Option<Handle>);
    impl Job {
        fn new() -> Result<Job, u32> {
            Ok(Job(Some(Handle::new(unsafe {
                CreateJobObjectW(null(), null())
            })?)))
        }
        fn raw(&self) -> HANDLE {
            self.0.as_ref().unwrap().raw()
        }
        /// Close the handle without terminating (for KILL_ON_JOB_CLOSE).
        fn close(mut self) -> bool {
            let h = self.0.take().unwrap();
            let ok = unsafe { CloseHandle(h.0) } != 0;
            std::mem::forget(h);
            ok
        }
    }
    impl Drop for Job {
        fn drop(&mut self) {
            if let Some(h) = &self.0 {
                unsafe { TerminateJobObject(h.raw(), 0xDEAD) };
            }
        }
    }

    /// A started child process; killed on drop if still running.
    struct Child {
        process: Handle,
        thread: Handle,
        pid: u32,
    }
    impl Drop for Child {
        fn drop(&mut self) {
            if wait(self.process.raw(), 0) != WAIT_OBJECT_0 {
                unsafe { TerminateProcess(self.process.raw(), 0xDEAD) };
                wait(self.process.raw(), 2000);
            }
        }
    }

    /// PROC_THREAD_ATTRIBUTE_LIST storage.  The values passed to `add` must
    /// outlive every CreateProcessW call that uses the list.
    struct AttrList {
        buf: Vec<u64>,
    }
    impl AttrList {
        fn new(count: u32) -> Result<AttrList, u32> {
            let mut size = 0usize;
            unsafe { InitializeProcThreadAttributeList(null_mut(), count, 0, &mut size) };
            if size == 0 {
                return Err(last_error());
            }
            let mut buf = vec![0u64; size.div_ceil(8)];
            if unsafe {
                InitializeProcThreadAttributeList(buf.as_mut_ptr().cast(), count, 0, &mut size)
            } == 0
            {
                return Err(last_error());
            }
            Ok(AttrList { buf })
        }
        fn ptr(&self) -> *mut c_void {
            self.buf.as_ptr() as *mut c_void
        }
        fn add<T>(&mut self, attr: u32, values: &[T]) -> Result<(), u32> {
            let ok = unsafe {
                UpdateProcThreadAttribute(
                    self.ptr(),
                    0,
                    attr as usize,
                    values.as_ptr().cast(),
                    std::mem::size_of_val(values),
                    null_mut(),
                    null(),
                )
            };
            if ok == 0 {
                Err(last_error())
            } else {
                Ok(())
            }
        }
    }
    impl Drop for AttrList {
        fn drop(&mut self) {
            unsafe { DeleteProcThreadAttributeList(self.ptr()) };
        }
    }

    fn self_exe() -> String {
        std::env::current_exe()
            .expect("current_exe")
            .to_string_lossy()
            .into_owned()
    }

    /// Start this program again as `wine-probe.exe child <args>`.
    fn spawn(
        args: &str,
        flags: u32,
        attrs: Option<&AttrList>,
        inherit: bool,
    ) -> Result<Child, u32> {
        let mut cmd = wide(&format!("\"{}\" child {}", self_exe(), args));
        let mut si: STARTUPINFOEXW = unsafe { zeroed() };
        let mut flags = flags;
        if let Some(a) = attrs {
            si.StartupInfo.cb = size_of::<STARTUPINFOEXW>() as u32;
            si.lpAttributeList = a.ptr();
            flags |= EXTENDED_STARTUPINFO_PRESENT;
        } else {
            si.StartupInfo.cb = size_of::<STARTUPINFOW>() as u32;
        }
        let mut pi: PROCESS_INFORMATION = unsafe { zeroed() };
        let ok = unsafe {
            CreateProcessW(
                null(),
                cmd.as_mut_ptr(),
                null(),
                null(),
                inherit as BOOL,
                flags,
                null(),
                null(),
                &si.StartupInfo,
                &mut pi,
            )
        };
        if ok == 0 {
            return Err(last_error());
        }
        Ok(Child {
            process: Handle(pi.hProcess),
            thread: Handle(pi.hThread),
            pid: pi.dwProcessId,
        })
    }

    fn wait(h: HANDLE, ms: u32) -> u32 {
        unsafe { WaitForSingleObject(h, ms) }
    }

    fn exit_code(h: HANDLE) -> u32 {
        let mut c = 0u32;
        if unsafe { GetExitCodeProcess(h, &mut c) } == 0 {
            return u32::MAX;
        }
        c
    }

    /// Wait up to `ms` and describe how the process ended.
    fn wait_exit(c: &Child, ms: u32) -> Option<u32> {
        if wait(c.process.raw(), ms) == WAIT_OBJECT_0 {
            Some(exit_code(c.process.raw()))
        } else {
            None
        }
    }

    fn in_job(process: HANDLE, job: HANDLE) -> Result<bool, u32> {
        let mut r: BOOL = 0;
        if unsafe { IsProcessInJob(process, job, &mut r) } == 0 {
            Err(last_error())
        } else {
            Ok(r != 0)
        }
    }

    fn query<T>(job: HANDLE, class: JOBOBJECTINFOCLASS) -> Result<T, u32> {
        let mut v: T = unsafe { zeroed() };
        let ok = unsafe {
            QueryInformationJobObject(
                job,
                class,
                (&mut v as *mut T).cast(),
                size_of::<T>() as u32,
                null_mut(),
            )
        };
        if ok == 0 {
            Err(last_error())
        } else {
            Ok(v)
        }
    }

    fn accounting(job: HANDLE) -> Result<JOBOBJECT_BASIC_ACCOUNTING_INFORMATION, u32> {
        query(job, JobObjectBasicAccountingInformation)
    }

    fn acct_str(job: HANDLE) -> String {
        match accounting(job) {
            Ok(a) => format!(
                "active={} total={} terminated={}",
                a.ActiveProcesses, a.TotalProcesses, a.TotalTerminatedProcesses
            ),
            Err(e) => format!("query failed err={e}"),
        }
    }

    #[repr(C)]
    struct PidList {
        assigned: u32,
        in_list: u32,
        ids: [usize; 64],
    }

    fn pid_list(job: HANDLE) -> Result<Vec<u32>, u32> {
        let l: PidList = query(job, JobObjectBasicProcessIdList)?;
        Ok(l.ids[..l.in_list.min(64) as usize]
            .iter()
            .map(|&p| p as u32)
            .collect())
    }

    fn set_limit_flags(job: HANDLE, flags: u32) -> Result<(), u32> {
        let mut info: JOBOBJECT_EXTENDED_LIMIT_INFORMATION = unsafe { zeroed() };
        info.BasicLimitInformation.LimitFlags = flags;
        let ok = unsafe {
            SetInformationJobObject(
                job,
                JobObjectExtendedLimitInformation,
                (&info as *const JOBOBJECT_EXTENDED_LIMIT_INFORMATION).cast(),
                size_of::<JOBOBJECT_EXTENDED_LIMIT_INFORMATION>() as u32,
            )
        };
        if ok == 0 {
            Err(last_error())
        } else {
            Ok(())
        }
    }

    fn assign(job: HANDLE, process: HANDLE) -> Result<(), u32> {
        if unsafe { AssignProcessToJobObject(job, process) } == 0 {
            Err(last_error())
        } else {
            Ok(())
        }
    }

    static EVENT_SEQ: AtomicU32 = AtomicU32::new(0);

    /// A named event a child sets once it is ready (see `child_ready`).
    fn ready_event() -> (Handle, String) {
        let name = format!(
            "Local\\wine-probe-{}-{}",
            std::process::id(),
            EVENT_SEQ.fetch_add(1, Ordering::SeqCst)
        );
        let h = unsafe { CreateEventW(null(), 1, 0, wide(&name).as_ptr()) };
        (Handle::new(h).expect("CreateEventW"), name)
    }

    fn ms_since(t: Instant) -> u128 {
        t.elapsed().as_millis()
    }

    // ------------------------------------------------------------------
    // Result reporting
    // ------------------------------------------------------------------

    static RESULTS: Mutex<Vec<(String, &'static str)>> = Mutex::new(Vec::new());

    const WORKS: &str = "WORKS";
    const FAILS: &str = "FAILS";
    const PARTIAL: &str = "PARTIAL";
    const INFO: &str = "INFO";

    fn report(name: &str, verdict: &'static str, detail: String) {
        println!("RESULT {name:<28} {verdict:<7} {detail}");
        RESULTS.lock().unwrap().push((name.to_string(), verdict));
    }

    // ------------------------------------------------------------------
    // Child side: `wine-probe.exe child <ready-event|-> <mode> [args]`
    // ------------------------------------------------------------------

    fn child_ready(name: &str) {
        if name == "-" {
            return;
        }
        let h = unsafe { OpenEventW(EVENT_MODIFY_STATE, 0, wide(name).as_ptr()) };
        if !h.is_null() {
            unsafe {
                SetEvent(h);
                CloseHandle(h);
            }
        }
    }

    unsafe extern "system" fn on_ctrl(ctrl: u32) -> BOOL {
        if ctrl == CTRL_BREAK_EVENT {
            ExitProcess(42);
        }
        0
    }

    unsafe extern "system" fn swallow_ctrl(_ctrl: u32) -> BOOL {
        1
    }

    fn child_main(args: &[String]) -> ! {
        let ready = args.first().map(String::as_str).unwrap_or("-");
        let mode = args.get(1).map(String::as_str).unwrap_or("");
        let arg = |i: usize| args.get(2 + i).cloned().unwrap_or_default();
        let num = |i: usize| arg(i).parse::<u64>().unwrap_or(0);
        let code: u32 = match mode {
            // exit <code>
            "exit" => num(0) as u32,
            // sleep <ms> [code]
            "sleep" => {
                child_ready(ready);
                std::thread::sleep(Duration::from_millis(num(0)));
                num(1) as u32
            }
            // Am I in any job right from the start?  1 = yes, 0 = no, 2 = error.
            "injob" => match in_job(unsafe { GetCurrentProcess() }, null_mut()) {
                Ok(true) => 1,
                Ok(false) => 0,
                Err(_) => 2,
            },
            // handles <a> <b>: which of two (signaled event) handle values are
            // valid here?  16 + bit0 for a, bit1 for b.
            "handles" => {
                let mut bits = 0;
                for (i, v) in [arg(0), arg(1)].iter().enumerate() {
                    let h = v.parse::<usize>().unwrap_or(0) as HANDLE;
                    let mut f = 0u32;
                    let valid = unsafe { GetHandleInformation(h, &mut f) } != 0;
                    if valid && wait(h, 0) == WAIT_OBJECT_0 {
                        bits |= 1 << i;
                    }
                }
                16 + bits
            }
            // spawn-grandchild <ms>: start `child - sleep <ms> 3`, signal ready,
            // wait for it, exit with its code.
            "spawn-grandchild" => match spawn(&format!("- sleep {}", num(0)), 0, None, false) {
                Ok(gc) => {
                    child_ready(ready);
                    wait_exit(&gc, num(0) as u32 + 10_000).unwrap_or(99)
                }
                Err(_) => 98,
            },
            // ctrl-break: exit 42 on CTRL_BREAK_EVENT, 3 if none came in 10 s.
            "ctrl-break" => {
                unsafe { SetConsoleCtrlHandler(Some(on_ctrl), 1) };
                child_ready(ready);
                std::thread::sleep(Duration::from_secs(10));
                3
            }
            // nested-inner: run inside an outer job; make an inner job and put a
            // process in it both ways.  64 + bits: 1 assign ok, 2 in inner job
            // after assign, 4 JOB_LIST spawn ok, 8 in inner job via JOB_LIST.
            "nested-inner" => {
                let mut bits = 0u32;
                if let Ok(inner) = Job::new() {
                    if let Ok(c) = spawn("- sleep 5000", CREATE_SUSPENDED, None, false) {
                        if assign(inner.raw(), c.process.raw()).is_ok() {
                            bits |= 1;
                        }
                        if in_job(c.process.raw(), inner.raw()) == Ok(true) {
                            bits |= 2;
                        }
                    }
                    let jobs = [inner.raw()];
                    if let Ok(mut al) = AttrList::new(1) {
                        if al.add(PROC_THREAD_ATTRIBUTE_JOB_LIST, &jobs).is_ok() {
                            if let Ok(c) = spawn("- sleep 5000", 0, Some(&al), false) {
                                bits |= 4;
                                if in_job(c.process.raw(), inner.raw()) == Ok(true) {
                                    bits |= 8;
                                }
                            }
                        }
                    }
                }
                64 + bits
            }
            // hold-job <pidfile>: own a KILL_ON_JOB_CLOSE job with a sleeping
            // member, write the member's pid to <pidfile>, then sleep until killed.
            "hold-job" => {
                let job = match Job::new() {
                    Ok(j) => j,
                    Err(_) => unsafe { ExitProcess(90) },
                };
                if set_limit_flags(job.raw(), JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE).is_err() {
                    unsafe { ExitProcess(91) };
                }
                let c = match spawn("- sleep 30000", CREATE_SUSPENDED, None, false) {
                    Ok(c) => c,
                    Err(_) => unsafe { ExitProcess(92) },
                };
                if assign(job.raw(), c.process.raw()).is_err() {
                    unsafe { ExitProcess(93) };
                }
                unsafe { ResumeThread(c.thread.raw()) };
                let _ = std::fs::write(arg(0), c.pid.to_string());
                child_ready(ready);
                std::mem::forget(c); // keep it running when we are killed
                std::thread::sleep(Duration::from_secs(30));
                0
            }
            // ctrl-break-sender: the CTRL_BREAK probe, run from a process that
            // Wine started (not the one launched from the Unix shell).
            // 100 + bit0 GenerateConsoleCtrlEvent ok + bit1 target's handler ran.
            "ctrl-break-sender" => match ctrl_break_once() {
                Ok(_) => 103,
                Err(d) if d.contains("GenerateConsoleCtrlEvent=true") => 101,
                Err(_) => 100,
            },
            // breakaway: try CREATE_BREAKAWAY_FROM_JOB from inside a job.
            // 10 = refused with ACCESS_DENIED, 11 = started outside the job,
            // 12 = started but still in a job, 13 = other error.
            "breakaway" => match spawn("- exit 5", CREATE_BREAKAWAY_FROM_JOB, None, false) {
                Err(ERROR_ACCESS_DENIED) => 10,
                Err(_) => 13,
                Ok(gc) => match in_job(gc.process.raw(), null_mut()) {
                    Ok(false) => 11,
                    _ => 12,
                },
            },
            _ => 250,
        };
        unsafe { ExitProcess(code) }
    }

    // ------------------------------------------------------------------
    // Probes
    // ------------------------------------------------------------------

    fn probe_create_job() {
        match Job::new() {
            Ok(_) => report("CreateJobObjectW", WORKS, "anonymous job created".into()),
            Err(e) => report("CreateJobObjectW", FAILS, format!("err={e}")),
        }
    }

    fn probe_suspended_assign_resume() {
        let name = "suspended+assign+resume";
        let r = (|| -> Result<String, String> {
            let job = Job::new().map_err(|e| format!("CreateJobObjectW err={e}"))?;
            let c = spawn("- exit 7", CREATE_SUSPENDED, None, false)
                .map_err(|e| format!("CreateProcessW err={e}"))?;
            let still = wait(c.process.raw(), 300) == WAIT_TIMEOUT;
            assign(job.raw(), c.process.raw()).map_err(|e| format!("Assign err={e}"))?;
            let inj = in_job(c.process.raw(), job.raw());
            let prev = unsafe { ResumeThread(c.thread.raw()) };
            let code = wait_exit(&c, 10_000);
            let detail = format!(
                "stayed suspended={still}, IsProcessInJob={inj:?}, ResumeThread prev count={prev}, \
                 exit={code:?} (want Some(7)); {}",
                acct_str(job.raw())
            );
            if still && inj == Ok(true) && prev == 1 && code == Some(7) {
                Ok(detail)
            } else {
                Err(detail)
            }
        })();
        match r {
            Ok(d) => report(name, WORKS, d),
            Err(d) => report(name, FAILS, d),
        }
    }

    fn probe_job_list() {
        let name = "PROC_THREAD_ATTRIBUTE_JOB_LIST";
        let r = (|| -> Result<String, String> {
            let job = Job::new().map_err(|e| format!("CreateJobObjectW err={e}"))?;
            let jobs = [job.raw()];
            let mut al = AttrList::new(1)
                .map_err(|e| format!("InitializeProcThreadAttributeList err={e}"))?;
            al.add(PROC_THREAD_ATTRIBUTE_JOB_LIST, &jobs)
                .map_err(|e| format!("UpdateProcThreadAttribute err={e}"))?;
            let c = spawn("- injob", 0, Some(&al), false)
                .map_err(|e| format!("CreateProcessW err={e}"))?;
            let inj = in_job(c.process.raw(), job.raw());
            let code = wait_exit(&c, 10_000);
            let acct = accounting(job.raw()).ok();
            let detail = format!(
                "parent IsProcessInJob right after CreateProcessW={inj:?}; child saw itself in a job \
                 at start: {} ; {}",
                match code {
                    Some(1) => "yes".to_string(),
                    other => format!("no (exit={other:?})"),
                },
                acct_str(job.raw())
            );
            if inj == Ok(true) && code == Some(1) && acct.map(|a| a.TotalProcesses) == Some(1) {
                Ok(detail)
            } else {
                Err(detail)
            }
        })();
        match r {
            Ok(d) => report(name, WORKS, d),
            Err(d) => report(name, FAILS, d),
        }
    }

    fn probe_job_list_two() {
        let name = "JOB_LIST with two jobs";
        let r = (|| -> Result<String, String> {
            let j1 = Job::new().map_err(|e| format!("err={e}"))?;
            let j2 = Job::new().map_err(|e| format!("err={e}"))?;
            let jobs = [j1.raw(), j2.raw()];
            let mut al = AttrList::new(1).map_err(|e| format!("init err={e}"))?;
            al.add(PROC_THREAD_ATTRIBUTE_JOB_LIST, &jobs)
                .map_err(|e| format!("update err={e}"))?;
            let c = spawn("- sleep 3000", 0, Some(&al), false)
                .map_err(|e| format!("CreateProcessW err={e}"))?;
            let a = in_job(c.process.raw(), j1.raw());
            let b = in_job(c.process.raw(), j2.raw());
            unsafe { TerminateJobObject(j1.raw(), 0x51) };
            let code = wait_exit(&c, 5000);
            let detail = format!(
                "in job1={a:?} in job2={b:?}; TerminateJobObject(job1, 0x51) -> exit={code:?}"
            );
            if a == Ok(true) && b == Ok(true) && code == Some(0x51) {
                Ok(detail)
            } else {
                Err(detail)
            }
        })();
        match r {
            Ok(d) => report(name, WORKS, d),
            Err(d) => report(name, FAILS, d),
        }
    }

    fn inheritable_event() -> Handle {
        let h = Handle::new(unsafe { CreateEventW(null(), 1, 1, null()) }).expect("CreateEventW");
        unsafe { SetHandleInformation(h.raw(), HANDLE_FLAG_INHERIT, HANDLE_FLAG_INHERIT) };
        h
    }

    fn probe_handle_list() {
        let name = "PROC_THREAD_ATTRIBUTE_HANDLE_LIST";
        let r = (|| -> Result<String, String> {
            let a = inheritable_event();
            let b = inheritable_event();
            let args = format!("- handles {} {}", a.raw() as usize, b.raw() as usize);
            // Control: plain bInheritHandles=TRUE passes both.
            let ctl = spawn(&args, 0, None, true).map_err(|e| format!("CreateProcessW err={e}"))?;
            let ctl_code = wait_exit(&ctl, 10_000);
            let list = [a.raw()];
            let mut al = AttrList::new(1).map_err(|e| format!("init err={e}"))?;
            al.add(PROC_THREAD_ATTRIBUTE_HANDLE_LIST, &list)
                .map_err(|e| format!("UpdateProcThreadAttribute err={e}"))?;
            let c =
                spawn(&args, 0, Some(&al), true).map_err(|e| format!("CreateProcessW err={e}"))?;
            let code = wait_exit(&c, 10_000);
            let bits = |c: Option<u32>| match c {
                Some(16) => "none".to_string(),
                Some(17) => "listed only".to_string(),
                Some(18) => "unlisted only".to_string(),
                Some(19) => "both".to_string(),
                other => format!("?? exit={other:?}"),
            };
            let detail = format!(
                "two inheritable events, list=[first]: child got {}; control without list got {}",
                bits(code),
                bits(ctl_code)
            );
            if code == Some(17) && ctl_code == Some(19) {
                Ok(detail)
            } else {
                Err(detail)
            }
        })();
        match r {
            Ok(d) => report(name, WORKS, d),
            Err(d) => report(name, FAILS, d),
        }
    }

    fn probe_job_and_handle_list() {
        let name = "JOB_LIST + HANDLE_LIST together";
        let r = (|| -> Result<String, String> {
            let job = Job::new().map_err(|e| format!("err={e}"))?;
            let a = inheritable_event();
            let b = inheritable_event();
            let jobs = [job.raw()];
            let list = [a.raw()];
            let mut al = AttrList::new(2).map_err(|e| format!("init err={e}"))?;
            al.add(PROC_THREAD_ATTRIBUTE_JOB_LIST, &jobs)
                .map_err(|e| format!("update JOB_LIST err={e}"))?;
            al.add(PROC_THREAD_ATTRIBUTE_HANDLE_LIST, &list)
                .map_err(|e| format!("update HANDLE_LIST err={e}"))?;
            let args = format!("- handles {} {}", a.raw() as usize, b.raw() as usize);
            let c =
                spawn(&args, 0, Some(&al), true).map_err(|e| format!("CreateProcessW err={e}"))?;
            let inj = in_job(c.process.raw(), job.raw());
            let code = wait_exit(&c, 10_000);
            let detail =
                format!("in job={inj:?}; child exit={code:?} (17 = only the listed handle)");
            if inj == Ok(true) && code == Some(17) {
                Ok(detail)
            } else {
                Err(detail)
            }
        })();
        match r {
            Ok(d) => report(name, WORKS, d),
            Err(d) => report(name, FAILS, d),
        }
    }

    fn probe_nested() {
        let name = "nested jobs (assign to 2nd)";
        let r = (|| -> Result<String, String> {
            let j1 = Job::new().map_err(|e| format!("err={e}"))?;
            let j2 = Job::new().map_err(|e| format!("err={e}"))?;
            let c = spawn("- sleep 5000", CREATE_SUSPENDED, None, false)
                .map_err(|e| format!("CreateProcessW err={e}"))?;
            assign(j1.raw(), c.process.raw()).map_err(|e| format!("assign job1 err={e}"))?;
            let second = assign(j2.raw(), c.process.raw());
            let a = in_job(c.process.raw(), j1.raw());
            let b = in_job(c.process.raw(), j2.raw());
            unsafe { ResumeThread(c.thread.raw()) };
            // Terminating the parent job must reach the nested one's members.
            unsafe { TerminateJobObject(j1.raw(), 0x52) };
            let code = wait_exit(&c, 5000);
            let detail = format!(
                "assign to job2 while in job1: {second:?}; in job1={a:?} in job2={b:?}; \
                 TerminateJobObject(job1,0x52) -> exit={code:?}"
            );
            if second.is_ok() && a == Ok(true) && b == Ok(true) && code == Some(0x52) {
                Ok(detail)
            } else {
                Err(detail)
            }
        })();
        match r {
            Ok(d) => report(name, WORKS, d),
            Err(d) => report(name, FAILS, d),
        }
    }

    fn probe_nested_invalid() {
        let name = "nested jobs: invalid chain";
        let r = (|| -> Result<String, String> {
            // job2 already has its own member, so it cannot become job1's child.
            let j1 = Job::new().map_err(|e| format!("err={e}"))?;
            let j2 = Job::new().map_err(|e| format!("err={e}"))?;
            let x =
                spawn("- sleep 5000", CREATE_SUSPENDED, None, false).map_err(|e| format!("{e}"))?;
            let y =
                spawn("- sleep 5000", CREATE_SUSPENDED, None, false).map_err(|e| format!("{e}"))?;
            assign(j2.raw(), x.process.raw()).map_err(|e| format!("assign x err={e}"))?;
            assign(j1.raw(), y.process.raw()).map_err(|e| format!("assign y err={e}"))?;
            let r = assign(j2.raw(), y.process.raw());
            let detail =
                format!("assign (in job1) to non-empty unrelated job2: {r:?} (Windows: Err(5))");
            if r == Err(ERROR_ACCESS_DENIED) {
                Ok(detail)
            } else {
                Err(detail)
            }
        })();
        match r {
            Ok(d) => report(name, WORKS, d),
            Err(d) => report(name, FAILS, d),
        }
    }

    fn probe_nested_from_inside() {
        let name = "nested: job inside a job";
        let r = (|| -> Result<String, String> {
            let outer = Job::new().map_err(|e| format!("err={e}"))?;
            let c = spawn("- nested-inner", CREATE_SUSPENDED, None, false)
                .map_err(|e| format!("CreateProcessW err={e}"))?;
            assign(outer.raw(), c.process.raw()).map_err(|e| format!("assign err={e}"))?;
            unsafe { ResumeThread(c.thread.raw()) };
            let code = wait_exit(&c, 15_000);
            let detail = match code {
                Some(v) if (64..80).contains(&v) => {
                    let b = v - 64;
                    format!(
                        "child in outer job made inner job: Assign ok={}, in inner={}, \
                         JOB_LIST spawn ok={}, in inner={}",
                        b & 1 != 0,
                        b & 2 != 0,
                        b & 4 != 0,
                        b & 8 != 0
                    )
                }
                other => format!("child exit={other:?}"),
            };
            if code == Some(64 + 15) {
                Ok(detail)
            } else {
                Err(detail)
            }
        })();
        match r {
            Ok(d) => report(name, WORKS, d),
            Err(d) => report(name, FAILS, d),
        }
    }

    fn associate_port(job: HANDLE, key: usize) -> Result<Handle, String> {
        let port =
            Handle::new(unsafe { CreateIoCompletionPort(INVALID_HANDLE_VALUE, null_mut(), 0, 1) })
                .map_err(|e| format!("CreateIoCompletionPort err={e}"))?;
        let assoc = JOBOBJECT_ASSOCIATE_COMPLETION_PORT {
            CompletionKey: key as *mut c_void,
            CompletionPort: port.raw(),
        };
        if unsafe {
            SetInformationJobObject(
                job,
                JobObjectAssociateCompletionPortInformation,
                (&assoc as *const JOBOBJECT_ASSOCIATE_COMPLETION_PORT).cast(),
                size_of::<JOBOBJECT_ASSOCIATE_COMPLETION_PORT>() as u32,
            )
        } == 0
        {
            return Err(format!("associate port err={}", last_error()));
        }
        Ok(port)
    }

    fn msg_name(m: u32) -> String {
        match m {
            JOB_OBJECT_MSG_NEW_PROCESS => "NEW_PROCESS".into(),
            JOB_OBJECT_MSG_EXIT_PROCESS => "EXIT_PROCESS".into(),
            JOB_OBJECT_MSG_ABNORMAL_EXIT_PROCESS => "ABNORMAL_EXIT_PROCESS".into(),
            JOB_OBJECT_MSG_ACTIVE_PROCESS_ZERO => "ACTIVE_PROCESS_ZERO".into(),
            other => format!("MSG{other}"),
        }
    }

    /// Completion port + accounting + grandchild membership + waiting on a job
    /// whose members exited by themselves.
    fn probe_completion_port() {
        let r = (|| -> Result<(), String> {
            let job = Job::new().map_err(|e| format!("err={e}"))?;
            const KEY: usize = 0xC0FFEE;
            let port = associate_port(job.raw(), KEY)?;
            let (ev, ev_name) = ready_event();
            let c = spawn(
                &format!("{ev_name} spawn-grandchild 1500"),
                CREATE_SUSPENDED,
                None,
                false,
            )
            .map_err(|e| format!("CreateProcessW err={e}"))?;
            assign(job.raw(), c.process.raw()).map_err(|e| format!("assign err={e}"))?;
            unsafe { ResumeThread(c.thread.raw()) };
            let ready = wait(ev.raw(), 10_000) == WAIT_OBJECT_0;

            // While both run: accounting and the pid list.
            let acct_running = accounting(job.raw());
            let pids = pid_list(job.raw());
            let grandchild = pids
                .as_ref()
                .ok()
                .and_then(|p| p.iter().copied().find(|&p| p != c.pid));
            // IsProcessInJob on a handle opened by pid, with the limited and
            // with the full query right.
            let gc_in_job_with = |access: u32| {
                grandchild.map(|pid| {
                    let h = unsafe { OpenProcess(access, 0, pid) };
                    match Handle::new(h) {
                        Ok(h) => in_job(h.raw(), job.raw()),
                        Err(e) => Err(e),
                    }
                })
            };
            let gc_in_job_limited = gc_in_job_with(PROCESS_QUERY_LIMITED_INFORMATION | SYNCHRONIZE);
            let gc_in_job = gc_in_job_with(PROCESS_QUERY_INFORMATION | SYNCHRONIZE);
            let job_signaled_running = wait(job.raw(), 0) == WAIT_OBJECT_0;

            // Drain the port until ACTIVE_PROCESS_ZERO (or a quiet 3 s / 15 s total).
            let t = Instant::now();
            let mut msgs = Vec::new();
            let mut key_ok = true;
            let mut zero_at = None;
            while t.elapsed() < Duration::from_secs(15) {
                let mut m = 0u32;
                let mut key = 0usize;
                let mut ov: *mut OVERLAPPED = null_mut();
                let ok = unsafe {
                    GetQueuedCompletionStatus(port.raw(), &mut m, &mut key, &mut ov, 3000)
                };
                if ok == 0 && ov.is_null() {
                    break; // timeout
                }
                key_ok &= key == KEY;
                let pid = ov as usize;
                msgs.push(if m == JOB_OBJECT_MSG_ACTIVE_PROCESS_ZERO {
                    msg_name(m)
                } else {
                    let who = if pid == c.pid as usize {
                        "child".to_string()
                    } else if Some(pid as u32) == grandchild {
                        "grandchild".to_string()
                    } else {
                        format!("pid {pid}")
                    };
                    format!("{}({who})", msg_name(m))
                });
                if m == JOB_OBJECT_MSG_ACTIVE_PROCESS_ZERO {
                    zero_at = Some(ms_since(t));
                    break;
                }
            }
            let code = wait_exit(&c, 5000);
            let acct_after = accounting(job.raw());
            let job_signaled_after = wait(job.raw(), 500) == WAIT_OBJECT_0;

            let want = [
                "NEW_PROCESS(child)",
                "NEW_PROCESS(grandchild)",
                "EXIT_PROCESS(grandchild)",
                "EXIT_PROCESS(child)",
                "ACTIVE_PROCESS_ZERO",
            ];
            let got: Vec<&str> = msgs.iter().map(String::as_str).collect();
            let detail = format!(
                "messages: [{}], key ok={key_ok}, ZERO after {:?} ms of draining; child exit={code:?}",
                msgs.join(", "),
                zero_at
            );
            report(
                "completion port messages",
                if got == want && key_ok {
                    WORKS
                } else if got.contains(&"ACTIVE_PROCESS_ZERO") {
                    PARTIAL
                } else {
                    FAILS
                },
                detail,
            );

            let (ar, aa) = (acct_running.as_ref().ok(), acct_after.as_ref().ok());
            report(
                "accounting ActiveProcesses",
                if ar.map(|a| a.ActiveProcesses) == Some(2)
                    && aa.map(|a| (a.ActiveProcesses, a.TotalProcesses)) == Some((0, 2))
                {
                    WORKS
                } else {
                    FAILS
                },
                format!(
                    "child+grandchild running (ready={ready}): {}; after both exited: {}",
                    match ar {
                        Some(a) => format!(
                            "active={} total={} terminated={}",
                            a.ActiveProcesses, a.TotalProcesses, a.TotalTerminatedProcesses
                        ),
                        None => format!("query failed {:?}", acct_running.as_ref().err()),
                    },
                    match aa {
                        Some(a) => format!(
                            "active={} total={} terminated={}",
                            a.ActiveProcesses, a.TotalProcesses, a.TotalTerminatedProcesses
                        ),
                        None => "query failed".into(),
                    }
                ),
            );
            report(
                "grandchild inherits job",
                if gc_in_job == Some(Ok(true)) { WORKS } else { FAILS },
                format!(
                    "JobObjectBasicProcessIdList={pids:?} (child pid {}); grandchild IsProcessInJob \
                     via OpenProcess(QUERY_INFORMATION)={gc_in_job:?}, \
                     via OpenProcess(QUERY_LIMITED_INFORMATION)={gc_in_job_limited:?}",
                    c.pid
                ),
            );
            report(
                "wait on job: natural exit",
                INFO,
                format!(
                    "job signaled while members run={job_signaled_running}, after all exited by \
                     themselves={job_signaled_after} (Windows: false, false)"
                ),
            );
            Ok(())
        })();
        if let Err(d) = r {
            report("completion port messages", FAILS, d);
        }
    }

    fn probe_kill_on_close() {
        let name = "KILL_ON_JOB_CLOSE";
        let r = (|| -> Result<String, String> {
            let job = Job::new().map_err(|e| format!("err={e}"))?;
            set_limit_flags(job.raw(), JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE)
                .map_err(|e| format!("SetInformationJobObject err={e}"))?;
            let back: Result<JOBOBJECT_EXTENDED_LIMIT_INFORMATION, u32> =
                query(job.raw(), JobObjectExtendedLimitInformation);
            let flags = match back {
                Ok(b) => format!("{:#x}", b.BasicLimitInformation.LimitFlags),
                Err(e) => format!("query failed err={e}"),
            };
            let (ev, ev_name) = ready_event();
            let c = spawn(
                &format!("{ev_name} sleep 30000"),
                CREATE_SUSPENDED,
                None,
                false,
            )
            .map_err(|e| format!("CreateProcessW err={e}"))?;
            assign(job.raw(), c.process.raw()).map_err(|e| format!("assign err={e}"))?;
            unsafe { ResumeThread(c.thread.raw()) };
            wait(ev.raw(), 10_000);
            let t = Instant::now();
            let closed = job.close();
            let code = wait_exit(&c, 5000);
            let detail = format!(
                "set {set:#x}, QueryInformationJobObject reads back {flags}; CloseHandle(job)={closed}; member {} \
                 after {} ms, exit={code:?}",
                if code.is_some() { "died" } else { "still alive" },
                ms_since(t),
                set = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
            );
            if code.is_some() {
                Ok(detail)
            } else {
                Err(detail)
            }
        })();
        match r {
            Ok(d) => report(name, WORKS, d),
            Err(d) => report(name, FAILS, d),
        }
    }

    fn probe_kill_on_close_holder_killed() {
        let name = "KILL_ON_JOB_CLOSE: holder killed";
        let r = (|| -> Result<String, String> {
            let pidfile =
                std::env::temp_dir().join(format!("wine-probe-{}.pid", std::process::id()));
            let _ = std::fs::remove_file(&pidfile);
            let (ev, ev_name) = ready_event();
            let holder = spawn(
                &format!("{ev_name} hold-job {}", pidfile.display()),
                0,
                None,
                false,
            )
            .map_err(|e| format!("CreateProcessW err={e}"))?;
            if wait(ev.raw(), 10_000) != WAIT_OBJECT_0 {
                return Err(format!(
                    "holder not ready, exit={:?}",
                    wait_exit(&holder, 0)
                ));
            }
            let pid: u32 = std::fs::read_to_string(&pidfile)
                .map_err(|e| format!("pidfile: {e}"))?
                .trim()
                .parse()
                .map_err(|e| format!("pidfile: {e}"))?;
            let _ = std::fs::remove_file(&pidfile);
            let gc = Handle::new(unsafe {
                OpenProcess(
                    PROCESS_QUERY_LIMITED_INFORMATION | SYNCHRONIZE | PROCESS_TERMINATE,
                    0,
                    pid,
                )
            })
            .map_err(|e| format!("OpenProcess(member) err={e}"))?;
            let t = Instant::now();
            unsafe { TerminateProcess(holder.process.raw(), 1) };
            let died = wait(gc.raw(), 5000) == WAIT_OBJECT_0;
            let detail = format!(
                "TerminateProcess(job holder): member {} after {} ms, exit={:?}",
                if died { "died" } else { "still alive" },
                ms_since(t),
                if died {
                    Some(exit_code(gc.raw()))
                } else {
                    None
                }
            );
            if !died {
                unsafe { TerminateProcess(gc.raw(), 1) };
                return Err(detail);
            }
            Ok(detail)
        })();
        match r {
            Ok(d) => report(name, WORKS, d),
            Err(d) => report(name, FAILS, d),
        }
    }

    fn probe_terminate_job() {
        let r = (|| -> Result<(), String> {
            let job = Job::new().map_err(|e| format!("err={e}"))?;
            let port = associate_port(job.raw(), 1)?;
            let (ev, ev_name) = ready_event();
            let c = spawn(
                &format!("{ev_name} spawn-grandchild 30000"),
                CREATE_SUSPENDED,
                None,
                false,
            )
            .map_err(|e| format!("CreateProcessW err={e}"))?;
            assign(job.raw(), c.process.raw()).map_err(|e| format!("assign err={e}"))?;
            unsafe { ResumeThread(c.thread.raw()) };
            wait(ev.raw(), 10_000);
            let before = acct_str(job.raw());
            let signaled_before = wait(job.raw(), 0) == WAIT_OBJECT_0;
            let pids = pid_list(job.raw()).unwrap_or_default();
            let gc = pids.iter().copied().find(|&p| p != c.pid).and_then(|pid| {
                Handle::new(unsafe {
                    OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION | SYNCHRONIZE, 0, pid)
                })
                .ok()
            });
            let t = Instant::now();
            let ok = unsafe { TerminateJobObject(job.raw(), 0xC0DE) } != 0;
            let code = wait_exit(&c, 5000);
            let child_ms = ms_since(t);
            let gc_code = gc.as_ref().map(|h| {
                if wait(h.raw(), 5000) == WAIT_OBJECT_0 {
                    exit_code(h.raw())
                } else {
                    STILL_ACTIVE
                }
            });
            // Members die asynchronously: poll ActiveProcesses down to 0.
            let mut zero_ms = None;
            while t.elapsed() < Duration::from_secs(5) {
                if accounting(job.raw()).map(|a| a.ActiveProcesses) == Ok(0) {
                    zero_ms = Some(ms_since(t));
                    break;
                }
                unsafe { Sleep(10) };
            }
            let signaled_after = wait(job.raw(), 1000) == WAIT_OBJECT_0;
            // Which messages did the kill produce?
            let mut msgs = Vec::new();
            let t2 = Instant::now();
            while t2.elapsed() < Duration::from_secs(5) {
                let (mut m, mut key, mut ov) = (0u32, 0usize, null_mut::<OVERLAPPED>());
                if unsafe { GetQueuedCompletionStatus(port.raw(), &mut m, &mut key, &mut ov, 1000) }
                    == 0
                    && ov.is_null()
                {
                    break;
                }
                msgs.push(msg_name(m));
                if m == JOB_OBJECT_MSG_ACTIVE_PROCESS_ZERO {
                    break;
                }
            }
            report(
                "TerminateJobObject messages",
                INFO,
                format!("port messages over the whole run: [{}]", msgs.join(", ")),
            );
            report(
                "TerminateJobObject exit code",
                if ok && code == Some(0xC0DE) && gc_code == Some(0xC0DE) { WORKS } else { FAILS },
                format!(
                    "before: {before}; TerminateJobObject(0xC0DE)={ok}: child exit={:?} after {child_ms} ms, \
                     grandchild exit={:?}; ActiveProcesses==0 after {zero_ms:?} ms; after: {}",
                    code.map(|v| format!("{v:#x}")),
                    gc_code.map(|v| format!("{v:#x}")),
                    acct_str(job.raw())
                ),
            );
            report(
                "wait on job handle",
                INFO,
                format!(
                    "WaitForSingleObject(job): while running signaled={signaled_before}, after \
                     TerminateJobObject signaled={signaled_after} (Windows documents signaling \
                     only at end-of-job time limit)"
                ),
            );
            Ok(())
        })();
        if let Err(d) = r {
            report("TerminateJobObject exit code", FAILS, d);
        }
    }

    fn probe_ctrl_break() {
        let name = "CTRL_BREAK to process group";
        let mut r = ctrl_break_once();
        if let Err(first) = &r {
            if first.starts_with("processes on our console=0") {
                // No console (stdout not a terminal): try again on a console of
                // our own (FreeConsole + AllocConsole).
                // AllocConsole re-points the std handles at the new console;
                // keep reporting to wherever stdout/stderr went before.
                let saved = [STD_INPUT_HANDLE, STD_OUTPUT_HANDLE, STD_ERROR_HANDLE]
                    .map(|which| (which, unsafe { GetStdHandle(which) }));
                let freed = unsafe { FreeConsole() } != 0;
                let alloc = unsafe { AllocConsole() } != 0;
                let err = if alloc { 0 } else { last_error() };
                for (which, h) in saved {
                    unsafe { SetStdHandle(which, h) };
                }
                let first = format!("{first} || FreeConsole()={freed}");
                r = match ctrl_break_once() {
                    Ok(d) => Ok(format!(
                        "without console: {first} || after AllocConsole(): {d}"
                    )),
                    Err(d) => Err(format!(
                        "without console: {first} || AllocConsole()={alloc} (err={err}): {d}"
                    )),
                };
            }
        }
        match r {
            Ok(d) => report(name, WORKS, d),
            Err(d) => report(name, FAILS, d),
        }
        // Same thing from a Wine-started child process.
        let r = spawn("- ctrl-break-sender", 0, None, false).map(|c| wait_exit(&c, 20_000));
        let detail = format!(
            "sender exit={r:?} (103 = works, 101 = sent but handler did not run, 100 = \
             GenerateConsoleCtrlEvent failed)"
        );
        report(
            "CTRL_BREAK from a child",
            if r == Ok(Some(103)) { WORKS } else { FAILS },
            detail,
        );
    }

    fn ctrl_break_once() -> Result<String, String> {
        (|| -> Result<String, String> {
            let mut list = [0u32; 16];
            let n = unsafe { GetConsoleProcessList(list.as_mut_ptr(), 16) };
            let (ev, ev_name) = ready_event();
            let c = spawn(
                &format!("{ev_name} ctrl-break"),
                CREATE_NEW_PROCESS_GROUP,
                None,
                false,
            )
            .map_err(|e| format!("CreateProcessW err={e}"))?;
            let ready = wait(ev.raw(), 10_000) == WAIT_OBJECT_0;
            let sent = unsafe { GenerateConsoleCtrlEvent(CTRL_BREAK_EVENT, c.pid) };
            let err = if sent == 0 { last_error() } else { 0 };
            // Does the call work at all?  Group 0 = every process on our
            // console, ourselves included (our handler swallows it).
            let all = if sent == 0 {
                unsafe { SetConsoleCtrlHandler(Some(swallow_ctrl), 1) };
                let ok = unsafe { GenerateConsoleCtrlEvent(CTRL_BREAK_EVENT, 0) } != 0;
                format!(
                    "; to group 0 instead: {ok} (err={})",
                    if ok { 0 } else { last_error() }
                )
            } else {
                String::new()
            };
            let t = Instant::now();
            let code = wait_exit(&c, 5000);
            let detail = format!(
                "processes on our console={n}; child ready={ready}; GenerateConsoleCtrlEvent={} \
                 (err={err}){all}; child exit={code:?} after {} ms (42 = handler ran, 3 = no event)",
                sent != 0,
                ms_since(t)
            );
            if code == Some(42) {
                Ok(detail)
            } else {
                Err(detail)
            }
        })()
    }

    fn probe_breakaway() {
        let name = "CREATE_BREAKAWAY_FROM_JOB";
        let r = (|| -> Result<String, String> {
            let mut out = Vec::new();
            let mut codes = Vec::new();
            for (label, flags) in [
                ("no BREAKAWAY_OK", 0u32),
                ("BREAKAWAY_OK", JOB_OBJECT_LIMIT_BREAKAWAY_OK),
            ] {
                let job = Job::new().map_err(|e| format!("err={e}"))?;
                if flags != 0 {
                    set_limit_flags(job.raw(), flags).map_err(|e| format!("set limit err={e}"))?;
                }
                let c = spawn("- breakaway", CREATE_SUSPENDED, None, false)
                    .map_err(|e| format!("CreateProcessW err={e}"))?;
                assign(job.raw(), c.process.raw()).map_err(|e| format!("assign err={e}"))?;
                unsafe { ResumeThread(c.thread.raw()) };
                let code = wait_exit(&c, 10_000);
                codes.push(code);
                out.push(format!(
                    "{label}: {}",
                    match code {
                        Some(10) => "refused (ACCESS_DENIED)".to_string(),
                        Some(11) => "child started outside the job".to_string(),
                        Some(12) => "child started but still in the job".to_string(),
                        other => format!("other (exit={other:?})"),
                    }
                ));
            }
            let detail = out.join("; ");
            if codes == [Some(10), Some(11)] {
                Ok(detail)
            } else {
                Err(detail)
            }
        })();
        match r {
            Ok(d) => report(name, WORKS, d),
            Err(d) => report(name, FAILS, d),
        }
    }

    // ------------------------------------------------------------------

    fn wine_version() -> String {
        // ntdll!wine_get_version exists only under Wine.
        use windows_sys::Win32::System::LibraryLoader::{GetModuleHandleW, GetProcAddress};
        unsafe {
            let ntdll = GetModuleHandleW(wide("ntdll.dll").as_ptr());
            if ntdll.is_null() {
                return "unknown".into();
            }
            match GetProcAddress(ntdll, b"wine_get_version\0".as_ptr()) {
                Some(f) => {
                    let f: unsafe extern "C" fn() -> *const std::ffi::c_char =
                        std::mem::transmute(f);
                    std::ffi::CStr::from_ptr(f()).to_string_lossy().into_owned()
                }
                None => "not Wine (no ntdll!wine_get_version)".into(),
            }
        }
    }

    pub fn main() {
        let args: Vec<String> = std::env::args().collect();
        if args.get(1).map(String::as_str) == Some("child") {
            child_main(&args[2..]);
        }
        std::thread::spawn(|| {
            std::thread::sleep(Duration::from_secs(WATCHDOG_SECS));
            println!("WATCHDOG: probes did not finish in {WATCHDOG_SECS} s, giving up");
            std::process::exit(99);
        });
        let self_in_job = in_job(unsafe { GetCurrentProcess() }, null_mut());
        println!("wine-probe: Wine version {}", wine_version());
        println!("wine-probe: probe process itself in a job: {self_in_job:?}");
        let t = Instant::now();

        probe_create_job();
        probe_suspended_assign_resume();
        probe_job_list();
        probe_job_list_two();
        probe_handle_list();
        probe_job_and_handle_list();
        probe_nested();
        probe_nested_invalid();
        probe_nested_from_inside();
        probe_completion_port();
        probe_kill_on_close();
        probe_kill_on_close_holder_killed();
        probe_terminate_job();
        probe_ctrl_break();
        probe_breakaway();

        let res = RESULTS.lock().unwrap();
        let count = |v: &str| res.iter().filter(|r| r.1 == v).count();
        println!(
            "wine-probe: done in {} ms: {} works, {} partial, {} fails, {} info",
            ms_since(t),
            count(WORKS),
            count(PARTIAL),
            count(FAILS),
            count(INFO)
        );
    }
}

// `cargo test --target x86_64-pc-windows-gnu` with the wine runner runs these
// under Wine; they only check the toolchain and runner wiring.
#[cfg(all(test, windows))]
mod tests {
    #[test]
    fn std_runs_under_wine() {
        // HashMap seeding goes through ProcessPrng (bcryptprimitives shim).
        let mut m = std::collections::HashMap::new();
        m.insert(1u8, 2u8);
        assert_eq!(m[&1], 2);
    }

    #[test]
    fn std_process_exit_code() {
        let st = std::process::Command::new("cmd")
            .args(["/c", "exit", "3"])
            .status()
            .expect("spawn cmd.exe");
        assert_eq!(st.code(), Some(3));
    }
}
