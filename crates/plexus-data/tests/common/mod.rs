//! The harness of the CRDT law tests: replicas that mutate and exchange
//! deltas and states as a generated schedule says, and the laws checked on
//! what they built.
//!
//! A [`Model`] names a CRDT, its operations and its observable value, and
//! checks a converged state against the history of operations (each with
//! the set of operations its replica had seen when it ran it, which is what
//! an observed-remove's semantics depend on).

use std::collections::BTreeSet;
use std::fmt::Debug;

use plexus_data::{Crdt, ReplicaId};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

/// The replicas of a run.
pub const REPLICAS: [ReplicaId; 3] = [ReplicaId(0xa1), ReplicaId(0xb2), ReplicaId(0xc3)];

/// A CRDT under test.
pub trait Model: Sized + 'static {
    /// The CRDT.
    type State: Crdt;
    /// One mutation, as generated.
    type Op: Clone + Debug;
    /// What a user observes of a state.
    type Value: PartialEq + Debug;

    /// The mutations to generate (a small domain, so they conflict).
    fn op() -> BoxedStrategy<Self::Op>;
    /// Runs `op` at `replica`, returning its delta.
    fn apply(state: &mut Self::State, replica: ReplicaId, op: &Self::Op) -> Self::State;
    /// The observable value.
    fn value(state: &Self::State) -> Self::Value;
    /// Checks that `state`, which has merged every delta of `history`,
    /// reflects every mutation as the type's semantics say.
    fn check_history(state: &Self::State, history: &[Event<Self>]) -> Result<(), TestCaseError>;
}

/// One mutation of a run.
pub struct Event<M: Model> {
    /// Where it ran.
    pub replica: ReplicaId,
    /// What it was.
    pub op: M::Op,
    /// The events its replica had merged (as deltas or within states)
    /// before it ran.
    pub seen: BTreeSet<usize>,
    /// The delta it returned.
    pub delta: M::State,
}

/// One step of a schedule.
#[derive(Clone, Debug)]
pub enum Step<O> {
    /// A replica runs a mutation.
    Op(usize, O),
    /// A replica merges one delta of the log (any, again or out of order).
    Deliver { to: usize, delta: usize },
    /// A replica merges another's whole state.
    Sync { from: usize, to: usize },
}

/// A generated schedule, and how the final delta exchange is shuffled.
#[derive(Clone, Debug)]
pub struct Case<O> {
    /// The steps.
    pub steps: Vec<Step<O>>,
    /// Sort keys giving the order in which a replica merges every delta.
    pub order: Vec<u16>,
    /// Deltas merged a second time afterwards.
    pub dups: Vec<usize>,
    /// The replica pruned, and the one that prunes it.
    pub removed: usize,
    /// The pruning replica (made different from `removed`).
    pub into: usize,
}

/// Schedules of up to 40 steps at three replicas.
pub fn case<M: Model>() -> impl Strategy<Value = Case<M::Op>> {
    let step = prop_oneof![
        4 => (0..REPLICAS.len(), M::op()).prop_map(|(r, op)| Step::Op(r, op)),
        3 => (0..REPLICAS.len(), any::<usize>()).prop_map(|(to, delta)| Step::Deliver { to, delta }),
        1 => (0..REPLICAS.len(), 0..REPLICAS.len()).prop_map(|(from, to)| Step::Sync { from, to }),
    ];
    (
        prop::collection::vec(step, 0..40),
        prop::collection::vec(any::<u16>(), 1..32),
        prop::collection::vec(any::<usize>(), 0..6),
        0..REPLICAS.len(),
        1..REPLICAS.len(),
    )
        .prop_map(|(steps, order, dups, removed, offset)| Case {
            steps,
            order,
            dups,
            removed,
            into: (removed + offset) % REPLICAS.len(),
        })
}

/// What a schedule built.
pub struct Run<M: Model> {
    /// Each replica's state at the end of the schedule.
    pub states: Vec<M::State>,
    /// Every mutation, in order.
    pub history: Vec<Event<M>>,
    /// The first state or delta that failed validation, if any.
    pub invalid: Option<String>,
}

