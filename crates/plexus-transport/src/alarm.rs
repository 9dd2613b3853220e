//! The deadline timer of the UDP socket task, kept off the reactor's wait.
//!
//! A tokio `Sleep` turns every park of the runtime into an `epoll_wait` with
//! a timeout, and the kernel arms a high-resolution timer for each such
//! wait and cancels it when the wait ends early. The socket task of a busy
//! endpoint parks between every request and its reply while its peers'
//! stack timers (a delivery layer's delayed ack and retransmission timeout)
//! are nearly always pending, so every park paid for arming and cancelling
//! a kernel timer. On a virtual machine that is a trap to the hypervisor
//! each: in W1 with 16 pongs over `udp`, 3.5 µs of system time per round
//! trip, a tenth of all the CPU the exchange takes (docs/benchmarks.md).
//!
//! On Linux an [`Alarm`] is a `timerfd` registered with the reactor. Once
//! armed it stays armed across parks, and the reactor waits without a
//! timeout (unless some other tokio timer is pending). It is also lazy:
//! [`Alarm::arm_by`] only ever moves it earlier. An owner whose deadline
//! keeps moving later (every reply moves the retransmission timeout on)
//! lets the alarm ring at the earlier time, finds nothing due, and arms it
//! again: one `timerfd_settime` per timer period instead of a kernel timer
//! per park. **An owner must expect rings before its deadline** and check
//! what is due.
//!
//! The timerfd runs on the OS clock. Where tokio's clock is not that clock
//! (paused or advanced by `tokio::time::pause` in a test), where there is no
//! timerfd, or when none can be had (out of descriptors), an alarm is a
//! tokio `Sleep` on tokio's clock, with the same lazy semantics.
//!
//! One descriptor per alarm: fine for one socket task per UDP endpoint. The
//! stream drivers (one per connection) keep a tokio `Sleep`, so a link does
//! not cost two descriptors.

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Instant;

/// A one-shot timer that rings no later than the earliest time it was
/// armed for, and possibly earlier than a later deadline asked since. See
/// the [module docs](self).
#[derive(Default)]
pub(crate) struct Alarm {
    clock: Option<Clock>,
    /// When it rings, while armed.
    armed: Option<Instant>,
}

enum Clock {
    #[cfg(target_os = "linux")]
    TimerFd(timerfd::Timer),
    Sleep(Pin<Box<tokio::time::Sleep>>),
}

impl Alarm {
    /// An alarm that is not armed. It takes no descriptor until first armed.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// An alarm on a tokio `Sleep` even where a timerfd could be had.
    #[cfg(test)]
    fn on_tokio_sleep() -> Self {
        Self {
            clock: Some(Clock::sleep(Instant::now())),
            armed: None,
        }
    }

    /// Whether it is armed (then [`ring`](Self::ring) resolves).
    pub(crate) fn is_armed(&self) -> bool {
        self.armed.is_some()
    }

    /// Makes the alarm ring no later than `at`: arms it for `at` unless it
    /// is armed for that time or earlier already.
    ///
    /// Needs a tokio runtime with I/O and time enabled.
    pub(crate) fn arm_by(&mut self, at: Instant) {
        if self.armed.is_some_and(|armed| armed <= at) {
            return;
        }
        self.armed = Some(at);
        match self.clock.get_or_insert_with(Clock::new) {
            #[cfg(target_os = "linux")]
            Clock::TimerFd(timer) => {
                if !tokio_clock_is_os_clock() {
                    tracing::debug!(target: "plexus::transport", "tokio's clock is paused or advanced; a tokio timer instead");
                    self.clock = Some(Clock::sleep(at));
                } else if let Err(error) = timer.set(at) {
                    // EINVAL for a deadline beyond what a timespec holds.
                    tracing::debug!(target: "plexus::transport", %error, "timerfd: cannot arm; a tokio timer instead");
                    self.clock = Some(Clock::sleep(at));
                }
            }
            Clock::Sleep(sleep) => sleep.as_mut().reset(at.into()),
        }
    }

