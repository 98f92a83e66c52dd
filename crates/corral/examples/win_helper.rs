//! Test helper for the Windows suite (tests/windows.rs); a no-op elsewhere.
//!
//! Every mode that lingers writes its pid to a file first and exits by
//! itself within 30 s, so nothing outlives a failed test for long.
//!
//! ```text
//! win_helper exit CODE [TEXT]          print TEXT (if any), exit CODE
//! win_helper touch FILE                create FILE, exit 0
//! win_helper sleep PIDFILE             write pid, sleep 30 s
//! win_helper spawn MODE PIDFILE CODE   start `sleep PIDFILE` as a grandchild,
//!                                      then print and exit CODE. MODE is
//!                                      `held` (the grandchild inherits stdout)
//!                                      or `detached` (its output is NUL and it
//!                                      inherits no handle of ours)
//! win_helper host PIDFILE              run corral on `sleep PIDFILE` (30 s
//!                                      timeout), for the crash-safety test
//! win_helper host-keep PIDFILE         run corral on `spawn detached PIDFILE 0`
//!                                      (KeepOnSuccess) and exit when it returns
//! ```

#[cfg(windows)]
fn main() {
    use std::os::windows::io::AsRawHandle;
    use std::process::{Command, Stdio};
    use std::time::Duration;

    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize| args.get(i).cloned().unwrap_or_default();
    let write_pid = |path: &str| {
        let tmp = format!("{path}.tmp");
        std::fs::write(&tmp, std::process::id().to_string()).unwrap();
        std::fs::rename(&tmp, path).unwrap();
    };
    let me = std::env::current_exe().unwrap();
    match arg(1).as_str() {
        "exit" => {
            if args.len() > 3 {
                println!("{}", arg(3));
            }
            std::process::exit(arg(2).parse().unwrap());
        }
        "touch" => std::fs::write(arg(2), b"ran").unwrap(),
        "sleep" => {
            write_pid(&arg(2));
            std::thread::sleep(Duration::from_secs(30));
        }
        "spawn" => {
            let mut c = Command::new(&me);
            c.args(["sleep", &arg(3)]).stdin(Stdio::null());
            if arg(2) == "detached" {
                // std inherits every inheritable handle: make our standard
                // handles non-inheritable so the grandchild holds none.
                for h in [
                    std::io::stdout().as_raw_handle(),
                    std::io::stderr().as_raw_handle(),
                    std::io::stdin().as_raw_handle(),
                ] {
                    // SAFETY: clearing a flag on our own standard handle.
                    unsafe {
                        windows_sys::Win32::Foundation::SetHandleInformation(
                            h as _,
                            windows_sys::Win32::Foundation::HANDLE_FLAG_INHERIT,
                            0,
                        )
                    };
                }
                c.stdout(Stdio::null()).stderr(Stdio::null());
            }
            let child = c.spawn().unwrap();
            drop(child);
            // Wait for the pid file, so the test can pin the grandchild.
            for _ in 0..500 {
                if std::path::Path::new(&arg(3)).exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            println!("spawned");
            std::process::exit(arg(4).parse().unwrap());
        }
        "host" => {
            let r = corral::Command::new(&me)
                .args(["sleep", &arg(2)])
                .timeout(Duration::from_secs(30))
                .run();
            println!("{r:?}");
        }
        "host-keep" => {
            let r = corral::Command::new(&me)
                .args(["spawn", "detached", &arg(2), "0"])
                .timeout(Duration::from_secs(30))
                .run()
                .unwrap();
            println!("{:?} kept={}", r.outcome, r.leftovers.kept);
        }
        m => panic!("unknown mode {m:?}"),
    }
}

#[cfg(not(windows))]
fn main() {}