impl<M: Model> Run<M> {
    /// The join of every replica's state.
    pub fn joined(&self) -> M::State {
        let mut s = M::State::default();
        for st in &self.states {
            s.merge(st);
        }
        s
    }

    /// States to check the algebraic laws on: the replicas' states, the
    /// first and last deltas, and the bottom.
    pub fn pool(&self) -> Vec<M::State> {
        let mut pool = self.states.clone();
        if let (Some(first), Some(last)) = (self.history.first(), self.history.last()) {
            pool.push(first.delta.clone());
            pool.push(last.delta.clone());
        }
        pool
    }
}

/// Plays a schedule.
pub fn run<M: Model>(case: &Case<M::Op>) -> Run<M> {
    let mut states: Vec<M::State> = vec![M::State::default(); REPLICAS.len()];
    let mut seen: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); REPLICAS.len()];
    let mut history: Vec<Event<M>> = Vec::new();
    let mut invalid = None;
    let mut check = |what: &str, s: &M::State| {
        if invalid.is_none() {
            if let Err(e) = s.validate() {
                invalid = Some(format!("{what} is invalid ({e}): {s:?}"));
            }
        }
    };
    for step in &case.steps {
        match step {
            Step::Op(r, op) => {
                let delta = M::apply(&mut states[*r], REPLICAS[*r], op);
                check("a delta", &delta);
                check("a mutated state", &states[*r]);
                history.push(Event {
                    replica: REPLICAS[*r],
                    op: op.clone(),
                    seen: seen[*r].clone(),
                    delta,
                });
                seen[*r].insert(history.len() - 1);
            }
            Step::Deliver { to, delta } => {
                if history.is_empty() {
                    continue;
                }
                let i = delta % history.len();
                states[*to].merge(&history[i].delta);
                seen[*to].insert(i);
                check("a state after a delta", &states[*to]);
            }
            Step::Sync { from, to } => {
                let from_state = states[*from].clone();
                states[*to].merge(&from_state);
                let from_seen = seen[*from].clone();
                seen[*to].extend(from_seen);
                check("a state after a sync", &states[*to]);
            }
        }
    }
    Run {
        states,
        history,
        invalid,
    }
}

/// Every delta of the run, in the case's shuffled order, then the
/// duplicates again.
fn shuffled<'a, M: Model>(case: &Case<M::Op>, run: &'a Run<M>) -> Vec<&'a M::State> {
    let n = run.history.len();
    let mut idx: Vec<usize> = (0..n).collect();
    idx.sort_by_key(|&i| (case.order[i % case.order.len()], i));
    if n > 0 {
        idx.extend(case.dups.iter().map(|d| d % n));
    }
    idx.into_iter().map(|i| &run.history[i].delta).collect()
}

/// `a ⊔ b`.
pub fn join<S: Crdt>(a: &S, b: &S) -> S {
    let mut s = a.clone();
    s.merge(b);
    s
}

/// Merge is commutative.
pub fn commutative<M: Model>(pool: &[M::State]) -> Result<(), TestCaseError> {
    for a in pool {
        for b in pool {
            prop_assert_eq!(
                join(a, b),
                join(b, a),
                "a ⊔ b ≠ b ⊔ a for\n{:?}\n{:?}",
                a,
                b
            );
        }
    }
    Ok(())
}

/// Merge is associative.
pub fn associative<M: Model>(pool: &[M::State]) -> Result<(), TestCaseError> {
    for a in pool {
        for b in pool {
            let ab = join(a, b);
            for c in pool {
                prop_assert_eq!(
                    join(&ab, c),
                    join(a, &join(b, c)),
                    "(a ⊔ b) ⊔ c ≠ a ⊔ (b ⊔ c) for\n{:?}\n{:?}\n{:?}",
                    a,
                    b,
                    c
                );
            }
        }
    }
    Ok(())
}

/// Merge is idempotent.
pub fn idempotent<M: Model>(pool: &[M::State]) -> Result<(), TestCaseError> {
    for a in pool {
        prop_assert_eq!(&join(a, a), a);
    }
    Ok(())
}