    /// Ready once the armed time has come; the alarm is then no longer
    /// armed. Pending while it is not armed (without a waker: arm it from
    /// the task that polls it).
    pub(crate) fn poll_ring(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let Some(at) = self.armed else {
            return Poll::Pending;
        };
        // Armed means a clock was set up; should that ever not hold, a
        // timer for the armed time keeps the promise to ring.
        match self.clock.get_or_insert_with(|| Clock::sleep(at)) {
            #[cfg(target_os = "linux")]
            Clock::TimerFd(timer) => match ready!(timer.poll_expired(cx)) {
                Ok(()) => {}
                Err(error) => {
                    // The reactor lost the descriptor: nothing would wake
                    // us for it again.
                    tracing::debug!(target: "plexus::transport", %error, "timerfd failed; a tokio timer instead");
                    self.clock = Some(Clock::sleep(at));
                    return self.poll_ring(cx);
                }
            },
            Clock::Sleep(sleep) => ready!(sleep.as_mut().poll(cx)),
        }
        self.armed = None;
        Poll::Ready(())
    }

    /// Resolves once the armed time has come (see
    /// [`poll_ring`](Self::poll_ring)).
    pub(crate) async fn ring(&mut self) {
        poll_fn(|cx| self.poll_ring(cx)).await;
    }
}

/// Whether tokio's clock reads the OS clock (it does unless a test paused
/// or advanced it): the timerfd counts on the latter, deadlines come in
/// the former.
#[cfg(target_os = "linux")]
fn tokio_clock_is_os_clock() -> bool {
    let (tokio, os) = (tokio::time::Instant::now().into_std(), Instant::now());
    let apart = os
        .saturating_duration_since(tokio)
        .max(tokio.saturating_duration_since(os));
    apart < std::time::Duration::from_millis(1)
}

impl Clock {
    fn new() -> Clock {
        #[cfg(target_os = "linux")]
        match timerfd::Timer::new() {
            Ok(timer) => return Clock::TimerFd(timer),
            Err(error) => {
                tracing::debug!(target: "plexus::transport", %error, "no timerfd; a tokio timer instead")
            }
        }
        Clock::sleep(Instant::now())
    }

    fn sleep(at: Instant) -> Clock {
        Clock::Sleep(Box::pin(tokio::time::sleep_until(at.into())))
    }
}

#[cfg(target_os = "linux")]
mod timerfd {
    use std::io;
    use std::os::fd::{AsFd, AsRawFd, RawFd};
    use std::task::{ready, Context, Poll};
    use std::time::{Duration, Instant};

    use nix::sys::time::TimeSpec;
    use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
    use tokio::io::unix::AsyncFd;
    use tokio::io::Interest;

    use crate::udp::socket::register;

    /// A `CLOCK_MONOTONIC` timerfd (the clock of `std::time::Instant`)
    /// registered for reading.
    pub(super) struct Timer(AsyncFd<Fd>);

    /// `AsyncFd` wants `AsRawFd`, which nix's `TimerFd` leaves out. It owns
    /// the descriptor, as [`register`] asks.
    struct Fd(TimerFd);

    impl AsRawFd for Fd {
        fn as_raw_fd(&self) -> RawFd {
            self.0.as_fd().as_raw_fd()
        }
    }

    impl Timer {
        pub(super) fn new() -> io::Result<Timer> {
            let flags = TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC;
            let fd = TimerFd::new(ClockId::CLOCK_MONOTONIC, flags)?;
            Ok(Timer(register(Fd(fd), Interest::READABLE)?))
        }

        /// Arms it for `at`, replacing what it was armed for. Relative to
        /// now: `Instant` does not expose the clock's absolute reading.
        pub(super) fn set(&self, at: Instant) -> io::Result<()> {
            // A zero expiration would disarm it.
            let after = at
                .saturating_duration_since(Instant::now())
                .max(Duration::from_nanos(1));
            let expiration = Expiration::OneShot(TimeSpec::from_duration(after));
            self.0
                .get_ref()
                .0
                .set(expiration, TimerSetTimeFlags::empty())?;
            Ok(())
        }

