//! `http`: the server side of HTTP/1.1 as a layer of the composable stack
//! (`tcp / http`, `tls / http`): bytes below, requests up, responses down.
//!
//! **Guarantee.** Every request the peer sends whole within the bounds goes
//! up once, in order, as a [`RequestMessage`] numbered on the connection;
//! the responses the application hands down ([`ResponseMessage`], in any
//! order) leave in request order (pipelining), each with its length or
//! chunked. A request the decoder refuses, and a request not received whole
//! within `request_timeout` (a slowloris client), gets its status (400,
//! 408, 413, 417, 431, 501, 505) after the responses owed before it, and
//! the connection closes; so does a connection idle for `idle_timeout`,
//! and one whose request or response said `Connection: close` once that
//! response is out. Memory per connection is bounded: the received bytes
//! not yet decoded by a head and a body (reading pauses while `pipeline`
//! requests await their responses), held response parts by `max_held`;
//! once everything received is decoded, a receive buffer over 4 KiB is
//! released, so an idle connection does not keep its largest request.
//! `Expect: 100-continue` is answered with `100 Continue` when the body has
//! not come.
//!
//! **Spec options.** `http(max_head=16KiB, max_headers=64, max_body=1MiB,
//! request_timeout=10s, idle_timeout=60s, pipeline=16, max_held=16MiB)`.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use plexus_net::{
    DataUnit, Frame, Interface, Layer, LayerConfig, LayerError, LayerOptions, LinkContext,
    LinkError, OptionError, Output, ReceiveError, StackSendError,
};

use crate::body::Body;
use crate::decoder::{Decoded, Limits, RequestDecoder};
use crate::error::HttpClose;
use crate::response::{
    encode_chunk_size, encode_chunked_head_as, encode_head_as, encode_last_chunk, Persistence,
    Response,
};
use crate::wire::{RequestMessage, ResponseMessage};
use crate::{Method, Version};

/// Bytes of receive buffer an idle connection keeps for its next request;
/// a larger one, or one shared with a body handed up, is released once
/// everything in it is decoded.
const KEEP_RECEIVED: usize = 4 << 10;

/// Configuration of the `http` layer (see the [module docs](self)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpConfig {
    /// The request decoder's bounds (`max_head`, `max_headers`, `max_body`).
    pub limits: Limits,
    /// A request must arrive whole within this long of its first byte.
    /// Default 10 s.
    pub request_timeout: Duration,
    /// A connection with no request in progress and none unanswered closes
    /// after this long. Default 60 s.
    pub idle_timeout: Duration,
    /// Requests handed up and not answered yet, at most; reading pauses
    /// beyond. Default 16.
    pub pipeline: usize,
    /// Bytes of response parts held for requests whose turn has not come.
    /// Default 16 MiB.
    pub max_held: usize,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            limits: Limits::default(),
            request_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            pipeline: 16,
            max_held: 16 << 20,
        }
    }
}

impl LayerConfig for HttpConfig {
    const NAME: &'static str = "http";
    const INTERFACE: Interface = Interface {
        needs: DataUnit::ByteStream,
        offers: DataUnit::Message,
    };

    fn from_options(options: &LayerOptions) -> Result<Self, OptionError> {
        let mut c = Self::default();
        for o in options.iter() {
            match o.key() {
                "max_head" => c.limits.max_head = o.size()?,
                "max_headers" => c.limits.max_headers = o.count_usize()?.max(1),
                "max_body" => c.limits.max_body = o.size()?,
                "request_timeout" => c.request_timeout = o.duration()?,
                "idle_timeout" => c.idle_timeout = o.duration()?,
                "pipeline" => c.pipeline = o.count_usize()?.max(1),
                "max_held" => c.max_held = o.size()?,
                _ => return Err(o.unknown()),
            }
        }
        Ok(c)
    }

    fn build(&self, link: &LinkContext) -> Box<dyn Layer> {
        Box::new(HttpLayer::new(self.clone(), link.now))
    }
}

