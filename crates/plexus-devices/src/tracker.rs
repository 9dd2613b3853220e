//! The server side: the devices one server is responsible for, sans-IO.
//!
//! ```text
//!  Register ──► rate limit (per source) ──► duplicate? ──► owner by the ring ──► forward (hops 1)
//!                    │ Refused(RateLimited)    │ newer session wins:   │ this server
//!                                              │ the older gets Stop   ▼
//!                                                             table full? Refused(TableFull)
//!                                                             entry: Welcome, heartbeats, phi,
//!                                                             Request → Report → Request ...
//! ```
//!
//! A driver calls [`Tracker::handle_packet`] for each device packet,
//! [`Tracker::handle_ring`] whenever the cluster's ring or the set of
//! unreachable members changes, and [`Tracker::handle_timeout`] at
//! [`Tracker::poll_timeout`]; after each it drains
//! [`Tracker::poll_transmit`] and [`Tracker::poll_event`].
//!
//! **Assignment.** A device belongs to the first member of its ring
//! owners (`Ring::owners` of its id) that is neither unreachable nor the
//! server the device reported as failed (`Register::failed`): while the
//! cluster has not yet downed a crashed server, the device moves to the
//! ring's next owner at once. When the ring changes, a server hands each
//! device it no longer owns to its owner (a forwarded `Register`); the
//! new owner's `Welcome` moves the device.
//!
//! **Duplicates.** Two drivers of one device id: the newer session wins
//! (sessions grow with the driver's start time), the older is sent
//! `Stop(Duplicate)`, whichever registered first. So a restarted device
//! process takes over from its dead predecessor at once, and of two live
//! drivers configured with the same id the one started last runs.
//! Packets of a session that does not hold the id (a stopped duplicate,
//! or a device claiming another's id) are refused with
//! [`PacketError::WrongSession`] or [`PacketError::OlderDuplicate`].
//!
//! **Bounds.** At most `max_devices` entries (then `TableFull`), a token
//! bucket per source address for registrations and for answers to unknown
//! devices (`register_burst`, `register_rate`, at most `max_sources`
//! buckets), report values bounded by the wire format; a timer heap with at
//! most three live entries per device.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use plexus_cluster::Ring;
use plexus_net::phi::{PhiDetector, PhiThreshold};
use rustc_hash::FxHashMap;

use crate::config::TrackerConfig;
use crate::directory::{DeviceDirectory, DeviceRecord, DeviceStatus, LocalDirectory};
use crate::limit::Limiter;
use crate::wire::{
    server_tag, DeviceId, Packet, RefuseReason, SessionId, StopReason, Values, WireError,
};
use crate::{To, Transmit};

/// What a tracker tells its driver (and its log).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TrackerEvent {
    /// This server now holds the device.
    Registered {
        /// The device.
        device: DeviceId,
        /// Its driver's run.
        session: SessionId,
        /// Whether another server forwarded or handed it here.
        forwarded: bool,
    },
    /// A registration went on to the device's owner.
    Forwarded {
        /// The device.
        device: DeviceId,
        /// The owner.
        to: Arc<str>,
    },
    /// The ring moved a device this server held to another server.
    Moved {
        /// The device.
        device: DeviceId,
        /// Its new server.
        to: Arc<str>,
    },
    /// The device went silent past the phi threshold.
    Lost {
        /// The device.
        device: DeviceId,
    },
    /// A lost device is heard again.
    Recovered {
        /// The device.
        device: DeviceId,
    },
    /// A lost device was forgotten (`forget_after`).
    Forgotten {
        /// The device.
        device: DeviceId,
    },
    /// The device said another server holds it; this one let go.
    Released {
        /// The device.
        device: DeviceId,
    },
    /// Of two drivers of one device, `stopped` was told to stop.
    DuplicateStopped {
        /// The device.
        device: DeviceId,
        /// The older session, told to stop.
        stopped: SessionId,
        /// The newer session, which holds the device.
        holder: SessionId,
    },
}

