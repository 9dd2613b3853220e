//! The device side: one device driver's session with the cluster, sans-IO.
//!
//! ```text
//!             new ──► Registering ──Welcome / a server's heartbeat──► Attached
//!                      ▲    │ every register_retry: Register          │ heartbeats every interval,
//!                      │    │ to every seed but the failed one        │ phi on the server's
//!                      │    └─ Refused(load): wait refused_backoff    │
//!                      └── phi crossed (ServerLost) / Refused(Unknown)┘
//!          any state ──Stop(Duplicate)──► Stopped (final: sends nothing)
//! ```
//!
//! A driver calls [`DeviceSession::handle_packet`] for each packet about
//! this device and [`DeviceSession::handle_timeout`] at
//! [`DeviceSession::poll_timeout`]; after either (and after
//! [`DeviceSession::send_report`]) it drains
//! [`DeviceSession::poll_transmit`] and [`DeviceSession::poll_event`].

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;
use plexus_net::phi::{PhiDetector, PhiThreshold};

use crate::config::SessionConfig;
use crate::wire::{
    encode_report, DeviceId, Packet, RefuseReason, SessionId, StopReason, MAX_ADDR, MAX_VALUES,
};
use crate::{To, Transmit};

/// What a session tells its driver.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeviceEvent {
    /// A server took the device (first, or after a move or a failure).
    Attached {
        /// The responsible server.
        server: Arc<str>,
    },
    /// The server went silent past the phi threshold; registering again
    /// through the seeds.
    ServerLost {
        /// The server.
        server: Arc<str>,
    },
    /// The server asks for a report; answer with
    /// [`DeviceSession::send_report`].
    ReportRequested {
        /// The request.
        seq: u64,
    },
    /// A server refused the device for now; the session tries again.
    Refused {
        /// Why.
        reason: RefuseReason,
    },
    /// The session stopped for good (a newer driver holds the device id).
    Stopped {
        /// Why.
        reason: StopReason,
    },
}

/// Why a session could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// Without a seed the device cannot reach the cluster.
    #[error("device {0}: no seed server given; pass at least one seed URI")]
    NoSeeds(DeviceId),
    /// An address does not fit a packet.
    #[error("device {device}: address `{address}` is longer than {MAX_ADDR} bytes")]
    AddressTooLong {
        /// The device.
        device: DeviceId,
        /// The address.
        address: String,
    },
}

/// A packet the session did not take. Nothing changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DevicePacketError {
    /// The packet is for another run of this device (an old one's, or a
    /// forged one).
    #[error("device {device}: packet for session {got}, this driver is {mine}")]
    WrongSession {
        /// The device.
        device: DeviceId,
        /// The packet's session.
        got: SessionId,
        /// This session.
        mine: SessionId,
    },
    /// A packet only servers take.
    #[error("device {0}: a server-bound packet reached the device")]
    Unexpected(DeviceId),
}

/// Why a report was not sent. Nothing was sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReportError {
    /// No server holds the device now; a request will come once one does.
    #[error("device {0}: not attached to a server; wait for the next ReportRequested")]
    NotAttached(DeviceId),
    /// The session stopped.
    #[error("device {0}: the session stopped")]
    Stopped(DeviceId),
    /// Too many values for one report.
    #[error("device {device}: {len} values in one report (at most {MAX_VALUES})")]
    TooMany {
        /// The device.
        device: DeviceId,
        /// Values given.
        len: usize,
    },
}

#[derive(Debug)]
enum Phase {
    Registering {
        failed: Option<Arc<str>>,
        next: Instant,
    },
    Attached {
        server: Arc<str>,
        tag: u64,
        detector: PhiDetector,
    },
    Stopped,
}

/// One device driver's session. See the [module docs](self).
#[derive(Debug)]
pub struct DeviceSession {
    config: SessionConfig,
    threshold: PhiThreshold,
    device: DeviceId,
    session: SessionId,
    reply_to: Arc<str>,
    seeds: Vec<Arc<str>>,
    phase: Phase,
    next_heartbeat: Instant,
    out: VecDeque<Transmit>,
    events: VecDeque<DeviceEvent>,
    buf: BytesMut,
}

