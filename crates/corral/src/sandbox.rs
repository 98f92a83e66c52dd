//! The sandbox's place in a spawn ([`Command::sandbox`](crate::Command::sandbox)):
//! prepares the policy for the platform before the spawn (Linux:
//! `sys::linux_spawn::sandbox`), and after it names a failed sandbox step
//! as [`Error::Sandbox`]. Elsewhere a sandbox is refused: nothing runs.

use crate::lifecycle::Running;
use crate::spec::{ChildSetup, Sandbox};
use crate::Error;

/// The setup for a sandboxed spawn: `setup` with the prepared policy.
/// The preparation opens every path of the policy (a hung network
/// filesystem would block it): with a `bound` it runs on a thread of its
/// own and is given up at the bound ([`Error::Sandbox`], nothing runs; the
/// thread ends when the kernel lets it).
#[cfg(linux_raw)]
pub(crate) fn prepare(
    policy: &Sandbox,
    cwd: Option<&std::path::Path>,
    setup: &ChildSetup,
    bound: Option<std::time::Instant>,
) -> Result<ChildSetup, Error> {
    use crate::sys::linux_spawn::sandbox;
    sandbox::check_setup(setup, policy.allowed_writes().len())?;
    let prepared = match bound {
        None => sandbox::prepare(policy, cwd)?,
        Some(at) if at <= std::time::Instant::now() => {
            return Err(Error::Sandbox {
                reason: "the run's deadline passed before the sandbox was built".into(),
                source: None,
            })
        }
        Some(at) => {
            let (tx, rx) = std::sync::mpsc::channel();
            let policy = policy.clone();
            let cwd = cwd.map(std::path::Path::to_path_buf);
            std::thread::Builder::new()
                .name("corral-sandbox-setup".into())
                .spawn(move || {
                    let _ = tx.send(sandbox::prepare(&policy, cwd.as_deref()));
                })
                .map_err(|e| Error::Sandbox {
                    reason: "cannot start the sandbox's setup thread".into(),
                    source: Some(e),
                })?;
            let left = at.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok(r) => r?,
                Err(_) => {
                    return Err(Error::Sandbox {
                        reason: "building the sandbox did not finish within the run's deadline"
                            .into(),
                        source: None,
                    })
                }
            }
        }
    };
    Ok(ChildSetup {
        sandbox: Some(crate::spec::PreparedSandbox(std::sync::Arc::new(prepared))),
        ..setup.clone()
    })
}

/// Where no mechanism enforces a sandbox: refused, nothing runs.
#[cfg(not(linux_raw))]
pub(crate) fn prepare(
    _policy: &Sandbox,
    _cwd: Option<&std::path::Path>,
    _setup: &ChildSetup,
    _bound: Option<std::time::Instant>,
) -> Result<ChildSetup, Error> {
    Err(Error::Sandbox {
        reason: format!(
            "no sandbox mechanism is implemented on this platform ({}, {})",
            std::env::consts::OS,
            std::env::consts::ARCH
        ),
        source: None,
    })
}

/// The result of a sandboxed spawn: a child-side sandbox step that failed
/// is [`Error::Sandbox`] naming the step; a started run carries what the
/// sandbox enforced into its report.
pub(crate) fn spawned(r: Result<Running, Error>, setup: &ChildSetup) -> Result<Running, Error> {
    #[cfg(linux_raw)]
    {
        use crate::sys::linux_spawn::sandbox;
        match r {
            Ok(mut running) => {
                if let Some(p) = sandbox::Prepared::of(setup) {
                    // The refused socket(2) calls are notified to a thread
                    // of corral until the report is made.
                    use crate::sys::linux_spawn::supervisor::{unwatched, Supervisor};
                    let finish: crate::lifecycle::SandboxFinish =
                        match p.net.as_ref().and_then(Supervisor::start) {
                            Some(s) => Box::new(move |r| s.finish(r)),
                            None => Box::new(unwatched),
                        };
                    running.set_sandbox_report(p.enforced.clone(), finish);
                }
                Ok(running)
            }
            Err(e) => {
                let code = match &e {
                    Error::Spawn { source, .. } => source.raw_os_error(),
                    Error::Containment {
                        source: Some(s), ..
                    } => s.raw_os_error(),
                    _ => None,
                };
                match code.and_then(sandbox::decode) {
                    Some((step, errno)) => Err(Error::Sandbox {
                        reason: format!("the child could not {step}"),
                        source: Some(std::io::Error::from_raw_os_error(errno)),
                    }),
                    None => Err(e),
                }
            }
        }
    }
    #[cfg(not(linux_raw))]
    {
        let _ = setup;
        r
    }
}

#[cfg(test)]
mod tests {
    /// Off Linux (and on a Linux arch without the raw layer) a sandbox is
    /// refused before anything runs.
    #[cfg(not(linux_raw))]
    #[test]
    fn a_sandbox_is_refused_where_no_mechanism_enforces_it() {
        let r = super::prepare(
            &crate::Sandbox::new(),
            None,
            &crate::spec::ChildSetup::default(),
            None,
        );
        assert!(matches!(r, Err(crate::Error::Sandbox { .. })), "{r:?}");
    }

    /// A child-side failure code names its step and keeps the errno.
    #[cfg(linux_raw)]
    #[test]
    fn child_failure_codes_decode_to_their_step() {
        use crate::sys::linux_spawn::sandbox::{decode, FAIL_BASE};
        assert_eq!(decode(2), None);
        let (step, errno) = decode(FAIL_BASE + 4 * 4096 + 1).unwrap();
        assert!(step.contains("read-only"), "{step}");
        assert_eq!(errno, 1);
    }
}
