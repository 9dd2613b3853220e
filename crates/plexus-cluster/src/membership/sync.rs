//! Full-membership exchanges: a joiner's first view, and push-pull
//! anti-entropy (SWIM's gossip only spreads news; a member that missed some
//! catches up here). Digests go first, so members that agree exchange one
//! small packet each way.

use std::sync::Arc;
use std::time::Instant;

use rand::Rng;

use super::Membership;
use super::ADMITTED_RETRY;
use crate::event::ClusterEvent;
use crate::member::{Member, MemberState};
use crate::wire::{entry_len, Body, Packet, SyncMode, MAX_ENTRIES};

impl Membership {
    /// A digest of every claim this member holds: a sum of one hash per
    /// claim, so it needs no sorting and two members holding the same
    /// claims agree whatever order they learnt them in. XXH3 rather than
    /// BLAKE3: a digest only decides whether to exchange pages (a collision
    /// delays a sync to the next round), and every member hashes its whole
    /// view at every push-pull.
    pub(super) fn digest(&self) -> u64 {
        let mut buf = [0u8; 255 + 8 + 1];
        self.members
            .values()
            .filter(|m| m.state != MemberState::Removed)
            .chain(std::iter::once(&self.me))
            .map(|m| {
                // Addresses are at most 255 bytes (checked on decode and in
                // `Membership::new`).
                let a = &m.address.as_bytes()[..m.address.len().min(255)];
                buf[..a.len()].copy_from_slice(a);
                buf[a.len()..a.len() + 8].copy_from_slice(&m.incarnation.to_le_bytes());
                buf[a.len() + 8] = m.state.code();
                twox_hash::XxHash3_64::oneshot(&buf[..a.len() + 9])
            })
            .fold(0u64, u64::wrapping_add)
    }

    /// Sends this member's whole view to `to` in pages that fit the packet
    /// limit.
    pub(super) fn send_pages(&mut self, to: &Arc<str>, mode: SyncMode) {
        let mut all: Vec<Member> = self
            .members
            .values()
            .filter(|m| m.state != MemberState::Removed)
            .cloned()
            .collect();
        all.push(self.me.clone());
        let digest = self.digest();
        let template = Packet {
            cluster: Arc::clone(&self.name),
            from: Arc::clone(&self.me.address),
            from_incarnation: self.me.incarnation,
            from_life: self.me.life,
            body: Body::Sync {
                mode,
                page: 0,
                pages: 0,
                digest,
            },
            entries: Vec::new(),
        };
        let budget = self
            .config
            .max_packet
            .saturating_sub(template.header_len() + 1);
        let mut pages: Vec<Vec<Member>> = vec![Vec::new()];
        let mut left = budget;
        for m in all {
            let len = entry_len(&m);
            let full = pages.last().is_some_and(|p| p.len() == MAX_ENTRIES);
            if len > left || full {
                pages.push(Vec::new());
                left = budget;
            }
            left = left.saturating_sub(len);
            if let Some(p) = pages.last_mut() {
                p.push(m);
            }
        }
        let count = pages.len().min(usize::from(u16::MAX)) as u16;
        for (i, entries) in pages.into_iter().enumerate().take(usize::from(count)) {
            let packet = Packet {
                body: Body::Sync {
                    mode,
                    page: i as u16,
                    pages: count,
                    digest,
                },
                entries,
                ..template.clone()
            };
            self.push_packet(to, &packet);
        }
    }

    pub(super) fn on_sync(
        &mut self,
        now: Instant,
        from: &Arc<str>,
        mode: SyncMode,
        page: u16,
        digest: u64,
        digest_before: u64,
    ) {
        match mode {
            SyncMode::JoinReply => {
                if self.me.state == MemberState::Joining && !self.admitted {
                    self.admitted = true;
                    // Admitted, it waits for a leader to promote it; should
                    // none do (the admitter may be on a losing side that
                    // downs itself), it asks again, slowly.
                    self.next_join = Some(now + self.config.join_retry * ADMITTED_RETRY);
                    self.ever_joined = true;
                    self.join_attempt = None;
                    self.join_causes.clear();
                    self.events.push_back(ClusterEvent::Admitted {
                        local: self.me.clone(),
                        by: Arc::clone(from),
                    });
                    // This life introduces itself to the members that will
                    // watch it: a driver makes a new route to an address
                    // when a new life there first speaks to it
                    // (`Transmit::heard_life`), so their first probes reach
                    // this process, not the one that was here before.
                    self.refresh_live(now);
                    let me = Arc::clone(&self.me.address);
                    for w in self.watchers(&me) {
                        self.send(&w, Body::Gossip, None);
                    }
                    // A promotion heard first (in this reply's pages too)
                    // takes effect now that it holds the view.
                    if let Some(up_number) = self.promotion {
                        self.go_up(up_number);
                    }
                }
            }
            SyncMode::Push => {
                if digest != digest_before {
                    self.send_pages(from, SyncMode::PushReply);
                }
            }
            SyncMode::PushReply => {
                // Answer an answer once, with this member's pages, if it held
                // claims the other side lacks.
                if page == 0 && self.pushed_to.as_ref() == Some(from) {
                    self.pushed_to = None;
                    if digest != digest_before {
                        self.send_pages(from, SyncMode::PushReply);
                    }
                }
            }
        }
    }

    /// Sends this member's digest to one random live member.
    pub(super) fn push_pull_round(&mut self) {
        if self.me.state != MemberState::Up {
            return;
        }
        let others: Vec<Arc<str>> = self
            .live
            .iter()
            .map(|(_, a)| a)
            .filter(|a| **a != self.me.address)
            .cloned()
            .collect();
        if others.is_empty() {
            return;
        }
        let to = Arc::clone(&others[self.rng.gen_range(0..others.len())]);
        let packet = Packet {
            cluster: Arc::clone(&self.name),
            from: Arc::clone(&self.me.address),
            from_incarnation: self.me.incarnation,
            from_life: self.me.life,
            body: Body::Sync {
                mode: SyncMode::Push,
                page: 0,
                pages: 1,
                digest: self.digest(),
            },
            entries: Vec::new(),
        };
        self.pushed_to = Some(Arc::clone(&to));
        self.push_packet(&to, &packet);
    }
}
