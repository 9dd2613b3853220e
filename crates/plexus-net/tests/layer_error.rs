//! A layer of one's own ends a link with an error type of its own, and the
//! application gets that type back from the stack's close reason: it acts on
//! the layer's meaning, never on its text.

use std::time::Instant;

use bytes::Bytes;
use plexus_net::{
    Frame, Layer, LayerError, LinkError, Output, ReceiveError, Stack, StackSendError,
};

/// The layer's own error.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("quota of {limit} messages used up")]
struct QuotaExceeded {
    limit: u32,
}

/// Passes `limit` received messages up, then closes the link.
struct Quota {
    limit: u32,
    received: u32,
}

impl Layer for Quota {
    fn name(&self) -> &'static str {
        "quota"
    }

    fn handle_send(
        &mut self,
        _now: Instant,
        frame: Frame,
        out: &mut Output,
    ) -> Result<(), StackSendError> {
        out.push_down(frame);
        Ok(())
    }

    fn handle_receive(
        &mut self,
        _now: Instant,
        frame: Frame,
        out: &mut Output,
    ) -> Result<(), ReceiveError> {
        if self.received == self.limit {
            out.close(LinkError::Layer {
                layer: "quota",
                source: LayerError::new(QuotaExceeded { limit: self.limit }),
            });
            return Ok(());
        }
        self.received += 1;
        out.push_up(frame);
        Ok(())
    }

    fn handle_timeout(&mut self, _now: Instant, _out: &mut Output) {}

    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
}

#[test]
fn a_layer_of_ones_own_closes_with_its_own_error_type() {
    let mut stack = Stack::new(
        None,
        vec![Box::new(Quota {
            limit: 2,
            received: 0,
        })],
    );
    let now = Instant::now();
    for _ in 0..2 {
        stack
            .handle_receive(now, Bytes::from_static(b"m"))
            .expect("within the quota");
    }
    assert_eq!(std::iter::from_fn(|| stack.poll_receive()).count(), 2);
    let _ = stack.handle_receive(now, Bytes::from_static(b"m"));
    let Some(LinkError::Layer { layer, source }) = stack.close_reason() else {
        panic!("closed by the layer: {:?}", stack.close_reason());
    };
    assert_eq!(*layer, "quota");
    assert_eq!(
        source.downcast_ref::<QuotaExceeded>(),
        Some(&QuotaExceeded { limit: 2 })
    );
    assert_eq!(
        stack.close_reason().map(ToString::to_string).as_deref(),
        Some("quota: quota of 2 messages used up")
    );
    assert!(stack.handle_receive(now, Bytes::from_static(b"m")).is_err());
}
