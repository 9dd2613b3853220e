//! [`Forwarder`]: the thin driver that moves packets between the two TUN
//! devices through one [`LinkModel`] per direction.
//!
//! It runs on its own thread with a current-thread tokio runtime. Tokio's
//! timer has a 1 ms granularity, so the driver sleeps with tokio until 2 ms
//! before the next departure, and then in blocking steps of 100 µs, reading
//! the TUNs without blocking after each step: packets leave within about
//! 100 µs of their time and are time-stamped within about 100 µs of their
//! arrival. The cost is up to 20 wake-ups per departure.
//!
//! [`Forwarder::set_config`] changes the settings while it runs (cut the
//! link with 100 % loss, heal it again): the driver hands them to both
//! models at its next wake-up, and they apply to packets arriving from then
//! on.

use std::io;
use std::time::{Duration, Instant};

use tokio::runtime::Runtime;
use tokio::sync::{mpsc, oneshot};
use tokio_tun::Tun;

use crate::config::LinkConfig;
use crate::model::{LinkModel, LinkStats};
use crate::netns::SetupError;

/// Below this, the driver sleeps precisely instead of on tokio's timer
/// (which rounds up to whole milliseconds, and epoll once more).
const FINE: Duration = Duration::from_millis(2);
/// Longest blocking sleep of the precise phase.
const STEP: Duration = Duration::from_micros(100);
/// Largest IP packet a TUN hands out.
const MAX_PACKET: usize = 65_536;
/// Packets read in one go before the driver looks at its timers again.
const READ_BATCH: usize = 64;

/// The forwarder is no longer running, so new settings cannot apply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the link's forwarder has stopped; the new settings were not applied")]
#[non_exhaustive]
pub struct ForwarderStopped;

/// The forwarding thread of a link.
pub struct Forwarder {
    stop: Option<oneshot::Sender<()>>,
    configs: mpsc::UnboundedSender<LinkConfig>,
    thread: Option<std::thread::JoinHandle<io::Result<[LinkStats; 2]>>>,
    failed: Option<oneshot::Receiver<String>>,
    reason: Option<String>,
}

impl Forwarder {
    /// Starts forwarding between `tun_a` and `tun_b` (created inside `rt`).
    ///
    /// # Errors
    /// If the thread cannot be spawned.
    pub fn start(
        rt: Runtime,
        tun_a: Tun,
        tun_b: Tun,
        config: LinkConfig,
    ) -> Result<Forwarder, SetupError> {
        let (stop_tx, stop_rx) = oneshot::channel();
        let (fail_tx, fail_rx) = oneshot::channel();
        let (configs, configs_rx) = mpsc::unbounded_channel();
        let ab = LinkModel::new(config.a_to_b, config.seed);
        let ba = LinkModel::new(config.b_to_a, config.seed ^ 0x9e37_79b9_7f4a_7c15);
        let thread = std::thread::Builder::new()
            .name("linkem-forwarder".into())
            .spawn(move || {
                let res = rt.block_on(forward(&tun_a, &tun_b, ab, ba, stop_rx, configs_rx));
                if let Err(e) = &res {
                    let _ = fail_tx.send(format!("the forwarder stopped: {e}"));
                }
                res
            })
            .map_err(|source| SetupError::Io {
                what: "starting the forwarder thread".into(),
                source,
            })?;
        Ok(Forwarder {
            stop: Some(stop_tx),
            configs,
            thread: Some(thread),
            failed: Some(fail_rx),
            reason: None,
        })
    }

    /// Changes the settings of both directions while the link runs; they
    /// apply to packets arriving from the forwarder's next wake-up on
    /// (packets in flight keep their times). `config.seed` is not used:
    /// the RNGs go on where they are.
    ///
    /// # Errors
    /// [`ForwarderStopped`] if the forwarder thread has ended.
    pub fn set_config(&self, config: LinkConfig) -> Result<(), ForwarderStopped> {
        self.configs.send(config).map_err(|_| ForwarderStopped)
    }