impl DeviceSession {
    /// A session of `device` for this run `session`, reached at `reply_to`,
    /// registering through `seeds` (server addresses) from `now` on.
    ///
    /// # Errors
    ///
    /// [`SessionError`] if there is no seed or an address is too long.
    pub fn new(
        config: SessionConfig,
        device: DeviceId,
        session: SessionId,
        reply_to: Arc<str>,
        seeds: Vec<Arc<str>>,
        now: Instant,
    ) -> Result<Self, SessionError> {
        if seeds.is_empty() {
            return Err(SessionError::NoSeeds(device));
        }
        if let Some(a) = seeds.iter().chain([&reply_to]).find(|a| a.len() > MAX_ADDR) {
            return Err(SessionError::AddressTooLong {
                device,
                address: a.to_string(),
            });
        }
        Ok(Self {
            threshold: PhiThreshold::new(config.liveness.threshold),
            config,
            device,
            session,
            reply_to,
            seeds,
            phase: Phase::Registering {
                failed: None,
                next: now,
            },
            next_heartbeat: now,
            out: VecDeque::new(),
            events: VecDeque::new(),
            buf: BytesMut::new(),
        })
    }

    /// The device.
    pub fn device(&self) -> DeviceId {
        self.device
    }

    /// This run.
    pub fn session(&self) -> SessionId {
        self.session
    }

    /// The server holding the device, if one does.
    pub fn server(&self) -> Option<&Arc<str>> {
        match &self.phase {
            Phase::Attached { server, .. } => Some(server),
            _ => None,
        }
    }

    /// Whether the session stopped for good.
    pub fn is_stopped(&self) -> bool {
        matches!(self.phase, Phase::Stopped)
    }

    /// A packet about this device arrived at `now`.
    ///
    /// # Errors
    ///
    /// [`DevicePacketError`] if it is for another session or only servers
    /// take it; it is then ignored.
    pub fn handle_packet(
        &mut self,
        now: Instant,
        packet: &Packet,
    ) -> Result<(), DevicePacketError> {
        let (session, device) = match packet {
            Packet::Welcome {
                session, device, ..
            }
            | Packet::ServerHeartbeat {
                session, device, ..
            }
            | Packet::Request {
                session, device, ..
            }
            | Packet::Stop {
                session, device, ..
            }
            | Packet::Refused {
                session, device, ..
            } => (*session, *device),
            _ => return Err(DevicePacketError::Unexpected(self.device)),
        };
        if session != self.session || device != self.device {
            return Err(DevicePacketError::WrongSession {
                device: self.device,
                got: session,
                mine: self.session,
            });
        }
        if self.is_stopped() {
            return Ok(());
        }
        match packet {
            Packet::Welcome {
                server_tag, server, ..
            } => self.attach(now, *server_tag, server),
            Packet::ServerHeartbeat {
                server_tag, server, ..
            } => match &mut self.phase {
                Phase::Attached { tag, detector, .. } if tag == server_tag => {
                    detector.on_arrival(now);
                }
                // Another server believes it holds the device (its ring
                // disagreed for a while): tell it to let go.
                Phase::Attached { .. } => self.send(
                    server,
                    &Packet::NotYours {
                        device: self.device,
                        session: self.session,
                        server_tag: *server_tag,
                    },
                ),
                // Its Welcome was lost: the heartbeat says as much.
                Phase::Registering { .. } => self.attach(now, *server_tag, server),
                Phase::Stopped => {}
            },
            Packet::Request {
                server_tag, seq, ..
            } => {
                if matches!(&self.phase, Phase::Attached { tag, .. } if tag == server_tag) {
                    self.events
                        .push_back(DeviceEvent::ReportRequested { seq: *seq });
                }
            }
            Packet::Stop { reason, .. } => {
                self.phase = Phase::Stopped;
                self.out.clear();
                self.events
                    .push_back(DeviceEvent::Stopped { reason: *reason });
            }
            Packet::Refused { reason, .. } => {
                let wait = match reason {
                    // The server forgot us: register again at once.
                    RefuseReason::Unknown => std::time::Duration::ZERO,
                    _ => self.config.refused_backoff,
                };
                let failed = match &self.phase {
                    Phase::Registering { failed, .. } => failed.clone(),
                    _ => None,
                };
                self.phase = Phase::Registering {
                    failed,
                    next: now + wait,
                };
                self.events
                    .push_back(DeviceEvent::Refused { reason: *reason });
                self.handle_timeout(now);
            }
            _ => {}
        }
        Ok(())
    }

