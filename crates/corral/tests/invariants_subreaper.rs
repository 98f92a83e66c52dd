//! The invariant rows (`invariant_matrix`) in the subreaper tier. The first
//! test to run makes this process a child subreaper (`enable_subreaper`,
//! process-wide, so in a binary of its own); the tests are named
//! `subreaper::<row>`.

#![cfg(target_os = "linux")]

mod invariant_matrix;

invariant_matrix::tiers! {
    subreaper => Subreaper ();
}