/// The counters of one connection's `http` layer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HttpStats {
    /// Requests handed up.
    pub requests: u64,
    /// Responses written whole.
    pub responses: u64,
    /// Requests refused by the decoder (malformed, too large, smuggling).
    pub refused: u64,
    /// Requests not received whole within `request_timeout`.
    pub timeouts: u64,
}

/// Counters many connections' layers add to (a server's totals), next to
/// each layer's own [`HttpStats`]; see [`HttpLayer::with_totals`].
#[derive(Debug, Default)]
pub struct HttpTotals {
    requests: AtomicU64,
    responses: AtomicU64,
    refused: AtomicU64,
    timeouts: AtomicU64,
    /// Responses (the refusals' included) by status class, 1xx to 5xx.
    by_class: [AtomicU64; 5],
}

impl HttpTotals {
    /// The totals so far.
    pub fn snapshot(&self) -> HttpStats {
        HttpStats {
            requests: self.requests.load(Ordering::Relaxed),
            responses: self.responses.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            timeouts: self.timeouts.load(Ordering::Relaxed),
        }
    }

    /// Responses so far whose status is in `class` (1 for 1xx ... 5 for
    /// 5xx; others 0).
    pub fn responses_in_class(&self, class: u16) -> u64 {
        match class {
            1..=5 => self.by_class[usize::from(class - 1)].load(Ordering::Relaxed),
            _ => 0,
        }
    }
}

/// The index in [`HttpTotals::by_class`] of a status (an out-of-range
/// status, which the encoder refuses anyway, counts as 5xx).
fn class_index(status: u16) -> usize {
    match status / 100 {
        c @ 1..=5 => usize::from(c - 1),
        _ => 4,
    }
}

/// Which counter an event adds to.
#[derive(Debug, Clone, Copy)]
enum Count {
    Request,
    Response,
    Refused,
    Timeout,
}

/// A request handed up and not fully answered.
#[derive(Debug, Clone, Copy)]
struct Open {
    id: u64,
    version: Version,
    keep_alive: bool,
    head_only: bool,
    /// Its chunked response has begun.
    streaming: bool,
    /// When it was received whole (the start of its latency).
    received_at: Instant,
    /// The status of its chunked response, once its head is out.
    status: u16,
}

/// The `http` layer of one connection. See the [module docs](self).
#[derive(Debug)]
pub struct HttpLayer {
    config: HttpConfig,
    decoder: RequestDecoder,
    received: BytesMut,
    open: VecDeque<Open>,
    next_id: u64,
    held: BTreeMap<u64, VecDeque<ResponseMessage>>,
    held_bytes: usize,
    /// No more requests are read: one said `Connection: close`, or one was
    /// refused (its answer is `last_word`).
    reading_done: bool,
    /// The status (and why) owed after the open requests' responses, then
    /// the connection closes.
    last_word: Option<(u16, String)>,
    request_started: Option<Instant>,
    idle_since: Option<Instant>,
    stats: HttpStats,
    totals: Option<Arc<HttpTotals>>,
    /// `plexus_http_request_seconds`, a handle the server looked up once.
    latency: Option<metrics::Histogram>,
}

impl HttpLayer {
    /// A layer for a connection accepted at `now`.
    pub fn new(config: HttpConfig, now: Instant) -> Self {
        Self {
            decoder: RequestDecoder::new(config.limits),
            config,
            received: BytesMut::new(),
            open: VecDeque::new(),
            next_id: 0,
            held: BTreeMap::new(),
            held_bytes: 0,
            reading_done: false,
            last_word: None,
            request_started: None,
            idle_since: Some(now),
            stats: HttpStats::default(),
            totals: None,
            latency: None,
        }
    }

    /// The layer, adding what it counts to `totals` too (a server's
    /// counters over all its connections).
    pub fn with_totals(mut self, totals: Arc<HttpTotals>) -> Self {
        self.totals = Some(totals);
        self
    }

