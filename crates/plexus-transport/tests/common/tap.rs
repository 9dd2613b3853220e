//! `tap`: a pass-through layer of the user's own, registered the way any
//! user registers one, counting the frames it passes each way.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use plexus_net::{
    Frame, Interface, Layer, LayerConstructor, LayerFactory, LayerOptions, LayerRegistry,
    LinkContext, OptionError, Output, ReceiveError, StackSendError, StackSpec,
};

/// Frames a `tap` layer passed, shared by every instance of one spec.
#[derive(Default)]
pub struct Taps {
    pub sent: AtomicU64,
    pub received: AtomicU64,
}

struct Tap(Arc<Taps>);

impl Layer for Tap {
    fn name(&self) -> &'static str {
        "tap"
    }

    fn handle_send(
        &mut self,
        _: Instant,
        f: Frame,
        out: &mut Output,
    ) -> Result<(), StackSendError> {
        self.0.sent.fetch_add(1, Ordering::Relaxed);
        out.push_down(f);
        Ok(())
    }

    fn handle_receive(
        &mut self,
        _: Instant,
        f: Frame,
        out: &mut Output,
    ) -> Result<(), ReceiveError> {
        self.0.received.fetch_add(1, Ordering::Relaxed);
        out.push_up(f);
        Ok(())
    }

    fn handle_timeout(&mut self, _: Instant, _: &mut Output) {}

    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
}

struct TapConstructor(Arc<Taps>);

impl LayerConstructor for TapConstructor {
    fn interface(&self) -> Interface {
        Interface::MESSAGE
    }

    fn configure(&self, _: &LayerOptions) -> Result<LayerFactory, OptionError> {
        let taps = self.0.clone();
        Ok(Arc::new(move |_: &LinkContext| {
            Box::new(Tap(taps.clone())) as Box<dyn Layer>
        }))
    }
}

/// `spec` parsed with `tap` registered, and the counters of its taps.
pub fn tapped(spec: &str) -> (StackSpec, Arc<Taps>) {
    let taps = Arc::new(Taps::default());
    let mut registry = LayerRegistry::default();
    registry.register("tap", TapConstructor(taps.clone()));
    let spec = StackSpec::parse(spec, &registry).expect("valid spec");
    (spec, taps)
}