    /// Resolves with the reason when the forwarder stopped on an error.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn failed(&mut self) -> String {
        if let Some(rx) = self.failed.as_mut() {
            match rx.await {
                Ok(reason) => self.reason = Some(reason),
                Err(_) => std::future::pending::<()>().await,
            }
            self.failed = None;
        }
        match &self.reason {
            Some(r) => r.clone(),
            None => std::future::pending().await,
        }
    }

    /// Stops the thread (closing the TUN devices) and returns the a→b and
    /// b→a counters.
    ///
    /// # Errors
    /// The I/O error that stopped the forwarder earlier, if any.
    pub fn stop(mut self) -> io::Result<[LinkStats; 2]> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(res)) => res,
            Some(Err(_)) => Err(io::Error::other("the forwarder thread panicked")),
            None => Ok(Default::default()),
        }
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The driver loop: deliver what is due, then wait for a packet or the next
/// departure.
async fn forward(
    a: &Tun,
    b: &Tun,
    mut ab: LinkModel,
    mut ba: LinkModel,
    mut stop: oneshot::Receiver<()>,
    mut configs: mpsc::UnboundedReceiver<LinkConfig>,
) -> io::Result<[LinkStats; 2]> {
    let apply = |c: LinkConfig, ab: &mut LinkModel, ba: &mut LinkModel| {
        ab.set_config(c.a_to_b);
        ba.set_config(c.b_to_a);
    };
    let mut buf_a = vec![0u8; MAX_PACKET];
    let mut buf_b = vec![0u8; MAX_PACKET];
    loop {
        let now = Instant::now();
        deliver(&mut ab, now, b);
        deliver(&mut ba, now, a);
        let next = match (ab.poll_timeout(), ba.poll_timeout()) {
            (Some(x), Some(y)) => Some(x.min(y)),
            (x, y) => x.or(y),
        };
        if let Some(t) = next {
            let left = t.saturating_duration_since(Instant::now());
            if left <= FINE {
                // Precise phase: short blocking sleeps, reading whatever
                // arrived in between so that arrival times stay exact to
                // about one STEP.
                std::thread::sleep(left.min(STEP));
                while let Ok(c) = configs.try_recv() {
                    apply(c, &mut ab, &mut ba);
                }
                poll_reads(a, &mut buf_a, &mut ab)?;
                poll_reads(b, &mut buf_b, &mut ba)?;
                continue;
            }
        }
        let coarse = next.map(|t| tokio::time::Instant::from_std(t - FINE));
        tokio::select! {
            biased;
            _ = &mut stop => return Ok([ab.stats(), ba.stats()]),
            Some(c) = configs.recv() => apply(c, &mut ab, &mut ba),
            r = a.recv(&mut buf_a) => take(r?, &mut buf_a, a, &mut ab)?,
            r = b.recv(&mut buf_b) => take(r?, &mut buf_b, b, &mut ba)?,
            _ = sleep_until(coarse) => {}
        }
    }
}

async fn sleep_until(t: Option<tokio::time::Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// Hands every packet already waiting on `tun` to the model.
fn poll_reads(tun: &Tun, buf: &mut [u8], model: &mut LinkModel) -> io::Result<()> {
    match tun.try_recv(buf) {
        Ok(n) => take(n, buf, tun, model),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
        Err(e) => Err(e),
    }
}

/// Hands the packet just read (`n` bytes of `buf`) and any others already
/// waiting on `tun` to the model.
fn take(mut n: usize, buf: &mut [u8], tun: &Tun, model: &mut LinkModel) -> io::Result<()> {
    for _ in 0..READ_BATCH {
        model.handle_packet(Instant::now(), buf[..n].to_vec());
        n = match tun.try_recv(buf) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) => return Err(e),
        };
    }
    model.handle_packet(Instant::now(), buf[..n].to_vec());
    Ok(())
}

fn deliver(model: &mut LinkModel, now: Instant, out: &Tun) {
    while let Some(p) = model.poll_transmit(now) {
        // A TUN write only fails for a packet the kernel refuses (or when
        // its queue is full); the emulated link drops it, as a wire would.
        let _ = out.try_send(&p);
    }
}
