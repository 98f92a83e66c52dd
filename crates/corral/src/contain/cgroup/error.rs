//! Why the cgroup tier cannot be had for a run.

use std::io;
use std::path::PathBuf;

use super::delegated;
use super::files::CgroupFile;
use crate::contain::Mechanism;

/// Why the cgroup tier cannot be had for a run: the step that failed, in
/// words (`Display`), and the OS error behind it (`source`), if any.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CgroupError {
    /// Detection could not read a file of /proc.
    #[error("cannot read {path}")]
    Read {
        path: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("no cgroup v2 hierarchy is mounted")]
    NoV2Mount,
    #[error("this process has no cgroup v2 membership")]
    NoV2Membership,
    /// The per-command directory could not be made.
    #[error(
        "cannot create a cgroup under {} (corral needs a writable, delegated cgroup v2 subtree)",
        parent.display()
    )]
    Create {
        parent: PathBuf,
        #[source]
        source: io::Error,
    },
    /// corral's own cgroup is not a subtree delegated to this user: its
    /// directory (to make the runs' cgroups in) or its `cgroup.procs` (the
    /// kernel asks for write access to the common ancestor's `cgroup.procs`
    /// to place a process in a cgroup below it) is not writable.
    #[error(
        "cannot create a cgroup under {} ({what} is not writable by this user: corral needs a \
         delegated cgroup v2 subtree it sits in)",
        parent.display()
    )]
    NotDelegated {
        parent: PathBuf,
        what: &'static str,
        #[source]
        source: io::Error,
    },
    /// A limit needs a controller enabled for the runs' cgroups, and the
    /// kernel's "no internal processes" rule refuses it while these
    /// processes (not corral's: it moved itself aside) sit in the parent.
    #[error(
        "cannot enable the controllers a limit needs in {}: other processes sit in it (pids {pids}), \
         and the kernel enables a controller for child cgroups only in a cgroup with no process \
         of its own (start corral in a cgroup of its own: systemd-run --user --scope -p \
         Delegate=yes corral ...)",
        parent.display()
    )]
    Occupied { parent: PathBuf, pids: String },
    /// corral's own cgroup is not delegated, but a cgroup beside it is: a
    /// process can be placed only where the user may write the
    /// `cgroup.procs` of a cgroup above both where it is and where it goes.
    #[error(
        "{reason}; {} beside it is delegated to this user, but the kernel places a process \
         only below a cgroup whose cgroup.procs the user may write and that holds both where it \
         is and where it goes: start corral inside the delegated cgroup (echo $$ > {}/cgroup.procs \
         first)",
        sibling.display(),
        sibling.display()
    )]
    DelegatedBeside { reason: String, sibling: PathBuf },
    /// A v1 group for a limit could not be made.
    #[error(
        "cannot create {} (a limit here is a group in the v1 hierarchy: corral's group there must \
         be writable by this user, delegated as its cgroup v2 is)",
        dir.display()
    )]
    CreateV1 {
        dir: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot open {}", path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A limit could not be written.
    #[error("cannot set {file}")]
    SetLimit {
        file: &'static str,
        #[source]
        source: io::Error,
    },
    /// A limit was asked for a controller that is nowhere.
    #[error("the {controller} controller is available neither in cgroup v2 nor in a v1 hierarchy")]
    NoController { controller: &'static str },
}

impl CgroupError {
    /// The OS error behind it, taken out.
    fn into_source(self) -> Option<io::Error> {
        match self {
            CgroupError::Read { source, .. }
            | CgroupError::Create { source, .. }
            | CgroupError::NotDelegated { source, .. }
            | CgroupError::CreateV1 { source, .. }
            | CgroupError::Open { source, .. }
            | CgroupError::SetLimit { source, .. } => Some(source),
            CgroupError::NoV2Mount
            | CgroupError::NoV2Membership
            | CgroupError::Occupied { .. }
            | CgroupError::DelegatedBeside { .. }
            | CgroupError::NoController { .. } => None,
        }
    }
}

/// Detection's answer is kept for the life of the process and handed out
/// again: an OS error is copied by its errno (or its kind and text).
impl Clone for CgroupError {
    fn clone(&self) -> Self {
        fn copy(e: &io::Error) -> io::Error {
            match e.raw_os_error() {
                Some(code) => io::Error::from_raw_os_error(code),
                None => io::Error::new(e.kind(), e.to_string()),
            }
        }
        match self {
            CgroupError::Read { path, source } => CgroupError::Read {
                path,
                source: copy(source),
            },
            CgroupError::NoV2Mount => CgroupError::NoV2Mount,
            CgroupError::NoV2Membership => CgroupError::NoV2Membership,
            CgroupError::Create { parent, source } => CgroupError::Create {
                parent: parent.clone(),
                source: copy(source),
            },
            CgroupError::NotDelegated {
                parent,
                what,
                source,
            } => CgroupError::NotDelegated {
                parent: parent.clone(),
                what,
                source: copy(source),
            },
            CgroupError::CreateV1 { dir, source } => CgroupError::CreateV1 {
                dir: dir.clone(),
                source: copy(source),
            },
            CgroupError::Open { path, source } => CgroupError::Open {
                path: path.clone(),
                source: copy(source),
            },
            CgroupError::SetLimit { file, source } => CgroupError::SetLimit {
                file,
                source: copy(source),
            },
            CgroupError::NoController { controller } => CgroupError::NoController { controller },
            CgroupError::DelegatedBeside { reason, sibling } => CgroupError::DelegatedBeside {
                reason: reason.clone(),
                sibling: sibling.clone(),
            },
            CgroupError::Occupied { parent, pids } => CgroupError::Occupied {
                parent: parent.clone(),
                pids: pids.clone(),
            },
        }
    }
}

impl From<delegated::LeafError> for CgroupError {
    fn from(e: delegated::LeafError) -> CgroupError {
        use delegated::LeafError;
        match e {
            LeafError::Occupied { parent, pids } => CgroupError::Occupied { parent, pids },
            LeafError::NotDelegated { parent, source } => CgroupError::NotDelegated {
                parent,
                what: "its cgroup.subtree_control",
                source,
            },
            LeafError::Io { path, source } => CgroupError::Open { path, source },
            LeafError::Enable { source } => CgroupError::SetLimit {
                file: CgroupFile::SubtreeControl.name(),
                source,
            },
        }
    }
}

/// The run's error: the step as the reason, the OS error as the source.
impl From<CgroupError> for crate::Error {
    fn from(e: CgroupError) -> crate::Error {
        let reason = e.to_string();
        match e.into_source() {
            Some(source) => crate::Error::containment_io(Mechanism::Cgroup, reason, source),
            None => crate::Error::containment(Mechanism::Cgroup, reason),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_keep_the_os_error_as_the_source() {
        use std::error::Error as _;
        let e = CgroupError::Create {
            parent: PathBuf::from("/sys/fs/cgroup/x"),
            source: io::Error::from_raw_os_error(13),
        };
        // The cached detection hands out copies: the errno survives.
        let copy = e.clone();
        let os = copy.source().and_then(|s| s.downcast_ref::<io::Error>());
        assert_eq!(os.and_then(io::Error::raw_os_error), Some(13));
        let note = crate::error::chain_text(&e);
        assert!(note.starts_with("cannot create a cgroup under /sys/fs/cgroup/x (corral needs a writable, delegated cgroup v2 subtree): "), "{note}");
        match crate::Error::from(e) {
            err @ crate::Error::Containment { .. } => {
                let text = err.to_string();
                assert!(
                    text.contains("cannot create a cgroup under /sys/fs/cgroup/x"),
                    "{text}"
                );
                let os = err.source().and_then(|s| s.downcast_ref::<io::Error>());
                assert_eq!(os.and_then(io::Error::raw_os_error), Some(13));
                let crate::Error::Containment {
                    mechanism, reason, ..
                } = err
                else {
                    unreachable!()
                };
                assert_eq!(mechanism, Mechanism::Cgroup);
                assert!(
                    !reason.contains("os error"),
                    "the OS error is the source, not the reason: {reason}"
                );
            }
            other => panic!("{other:?}"),
        }
        let missing = crate::Error::from(CgroupError::NoController { controller: "pids" });
        assert!(missing.source().is_none());
        assert!(missing
            .to_string()
            .contains("the pids controller is available neither"));
    }
}
