//! Words for people: GNU's quoting of a name in a message, and what corral
//! says about a run that could not start. A leaf: shared by `exit`, `run`,
//! `timeout`, `json` and `mcp`.

use corral::{Error, SpawnErrorKind};

/// GNU's quoting of a name in a message, in the C locale: 'x'.
pub fn quote(s: &str) -> String {
    if s.contains('\'') {
        format!("\"{s}\"")
    } else {
        format!("'{s}'")
    }
}

/// What corral says about a run that could not start: the library's
/// message, except out of descriptors, where a shell user is told what to
/// do in the shell (`ulimit -n`) rather than which library function raises
/// the limit.
pub fn error_message(err: &Error) -> String {
    match err {
        Error::Spawn {
            kind: SpawnErrorKind::TooManyOpenFiles,
            program,
            source,
        } => format!("cannot run {program:?}: {source}{}", nofile_advice(source)),
        _ => err.full_message(),
    }
}

/// The open-file limits and what to change (Unix).
#[cfg(unix)]
fn nofile_advice(source: &std::io::Error) -> String {
    use rustix::process::{getrlimit, Resource};
    // ENFILE: the whole system's table is full, not this process's share.
    if source.raw_os_error() == Some(23) {
        return " (the system's open-file table is full: see `sysctl fs.file-max`; \
                nothing was left running)"
            .to_string();
    }
    let lim = getrlimit(Resource::Nofile);
    let show = |v: Option<u64>| v.map_or("unlimited".to_string(), |v| v.to_string());
    let raise = match (lim.current, lim.maximum) {
        (Some(soft), Some(hard)) if soft < hard => {
            format!("raise it with `ulimit -n {hard}` in the shell that runs corral")
        }
        (Some(soft), None) => {
            format!("raise it with `ulimit -n N` (N above {soft}) in the shell that runs corral")
        }
        _ => "the hard limit is reached too: raise it as root (`ulimit -Hn`, \
              limits.conf, or `LimitNOFILE=` for a service), then `ulimit -n`"
            .to_string(),
    };
    format!(
        " (open-file limit: soft {}, hard {}; every running command holds descriptors until \
         it ends; {raise}; nothing was left running)",
        show(lim.current),
        show(lim.maximum)
    )
}

#[cfg(not(unix))]
fn nofile_advice(_: &std::io::Error) -> String {
    String::new()
}
