//! The pseudo-terminal (`pty_matrix`) in the subreaper tier, in a binary of
//! its own (the tier makes the whole test process a child subreaper).

#![cfg(target_os = "linux")]

mod pty_matrix;

pty_matrix::tiers! {
    subreaper => Subreaper ();
}
