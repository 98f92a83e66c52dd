//! The scenario matrix (`scenario_matrix`) in the subreaper tier. The first
//! test to run makes this process a child subreaper (`enable_subreaper`,
//! process-wide, so in a binary of its own); the tests are named
//! `subreaper::<scenario>`.

#![cfg(target_os = "linux")]

mod scenario_matrix;

scenario_matrix::tiers! {
    subreaper => Subreaper ();
}
