//! [`WebSocketLayer`]: a [`WebSocket`] connection as the bottom layer of a
//! stack, over the byte stream that is left once the opening handshake is
//! done: each message from above leaves as one binary message, each
//! message from the peer goes up whole.
//!
//! The `ws` transport puts it under the spec's layers (it knows which end
//! it is, which decides masking); it is not a layer a spec names.

use std::time::Instant;

use bytes::BytesMut;
use plexus_net::{Frame, Layer, LinkError, Output, ReceiveError, StackSendError};

use super::{Role, WebSocket, WsConfig, WsEvent, WsMessage};

/// See the [module docs](self).
#[derive(Debug)]
pub struct WebSocketLayer {
    ws: WebSocket,
    received: BytesMut,
}

impl WebSocketLayer {
    /// The layer of one connection, for `role`, with masking keys from
    /// `seed` (a client's; give it fresh randomness).
    pub fn new(role: Role, config: WsConfig, seed: u64) -> Self {
        Self {
            ws: WebSocket::new(role, config, seed),
            received: BytesMut::new(),
        }
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
                        reason: format!(
                            "{} closed the connection ({}{})",
                            if by_us { "we" } else { "the peer" },
                            code.map_or("no code".to_owned(), |c| c.0.to_string()),
                            if reason.is_empty() {
                                String::new()
                            } else {
                                format!(": {reason}")
                            }
                        ),
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
