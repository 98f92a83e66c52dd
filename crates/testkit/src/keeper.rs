//! The crash-safety keeper of a process, as tests see it: a child named
//! `corral-keeper` (one per corral process, started by its first run that
//! needs it). Found through `/proc`, signalled through a pidfd.

use rustix::event::{poll, PollFd, PollFlags};
use rustix::process::{pidfd_open, pidfd_send_signal, Pid, PidfdFlags, Signal};

/// The keepers among the children of `parent` (every thread's), live or
/// dead and unreaped: (pid, zombie).
pub fn keepers_of(parent: u32) -> Vec<(i32, bool)> {
    let mut kids = String::new();
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{parent}/task")) {
        for t in tasks.flatten() {
            kids += &std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
            kids.push(' ');
        }
    }
    kids.split_whitespace()
        .filter_map(|p| p.parse::<i32>().ok())
        .filter_map(|p| {
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
            // "pid (comm) S ...".
            let state = stat.rsplit_once(") ")?.1.chars().next()?;
            stat.contains("(corral-keeper)")
                .then_some((p, matches!(state, 'Z' | 'X')))
        })
        .collect()
}

/// This process's live keeper. The keeper is started without being waited
/// for and names itself (`corral-keeper`) once it runs: on a loaded machine
/// that can come a little after the run that started it, so this looks for
/// up to 10 s.
pub fn own_keeper() -> Option<i32> {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let live = keepers_of(std::process::id())
            .into_iter()
            .find(|k| !k.1)
            .map(|k| k.0);
        if live.is_some() || std::time::Instant::now() >= until {
            return live;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// SIGKILLs keeper `pid` through a pidfd (opened while it is this
/// process's unreaped child, so it names the keeper) and waits for its
/// death.
pub fn kill_keeper(pid: i32) {
    let fd = pidfd_open(
        Pid::from_raw(pid).expect("a keeper pid"),
        PidfdFlags::empty(),
    )
    .expect("pidfd of the keeper");
    pidfd_send_signal(&fd, Signal::KILL).expect("kill the keeper");
    let mut p = [PollFd::new(&fd, PollFlags::IN)];
    poll(&mut p, None).expect("wait for the keeper's death");
}

/// Children of this process (every thread's) that are alive (not zombies),
/// but its keeper.
pub fn live_children() -> Vec<u32> {
    let me = std::process::id();
    let keepers: Vec<i32> = keepers_of(me).into_iter().map(|k| k.0).collect();
    let mut v = Vec::new();
    for t in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let text = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
        for pid in text
            .split_whitespace()
            .filter_map(|p| p.parse::<u32>().ok())
        {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let state = stat.rsplit(") ").next().and_then(|r| r.chars().next());
            if !keepers.contains(&(pid as i32)) && !matches!(state, Some('Z') | Some('X') | None) {
                v.push(pid);
            }
        }
    }
    v
}
