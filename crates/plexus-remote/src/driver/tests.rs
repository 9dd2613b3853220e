use std::time::Duration;

use super::locked::{Carry, Locked};
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

/// What a [`Locked`] recorder's steps produced, as its owner saw it.
#[derive(Default)]
struct Seen {
    sent: std::sync::Mutex<Vec<u32>>,
    /// Events carried out, each with whether the lock was free then.
    events: std::sync::Mutex<Vec<(u32, bool)>>,
    stepped: std::sync::Mutex<usize>,
    wakes: std::sync::Mutex<Vec<Instant>>,
}

/// The owner of a locked recorder: answers event 7 by stepping it again.
#[derive(Clone)]
struct Owner {
    locked: std::sync::Arc<Locked<Recorder>>,
    seen: std::sync::Arc<Seen>,
}

impl Carry<Recorder> for Owner {
    fn transmit(&self, to: u32, _packet: Bytes) {
        self.seen.sent.lock().unwrap().push(to);
    }

    fn event(&self, event: u32) {
        let free = !self.locked.is_locked();
        self.seen.events.lock().unwrap().push((event, free));
        if event == 7 {
            // Re-entering from an event: the lock is let go by now.
            self.locked
                .step(self, |r, now| r.handle_packet(now, 8, Bytes::new()));
        }
    }

    fn stepped(&self, recorder: &mut Recorder) {
        *self.seen.stepped.lock().unwrap() += 1;
        recorder.log.push("stepped".into());
    }

    fn wake_at(&self, deadline: Instant) {
        self.seen.wakes.lock().unwrap().push(deadline);
    }
}

fn owner() -> Owner {
    Owner {
        locked: std::sync::Arc::new(Locked::default()),
        seen: std::sync::Arc::default(),
    }
}

#[test]
fn a_locked_step_carries_out_its_output_with_the_lock_let_go() {
    let o = owner();
    let answer = o.locked.step(&o, |r, now| {
        r.handle_packet(now, 7, Bytes::new());
        r.out.push((3, Bytes::new()));
        42
    });
    assert_eq!(answer, 42, "the input's own result comes back");
    assert_eq!(*o.seen.sent.lock().unwrap(), [3]);
    // Event 7 stepped the protocol again from inside its carrying out:
    // no deadlock, and event 8 was carried out by that inner step.
    assert_eq!(*o.seen.events.lock().unwrap(), [(7, true), (8, true)]);
    assert_eq!(*o.seen.stepped.lock().unwrap(), 2, "stepped once per input");
    o.locked.read(|r| {
        assert_eq!(r.log, ["packet 7", "stepped", "packet 8", "stepped"]);
    });
}

#[tokio::test(start_paused = true)]
async fn a_locked_protocol_asks_for_a_wake_up_only_when_its_deadline_moves_earlier() {
    let o = owner();
    let start = clock();
    let at = |secs| start + Duration::from_secs(secs);
    o.locked.step(&o, |r, _| r.deadline = Some(at(5)));
    // Later, or the same: the wake-up armed comes first.
    o.locked.step(&o, |r, _| r.deadline = Some(at(9)));
    o.locked.step(&o, |r, _| r.deadline = Some(at(5)));
    // Earlier: a new wake-up.
    o.locked.step(&o, |r, _| r.deadline = Some(at(2)));
    assert_eq!(*o.seen.wakes.lock().unwrap(), [at(5), at(2)]);

    // The wake-up at 2 comes before the deadline is due (it moved): no
    // timeout, and the next deadline is armed again.
    o.locked.step(&o, |r, _| r.deadline = Some(at(4)));
    tokio::time::advance(Duration::from_secs(2)).await;
    o.locked.timeout(&o);
    o.locked
        .read(|r| assert!(!r.log.contains(&"timeout".to_owned())));
    assert_eq!(o.seen.wakes.lock().unwrap().last(), Some(&at(4)));

    tokio::time::advance(Duration::from_secs(2)).await;
    o.locked.timeout(&o);
    o.locked.read(|r| {
        assert_eq!(r.log.iter().filter(|l| *l == "timeout").count(), 1);
        assert_eq!(r.deadline, None);
    });
    assert_eq!(
        o.seen.wakes.lock().unwrap().len(),
        3,
        "nothing left to wake for"
    );
}