    /// `now` reached [`DeviceSession::poll_timeout`]'s deadline (or later).
    pub fn handle_timeout(&mut self, now: Instant) {
        match &mut self.phase {
            Phase::Registering { failed, next } => {
                if now < *next {
                    return;
                }
                *next = now + self.config.register_retry;
                let failed = failed.clone();
                let packet = Packet::Register {
                    device: self.device,
                    session: self.session,
                    hops: 0,
                    heartbeat_ms: self.config.liveness.heartbeat_interval.as_millis() as u32,
                    reply_to: Arc::clone(&self.reply_to),
                    failed: failed.clone(),
                }
                .to_bytes();
                for seed in &self.seeds {
                    if failed.as_ref() != Some(seed) || self.seeds.len() == 1 {
                        self.out.push_back(Transmit {
                            to: To::Server(Arc::clone(seed)),
                            packet: packet.clone(),
                        });
                    }
                }
            }
            Phase::Attached {
                server, detector, ..
            } => {
                if now >= detector.deadline(&self.threshold) {
                    let server = Arc::clone(server);
                    self.events.push_back(DeviceEvent::ServerLost {
                        server: Arc::clone(&server),
                    });
                    self.phase = Phase::Registering {
                        failed: Some(server),
                        next: now,
                    };
                    self.handle_timeout(now);
                    return;
                }
                if now >= self.next_heartbeat {
                    self.next_heartbeat = now + self.config.liveness.heartbeat_interval;
                    let server = Arc::clone(server);
                    self.send(
                        &server,
                        &Packet::DeviceHeartbeat {
                            device: self.device,
                            session: self.session,
                            reply_to: Arc::clone(&self.reply_to),
                        },
                    );
                }
            }
            Phase::Stopped => {}
        }
    }

    /// Sends a report answering request `seq` to the device's server.
    ///
    /// # Errors
    ///
    /// [`ReportError`] if no server holds the device or there are too many
    /// values; nothing is sent then.
    pub fn send_report(&mut self, seq: u64, values: &[i64]) -> Result<(), ReportError> {
        if values.len() > MAX_VALUES {
            return Err(ReportError::TooMany {
                device: self.device,
                len: values.len(),
            });
        }
        let server = match &self.phase {
            Phase::Attached { server, .. } => Arc::clone(server),
            Phase::Stopped => return Err(ReportError::Stopped(self.device)),
            Phase::Registering { .. } => return Err(ReportError::NotAttached(self.device)),
        };
        // One buffer for every report: once the driver dropped the last
        // packet, its space is reused (no allocation per report).
        encode_report(self.device, self.session, seq, values, &mut self.buf);
        self.out.push_back(Transmit {
            to: To::Server(server),
            packet: self.buf.split().freeze(),
        });
        Ok(())
    }

    /// The next packet to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.out.pop_front()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<DeviceEvent> {
        self.events.pop_front()
    }

    /// When to call [`DeviceSession::handle_timeout`] next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match &self.phase {
            Phase::Registering { next, .. } => Some(*next),
            Phase::Attached { detector, .. } => {
                Some(self.next_heartbeat.min(detector.deadline(&self.threshold)))
            }
            Phase::Stopped => None,
        }
    }

    fn attach(&mut self, now: Instant, tag: u64, server: &Arc<str>) {
        if matches!(&self.phase, Phase::Attached { tag: t, .. } if *t == tag) {
            return;
        }
        self.phase = Phase::Attached {
            server: Arc::clone(server),
            tag,
            detector: PhiDetector::new(self.config.liveness.phi(), now),
        };
        self.next_heartbeat = now;
        self.events.push_back(DeviceEvent::Attached {
            server: Arc::clone(server),
        });
        self.handle_timeout(now);
    }

    fn send(&mut self, server: &Arc<str>, packet: &Packet) {
        self.out.push_back(Transmit {
            to: To::Server(Arc::clone(server)),
            packet: packet.to_bytes(),
        });
    }
}