/// A packet the tracker refused. Nothing changed beyond what each variant
/// says; every refusal is counted in [`TrackerStats`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PacketError {
    /// Not a device packet.
    #[error("{0}")]
    Malformed(#[from] WireError),
    /// A packet only devices take.
    #[error("a device-bound packet (tag {0}) reached the server")]
    Unexpected(&'static str),
    /// The source registered too often; it was told `RateLimited`.
    #[error("registration of {device} from `{from}` refused: over the per-source rate limit")]
    RateLimited {
        /// The device claimed.
        device: DeviceId,
        /// The source (the device process's address).
        from: Arc<str>,
    },
    /// The table is full; the device was told `TableFull`.
    #[error("registration of {device} refused: the table holds its maximum of {max} devices")]
    TableFull {
        /// The device.
        device: DeviceId,
        /// `max_devices`.
        max: usize,
    },
    /// A newer session holds the device; the sender was told to stop.
    #[error("{device}: session {session} is older than the holder {holder}; told it to stop")]
    OlderDuplicate {
        /// The device.
        device: DeviceId,
        /// The sender's session.
        session: SessionId,
        /// The holding session.
        holder: SessionId,
    },
    /// A packet for a device under a session that does not hold it (a
    /// device claiming another's id); dropped.
    #[error("{device}: packet of session {claimed}, but {holder} holds the device; dropped")]
    WrongSession {
        /// The device.
        device: DeviceId,
        /// The session in the packet.
        claimed: SessionId,
        /// The holding session.
        holder: SessionId,
    },
    /// A packet about a device this server does not hold.
    #[error("{device}: not held by this server; dropped (a heartbeat is answered Unknown)")]
    UnknownDevice {
        /// The device.
        device: DeviceId,
    },
}

/// A tracker's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TrackerStats {
    /// Devices held now.
    pub devices: usize,
    /// Registrations taken here.
    pub registrations: u64,
    /// Registrations forwarded to the owner.
    pub forwarded: u64,
    /// Devices handed to another server after a ring change.
    pub moved: u64,
    /// Reports received (of the outstanding request).
    pub reports: u64,
    /// Reports of a request already answered (a resend's second answer).
    pub stale_reports: u64,
    /// Requests sent again after `request_resend`.
    pub resends: u64,
    /// Older drivers told to stop.
    pub duplicates_stopped: u64,
    /// Packets refused (every [`PacketError`]).
    pub refused: u64,
    /// Of those, over the rate limit.
    pub rate_limited: u64,
    /// Devices lost (phi).
    pub lost: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
    Heartbeat = 0,
    Phi = 1,
    Resend = 2,
}

#[derive(Debug)]
struct Entry {
    session: SessionId,
    reply_to: Arc<str>,
    detector: PhiDetector,
    status: DeviceStatus,
    lost_since: Option<Instant>,
    /// A server the device lost: not given the device while in the ring.
    avoid: Option<Arc<str>>,
    seq: u64,
    /// When the outstanding request was (last) sent.
    outstanding: Option<Instant>,
    reports: u64,
    total: i64,
    recorded_reports: u64,
    /// The instant each timer kind is queued for.
    armed: [Option<Instant>; 3],
}

/// The devices one server is responsible for. See the [module docs](self).
#[derive(Debug)]
pub struct Tracker<D: DeviceDirectory = LocalDirectory> {
    config: TrackerConfig,
    threshold: PhiThreshold,
    local: Arc<str>,
    local_tag: u64,
    ring: Arc<Ring>,
    unreachable: HashSet<Arc<str>>,
    devices: FxHashMap<DeviceId, Entry>,
    timers: BinaryHeap<Reverse<(Instant, DeviceId, Timer)>>,
    next_record: Instant,
    limiter: Limiter,
    directory: D,
    changes: u64,
    out: VecDeque<Transmit>,
    events: VecDeque<TrackerEvent>,
    stats: TrackerStats,
}

