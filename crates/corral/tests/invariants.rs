//! The invariant rows (`invariant_matrix`) of promise 3, "never the wrong
//! process", in the process-group, cgroup and PID-namespace tiers: one test
//! per row and tier, named `<tier>::<row>`; a tier this machine lacks shows
//! its tests as ignored. The subreaper tier runs the same rows in a binary
//! of its own (`invariants_subreaper`), since it changes the whole test
//! process.

#![cfg(target_os = "linux")]

mod invariant_matrix;

invariant_matrix::tiers! {
    process_group => ProcessGroup ();
    cgroup => Cgroup (cgroup);
    pid_namespace => PidNamespace (pidns);
}
