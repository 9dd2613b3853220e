//! `count`: a pass-through layer of the benchmark's own, registered the way
//! any user registers a layer ([`plexus::net::LayerRegistry`]). It counts
//! the frames it passes and changes nothing: stacks with it on top measure
//! what a layer of one's own costs on the one send and receive path
//! (`--transport "tcp / framing / count"`).

use std::collections::VecDeque;
use std::time::Instant;

use plexus::net::{
    Frame, Interface, Layer, LayerConfig, LayerOptions, LayerRegistry, LinkContext, OptionError,
    Output, Packed, ReceiveError, StackSendError,
};

/// Counts frames both ways.
struct Count {
    sent: u64,
    received: u64,
}

impl Layer for Count {
    fn name(&self) -> &'static str {
        CountConfig::NAME
    }

    // Never refuses a frame: left out of the stack's per-send check, as the
    // built-in layers that never refuse are.
    fn limits_sends(&self) -> bool {
        false
    }

    fn handle_send(
        &mut self,
        _: Instant,
        frame: Frame,
        out: &mut Output,
    ) -> Result<(), StackSendError> {
        self.sent += 1;
        out.push_down(frame);
        Ok(())
    }

    // A run passes down whole, as a built-in pass-through layer's would.
    fn handle_send_run(
        &mut self,
        _: Instant,
        frames: &mut VecDeque<Frame>,
        out: &mut Output,
    ) -> Result<(), StackSendError> {
        self.sent += frames.len() as u64;
        out.push_down_all(frames);
        Ok(())
    }

    // So does a pack of small messages.
    fn handle_send_packed(
        &mut self,
        _: Instant,
        messages: &mut Packed<'_>,
        out: &mut Output,
    ) -> Result<(), StackSendError> {
        self.sent += messages.len() as u64;
        out.push_down_packed(messages);
        Ok(())
    }

    fn handle_receive(
        &mut self,
        _: Instant,
        frame: Frame,
        out: &mut Output,
    ) -> Result<(), ReceiveError> {
        self.received += 1;
        out.push_up(frame);
        Ok(())
    }

    fn handle_timeout(&mut self, _: Instant, _: &mut Output) {}

    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
}

#[derive(Clone, Default)]
struct CountConfig;

impl LayerConfig for CountConfig {
    const NAME: &'static str = "count";
    const INTERFACE: Interface = Interface::MESSAGE;

    fn from_options(options: &LayerOptions) -> Result<Self, OptionError> {
        match options.iter().next() {
            Some(o) => Err(o.unknown()),
            None => Ok(CountConfig),
        }
    }

    fn build(&self, _: &LinkContext) -> Box<dyn Layer> {
        Box::new(Count {
            sent: 0,
            received: 0,
        })
    }
}

/// The built-in layers and `count`.
pub fn registry() -> LayerRegistry {
    let mut registry = LayerRegistry::default();
    registry.register_config::<CountConfig>();
    registry
}
