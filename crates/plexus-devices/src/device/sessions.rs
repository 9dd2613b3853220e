//! The device sessions of one process as one sans-IO protocol: server
//! packets go to the session of the device they name, each report request
//! is answered at once by the device's [`Reporter`], and the sessions'
//! packets and deadlines are merged into one queue and one deadline, so
//! one driver (`plexus_remote::driver`) runs them all.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use plexus_net::Protocol;
use rustc_hash::FxHashMap;

use super::Reporter;
use crate::session::{DeviceEvent, DeviceSession};
use crate::wire::{DeviceId, Packet};
use crate::To;

struct Device {
    session: DeviceSession,
    reporter: Box<dyn Reporter>,
    /// Attached since the last report request (the next one is reported).
    fresh: bool,
}

/// The sessions. See the [module docs](self).
///
/// Events are every session event with its device, except that of the
/// `ReportRequested` events (the reporters answer them) only the first
/// after each `Attached` is reported, so a listener sees when a device that
/// moved reports again. Packets go to a server's node address (its
/// `plexus.devices` actor).
#[derive(Default)]
pub(super) struct Sessions {
    sessions: FxHashMap<DeviceId, Device>,
    out: VecDeque<(Arc<str>, Bytes)>,
    events: VecDeque<(DeviceId, DeviceEvent)>,
    /// The reporters' buffer, reused.
    values: Vec<i64>,
    /// The earliest deadline of any session (a session's deadline only
    /// moves later while it handles packets, except through its own
    /// timeout handling, after which it is read again).
    next: Option<Instant>,
    /// Reports sent so far.
    reports: u64,
}

impl Sessions {
    /// Starts `session` (replacing one of its device), answered by
    /// `reporter`.
    pub(super) fn add(
        &mut self,
        now: Instant,
        session: DeviceSession,
        reporter: Box<dyn Reporter>,
    ) {
        let device = session.device();
        let mut d = Device {
            session,
            reporter,
            fresh: false,
        };
        d.session.handle_timeout(now);
        self.sessions.insert(device, d);
        self.after(device);
    }

    /// Reports the sessions sent so far.
    pub(super) fn reports_sent(&self) -> u64 {
        self.reports
    }

    /// A packet from a server, for the session of the device it names.
    pub(super) fn handle_server_packet(&mut self, now: Instant, bytes: &Bytes) {
        let packet = match Packet::parse(bytes) {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!(target: "plexus::devices", error = %e, "refused a server packet");
                return;
            }
        };
        let device = match &packet {
            Packet::Welcome { device, .. }
            | Packet::ServerHeartbeat { device, .. }
            | Packet::Request { device, .. }
            | Packet::Stop { device, .. }
            | Packet::Refused { device, .. } => *device,
            _ => return,
        };
        let Some(d) = self.sessions.get_mut(&device) else {
            return;
        };
        if let Err(e) = d.session.handle_packet(now, &packet) {
            tracing::debug!(target: "plexus::devices", error = %e, "refused a server packet");
        }
        self.after(device);
    }

    /// Answers report requests, queues events and packets, and forgets a
    /// session that stopped.
    fn after(&mut self, device: DeviceId) {
        let Some(d) = self.sessions.get_mut(&device) else {
            return;
        };
        while let Some(event) = d.session.poll_event() {
            if let DeviceEvent::ReportRequested { seq } = event {
                if std::mem::take(&mut d.fresh) {
                    self.events.push_back((device, event));
                }
                self.values.clear();
                d.reporter.report(seq, &mut self.values);
                if d.session.send_report(seq, &self.values).is_ok() {
                    self.reports += 1;
                }
            } else {
                d.fresh |= matches!(event, DeviceEvent::Attached { .. });
                self.events.push_back((device, event));
            }
        }
        while let Some(t) = d.session.poll_transmit() {
            let (To::Server(server) | To::Device(server)) = t.to;
            self.out.push_back((server, t.packet));
        }
        if let Some(t) = d.session.poll_timeout() {
            if self.next.is_none_or(|n| t < n) {
                self.next = Some(t);
            }
        }
        if d.session.is_stopped() {
            self.sessions.remove(&device);
        }
    }
}

impl Protocol for Sessions {
    type Address = Arc<str>;
    type Event = (DeviceId, DeviceEvent);

    /// A server packet from a transport that names its sender; the node's
    /// does not, and its packets come in as the host's command (to
    /// [`Sessions::handle_server_packet`]).
    fn handle_packet(&mut self, now: Instant, _from: Arc<str>, packet: Bytes) {
        self.handle_server_packet(now, &packet);
    }

    fn handle_timeout(&mut self, now: Instant) {
        let due: Vec<DeviceId> = self
            .sessions
            .iter()
            .filter(|(_, d)| d.session.poll_timeout().is_some_and(|t| t <= now))
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            if let Some(d) = self.sessions.get_mut(&id) {
                d.session.handle_timeout(now);
            }
            self.after(id);
        }
        self.next = self
            .sessions
            .values()
            .filter_map(|d| d.session.poll_timeout())
            .min();
    }

    fn poll_transmit(&mut self) -> Option<(Arc<str>, Bytes)> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.next
    }

    fn poll_event(&mut self) -> Option<(DeviceId, DeviceEvent)> {
        self.events.pop_front()
    }
}
