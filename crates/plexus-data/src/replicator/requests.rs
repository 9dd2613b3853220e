//! Updates and gets waiting for enough members.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::error::{GetError, UpdateError};
use super::wire::{Body, WireEntry};
use super::{Event, ReplicaId, Replicator, RequestId, Traffic};

#[derive(Debug)]
enum Kind {
    Update {
        /// The store batch that must be written first (durable keys).
        batch: Option<u64>,
        /// The write, for sending again to peers that did not answer.
        write: Option<WireEntry>,
    },
    Get,
}

#[derive(Debug)]
struct Pending {
    key: Arc<str>,
    kind: Kind,
    needed: usize,
    answered: BTreeSet<ReplicaId>,
    /// Members that could not merge the write (its type not registered
    /// there, or refused).
    refused: BTreeSet<ReplicaId>,
    deadline: Instant,
    timeout: Duration,
}

#[derive(Debug, Default)]
pub(crate) struct Requests {
    pending: HashMap<RequestId, Pending>,
    deadlines: BTreeSet<(Instant, RequestId)>,
    /// Requests that got an answer (or started) since the last check.
    touched: Vec<RequestId>,
    /// Updates waiting for their store batch.
    storing: BTreeSet<(u64, RequestId)>,
    next: RequestId,
}

impl Requests {
    pub(crate) fn next_id(&mut self) -> RequestId {
        self.next += 1;
        self.next
    }

    pub(crate) fn len(&self) -> usize {
        self.pending.len()
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn start_update(
        &mut self,
        request: RequestId,
        key: Arc<str>,
        needed: usize,
        deadline: Instant,
        timeout: Duration,
        batch: Option<u64>,
        write: Option<WireEntry>,
    ) {
        self.deadlines.insert((deadline, request));
        self.touched.push(request);
        if let Some(b) = batch {
            self.storing.insert((b, request));
        }
        self.pending.insert(
            request,
            Pending {
                key,
                kind: Kind::Update { batch, write },
                needed,
                answered: BTreeSet::new(),
                refused: BTreeSet::new(),
                deadline,
                timeout,
            },
        );
    }

    pub(crate) fn start_get(
        &mut self,
        request: RequestId,
        key: Arc<str>,
        needed: usize,
        deadline: Instant,
        timeout: Duration,
    ) {
        self.deadlines.insert((deadline, request));
        self.touched.push(request);
        self.pending.insert(
            request,
            Pending {
                key,
                kind: Kind::Get,
                needed,
                answered: BTreeSet::new(),
                refused: BTreeSet::new(),
                deadline,
                timeout,
            },
        );
    }

    pub(crate) fn answered(&mut self, request: RequestId, from: ReplicaId) {
        if let Some(p) = self.pending.get_mut(&request) {
            p.answered.insert(from);
            self.touched.push(request);
        }
    }

    pub(crate) fn refused(&mut self, request: RequestId, from: ReplicaId) {
        if let Some(p) = self.pending.get_mut(&request) {
            p.refused.insert(from);
        }
    }

    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.first().map(|(d, _)| *d)
    }

    /// Ends the requests that have enough answers (and their store batch
    /// written) or whose deadline passed. `members` are the replicas
    /// counted now: an answer from a member that left no longer counts.
    pub(crate) fn complete(
        &mut self,
        now: Instant,
        stored: u64,
        members: &dyn Fn(ReplicaId) -> bool,
    ) -> Vec<Event> {
        let mut candidates: BTreeSet<RequestId> = self.touched.drain(..).collect();
        candidates.extend(
            self.deadlines
                .iter()
                .take_while(|(d, _)| *d <= now)
                .map(|(_, id)| *id),
        );
        candidates.extend(
            self.storing
                .iter()
                .take_while(|(b, _)| *b <= stored)
                .map(|(_, id)| *id),
        );
        let mut done = Vec::new();
        for id in candidates {
            let Some(p) = self.pending.get(&id) else {
                continue;
            };
            let answers = 1 + p.answered.iter().filter(|r| members(**r)).count();
            let stored_ok = match p.kind {
                Kind::Update { batch, .. } => batch.is_none_or(|b| b <= stored),
                Kind::Get => true,
            };
            if answers >= p.needed && stored_ok {
                done.push((id, Ok(())));
            } else if now >= p.deadline {
                done.push((id, Err((answers, p.refused.len()))));
            }
        }
        done.sort_by_key(|(id, _)| *id);
        done.into_iter()
            .map(|(id, outcome)| {
                let p = self.pending.remove(&id).expect("listed");
                self.deadlines.remove(&(p.deadline, id));
                if let Kind::Update { batch: Some(b), .. } = p.kind {
                    self.storing.remove(&(b, id));
                }
                let key = p.key;
                match (p.kind, outcome) {
                    (Kind::Update { .. }, Ok(())) => Event::UpdateDone {
                        request: id,
                        key,
                        result: Ok(()),
                    },
                    (Kind::Update { .. }, Err((acked, refused))) => Event::UpdateDone {
                        request: id,
                        result: Err(UpdateError::Timeout {
                            key: key.to_string(),
                            acked,
                            refused,
                            needed: p.needed,
                            timeout: p.timeout,
                        }),
                        key,
                    },
                    (Kind::Get, Ok(())) => Event::GetDone {
                        request: id,
                        key,
                        result: Ok(()),
                    },
                    (Kind::Get, Err((replies, _))) => Event::GetDone {
                        request: id,
                        result: Err(GetError::Timeout {
                            key: key.to_string(),
                            replies,
                            needed: p.needed,
                            timeout: p.timeout,
                        }),
                        key,
                    },
                }
            })
            .collect()
    }

    /// Writes and reads waiting for answers: `(request, what to send,
    /// who answered)`.
    fn unanswered(&self) -> Vec<(RequestId, Body, BTreeSet<ReplicaId>)> {
        let mut v: Vec<_> = self
            .pending
            .iter()
            .filter_map(|(&request, p)| {
                let body = match &p.kind {
                    Kind::Update {
                        write: Some(entry), ..
                    } => Body::Write {
                        request,
                        entry: entry.clone(),
                    },
                    Kind::Update { write: None, .. } => return None,
                    Kind::Get => Body::Read {
                        request,
                        key: p.key.to_string(),
                    },
                };
                let mut answered = p.answered.clone();
                answered.extend(p.refused.iter().copied());
                Some((request, body, answered))
            })
            .collect();
        v.sort_by_key(|(id, _, _)| *id);
        v
    }
}

impl Replicator {
    /// Sends writes and reads again to the peers that have not answered
    /// them (a request or its answer may have been lost).
    pub(super) fn resend_requests(&mut self) {
        for (_, body, answered) in self.requests.unanswered() {
            let to: Vec<Arc<str>> = self
                .peers
                .iter()
                .filter(|(_, p)| p.replica.is_none_or(|r| !answered.contains(&r)))
                .map(|(a, _)| Arc::clone(a))
                .collect();
            for address in to {
                self.send(&address, body.clone(), Traffic::Request);
            }
        }
    }
}
