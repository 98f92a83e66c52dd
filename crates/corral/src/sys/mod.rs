//! The platform layer: one module per OS family with the same small set of
//! items (`Root`, `PipeEnd`, `Poller`, `pipe`, ...), chosen at compile time.

#[cfg(unix)]
mod unix;
#[cfg(unix)]
pub(crate) use unix::*;