impl<D: DeviceDirectory> Tracker<D> {
    /// The tracker of the server at `local` (its ring address), recording
    /// device states in `directory`. Until [`Tracker::handle_ring`] gives
    /// it a ring, it holds every device itself.
    pub fn new(config: TrackerConfig, local: Arc<str>, directory: D, now: Instant) -> Self {
        Self {
            threshold: PhiThreshold::new(config.liveness.threshold),
            limiter: Limiter::new(
                config.register_burst,
                config.register_rate,
                config.max_sources,
            ),
            next_record: now + config.record_interval,
            config,
            local_tag: server_tag(&local),
            local,
            ring: Arc::new(Ring::default()),
            unreachable: HashSet::new(),
            devices: FxHashMap::default(),
            timers: BinaryHeap::new(),
            directory,
            changes: 0,
            out: VecDeque::new(),
            events: VecDeque::new(),
            stats: TrackerStats::default(),
        }
    }

    /// This server's address.
    pub fn local(&self) -> &Arc<str> {
        &self.local
    }

    /// The directory device states are recorded in.
    pub fn directory(&self) -> &D {
        &self.directory
    }

    /// The counters.
    pub fn stats(&self) -> TrackerStats {
        TrackerStats {
            devices: self.devices.len(),
            ..self.stats
        }
    }

    /// Whether this server holds `device`.
    pub fn holds(&self, device: DeviceId) -> bool {
        self.devices.contains_key(&device)
    }

    /// Reports received from `device` and their running total, if held.
    pub fn totals(&self, device: DeviceId) -> Option<(u64, i64)> {
        self.devices.get(&device).map(|e| (e.reports, e.total))
    }

    /// The owner of `device` by the ring: the first of its ring owners
    /// neither unreachable nor `avoid`; this server if the ring is empty.
    pub fn owner(&self, device: DeviceId, avoid: Option<&Arc<str>>) -> Arc<str> {
        let key = device.key();
        self.ring
            .owners(&key, self.ring.members().len())
            .into_iter()
            .find(|m| !self.unreachable.contains(*m) && avoid != Some(*m))
            .cloned()
            .unwrap_or_else(|| Arc::clone(&self.local))
    }

    /// The ring or the unreachable members changed: hands every device
    /// this server no longer owns to its owner.
    pub fn handle_ring(
        &mut self,
        now: Instant,
        ring: Arc<Ring>,
        unreachable: impl IntoIterator<Item = Arc<str>>,
    ) {
        self.ring = ring;
        self.unreachable = unreachable.into_iter().collect();
        let ids: Vec<DeviceId> = self.devices.keys().copied().collect();
        for id in ids {
            let Some(e) = self.devices.get_mut(&id) else {
                continue;
            };
            // A failed server that left the ring is no longer avoided: if
            // it comes back, it owns its devices again.
            if e.avoid
                .as_ref()
                .is_some_and(|a| !self.ring.members().contains(a))
            {
                e.avoid = None;
            }
            let avoid = e.avoid.clone();
            let owner = self.owner(id, avoid.as_ref());
            if owner != self.local {
                self.hand_over(now, id, owner);
            }
        }
    }

    /// A device packet arrived at `now`.
    ///
    /// # Errors
    ///
    /// [`PacketError`] if the packet was refused (the variant says what was
    /// answered); the server goes on either way.
    pub fn handle_packet(&mut self, now: Instant, bytes: &Bytes) -> Result<(), PacketError> {
        let r = Packet::parse(bytes)
            .map_err(PacketError::from)
            .and_then(|p| self.handle(now, p));
        if r.is_err() {
            self.stats.refused += 1;
        }
        r
    }

    fn handle(&mut self, now: Instant, packet: Packet) -> Result<(), PacketError> {
        match packet {
            Packet::Register {
                device,
                session,
                hops,
                reply_to,
                failed,
                ..
            } => self.on_register(now, device, session, hops, reply_to, failed),
            Packet::DeviceHeartbeat {
                device,
                session,
                reply_to,
            } => self.on_heartbeat(now, device, session, reply_to),
            Packet::Report {
                device,
                session,
                seq,
                values,
            } => self.on_report(now, device, session, seq, &values),
            Packet::NotYours {
                device,
                session,
                server_tag,
            } => {
                if server_tag == self.local_tag
                    && self
                        .devices
                        .get(&device)
                        .is_some_and(|e| e.session == session)
                {
                    self.remove(device, DeviceStatus::Moved);
                    self.events.push_back(TrackerEvent::Released { device });
                }
                Ok(())
            }
            Packet::Welcome { .. } => Err(PacketError::Unexpected("Welcome")),
            Packet::ServerHeartbeat { .. } => Err(PacketError::Unexpected("ServerHeartbeat")),
            Packet::Request { .. } => Err(PacketError::Unexpected("Request")),
            Packet::Stop { .. } => Err(PacketError::Unexpected("Stop")),
            Packet::Refused { .. } => Err(PacketError::Unexpected("Refused")),
        }
    }

