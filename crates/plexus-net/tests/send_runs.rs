//! A run of messages handed to a stack at once (`Stack::handle_send_run`,
//! as a driver hands over its batch) is the same as the messages handed
//! over one by one: the same bytes on the wire, the same messages at the
//! peer, in order, and the same refusals; and so are messages handed over
//! packed end to end in one buffer (`Stack::handle_send_packed`). For the
//! built-in layers with a run form of their own (`framing`), for a layer of
//! one's own that keeps the default (each frame of the run through
//! `handle_send`), and for stacks with a layer that may refuse a send
//! (whose top layer takes a run one message at a time, the run stopping at
//! the first refused). A pack on such a stack reaches its top layer up to
//! `CHECKED_CHUNK` bytes at a time, so a layer below that runs out of room
//! may take up to that much more before the first refusal, never less, and
//! what was taken reaches the peer in order.

use std::collections::VecDeque;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use plexus_net::layers::framing::{Framing, FramingConfig};
use plexus_net::stack::CHECKED_CHUNK;
use plexus_net::{
    Frame, Interface, Layer, LayerConfig, LayerOptions, LayerRegistry, LinkContext, OptionError,
    Output, Packed, ReceiveError, Stack, StackSendError, StackSpec,
};
use proptest::prelude::*;

/// A pass-through layer of one's own, without a run form: the stack hands
/// it runs, the default takes them frame by frame.
struct Tap;

impl Layer for Tap {
    fn name(&self) -> &'static str {
        TapConfig::NAME
    }

    fn limits_sends(&self) -> bool {
        false
    }

    fn handle_send(
        &mut self,
        _: Instant,
        frame: Frame,
        out: &mut Output,
    ) -> Result<(), StackSendError> {
        out.push_down(frame);
        Ok(())
    }

    fn handle_receive(
        &mut self,
        _: Instant,
        frame: Frame,
        out: &mut Output,
    ) -> Result<(), ReceiveError> {
        out.push_up(frame);
        Ok(())
    }

    fn handle_timeout(&mut self, _: Instant, _: &mut Output) {}

    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
}

#[derive(Clone, Default)]
struct TapConfig;

impl LayerConfig for TapConfig {
    const NAME: &'static str = "tap";
    const INTERFACE: Interface = Interface::MESSAGE;

    fn from_options(options: &LayerOptions) -> Result<Self, OptionError> {
        match options.iter().next() {
            Some(o) => Err(o.unknown()),
            None => Ok(TapConfig),
        }
    }

    fn build(&self, _: &LinkContext) -> Box<dyn Layer> {
        Box::new(Tap)
    }
}

/// A pass-through layer of one's own that passes packs of small messages
/// down as packs (`Output::push_down_packed`), as `count` in the bench.
struct PackTap;

impl Layer for PackTap {
    fn name(&self) -> &'static str {
        PackTapConfig::NAME
    }

    fn limits_sends(&self) -> bool {
        false
    }

    fn handle_send(
        &mut self,
        _: Instant,
        frame: Frame,
        out: &mut Output,
    ) -> Result<(), StackSendError> {
        out.push_down(frame);
        Ok(())
    }

    fn handle_send_packed(
        &mut self,
        _: Instant,
        messages: &mut Packed<'_>,
        out: &mut Output,
    ) -> Result<(), StackSendError> {
        out.push_down_packed(messages);
        Ok(())
    }

    fn handle_receive(
        &mut self,
        _: Instant,
        frame: Frame,
        out: &mut Output,
    ) -> Result<(), ReceiveError> {
        out.push_up(frame);
        Ok(())
    }

    fn handle_timeout(&mut self, _: Instant, _: &mut Output) {}

    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
}

#[derive(Clone, Default)]
struct PackTapConfig;

impl LayerConfig for PackTapConfig {
    const NAME: &'static str = "ptap";
    const INTERFACE: Interface = Interface::MESSAGE;

    fn from_options(options: &LayerOptions) -> Result<Self, OptionError> {
        match options.iter().next() {
            Some(o) => Err(o.unknown()),
            None => Ok(PackTapConfig),
        }
    }

    fn build(&self, _: &LinkContext) -> Box<dyn Layer> {
        Box::new(PackTap)
    }
}

fn spec(text: &str) -> StackSpec {
    let mut registry = LayerRegistry::default();
    registry.register_config::<TapConfig>();
    registry.register_config::<PackTapConfig>();
    StackSpec::parse(text, &registry).expect("valid spec")
}

/// A message whose bytes say which it is.
fn message(index: usize, len: usize) -> Bytes {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(7) ^ index as u8)
        .collect()
}

/// What one side did: the bytes it wrote, and the messages refused (by
/// index, with the error's name).
#[derive(Debug, PartialEq, Eq)]
struct Sent {
    wire: Vec<Bytes>,
    refused: Vec<(usize, &'static str)>,
}

fn error_name(error: &StackSendError) -> &'static str {
    match error {
        StackSendError::TooLarge { .. } => "too large",
        StackSendError::WouldBlock(_) => "would block",
        StackSendError::Closed(_) => "closed",
        _ => "other",
    }
}

