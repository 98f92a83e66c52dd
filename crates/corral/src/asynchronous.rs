//! The async API (feature `tokio`, Unix).
//!
//! The same [`Command`] and [`Report`], awaited: [`Command::spawn_async`]
//! returns an [`AsyncRunning`] future. It drives the very same lifecycle
//! state machine as [`Running::wait`](crate::Running::wait) (`Life::advance`),
//! only the sleeping differs: instead of one `poll(2)` per command, the
//! command's descriptors (the root's pidfd, its pipes) are registered with
//! the tokio reactor and the timers come from tokio, so any number of
//! commands costs no thread of its own. A wake-up from another thread
//! (cancel, a signal request, relay back-pressure) wakes the task directly:
//! no descriptor is made for it.
//!
//! Descriptors per command: the pidfd, plus one per captured stream (and
//! stdin's pipe while it is fed), plus the containment's own (the cgroup
//! tier keeps its directory open). Each is registered
//! as it is, not duplicated: the lifecycle and the registration share it
//! (`sys::SharedFd`), so it is closed only once both let go. Order matters
//! for a reactor: deregistering a number that was closed and reused by
//! another registration would silence that one; a shared descriptor cannot
//! be closed while registered.
//!
//! Readiness from the reactor is only a wake-up call: after every wake-up a
//! zero-timeout `poll(2)` over the command's descriptors says what is really
//! ready (the same code as the synchronous driver), so no edge is ever lost.
//!
//! Dropping the future before it completes cancels the run: SIGKILL is
//! sent to the whole tree before the drop returns (no grace: nobody is left
//! to wait for it, and the host may leave `main` at once), then the death
//! is confirmed and the root reaped in the background (a tokio task, or a
//! thread when no runtime is running). A host that exits right after the
//! drop leaves nothing behind.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use crate::cancel::CancelToken;
use crate::lifecycle::{Life, SignalRequests};
use crate::sys::SharedFd;
use crate::{Command, Error, Report, Signal};

impl Command {
    /// Starts the command for the async API. The deadline counts from now.
    /// Must be called inside a tokio runtime with I/O and time enabled.
    pub fn spawn_async(&mut self) -> Result<AsyncRunning, Error> {
        let running = self.spawn()?;
        let id = running.id();
        let cancel = running.cancel_token();
        let life = running.into_life();
        let signals = life.signal_requests();
        Ok(AsyncRunning {
            id,
            cancel,
            signals,
            fut: Box::pin(drive(Guard {
                life: Some(life),
                background: false,
            })),
        })
    }

    /// Spawns and awaits.
    pub async fn run_async(&mut self) -> Result<Report, Error> {
        Ok(self.spawn_async()?.await)
    }
}

/// A running command for the async API: a future of its [`Report`].
///
/// Dropping it before it completes cancels the run: the whole tree is sent
/// SIGKILL before the drop returns (without the grace), and its death is
/// confirmed and the root reaped in the background.
#[must_use = "dropping an AsyncRunning cancels the run and kills its whole tree; await it"]
pub struct AsyncRunning {
    id: u32,
    cancel: CancelToken,
    /// Queues a signal and wakes the run, through its wake cell.
    signals: SignalRequests,
    fut: Pin<Box<dyn Future<Output = Report> + Send>>,
}

impl std::fmt::Debug for AsyncRunning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncRunning")
            .field("id", &self.id)
            .finish()
    }
}

impl AsyncRunning {
    /// The root's process id.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Cancels the run (idempotent).
    pub fn cancel(&self) {
        self.cancel.cancel();
    }

    /// A token that cancels this run from anywhere.
    pub fn cancel_token(&self) -> CancelToken {
        self.cancel.clone()
    }

