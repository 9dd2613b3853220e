use std::time::Duration;

use super::*;

/// Logs its inputs; raises an event per packet; wakes once at `deadline`.
#[derive(Default)]
struct Recorder {
    log: Vec<String>,
    deadline: Option<Instant>,
    out: Vec<(u32, Bytes)>,
    events: Vec<u32>,
}

impl Protocol for Recorder {
    type Address = u32;
    type Event = u32;

    fn handle_packet(&mut self, _now: Instant, from: u32, _packet: Bytes) {
        self.log.push(format!("packet {from}"));
        self.events.push(from);
    }

    fn handle_timeout(&mut self, _now: Instant) {
        self.log.push("timeout".into());
        self.deadline = None;
    }

    fn poll_transmit(&mut self) -> Option<(u32, Bytes)> {
        self.out.pop()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.deadline
    }

    fn poll_event(&mut self) -> Option<u32> {
        self.events.pop()
    }
}

enum Command {
    Stop,
}

/// Answers every event with a packet to its sender; counts flushes.
#[derive(Default)]
struct Answer {
    flushes: usize,
    sent: Vec<u32>,
    stop: bool,
}

impl Host<Recorder> for Answer {
    type Command = Command;

    fn command(&mut self, _: &mut Recorder, _now: Instant, Command::Stop: Command) {
        self.stop = true;
    }

    fn transmit(&mut self, _: &mut Recorder, _now: Instant, to: u32, _packet: Bytes) {
        self.sent.push(to);
    }

    fn event(&mut self, recorder: &mut Recorder, _now: Instant, from: u32) {
        recorder.out.push((from, Bytes::new()));
    }

    fn flushed(&mut self, _: &mut Recorder, _now: Instant) {
        self.flushes += 1;
    }

    fn is_done(&self, _: &Recorder) -> bool {
        self.stop
    }
}

fn packet(from: u32) -> Input<u32, Command> {
    Input::Packet(from, Bytes::new())
}

/// The inputs of a driven recorder, and the task handing it back.
type Driven = (
    super::Inputs<u32, Command>,
    tokio::task::JoinHandle<(Recorder, Answer)>,
);

/// A driven recorder that wakes `after` from now; the test sends it inputs
/// and awaits what the driver hands back.
fn spawn_waking_after(after: Duration) -> Driven {
    let (inputs, rx) = mpsc::unbounded_channel();
    let recorder = Recorder {
        deadline: Some((tokio::time::Instant::now() + after).into_std()),
        ..Recorder::default()
    };
    (inputs, tokio::spawn(run(recorder, Answer::default(), rx)))
}

#[tokio::test]
async fn waiting_inputs_are_handled_in_batches_before_each_flush() {
    let (inputs, rx) = mpsc::unbounded_channel();
    let n = 2 * BATCH + 10;
    for i in 0..n {
        inputs.send(packet(i as u32)).unwrap();
    }
    inputs.send(Input::Command(Command::Stop)).unwrap();
    let (recorder, host) = run(Recorder::default(), Answer::default(), rx).await;
    assert_eq!(recorder.log.len(), n);
    // One flush at the start, then one per batch (the last one holds the
    // stop).
    assert_eq!(host.flushes, 1 + 3);
    // Every event's answer went out in its batch's flush.
    assert_eq!(host.sent.len(), n);
}

#[tokio::test(start_paused = true)]
async fn the_protocol_is_woken_at_its_deadline() {
    let (inputs, task) = spawn_waking_after(Duration::from_secs(3));
    // Handled at the deadline (the paused clock jumps to it), before the
    // packet sent after it.
    tokio::time::sleep(Duration::from_secs(5)).await; // timing-ok: paused clock, jumps past the deadline
    inputs.send(packet(1)).unwrap();
    inputs.send(Input::Command(Command::Stop)).unwrap();
    let (recorder, _) = task.await.unwrap();
    assert_eq!(recorder.log, ["timeout", "packet 1"]);
}

#[tokio::test(start_paused = true)]
async fn a_deadline_passed_during_a_batch_is_handled_right_after_it() {
    let (inputs, task) = spawn_waking_after(Duration::from_secs(1));
    // The driver waits; then a packet and the deadline are both ready
    // when it runs again: inputs go first, the deadline right after, in
    // the same round (one flush for both).
    tokio::task::yield_now().await;
    inputs.send(packet(1)).unwrap();
    inputs.send(Input::Command(Command::Stop)).unwrap();
    tokio::time::advance(Duration::from_secs(2)).await;
    let (recorder, host) = task.await.unwrap();
    assert_eq!(recorder.log, ["packet 1", "timeout"]);
    assert_eq!(host.flushes, 2);
}