/// Sends `sizes` one message at a time.
fn one_by_one(stack: &mut Stack, now: Instant, sizes: &[usize]) -> Sent {
    let mut refused = Vec::new();
    for (i, len) in sizes.iter().enumerate() {
        if let Err(e) = stack.handle_send(now, message(i, *len)) {
            refused.push((i, error_name(&e)));
        }
    }
    Sent {
        wire: drain(stack),
        refused,
    }
}

/// Sends `sizes` in runs cut at `cuts`, each run handed over whole and
/// handed again after a refusal.
fn in_runs(stack: &mut Stack, now: Instant, sizes: &[usize], cuts: &[usize]) -> Sent {
    let mut refused = Vec::new();
    let mut start = 0;
    let mut ends: Vec<usize> = cuts.iter().map(|c| c % (sizes.len() + 1)).collect();
    ends.push(sizes.len());
    ends.sort_unstable();
    for end in ends {
        if end <= start {
            continue;
        }
        let mut run: VecDeque<Frame> = (start..end)
            .map(|i| Frame::from_payload(message(i, sizes[i])))
            .collect();
        while !run.is_empty() {
            let before = run.len();
            if let Err(e) = stack.handle_send_run(now, &mut run) {
                // The refused one is the last taken from the run.
                refused.push((end - before + (before - run.len()) - 1, error_name(&e)));
            }
        }
        start = end;
    }
    Sent {
        wire: drain(stack),
        refused,
    }
}

/// Sends `sizes` packed end to end in packs cut at `cuts`
/// (`Stack::handle_send_packed`), each pack handed again after a refusal.
fn in_packs(stack: &mut Stack, now: Instant, sizes: &[usize], cuts: &[usize]) -> Sent {
    let mut refused = Vec::new();
    let mut start = 0;
    let mut ends: Vec<usize> = cuts.iter().map(|c| c % (sizes.len() + 1)).collect();
    ends.push(sizes.len());
    ends.sort_unstable();
    for end in ends {
        if end <= start {
            continue;
        }
        let mut bytes = Vec::new();
        let mut message_ends = Vec::new();
        for (i, &len) in sizes.iter().enumerate().take(end).skip(start) {
            bytes.extend_from_slice(&message(i, len));
            message_ends.push(bytes.len() as u32);
        }
        let mut pack = Packed::new(&bytes, &message_ends);
        while !pack.is_empty() {
            if let Err(e) = stack.handle_send_packed(now, &mut pack) {
                // The refused one is the last taken from the pack.
                refused.push((start + pack.taken() - 1, error_name(&e)));
            }
        }
        start = end;
    }
    Sent {
        wire: drain(stack),
        refused,
    }
}

fn drain(stack: &mut Stack) -> Vec<Bytes> {
    std::iter::from_fn(|| stack.poll_transmit())
        .map(|f| f.to_bytes())
        .collect()
}

fn concat(chunks: &[Bytes]) -> Bytes {
    let mut all = BytesMut::new();
    for c in chunks {
        all.extend_from_slice(c);
    }
    all.freeze()
}

/// What the peer's stack hands up from `wire`.
fn received(spec: &StackSpec, now: Instant, wire: &[Bytes]) -> Vec<Bytes> {
    let mut peer = spec.build(now);
    for chunk in wire {
        peer.handle_receive(now, chunk.clone())
            .expect("the peer takes it");
    }
    std::iter::from_fn(|| peer.poll_receive()).collect()
}

