//! [`WebSocketLayer`]: a [`WebSocket`] connection as the bottom layer of a
//! stack, over the byte stream that is left once the opening handshake is
//! done: each message from above leaves as one binary message, each
//! message from the peer goes up whole.
//!
//! The `ws` transport puts it under the spec's layers (it knows which end
//! it is, which decides masking); it is not a layer a spec names.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;
use plexus_net::{Frame, Layer, LayerError, LinkError, Output, ReceiveError, StackSendError};

use super::handshake::Extensions;
use super::{CloseCode, Role, WebSocket, WsClose, WsConfig, WsEvent, WsMessage};

/// Counters many connections' layers add to (a transport's totals over
/// its connections); see [`WebSocketLayer::with_totals`].
#[derive(Debug, Default)]
pub struct WsTotals {
    messages: AtomicU64,
    closed_by_peer: AtomicU64,
    protocol_errors: AtomicU64,
    invalid_payloads: AtomicU64,
    policy: AtomicU64,
    too_big: AtomicU64,
}

/// What [`WsTotals`] counted so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WsTotalsSnapshot {
    /// Messages received.
    pub messages: u64,
    /// Connections the peer closed (with or without a code).
    pub closed_by_peer: u64,
    /// Connections we closed for a protocol error (1002: unmasked client
    /// frames, bad opcodes or reserved bits, fragmented control frames,
    /// RSV1 without permessage-deflate or on a control or continuation
    /// frame).
    pub protocol_errors: u64,
    /// ... for invalid UTF-8 in a text message or close reason, or a
    /// compressed message that does not inflate (1007).
    pub invalid_payloads: u64,
    /// ... for a policy violation (1008: a ping flood).
    pub policy: u64,
    /// ... for a frame or message over its bound, a compressed message
    /// that inflates past it included (1009).
    pub too_big: u64,
}

impl WsTotals {
    /// The totals so far.
    pub fn snapshot(&self) -> WsTotalsSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        WsTotalsSnapshot {
            messages: get(&self.messages),
            closed_by_peer: get(&self.closed_by_peer),
            protocol_errors: get(&self.protocol_errors),
            invalid_payloads: get(&self.invalid_payloads),
            policy: get(&self.policy),
            too_big: get(&self.too_big),
        }
    }

    fn closed(&self, code: Option<CloseCode>, by_us: bool) {
        let counter = match code {
            _ if !by_us => &self.closed_by_peer,
            Some(CloseCode::PROTOCOL_ERROR) => &self.protocol_errors,
            Some(CloseCode::INVALID_PAYLOAD) => &self.invalid_payloads,
            Some(CloseCode::POLICY) => &self.policy,
            Some(CloseCode::MESSAGE_TOO_BIG) => &self.too_big,
            // Our own normal closes are not counted.
            _ => return,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// See the [module docs](self).
#[derive(Debug)]
pub struct WebSocketLayer {
    ws: WebSocket,
    received: BytesMut,
    totals: Option<Arc<WsTotals>>,
}

impl WebSocketLayer {
    /// The layer of one connection, for `role`, with masking keys from
    /// `seed` (a client's; give it fresh randomness).
    pub fn new(role: Role, config: WsConfig, seed: u64) -> Self {
        Self {
            ws: WebSocket::new(role, config, seed),
            received: BytesMut::new(),
            totals: None,
        }
    }

    /// The layer with the `extensions` its opening handshake agreed on
    /// (see [`WebSocket::with_extensions`]).
    pub fn with_extensions(mut self, extensions: Extensions) -> Self {
        self.ws = self.ws.with_extensions(extensions);
        self
    }

    /// The layer, adding what it counts to `totals` too.
    pub fn with_totals(mut self, totals: Arc<WsTotals>) -> Self {
        self.totals = Some(totals);
        self
    }

    fn transmit(&mut self, out: &mut Output) {
        while let Some(bytes) = self.ws.poll_transmit() {
            out.push_down(Frame::from_payload(bytes));
        }
    }
}

impl Layer for WebSocketLayer {
    fn name(&self) -> &'static str {
        "websocket"
    }

    fn limits_sends(&self) -> bool {
        false
    }

    fn flushes(&self) -> bool {
        false
    }

    fn handle_send(
        &mut self,
        _now: Instant,
        frame: Frame,
        out: &mut Output,
    ) -> Result<(), StackSendError> {
        if self.ws.send(&WsMessage::Binary(frame.to_bytes())).is_err() {
            return Err(StackSendError::Closed(frame));
        }
        self.transmit(out);
        Ok(())
    }

    fn handle_receive(
        &mut self,
        now: Instant,
        frame: Frame,
        out: &mut Output,
    ) -> Result<(), ReceiveError> {
        for chunk in frame.chunks() {
            self.received.extend_from_slice(chunk);
        }
        while let Some(event) = self.ws.handle_receive(now, &mut self.received) {
            if let Some(totals) = &self.totals {
                match &event {
                    WsEvent::Message(_) => {
                        totals.messages.fetch_add(1, Ordering::Relaxed);
                    }
                    WsEvent::Closed { code, by_us, .. } => totals.closed(*code, *by_us),
                }
            }
            match event {
                WsEvent::Message(WsMessage::Binary(b)) => out.push_up_payload(b),
                WsEvent::Message(WsMessage::Text(t)) => out.push_up_payload(t.into()),
                WsEvent::Closed {
                    code,
                    reason,
                    by_us,
                } => {
                    self.transmit(out);
                    out.close(LinkError::Layer {
                        layer: "websocket",
                        source: LayerError::new(WsClose {
                            code,
                            reason,
                            by_us,
                        }),
                    });
                    return Ok(());
                }
            }
        }
        self.transmit(out);
        Ok(())
    }

    fn handle_timeout(&mut self, _now: Instant, _out: &mut Output) {}

    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
}