    /// The layer, recording each request's latency (from received whole
    /// to its response written) in `histogram`: a handle looked up once
    /// per server, so a request costs a record and no lookup.
    pub fn with_latency(mut self, histogram: metrics::Histogram) -> Self {
        self.latency = Some(histogram);
        self
    }

    /// Counts a response written (or a refusal's answer) by its status
    /// class, and records its latency when it answers a request.
    fn count_status(&mut self, status: u16, latency: Option<Duration>) {
        if let Some(t) = &self.totals {
            t.by_class[class_index(status)].fetch_add(1, Ordering::Relaxed);
        }
        if let (Some(h), Some(l)) = (&self.latency, latency) {
            h.record(l.as_secs_f64());
        }
    }

    /// The connection's counters.
    pub fn stats(&self) -> HttpStats {
        self.stats
    }

    fn count(&mut self, what: Count) {
        let (mine, total) = match what {
            Count::Request => (
                &mut self.stats.requests,
                self.totals.as_ref().map(|t| &t.requests),
            ),
            Count::Response => (
                &mut self.stats.responses,
                self.totals.as_ref().map(|t| &t.responses),
            ),
            Count::Refused => (
                &mut self.stats.refused,
                self.totals.as_ref().map(|t| &t.refused),
            ),
            Count::Timeout => (
                &mut self.stats.timeouts,
                self.totals.as_ref().map(|t| &t.timeouts),
            ),
        };
        *mine += 1;
        if let Some(total) = total {
            total.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Decodes what was received, as far as the pipeline allows.
    fn read(&mut self, now: Instant, out: &mut Output) {
        // A body goes up as a slice of the receive buffer, sharing its
        // allocation.
        let mut took_body = false;
        while !self.reading_done && self.open.len() < self.config.pipeline {
            match self.decoder.decode(&mut self.received) {
                Ok(None) => break,
                Ok(Some(Decoded::Continue)) => {
                    out.push_down(Frame::from_payload(Bytes::from_static(
                        b"HTTP/1.1 100 Continue\r\n\r\n",
                    )));
                }
                Ok(Some(Decoded::Request(request))) => {
                    let id = self.next_id;
                    self.next_id += 1;
                    self.count(Count::Request);
                    self.open.push_back(Open {
                        id,
                        version: request.version,
                        keep_alive: request.keep_alive,
                        head_only: request.method == Method::Head,
                        streaming: false,
                        received_at: now,
                        status: 0,
                    });
                    if !request.keep_alive {
                        self.reading_done = true;
                    }
                    took_body |= !request.body.is_empty();
                    self.request_started = None;
                    self.idle_since = None;
                    out.push_up(RequestMessage { id, request }.encode());
                }
                Err(e) => {
                    self.count(Count::Refused);
                    self.reading_done = true;
                    self.last_word = Some((e.status(), e.to_string()));
                }
            }
        }
        // Everything received is decoded: a large buffer goes back to the
        // allocator rather than staying, as large as the largest request
        // or burst so far, with a connection that may now idle for
        // `idle_timeout`; a small one stays for the next request. An empty
        // buffer may still hold all of the allocation its bytes came in:
        // reclaiming it shows its size (and fails if a body handed up
        // shares it).
        if self.received.is_empty() && (took_body || self.received.try_reclaim(KEEP_RECEIVED + 1)) {
            self.received = BytesMut::new();
        }
        if !self.reading_done && !self.received.is_empty() && self.request_started.is_none() {
            self.request_started = Some(now);
            self.idle_since = None;
        }
        self.write_ready(now, out);
    }

    /// Writes what is due: held parts of the request whose turn it is,
    /// then the last word once nothing is owed before it.
    fn write_ready(&mut self, now: Instant, out: &mut Output) {
        while let Some(front) = self.open.front().copied() {
            let Some(parts) = self.held.get_mut(&front.id) else {
                break;
            };
            let Some(part) = parts.pop_front() else {
                self.held.remove(&front.id);
                break;
            };
            self.held_bytes = self.held_bytes.saturating_sub(part_len(&part));
            if parts.is_empty() {
                self.held.remove(&front.id);
            }
            self.write(now, part, out);
        }
        if self.open.is_empty() {
            if let Some((status, why)) = self.last_word.take() {
                let response = Response::new(status, format!("{why}\n"))
                    .header("content-type", "text/plain; charset=utf-8");
                // A status and fields of our own: they encode.
                if let Ok(frame) = response_frame(response, Persistence::Close, false) {
                    out.push_down(frame);
                }
                self.count_status(status, None);
                out.close(LinkError::Layer {
                    layer: "http",
                    source: LayerError::new(HttpClose::Refused { status, why }),
                });
            } else if self.reading_done {
                out.close(LinkError::Layer {
                    layer: "http",
                    source: LayerError::new(HttpClose::ConnectionClose),
                });
            } else if self.received.is_empty() && self.idle_since.is_none() {
                self.idle_since = Some(now);
            }
        }
    }

    /// Writes a part of the response of the front request.
    fn write(&mut self, now: Instant, part: ResponseMessage, out: &mut Output) {
        // The connection closes after this response if the request said so,
        // or if it is the last before a close (reading ended, no refusal's
        // answer follows it).
        let last = self.open.len() == 1 && self.reading_done && self.last_word.is_none();
        let Some(front) = self.open.front_mut() else {
            return;
        };
        let persistence = Persistence::of(front.version, front.keep_alive && !last);
        let finished = match part {
            ResponseMessage::Whole { response, .. } => {
                front.status = response.status;
                let frame = response_frame(response, persistence, front.head_only).or_else(|e| {
                    front.status = 500;
                    // The application's response cannot be written:
                    // answer 500 in its place.
                    response_frame(
                        Response::new(500, format!("{e}\n")),
                        persistence,
                        front.head_only,
                    )
                });
                if let Ok(frame) = frame {
                    out.push_down(frame);
                }
                self.count(Count::Response);
                true
            }
            ResponseMessage::ChunkedHead {
                status, headers, ..
            } => {
                let mut head = BytesMut::new();
                front.status = status;
                if encode_chunked_head_as(&mut head, status, &headers, persistence).is_err() {
                    front.status = 500;
                    let _ = encode_chunked_head_as(&mut head, 500, &[], persistence);
                }
                front.streaming = true;
                out.push_down(Frame::from_payload(head.freeze()));
                false
            }
            ResponseMessage::Chunk { data, .. } => {
                if front.streaming && !front.head_only && !data.is_empty() {
                    let mut size = BytesMut::new();
                    encode_chunk_size(&mut size, data.len());
                    let mut frame = Frame::from_payload(size.freeze());
                    frame.push_payload(data);
                    frame.push_payload(Bytes::from_static(b"\r\n"));
                    out.push_down(frame);
                }
                false
            }
            ResponseMessage::End { .. } => {
                if front.streaming && !front.head_only {
                    let mut last = BytesMut::new();
                    encode_last_chunk(&mut last);
                    out.push_down(Frame::from_payload(last.freeze()));
                }
                self.count(Count::Response);
                true
            }
        };
        if finished {
            if let Some(&Open {
                status,
                received_at,
                ..
            }) = self.open.front()
            {
                self.count_status(status, Some(now.saturating_duration_since(received_at)));
            }
            let done = self.open.pop_front();
            if done.is_some_and(|o| !o.keep_alive) {
                self.reading_done = true;
            }
            // The pipeline has room again.
            if !self.reading_done {
                self.read(now, out);
            }
        }
    }
}

/// `response` as one frame: its head, then its body as a segment of its
/// own (none for a bodiless status or when `head_only`).
fn response_frame(
    response: Response,
    persistence: Persistence,
    head_only: bool,
) -> Result<Frame, crate::ResponseError> {
    let mut head = BytesMut::new();
    let body = encode_head_as(&mut head, &response, persistence)?;
    let mut frame = Frame::from_payload(head.freeze());
    if body && !head_only {
        match response.body {
            Body::Bytes(bytes) => frame.push_payload(bytes),
            Body::File(region) => frame.push_file(region),
        }
    }
    Ok(frame)
}

fn part_len(part: &ResponseMessage) -> usize {
    match part {
        ResponseMessage::Whole { response, .. } => 64 + response.body.len(),
        ResponseMessage::Chunk { data, .. } => 16 + data.len(),
        _ => 64,
    }
}

impl Layer for HttpLayer {
    fn name(&self) -> &'static str {
        "http"
    }

    fn limits_sends(&self) -> bool {
        false
    }

    /// A file body goes down as the region it came as, behind its head.
    fn passes_file_regions(&self) -> bool {
        true
    }

    fn flushes(&self) -> bool {
        false
    }

    fn handle_send(
        &mut self,
        now: Instant,
        frame: Frame,
        out: &mut Output,
    ) -> Result<(), StackSendError> {
        let refuse = |reason, frame| StackSendError::Layer {
            layer: "http",
            reason,
            frame,
        };
        let part = match ResponseMessage::decode_frame(&frame) {
            Ok(p) => p,
            Err(e) => return Err(refuse(e.0, frame)),
        };
        let id = part.id();
        let Some(front) = self.open.front() else {
            return Err(refuse("no request awaits a response", frame));
        };
        if id < front.id || id >= self.next_id {
            return Err(refuse("no open request has this number", frame));
        }
        if id == front.id && !self.held.contains_key(&id) {
            self.write(now, part, out);
            self.write_ready(now, out);
            return Ok(());
        }
        let len = part_len(&part);
        if self.held_bytes + len > self.config.max_held {
            return Err(refuse(
                "too many response bytes held for later requests",
                frame,
            ));
        }
        self.held_bytes += len;
        self.held.entry(id).or_default().push_back(part);
        self.write_ready(now, out);
        Ok(())
    }

    fn handle_receive(
        &mut self,
        now: Instant,
        frame: Frame,
        out: &mut Output,
    ) -> Result<(), ReceiveError> {
        if self.reading_done {
            // Nothing after a close or a refusal is read.
            return Ok(());
        }
        for chunk in frame.chunks() {
            self.received.extend_from_slice(chunk);
        }
        let bound = self.config.limits.max_head + self.config.limits.max_body + (64 << 10);
        if self.received.len() > bound {
            // A client pipelining far ahead of its answers.
            self.count(Count::Refused);
            self.reading_done = true;
            self.last_word = Some((
                503,
                "too many pipelined requests waiting for their responses".into(),
            ));
            self.write_ready(now, out);
            return Ok(());
        }
        self.read(now, out);
        Ok(())
    }

    fn handle_timeout(&mut self, now: Instant, out: &mut Output) {
        if let Some(started) = self.request_started {
            if now >= started + self.config.request_timeout && !self.reading_done {
                self.count(Count::Timeout);
                self.reading_done = true;
                self.request_started = None;
                self.last_word = Some((
                    408,
                    format!(
                        "the request did not arrive whole within {:?}",
                        self.config.request_timeout
                    ),
                ));
                self.write_ready(now, out);
                return;
            }
        }
        if let Some(idle) = self.idle_since {
            if now >= idle + self.config.idle_timeout && self.open.is_empty() {
                self.reading_done = true;
                self.idle_since = None;
                out.close(LinkError::Layer {
                    layer: "http",
                    source: LayerError::new(HttpClose::Idle(self.config.idle_timeout)),
                });
            }
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let request = self
            .request_started
            .filter(|_| !self.reading_done)
            .map(|t| t + self.config.request_timeout);
        let idle = self
            .idle_since
            .filter(|_| self.open.is_empty() && !self.reading_done)
            .map(|t| t + self.config.idle_timeout);
        match (request, idle) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}

#[cfg(test)]
mod tests;