fn sizes() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(
        prop_oneof![0usize..48, 48usize..1100, 1100usize..20_000],
        0..120,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Over a byte stream: the same bytes, the same messages at the peer.
    #[test]
    fn a_run_over_a_stream_writes_the_same_bytes_as_one_by_one(
        sizes in sizes(),
        cuts in prop::collection::vec(any::<usize>(), 0..6),
        text in prop_oneof![
            Just("tcp / framing"),
            Just("tcp / framing / tap"),
            Just("tcp / framing / tap / tap"),
            Just("tcp / framing(max_frame=4KiB)"),
            Just("tcp / framing(max_frame=600) / tap"),
            Just("tcp / framing / ptap"),
            Just("tcp / framing(max_frame=600) / ptap / tap"),
            Just("tcp / framing / tap / ptap"),
            Just("tcp / framing / ptap / ptap"),
        ],
    ) {
        let spec = spec(text);
        let now = Instant::now();
        let single = one_by_one(&mut spec.build(now), now, &sizes);
        let runs = in_runs(&mut spec.build(now), now, &sizes, &cuts);
        prop_assert_eq!(&runs.refused, &single.refused);
        prop_assert_eq!(concat(&runs.wire), concat(&single.wire));
        let packs = in_packs(&mut spec.build(now), now, &sizes, &cuts);
        prop_assert_eq!(&packs.refused, &single.refused);
        prop_assert_eq!(concat(&packs.wire), concat(&single.wire));
        let expected: Vec<Bytes> = (0..sizes.len())
            .filter(|i| !single.refused.iter().any(|(r, _)| r == i))
            .map(|i| message(i, sizes[i]))
            .collect();
        prop_assert_eq!(received(&spec, now, &runs.wire), expected);
        // A run's small frames leave as few frames.
        prop_assert!(runs.wire.len() <= single.wire.len().max(1));
    }

    /// Over datagrams, with layers that may refuse a send or combine
    /// frames: the same datagrams, the same messages at the peer.
    #[test]
    fn a_run_over_datagrams_sends_the_same_as_one_by_one(
        sizes in prop::collection::vec(0usize..3000, 0..60),
        cuts in prop::collection::vec(any::<usize>(), 0..6),
        text in prop_oneof![
            Just("udp / slicing / tap"),
            Just("udp / batching / tap"),
            Just("udp / slicing / delivery / ordering"),
            // Delivery's buffer fills within a run: the run stops at the
            // first message refused, as one by one.
            Just("udp / slicing / delivery(send_buffer=8KiB) / ordering"),
            Just("udp / heartbeat / slicing / delivery(send_buffer=4KiB) / ordering / batching"),
            Just("udp / heartbeat / slicing / delivery / ordering / batching"),
            Just("udp / heartbeat / slicing / delivery(send_buffer=4KiB) / ordering / batching / ptap"),
            Just("udp / slicing / ptap"),
            Just("udp / ptap"),
        ],
    ) {
        let spec = spec(text);
        let now = Instant::now();
        let single = one_by_one(&mut spec.build(now), now, &sizes);
        let runs = in_runs(&mut spec.build(now), now, &sizes, &cuts);
        prop_assert_eq!(&runs.refused, &single.refused);
        prop_assert_eq!(&runs.wire, &single.wire);
        let packs = in_packs(&mut spec.build(now), now, &sizes, &cuts);
        // Packs: the same messages refused for their size; a layer that
        // runs out of room may have taken up to a chunk more before the
        // first refusal (`CHECKED_CHUNK`), never less; the peer gets
        // exactly what was taken, in order.
        let refused_for = |sent: &Sent, why: &str| -> Vec<usize> {
            sent.refused.iter().filter(|r| r.1 == why).map(|r| r.0).collect()
        };
        prop_assert_eq!(refused_for(&packs, "too large"), refused_for(&single, "too large"));
        let blocked_from = |sent: &Sent| refused_for(sent, "would block").first().copied();
        match (blocked_from(&single), blocked_from(&packs)) {
            (None, packed) => prop_assert_eq!(packed, None),
            (Some(one), packed) => {
                let packed = packed.unwrap_or(sizes.len());
                prop_assert!(packed >= one, "packs refused from {packed}, one by one from {one}");
                let more: usize = sizes[one..packed].iter().sum();
                prop_assert!(more <= CHECKED_CHUNK + 3000, "{more} bytes more");
                // From there on every message not refused for its size.
                let too_large = refused_for(&single, "too large");
                let blocked = refused_for(&packs, "would block");
                let rest = (packed..sizes.len()).filter(|i| !too_large.contains(i));
                prop_assert!(blocked.iter().copied().eq(rest), "{blocked:?}");
            }
        }
        // What was taken reaches the peer in order, none twice (what
        // `delivery` holds for want of window is still to come), and at
        // least what one by one got there.
        let taken: Vec<Bytes> = (0..sizes.len())
            .filter(|i| !packs.refused.iter().any(|(r, _)| r == i))
            .map(|i| message(i, sizes[i]))
            .collect();
        let got = received(&spec, now, &packs.wire);
        prop_assert!(taken.starts_with(&got), "{} of {} taken arrived, not in order", got.len(), taken.len());
        prop_assert!(got.len() >= received(&spec, now, &single.wire).len());
    }
}

/// `framing`'s run form refuses a frame over its limit where it stands:
/// the frames before it are sent, those after it stay in the run.
#[test]
fn framing_refuses_a_long_frame_in_a_run_and_keeps_the_rest() {
    let now = Instant::now();
    let mut framing = Framing::new(FramingConfig { max_frame_len: 100 });
    let mut out = Output::new();
    let mut run: VecDeque<Frame> = [10, 20, 101, 30]
        .iter()
        .enumerate()
        .map(|(i, len)| Frame::from_payload(message(i, *len)))
        .collect();
    let error = framing
        .handle_send_run(now, &mut run, &mut out)
        .expect_err("the third is too long");
    let StackSendError::TooLarge { frame, max } = error else {
        panic!("refused as too long, not {error}");
    };
    assert_eq!((frame.len(), max), (101, 100));
    assert_eq!(run.len(), 1, "the fourth is still to send");
    framing
        .handle_send_run(now, &mut run, &mut out)
        .expect("the fourth fits");
    assert!(run.is_empty());
    let wire: Vec<Bytes> = std::iter::from_fn(|| out.pop_down())
        .map(|f| f.to_bytes())
        .collect();
    assert_eq!(wire.len(), 2, "the two before gathered in one frame");
    let spec = spec("tcp / framing");
    assert_eq!(
        received(&spec, now, &wire),
        vec![message(0, 10), message(1, 20), message(3, 30)]
    );
}
