//! Cancellation from another thread.

use std::sync::{Arc, Mutex, Weak};

use crate::Signal;

/// Something that wakes a supervising loop. Implemented by the platform
/// layer (a pipe on Unix, an event on Windows).
pub(crate) trait Wake: Send + Sync {
    fn wake(&self);
}

#[derive(Default)]
struct State {
    /// `Some(first signal override)` once cancelled.
    cancelled: Option<Option<Signal>>,
    /// The cancellation is the deadline come early ([`CancelToken::expire`]).
    expired: bool,
    /// The runs to wake. A token of its own (the usual case) wakes one
    /// run: it is kept here, with no allocation (figure 5); a shared
    /// token's others go to `more`.
    first: Option<Weak<dyn Wake>>,
    #[allow(clippy::box_collection)] // 8 bytes, not a `Vec`'s 24
    more: Option<Box<Vec<Weak<dyn Wake>>>>,
}

/// A handle that cancels one or many runs, from any thread.
///
/// Cancelling is idempotent: the first call wins, later calls do nothing.
/// Whatever the number of callers, the supervising thread alone decides and
/// sends the signals, so one cancellation sends at most one SIGKILL to a
/// tree. A token cancelled before [`Command::spawn`](crate::Command::spawn)
/// makes the spawn return [`Error::CancelledBeforeSpawn`](crate::Error)
/// without starting anything.
#[derive(Clone, Default)]
pub struct CancelToken {
    inner: Arc<Mutex<State>>,
}

impl std::fmt::Debug for CancelToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CancelToken")
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

impl CancelToken {
    /// A new token, not cancelled.
    pub fn new() -> Self {
        Self::default()
    }

    /// Cancels every run that uses this token. The grace rule applies: the
    /// command's first signal, then SIGKILL when the grace ends.
    pub fn cancel(&self) {
        self.cancel_inner(None, false)
    }

    /// Cancels with `signal` as the first signal instead of the command's
    /// own (a CLI passing on the signal it received uses this).
    pub fn cancel_with(&self, signal: Signal) {
        self.cancel_inner(Some(signal), false)
    }

    /// The deadline of every run that uses this token has come, early: each
    /// ends as at its own deadline (the command's first signal and grace,
    /// or nothing with [`Command::silent_deadline`](crate::Command::silent_deadline)),
    /// and its outcome is [`Outcome::TimedOut`](crate::Outcome::TimedOut) with
    /// [`TimeoutKind::Deadline`](crate::TimeoutKind::Deadline), not
    /// `Cancelled` (GNU `timeout` takes a SIGALRM so). Like a cancellation
    /// otherwise: the first call of `cancel`, `cancel_with` or `expire`
    /// wins, and before the spawn it stops the spawn.
    pub fn expire(&self) {
        self.cancel_inner(None, true)
    }

    fn cancel_inner(&self, signal: Option<Signal>, expired: bool) {
        let wakers = {
            let mut st = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            if st.cancelled.is_some() {
                return;
            }
            st.cancelled = Some(signal);
            st.expired = expired;
            let first = st.first.take();
            let more = st.more.take().map_or_else(Vec::new, |v| *v);
            first.into_iter().chain(more)
        };
        for w in wakers.filter_map(|w| w.upgrade()) {
            w.wake();
        }
    }

    /// Whether [`cancel`](Self::cancel) was called.
    pub fn is_cancelled(&self) -> bool {
        self.state().is_some()
    }

    /// `None` if not cancelled, else `Some(signal override)`.
    pub(crate) fn state(&self) -> Option<Option<Signal>> {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .cancelled
    }

    /// Whether the cancellation was an [`expire`](Self::expire).
    pub(crate) fn expired(&self) -> bool {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).expired
    }

    /// Registers a waker to be woken on cancellation. Returns whether the
    /// token is already cancelled (then the waker is not kept).
    pub(crate) fn register(&self, waker: &Arc<dyn Wake>) -> bool {
        let mut st = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if st.cancelled.is_some() {
            return true;
        }
        // Wakers of runs that have ended go (a token shared by many runs,
        // one after the other, does not grow without end).
        if st.first.as_ref().is_some_and(|w| w.strong_count() == 0) {
            st.first = None;
        }
        if let Some(more) = st.more.as_mut() {
            more.retain(|w| w.strong_count() > 0);
        }
        let w = Arc::downgrade(waker);
        if st.first.is_none() {
            st.first = Some(w);
        } else {
            st.more.get_or_insert_with(Default::default).push(w);
        }
        false
    }
}