/// `Default` is the bottom: merging it, or into it, changes nothing, and
/// it is valid and lacks nothing a state has not.
pub fn bottom<M: Model>(pool: &[M::State]) -> Result<(), TestCaseError> {
    let bottom = M::State::default();
    prop_assert!(bottom.validate().is_ok());
    for a in pool {
        prop_assert_eq!(&join(a, &bottom), a);
        prop_assert_eq!(&join(&bottom, a), a);
        prop_assert!(bottom.difference(a).is_none());
    }
    Ok(())
}

/// Exchanging deltas (shuffled, duplicated) converges to the state that
/// exchanging whole states reaches, at every replica and from scratch.
pub fn delta_merge_is_state_merge<M: Model>(
    case: &Case<M::Op>,
    run: &Run<M>,
) -> Result<(), TestCaseError> {
    let full = run.joined();
    let deltas = shuffled(case, run);
    let mut scratch = M::State::default();
    for d in &deltas {
        scratch.merge(d);
    }
    prop_assert_eq!(
        &scratch,
        &full,
        "the join of the deltas is not the join of the states"
    );
    for (i, st) in run.states.iter().enumerate() {
        let mut st = st.clone();
        for d in &deltas {
            st.merge(d);
        }
        prop_assert_eq!(
            &st,
            &full,
            "replica {} differs after merging every delta",
            i
        );
    }
    Ok(())
}

/// No mutation is lost: the converged state reflects the history.
pub fn no_mutation_lost<M: Model>(run: &Run<M>) -> Result<(), TestCaseError> {
    M::check_history(&run.joined(), &run.history)
}

/// `have ⊔ x.difference(have) == have ⊔ x`, the difference is part of `x`
/// and valid, and it is `None` exactly when `have` includes `x`.
pub fn difference_is_the_missing_part<M: Model>(run: &Run<M>) -> Result<(), TestCaseError> {
    let mut pool = run.pool();
    pool.push(run.joined());
    pool.push(M::State::default());
    for x in &pool {
        for have in &pool {
            let full = join(have, x);
            match x.difference(have) {
                None => prop_assert_eq!(&full, have, "no difference, yet have lacks part of x"),
                Some(d) => {
                    prop_assert!(
                        &full != have,
                        "a difference although have includes x: {:?}",
                        d
                    );
                    prop_assert!(d.validate().is_ok(), "invalid difference {:?}", d);
                    prop_assert_eq!(&join(have, &d), &full, "have ⊔ d ≠ have ⊔ x; d = {:?}", d);
                    prop_assert_eq!(&join(x, &d), x, "the difference is not part of x");
                }
            }
        }
    }
    Ok(())
}

/// Every state and delta the mutators and merges built is valid.
pub fn mutators_build_valid_states<M: Model>(run: &Run<M>) -> Result<(), TestCaseError> {
    if let Some(e) = &run.invalid {
        return Err(TestCaseError::fail(e.clone()));
    }
    for s in run.pool() {
        prop_assert!(s.validate().is_ok());
    }
    Ok(())
}

/// Pruning a removed replica from a converged state (one replica prunes,
/// the others clean up, then they exchange states) keeps the value and
/// leaves nothing of the removed replica.
pub fn prune_keeps_the_value<M: Model>(
    case: &Case<M::Op>,
    run: &Run<M>,
) -> Result<(), TestCaseError> {
    let full = run.joined();
    let removed = REPLICAS[case.removed];
    let into = REPLICAS[case.into];
    let mut pruned = full.clone();
    pruned.prune(removed, into);
    prop_assert!(
        pruned.validate().is_ok(),
        "pruning made an invalid state: {:?}",
        pruned
    );
    prop_assert!(!pruned.needs_pruning_from(removed));
    prop_assert_eq!(
        M::value(&pruned),
        M::value(&full),
        "pruning changed the value"
    );
    for (i, _) in REPLICAS.iter().enumerate() {
        if i == case.removed || i == case.into {
            continue;
        }
        let mut other = full.clone();
        other.prune_cleanup(removed);
        prop_assert!(!other.needs_pruning_from(removed));
        other.merge(&pruned);
        prop_assert_eq!(
            M::value(&other),
            M::value(&full),
            "cleanup then merge changed the value"
        );
        let mut back = pruned.clone();
        back.merge(&other);
        prop_assert_eq!(&back, &other, "the pruner and a cleaned-up replica differ");
        prop_assert!(!other.needs_pruning_from(removed));
    }
    Ok(())
}