    fn on_register(
        &mut self,
        now: Instant,
        device: DeviceId,
        session: SessionId,
        hops: u8,
        reply_to: Arc<str>,
        failed: Option<Arc<str>>,
    ) -> Result<(), PacketError> {
        if !self.limiter.allow(&reply_to, now) {
            self.stats.rate_limited += 1;
            self.refuse(device, session, &reply_to, RefuseReason::RateLimited);
            return Err(PacketError::RateLimited {
                device,
                from: reply_to,
            });
        }
        if let Some(e) = self.devices.get_mut(&device) {
            if e.session == session {
                // A retry (our Welcome was lost): welcome again.
                e.reply_to = reply_to;
                if failed.is_some() {
                    e.avoid = failed;
                }
                self.welcome(device, session);
                return Ok(());
            }
            if e.session > session {
                let holder = e.session;
                self.stop(device, session, &reply_to, holder);
                return Err(PacketError::OlderDuplicate {
                    device,
                    session,
                    holder,
                });
            }
            // A newer driver: the held one is told to stop.
            let (old, old_reply) = (e.session, Arc::clone(&e.reply_to));
            self.remove(device, DeviceStatus::Stopped);
            self.stop(device, old, &old_reply, session);
        }
        if hops == 0 {
            let owner = self.owner(device, failed.as_ref());
            if owner != self.local {
                self.stats.forwarded += 1;
                self.send(
                    To::Server(Arc::clone(&owner)),
                    &Packet::Register {
                        device,
                        session,
                        hops: 1,
                        heartbeat_ms: 0,
                        reply_to,
                        failed,
                    },
                );
                self.events
                    .push_back(TrackerEvent::Forwarded { device, to: owner });
                return Ok(());
            }
        }
        if self.devices.len() >= self.config.max_devices {
            self.refuse(device, session, &reply_to, RefuseReason::TableFull);
            return Err(PacketError::TableFull {
                device,
                max: self.config.max_devices,
            });
        }
        let entry = Entry {
            session,
            reply_to,
            detector: PhiDetector::new(self.config.liveness.phi(), now),
            status: DeviceStatus::Up,
            lost_since: None,
            avoid: failed,
            seq: 0,
            outstanding: None,
            reports: 0,
            total: 0,
            recorded_reports: 0,
            armed: [None; 3],
        };
        self.devices.insert(device, entry);
        self.stats.registrations += 1;
        self.welcome(device, session);
        self.heartbeat(now, device);
        self.arm(
            device,
            Timer::Phi,
            now + self.config.liveness.heartbeat_interval,
        );
        self.request(now, device);
        self.record(device);
        self.events.push_back(TrackerEvent::Registered {
            device,
            session,
            forwarded: hops > 0,
        });
        Ok(())
    }

    fn on_heartbeat(
        &mut self,
        now: Instant,
        device: DeviceId,
        session: SessionId,
        reply_to: Arc<str>,
    ) -> Result<(), PacketError> {
        let Some(e) = self.devices.get_mut(&device) else {
            if self.limiter.allow(&reply_to, now) {
                self.refuse(device, session, &reply_to, RefuseReason::Unknown);
            }
            return Err(PacketError::UnknownDevice { device });
        };
        if e.session == session {
            e.detector.on_arrival(now);
            if e.status == DeviceStatus::Lost {
                e.status = DeviceStatus::Up;
                e.lost_since = None;
                self.events.push_back(TrackerEvent::Recovered { device });
                self.record(device);
                self.request(now, device);
            }
            return Ok(());
        }
        let holder = e.session;
        if session < holder {
            if self.limiter.allow(&reply_to, now) {
                self.stop(device, session, &reply_to, holder);
            }
            return Err(PacketError::OlderDuplicate {
                device,
                session,
                holder,
            });
        }
        // A newer session that has not registered here: it must.
        if self.limiter.allow(&reply_to, now) {
            self.refuse(device, session, &reply_to, RefuseReason::Unknown);
        }
        Err(PacketError::WrongSession {
            device,
            claimed: session,
            holder,
        })
    }