    /// Asks for `sig` to be sent to the whole tree through the containment's
    /// identity, as [`Running::signal`](crate::Running::signal) does. The
    /// future carries it out at its next step (it is woken for it), while
    /// the identity is held; a request that arrives once the run has ended
    /// is dropped, never sent after the release. An OS error sending it is
    /// reported as the report's cleanup error.
    pub fn signal(&self, sig: Signal) {
        self.signals.push(sig);
    }
}

impl Future for AsyncRunning {
    type Output = Report;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Report> {
        self.fut.as_mut().poll(cx)
    }
}

/// Owns the lifecycle while it is driven; if the future is dropped midway,
/// cancels and finishes it in the background.
struct Guard {
    /// Boxed, not inline: an `async fn` keeps its argument and the local it
    /// moves into apart, so a `Life` inline would be in the driver's
    /// future twice (measured: 1,367 bytes against 104 + 640).
    life: Option<Box<Life>>,
    /// This guard already is the background continuation of a dropped run.
    /// If it is dropped too (its runtime is shutting down), the rest of the
    /// run goes to a thread: re-spawning onto a closed runtime would drop
    /// the task at once, and again, without end.
    background: bool,
}

impl Drop for Guard {
    fn drop(&mut self) {
        let Some(mut life) = self.life.take() else {
            return;
        };
        // SIGKILL reaches the whole tree before the drop returns: the host
        // may leave `main` right after (a `select!` that lost), and then no
        // task or thread started here would run.
        if !self.background {
            life.kill_now();
        }
        let on_thread = |life: Box<Life>| {
            let _ = std::thread::Builder::new()
                .name("corral-cleanup".into())
                .spawn(move || drop(life.run_to_end()));
        };
        if self.background {
            on_thread(life);
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(h) => {
                h.spawn(drive(Guard {
                    life: Some(life),
                    background: true,
                }));
            }
            Err(_) => on_thread(life),
        }
    }
}

