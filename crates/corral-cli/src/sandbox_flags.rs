//! `--sandbox` and its policy flags, shared by `corral run` (`args`) and
//! `corral mcp` (a leaf: clap and the library's request document only).

use std::path::PathBuf;

use clap::Args;
use corral::document::SandboxSpec;

/// `--sandbox` and its policy (`corral run`, `corral mcp`).
#[derive(Args, Debug, Clone, Default, PartialEq, Eq)]
pub struct SandboxOpts {
    /// Confine the tree: everything stays readable but --deny-read paths;
    /// writes only in the working directory, a private empty /tmp (and
    /// /dev/shm), the usual devices and --allow-write paths; the network
    /// of --network; no signal or ptrace reaches a process outside the
    /// tree; no new privileges. Where the policy cannot be enforced here,
    /// nothing runs: exit 125 (sandbox_failed) naming what is missing.
    #[arg(long)]
    pub sandbox: bool,

    /// With --sandbox: also allow writes under PATH (it must exist;
    /// repeatable).
    #[arg(long, value_name = "PATH", requires = "sandbox", value_parser = existing_path)]
    pub allow_write: Vec<PathBuf>,

    /// With --sandbox: deny reading, listing and executing PATH and
    /// everything under it (it must exist; repeatable).
    #[arg(long, value_name = "PATH", requires = "sandbox", value_parser = existing_path)]
    pub deny_read: Vec<PathBuf>,

    /// With --sandbox: none (no TCP, UDP or host unix socket), loopback (a
    /// private loopback, nothing of the host's) or host (not confined)
    /// [default: none].
    #[arg(long, value_name = "NETWORK", requires = "sandbox", value_parser = parse_network)]
    pub network: Option<corral::Network>,
}

impl SandboxOpts {
    /// The policy, when --sandbox is given.
    pub fn policy(&self) -> Option<SandboxSpec> {
        self.sandbox.then(|| SandboxSpec {
            allow_write: self.allow_write.clone(),
            deny_read: self.deny_read.clone(),
            network: self.network.unwrap_or_default(),
        })
    }
}

/// A policy path: one that exists (a dangling symlink does not), made
/// absolute against corral's working directory.
fn existing_path(s: &str) -> Result<PathBuf, String> {
    let p = PathBuf::from(s);
    if s.is_empty() || std::fs::symlink_metadata(&p).is_err() || !p.exists() {
        return Err(format!(
            "{s:?} does not exist (a sandbox policy names existing paths)"
        ));
    }
    std::path::absolute(&p).map_err(|e| format!("{s:?}: {e}"))
}

/// `--network`.
fn parse_network(s: &str) -> Result<corral::Network, String> {
    s.parse()
}