    fn on_report(
        &mut self,
        now: Instant,
        device: DeviceId,
        session: SessionId,
        seq: u64,
        values: &Values,
    ) -> Result<(), PacketError> {
        let Some(e) = self.devices.get_mut(&device) else {
            return Err(PacketError::UnknownDevice { device });
        };
        if e.session != session {
            return Err(PacketError::WrongSession {
                device,
                claimed: session,
                holder: e.session,
            });
        }
        if e.outstanding.is_none() || seq != e.seq {
            self.stats.stale_reports += 1;
            return Ok(());
        }
        e.total = e.total.wrapping_add(values.sum());
        e.reports += 1;
        e.outstanding = None;
        self.stats.reports += 1;
        if e.status == DeviceStatus::Up {
            self.request(now, device);
        }
        Ok(())
    }

    /// `now` reached [`Tracker::poll_timeout`]'s deadline (or later).
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(Reverse((at, device, timer))) = self.timers.peek().copied() {
            if at > now {
                break;
            }
            self.timers.pop();
            let Some(e) = self.devices.get_mut(&device) else {
                continue;
            };
            if e.armed[timer as usize] != Some(at) {
                continue;
            }
            e.armed[timer as usize] = None;
            match timer {
                Timer::Heartbeat => self.heartbeat(now, device),
                Timer::Phi => self.check_phi(now, device),
                Timer::Resend => {
                    let resend = self.config.request_resend;
                    match e.outstanding {
                        Some(sent) if now >= sent + resend => {
                            self.stats.resends += 1;
                            self.request(now, device);
                        }
                        Some(sent) => self.arm(device, Timer::Resend, sent + resend),
                        None => {}
                    }
                }
            }
        }
        if now >= self.next_record {
            self.next_record = now + self.config.record_interval;
            let changed: Vec<DeviceId> = self
                .devices
                .iter()
                .filter(|(_, e)| e.reports != e.recorded_reports)
                .map(|(d, _)| *d)
                .collect();
            for d in changed {
                self.record(d);
            }
        }
    }

    /// The next packet to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.out.pop_front()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<TrackerEvent> {
        self.events.pop_front()
    }

    /// When to call [`Tracker::handle_timeout`] next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let timer = self.timers.peek().map(|Reverse((at, _, _))| *at);
        Some(timer.map_or(self.next_record, |t| t.min(self.next_record)))
    }

    fn check_phi(&mut self, now: Instant, device: DeviceId) {
        let Some(e) = self.devices.get_mut(&device) else {
            return;
        };
        let deadline = e.detector.deadline(&self.threshold);
        match e.lost_since {
            None if now >= deadline => {
                e.status = DeviceStatus::Lost;
                e.lost_since = Some(now);
                e.outstanding = None;
                self.stats.lost += 1;
                self.events.push_back(TrackerEvent::Lost { device });
                self.record(device);
                self.arm(device, Timer::Phi, now + self.config.forget_after);
            }
            None => self.arm(device, Timer::Phi, deadline),
            Some(since) if now >= since + self.config.forget_after => {
                self.remove(device, DeviceStatus::Lost);
                self.events.push_back(TrackerEvent::Forgotten { device });
            }
            Some(since) => self.arm(device, Timer::Phi, since + self.config.forget_after),
        }
    }

    fn heartbeat(&mut self, now: Instant, device: DeviceId) {
        let Some(e) = self.devices.get(&device) else {
            return;
        };
        let packet = Packet::ServerHeartbeat {
            device,
            session: e.session,
            server_tag: self.local_tag,
            server: Arc::clone(&self.local),
        };
        let to = To::Device(Arc::clone(&e.reply_to));
        self.send(to, &packet);
        self.arm(
            device,
            Timer::Heartbeat,
            now + self.config.liveness.heartbeat_interval,
        );
    }

    /// Sends the device's outstanding request (the next one if none is).
    fn request(&mut self, now: Instant, device: DeviceId) {
        if !self.config.poll_reports {
            return;
        }
        let Some(e) = self.devices.get_mut(&device) else {
            return;
        };
        if e.outstanding.is_none() {
            e.seq += 1;
        }
        e.outstanding = Some(now);
        let packet = Packet::Request {
            device,
            session: e.session,
            server_tag: self.local_tag,
            seq: e.seq,
        };
        let to = To::Device(Arc::clone(&e.reply_to));
        self.send(to, &packet);
        self.arm(device, Timer::Resend, now + self.config.request_resend);
    }

    /// Queues `timer` of `device` at `at` unless it is queued earlier (it
    /// then re-arms itself when it fires).
    fn arm(&mut self, device: DeviceId, timer: Timer, at: Instant) {
        let Some(e) = self.devices.get_mut(&device) else {
            return;
        };
        if e.armed[timer as usize].is_some_and(|t| t <= at) {
            return;
        }
        e.armed[timer as usize] = Some(at);
        self.timers.push(Reverse((at, device, timer)));
    }

    fn hand_over(&mut self, _now: Instant, device: DeviceId, to: Arc<str>) {
        let Some(e) = self.devices.get(&device) else {
            return;
        };
        let packet = Packet::Register {
            device,
            session: e.session,
            hops: 1,
            heartbeat_ms: 0,
            reply_to: Arc::clone(&e.reply_to),
            failed: e.avoid.clone(),
        };
        self.send(To::Server(Arc::clone(&to)), &packet);
        self.remove(device, DeviceStatus::Moved);
        self.stats.moved += 1;
        self.events.push_back(TrackerEvent::Moved { device, to });
    }

    fn welcome(&mut self, device: DeviceId, session: SessionId) {
        let Some(e) = self.devices.get(&device) else {
            return;
        };
        let packet = Packet::Welcome {
            device,
            session,
            server_tag: self.local_tag,
            server: Arc::clone(&self.local),
        };
        let to = To::Device(Arc::clone(&e.reply_to));
        self.send(to, &packet);
    }

    fn stop(
        &mut self,
        device: DeviceId,
        stopped: SessionId,
        reply_to: &Arc<str>,
        holder: SessionId,
    ) {
        self.stats.duplicates_stopped += 1;
        self.send(
            To::Device(Arc::clone(reply_to)),
            &Packet::Stop {
                device,
                session: stopped,
                reason: StopReason::Duplicate,
            },
        );
        self.events.push_back(TrackerEvent::DuplicateStopped {
            device,
            stopped,
            holder,
        });
    }

    fn refuse(
        &mut self,
        device: DeviceId,
        session: SessionId,
        reply_to: &Arc<str>,
        reason: RefuseReason,
    ) {
        self.send(
            To::Device(Arc::clone(reply_to)),
            &Packet::Refused {
                device,
                session,
                reason,
            },
        );
    }

    fn remove(&mut self, device: DeviceId, status: DeviceStatus) {
        if let Some(e) = self.devices.get_mut(&device) {
            e.status = status;
        }
        self.record(device);
        self.devices.remove(&device);
    }

    fn record(&mut self, device: DeviceId) {
        let Some(e) = self.devices.get_mut(&device) else {
            return;
        };
        self.changes += 1;
        e.recorded_reports = e.reports;
        self.directory.record(DeviceRecord {
            device,
            session: e.session,
            server: Arc::clone(&self.local),
            status: e.status,
            reports: e.reports,
            total: e.total,
            version: (e.session, self.changes),
        });
    }

    fn send(&mut self, to: To, packet: &Packet) {
        self.out.push_back(Transmit {
            to,
            packet: packet.to_bytes(),
        });
    }
}

#[cfg(test)]
mod tests;
