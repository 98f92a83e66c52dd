//! The scenario matrix (`scenario_matrix`) in the process-group, cgroup and
//! PID-namespace tiers: every scenario is one test per tier, named
//! `<tier>::<scenario>`, and a tier this machine lacks shows its tests as
//! ignored. The subreaper tier runs the same matrix in a binary of its own
//! (`scenarios_subreaper`), since it changes the whole test process.

#![cfg(target_os = "linux")]

mod scenario_matrix;

scenario_matrix::tiers! {
    process_group => ProcessGroup ();
    cgroup => Cgroup (cgroup);
    pid_namespace => PidNamespace (pidns);
}