/// Every state survives a postcard round trip.
pub fn postcard_round_trip<M: Model>(pool: &[M::State]) -> Result<(), TestCaseError> {
    for s in pool {
        let bytes = postcard::to_allocvec(s).expect("a state encodes");
        let back: M::State = postcard::from_bytes(&bytes).expect("an encoded state decodes");
        prop_assert_eq!(&back, s);
    }
    Ok(())
}

/// Under add-wins semantics, the adds that keep an element present: those
/// seen by no other operation on it (a remove or clear removes the adds it
/// saw, a later add replaces them).
pub fn alive_adds<M: Model>(
    history: &[Event<M>],
    is_add: impl Fn(&M::Op) -> bool,
    touches: impl Fn(&M::Op) -> bool,
) -> Vec<usize> {
    (0..history.len())
        .filter(|&a| {
            is_add(&history[a].op)
                && !history
                    .iter()
                    .enumerate()
                    .any(|(o, other)| o != a && touches(&other.op) && other.seen.contains(&a))
        })
        .collect()
}

/// Whether an element stays present under add-wins semantics.
pub fn add_wins_present<M: Model>(
    history: &[Event<M>],
    is_add: impl Fn(&M::Op) -> bool,
    touches: impl Fn(&M::Op) -> bool,
) -> bool {
    !alive_adds(history, is_add, touches).is_empty()
}

/// Runs one law, naming it in the failure.
pub fn law(name: &str, result: Result<(), TestCaseError>) -> Result<(), TestCaseError> {
    result.map_err(|e| match e {
        TestCaseError::Fail(why) => TestCaseError::fail(format!("{name}: {why}")),
        reject => reject,
    })
}

/// Generates the law tests of a model: three proptests, each checking a
/// group of laws on the same generated runs (generating and playing a
/// schedule costs more than checking a law on it).
#[macro_export]
macro_rules! laws {
    ($name:ident, $model:ty) => {
        mod $name {
            // The model's type, and proptest's prelude, come from the caller.
            use super::*;
            use $crate::common::{self as h, law, Model};

            type M = $model;

            proptest! {
                /// Commutative, associative, idempotent, with `Default` as
                /// the bottom.
                #[test]
                fn merge_is_a_join(case in h::case::<M>()) {
                    let pool = h::run::<M>(&case).pool();
                    law("commutative", h::commutative::<M>(&pool))?;
                    law("associative", h::associative::<M>(&pool[..pool.len().min(4)]))?;
                    law("idempotent", h::idempotent::<M>(&pool))?;
                    law("bottom", h::bottom::<M>(&pool))?;
                }

                /// Shuffled, duplicated deltas reach the join of the states;
                /// `difference` is the missing part.
                #[test]
                fn deltas_converge_like_states(case in h::case::<M>()) {
                    let run = h::run::<M>(&case);
                    law("delta merge = state merge", h::delta_merge_is_state_merge::<M>(&case, &run))?;
                    law("difference", h::difference_is_the_missing_part::<M>(&run))?;
                }

                /// No mutation is lost, every built state is valid, pruning
                /// keeps the value, states round-trip through postcard.
                #[test]
                fn mutations_are_kept_and_states_valid(case in h::case::<M>()) {
                    let run = h::run::<M>(&case);
                    law("no mutation lost", h::no_mutation_lost::<M>(&run))?;
                    law("valid states", h::mutators_build_valid_states::<M>(&run))?;
                    law("prune keeps the value", h::prune_keeps_the_value::<M>(&case, &run))?;
                    law("postcard round trip", h::postcard_round_trip::<M>(&run.pool()))?;
                }
            }

            #[test]
            fn the_model_names_its_type() {
                assert!(!<<M as Model>::State as plexus_data::Crdt>::TYPE_NAME.is_empty());
            }
        }
    };
}