/// One registered descriptor: the lifecycle's own, shared with it (see
/// the module docs).
struct Reg {
    fd: AsyncFd<SharedFd>,
    /// Which lifecycle descriptor this is (to let go of it when the
    /// lifecycle closes it: the shared pipe end would stay open otherwise).
    slot: Slot,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Slot {
    Root,
    Out(usize),
    Stdin,
}

fn register(fd: &SharedFd, slot: Slot, interest: Interest) -> io::Result<Reg> {
    // SAFETY: the AsyncFd owns a reference to the descriptor (an
    // `Arc<OwnedFd>`), so it stays open and refers to the same file
    // description for the AsyncFd's whole life, whatever the lifecycle does
    // with its own reference; `as_raw_fd` of an Arc<OwnedFd> always returns
    // that same number, and nothing closes an OwnedFd but its drop.
    let fd = unsafe { AsyncFd::register_with_interest(fd.clone(), interest) }
        .map_err(io::Error::from)?;
    Ok(Reg { fd, slot })
}

async fn drive(mut guard: Guard) -> Report {
    let mut regs = Regs {
        root: None,
        rest: None,
    };
    let mut registered = false;
    loop {
        let life = guard.life.as_mut().expect("guard holds the lifecycle");
        match life.advance_looking_ahead() {
            Some(true) => break,
            Some(false) => {}
            None => {
                // A look shared with other runs is under way (bounded: one
                // pass of /proc); it wakes the cell when it is over. A
                // cancel or signal request wakes it too, and is taken by
                // the step after.
                Woken(life.wake_cell()).await;
                continue;
            }
        }
        if !registered {
            registered = true;
            match register_all(life) {
                Ok(r) => regs = r,
                Err(e) => life.wait_failed(e),
            }
        }
        // Let go of the descriptors the lifecycle has closed.
        if regs.root.as_ref().is_some_and(|r| !life.slot_open(r.slot)) {
            regs.root = None;
        }
        if let Some(rest) = regs.rest.as_mut() {
            rest.retain(|r| life.slot_open(r.slot));
        }
        // Ground truth, without sleeping: the synchronous driver's poll with
        // a zero timeout.
        if life.poll_now() {
            continue;
        }
        let timeout = life.next_wake(Instant::now());
        let sleep = timeout.map(|d| tokio::time::sleep(d.max(Duration::from_micros(50))));
        WaitAny {
            woken: life.wake_cell(),
            regs: &regs,
            sleep: sleep.map(Box::pin),
        }
        .await;
        // What woke us is looked at before the next step decides: a timer
        // that fires together with the root's exit must not decide on an
        // exit not yet seen (the step would count the dead root as alive).
        let life = guard.life.as_mut().expect("guard holds the lifecycle");
        life.poll_now();
    }
    drop(regs);
    let life = guard.life.take().expect("guard holds the lifecycle");
    life.into_report()
}

/// A run's registrations: the root's held in the driver's future itself
/// (a run whose output goes elsewhere has no other, and no allocation for
/// them: figure 5), the pipes' in a `Vec` made for the ones there are.
struct Regs {
    root: Option<Reg>,
    // Boxed: 8 bytes in the future where a `Vec` is 24 (figure 5).
    #[allow(clippy::box_collection)]
    rest: Option<Box<Vec<Reg>>>,
}

impl Regs {
    fn iter(&self) -> impl Iterator<Item = &Reg> {
        self.root
            .iter()
            .chain(self.rest.iter().flat_map(|v| v.iter()))
    }
}

fn register_all(life: &Life) -> io::Result<Regs> {
    // Room for exactly the descriptors there are, not for the three there
    // may be.
    let count = (0..2).filter(|&i| life.output_fd(i).is_some()).count()
        + usize::from(life.stdin_fd().is_some());
    let mut regs = Regs {
        root: None,
        rest: (count > 0).then(|| Box::new(Vec::with_capacity(count))),
    };
    if let Some(fd) = life.root_fd() {
        regs.root = Some(register(fd, Slot::Root, Interest::READABLE)?);
    }
    for i in 0..2 {
        if let Some(fd) = life.output_fd(i) {
            let reg = register(fd, Slot::Out(i), Interest::READABLE)?;
            regs.rest.get_or_insert_with(Default::default).push(reg);
        }
    }
    if let Some(fd) = life.stdin_fd() {
        let reg = register(fd, Slot::Stdin, Interest::WRITABLE)?;
        regs.rest.get_or_insert_with(Default::default).push(reg);
    }
    Ok(regs)
}

/// Completes when a waker fired.
struct Woken<'a>(&'a crate::sys::WakeCell);

impl Future for Woken<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match self.0.poll_woken(cx) {
            true => Poll::Ready(()),
            false => Poll::Pending,
        }
    }
}

/// Completes when a waker fired, any registered descriptor reports
/// readiness or the timer fires. Readiness is cleared as it is seen: the
/// zero-timeout poll after the wake-up decides what is really ready.
struct WaitAny<'a> {
    woken: &'a crate::sys::WakeCell,
    regs: &'a Regs,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Future for WaitAny<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut woke = self.woken.poll_woken(cx);
        for r in self.regs.iter() {
            let ready = if r.slot == Slot::Stdin {
                r.fd.poll_write_ready(cx)
            } else {
                r.fd.poll_read_ready(cx)
            };
            if let Poll::Ready(res) = ready {
                if let Ok(mut g) = res {
                    g.clear_ready();
                }
                woke = true;
            }
        }
        if let Some(s) = self.sleep.as_mut() {
            if s.as_mut().poll(cx).is_ready() {
                woke = true;
            }
        }
        if woke {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

impl Life {
    /// Whether the lifecycle descriptor mirrored by `slot` is still open.
    fn slot_open(&self, slot: Slot) -> bool {
        match slot {
            Slot::Root => self.root_fd().is_some(),
            Slot::Out(i) => self.output_fd(i).is_some(),
            Slot::Stdin => self.stdin_fd().is_some(),
        }
    }
}