        /// Ready once it has expired since last armed. Re-arming resets the
        /// count of expirations, so a stale readiness reads nothing and is
        /// cleared.
        pub(super) fn poll_expired(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            loop {
                let mut guard = ready!(self.0.poll_read_ready(cx))?;
                let read = guard.try_io(|fd| {
                    let mut count = [0u8; 8];
                    nix::unistd::read(fd.get_ref().0.as_fd(), &mut count)?;
                    Ok(())
                });
                if let Ok(result) = read {
                    // One-shot: nothing more to read until armed again, and
                    // that expiry is a new event. Without this the next
                    // poll would read in vain to learn it.
                    if result.is_ok() {
                        guard.clear_ready();
                    }
                    return Poll::Ready(result);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// An alarm on a timerfd (where there is one) and one on a tokio sleep.
    fn both() -> [Alarm; 2] {
        [Alarm::new(), Alarm::on_tokio_sleep()]
    }

    /// Rings within `limit`, or fails the test (instead of hanging it).
    async fn rings_within(alarm: &mut Alarm, limit: Duration) {
        tokio::time::timeout(limit, alarm.ring())
            .await
            .expect("the alarm rings");
    }

    #[tokio::test]
    async fn on_linux_the_alarm_is_a_timerfd() {
        let mut alarm = Alarm::new();
        alarm.arm_by(Instant::now() + Duration::from_secs(1));
        #[cfg(target_os = "linux")]
        assert!(matches!(alarm.clock, Some(Clock::TimerFd(_))));
    }

    #[tokio::test]
    async fn rings_at_the_armed_time_not_before() {
        for mut alarm in both() {
            let start = Instant::now();
            alarm.arm_by(start + Duration::from_millis(30));
            assert!(alarm.is_armed());
            rings_within(&mut alarm, Duration::from_secs(5)).await;
            assert!(start.elapsed() >= Duration::from_millis(30)); // timing-ok: never early
            assert!(!alarm.is_armed(), "a ring disarms it");
        }
    }

    #[tokio::test]
    async fn a_later_deadline_leaves_the_earlier_one() {
        for mut alarm in both() {
            let start = Instant::now();
            alarm.arm_by(start + Duration::from_millis(20));
            alarm.arm_by(start + Duration::from_secs(30));
            rings_within(&mut alarm, Duration::from_secs(5)).await;
        }
    }

    #[tokio::test]
    async fn an_earlier_deadline_moves_it() {
        for mut alarm in both() {
            let start = Instant::now();
            alarm.arm_by(start + Duration::from_secs(30));
            alarm.arm_by(start + Duration::from_millis(20));
            rings_within(&mut alarm, Duration::from_secs(5)).await;
        }
    }

    #[tokio::test]
    async fn rearmed_after_a_ring_it_waits_again() {
        for mut alarm in both() {
            alarm.arm_by(Instant::now());
            rings_within(&mut alarm, Duration::from_secs(5)).await;
            let start = Instant::now();
            alarm.arm_by(start + Duration::from_millis(40));
            rings_within(&mut alarm, Duration::from_secs(5)).await;
            assert!(start.elapsed() >= Duration::from_millis(40)); // timing-ok: never early
        }
    }

    #[tokio::test]
    async fn a_ring_nobody_polled_for_is_kept() {
        for mut alarm in both() {
            alarm.arm_by(Instant::now() + Duration::from_millis(5));
            // Expires while the owner is busy elsewhere.
            std::thread::sleep(Duration::from_millis(30)); // timing-ok: busy past the deadline
            tokio::task::yield_now().await;
            rings_within(&mut alarm, Duration::from_secs(5)).await;
        }
    }

    #[tokio::test]
    async fn unarmed_it_never_rings() {
        for mut alarm in both() {
            let rang = tokio::time::timeout(Duration::from_millis(50), alarm.ring()).await;
            assert!(rang.is_err());
            // Armed in the past and rung, it does not ring again.
            alarm.arm_by(Instant::now());
            rings_within(&mut alarm, Duration::from_secs(5)).await;
            let rang = tokio::time::timeout(Duration::from_millis(50), alarm.ring()).await;
            assert!(rang.is_err());
        }
    }

    /// A test that pauses tokio's clock drives the alarm with it: deadlines
    /// come from that clock, which the timerfd does not follow.
    #[tokio::test(start_paused = true)]
    async fn a_paused_tokio_clock_drives_it() {
        let start = tokio::time::Instant::now();
        tokio::time::advance(Duration::from_secs(60)).await;
        let mut alarm = Alarm::new();
        alarm.arm_by((tokio::time::Instant::now() + Duration::from_secs(3600)).into_std());
        // Paused, the runtime jumps to the next timer once idle: an hour
        // of tokio's clock passes at once (a timerfd armed for an hour of
        // real time would not ring within the two of tokio's).
        rings_within(&mut alarm, Duration::from_secs(7200)).await;
        assert!(start.elapsed() >= Duration::from_secs(3660)); // timing-ok: paused clock
    }
}
