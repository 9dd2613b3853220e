//! A node's lane plan: which schemes carry which lane (see
//! [`NodeConfig::lane`](crate::NodeConfig::lane)), checked once when the
//! node starts, and what each lane's stack guarantees.

use std::collections::HashMap;

use plexus_core::{Lane, MessageProperties, Requirements, RouteError};
use plexus_net::Guarantees;

use crate::error::LaneConfigError;
use crate::node::Scheme;
use crate::wire::MAX_CANDIDATES;

/// The candidate schemes of every lane (empty: the lane rides the primary
/// link).
#[derive(Debug, Clone, Default)]
pub(crate) struct LanePlan {
    lanes: [Vec<String>; Lane::COUNT],
}

impl LanePlan {
    /// Checks `config` (pairs of lane name and `|`-separated schemes)
    /// against the node's `schemes`.
    pub(crate) fn new(
        config: &[(String, String)],
        schemes: &HashMap<String, Scheme>,
    ) -> Result<Self, LaneConfigError> {
        let mut plan = LanePlan::default();
        for (name, text) in config {
            let lane: Lane = name.parse()?;
            if !plan.lanes[lane.index()].is_empty() {
                return Err(LaneConfigError::Duplicate { lane });
            }
            let candidates: Vec<String> = text
                .split('|')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect();
            if candidates.is_empty() {
                return Err(LaneConfigError::NoCandidates { lane });
            }
            if candidates.len() > MAX_CANDIDATES {
                return Err(LaneConfigError::TooManyCandidates {
                    lane,
                    given: candidates.len(),
                    max: MAX_CANDIDATES,
                });
            }
            let adaptive = candidates.len() > 1;
            for scheme in &candidates {
                let taken = Lane::ALL
                    .into_iter()
                    .find(|l| plan.lanes[l.index()].contains(scheme));
                let twice = candidates.iter().filter(|c| *c == scheme).count() > 1;
                if let Some(first) = taken.or(twice.then_some(lane)) {
                    return Err(LaneConfigError::SharedScheme {
                        first,
                        second: lane,
                        scheme: scheme.clone(),
                    });
                }
                let Some(s) = schemes.get(scheme) else {
                    return Err(LaneConfigError::UnknownScheme {
                        lane,
                        scheme: scheme.clone(),
                    });
                };
                let given = guarantees_of(s);
                let needs = to_guarantees(lane.needs());
                let (missing, why) = if adaptive {
                    // The receiver puts an adaptive lane back in order and
                    // waits for every number: a candidate that loses frames
                    // would stall it.
                    let needs = Guarantees {
                        reliable: true,
                        ..needs
                    };
                    (given.missing(needs), " (an adaptive lane's candidates must be reliable: its receiver waits for every frame)")
                } else {
                    (given.missing(needs), "")
                };
                if !missing.is_none() {
                    return Err(LaneConfigError::MissingGuarantee {
                        lane,
                        scheme: scheme.clone(),
                        stack: s.spec.to_string(),
                        missing,
                        why,
                    });
                }
            }
            plan.lanes[lane.index()] = candidates;
        }
        Ok(plan)
    }

    /// The candidate schemes of `lane` (empty: it rides the primary link).
    pub(crate) fn candidates(&self, lane: Lane) -> &[String] {
        &self.lanes[lane.index()]
    }

    /// What the stack of `lane` guarantees towards a peer whose primary
    /// link is of `primary` scheme. An adaptive lane is reliable (every
    /// candidate is) and ordered (its receiver resequences).
    pub(crate) fn guarantees(
        &self,
        lane: Lane,
        primary: &str,
        schemes: &HashMap<String, Scheme>,
    ) -> Guarantees {
        match self.candidates(lane) {
            [] => schemes.get(primary).map_or(Guarantees::NONE, guarantees_of),
            [one] => schemes.get(one).map_or(Guarantees::NONE, guarantees_of),
            _ => Guarantees::RELIABLE_ORDERED,
        }
    }

    /// The stack spec text that carries `lane` towards a `primary` peer,
    /// for errors.
    pub(crate) fn stack_text(
        &self,
        lane: Lane,
        primary: &str,
        schemes: &HashMap<String, Scheme>,
    ) -> String {
        let names: Vec<&str> = match self.candidates(lane) {
            [] => vec![primary],
            many => many.iter().map(String::as_str).collect(),
        };
        names
            .iter()
            .map(|n| {
                schemes
                    .get(*n)
                    .map_or_else(|| (*n).to_owned(), |s| s.spec.to_string())
            })
            .collect::<Vec<_>>()
            .join(" | ")
    }

    /// The lane `properties` pick for `actor` on a `primary` peer, if its
    /// stack honours them.
    pub(crate) fn route(
        &self,
        actor: plexus_core::ActorId,
        properties: &MessageProperties,
        primary: &str,
        schemes: &HashMap<String, Scheme>,
    ) -> Result<Lane, RouteError> {
        let lane = properties.lane();
        let missing = self
            .guarantees(lane, primary, schemes)
            .missing(to_guarantees(properties.requires()));
        if missing.is_none() {
            return Ok(lane);
        }
        Err(RouteError {
            actor,
            lane,
            stack: self.stack_text(lane, primary, schemes),
            missing: Requirements {
                reliable: missing.reliable,
                ordered: missing.ordered,
            },
        })
    }
}

fn guarantees_of(scheme: &Scheme) -> Guarantees {
    scheme.spec.guarantees().unwrap_or(Guarantees::NONE)
}

fn to_guarantees(r: Requirements) -> Guarantees {
    Guarantees {
        reliable: r.reliable,
        ordered: r.ordered,
    }
}
