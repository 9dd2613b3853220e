//! The CRDT laws, property-tested for every type of `plexus_data::crdt`:
//! merge is commutative, associative and idempotent; `Default` is the
//! bottom; exchanging deltas (in any order, duplicated) reaches the state
//! that exchanging whole states does; no mutation is lost; `difference` is
//! the optimal delta; mutators and merges build valid states; pruning keeps
//! the value; states survive a postcard round trip.
//!
//! Each type is a `Model` (its operations over a small domain, so that
//! replicas conflict, and what its converged value must be given the
//! history); `laws!` turns a model into one test per law. The schedules and
//! laws live in `common/mod.rs`.

mod common;

use std::collections::BTreeSet;

use common::{add_wins_present, Event, Model};
use plexus_data::{GCounter, GSet, ORSet, PNCounter, ReplicaId};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

struct GCounterModel;

impl Model for GCounterModel {
    type State = GCounter;
    type Op = u64;
    type Value = u128;

    fn op() -> BoxedStrategy<u64> {
        // Large increments too (entries add up past u32), below saturation.
        prop_oneof![4 => 0..5u64, 1 => Just(1u64 << 40)].boxed()
    }

    fn apply(s: &mut GCounter, r: ReplicaId, n: &u64) -> GCounter {
        s.increment(r, *n)
    }

    fn value(s: &GCounter) -> u128 {
        s.value()
    }

    fn check_history(s: &GCounter, history: &[Event<Self>]) -> Result<(), TestCaseError> {
        // Entries saturate at u64::MAX per replica (never reached by these
        // operations; the unit tests cover saturation).
        let mut per: std::collections::BTreeMap<ReplicaId, u64> = Default::default();
        for ev in history {
            let e = per.entry(ev.replica).or_default();
            *e = e.saturating_add(ev.op);
        }
        prop_assert_eq!(
            s.value(),
            per.values().map(|&v| u128::from(v)).sum::<u128>()
        );
        Ok(())
    }
}

laws!(gcounter, GCounterModel);

struct PNCounterModel;

impl Model for PNCounterModel {
    type State = PNCounter;
    /// `(increment?, amount)`.
    type Op = (bool, u64);
    type Value = i128;

    fn op() -> BoxedStrategy<(bool, u64)> {
        (any::<bool>(), 0..5u64).boxed()
    }

    fn apply(s: &mut PNCounter, r: ReplicaId, &(up, n): &(bool, u64)) -> PNCounter {
        if up {
            s.increment(r, n)
        } else {
            s.decrement(r, n)
        }
    }

    fn value(s: &PNCounter) -> i128 {
        s.value()
    }

    fn check_history(s: &PNCounter, history: &[Event<Self>]) -> Result<(), TestCaseError> {
        let expected: i128 = history
            .iter()
            .map(|ev| {
                if ev.op.0 {
                    i128::from(ev.op.1)
                } else {
                    -i128::from(ev.op.1)
                }
            })
            .sum();
        prop_assert_eq!(s.value(), expected);
        Ok(())
    }
}

laws!(pncounter, PNCounterModel);

struct GSetModel;

impl Model for GSetModel {
    type State = GSet<u8>;
    type Op = u8;
    type Value = Vec<u8>;

    fn op() -> BoxedStrategy<u8> {
        (0..6u8).boxed()
    }

    fn apply(s: &mut GSet<u8>, _r: ReplicaId, e: &u8) -> GSet<u8> {
        s.insert(*e)
    }

    fn value(s: &GSet<u8>) -> Vec<u8> {
        s.iter().copied().collect()
    }

    fn check_history(s: &GSet<u8>, history: &[Event<Self>]) -> Result<(), TestCaseError> {
        let expected: BTreeSet<u8> = history.iter().map(|ev| ev.op).collect();
        prop_assert_eq!(Self::value(s), expected.into_iter().collect::<Vec<_>>());
        prop_assert_eq!(s.len(), Self::value(s).len());
        Ok(())
    }
}

laws!(gset, GSetModel);

#[derive(Clone, Debug)]
enum SetOp {
    Add(u8),
    Remove(u8),
    Clear,
}

/// The elements set operations draw from: few, so adds and removes of the
/// same element race.
const ELEMENTS: u8 = 4;

fn set_op() -> BoxedStrategy<SetOp> {
    prop_oneof![
        5 => (0..ELEMENTS).prop_map(SetOp::Add),
        3 => (0..ELEMENTS).prop_map(SetOp::Remove),
        1 => Just(SetOp::Clear),
    ]
    .boxed()
}

struct ORSetModel;

impl Model for ORSetModel {
    type State = ORSet<u8>;
    type Op = SetOp;
    type Value = Vec<u8>;

    fn op() -> BoxedStrategy<SetOp> {
        set_op()
    }

    fn apply(s: &mut ORSet<u8>, r: ReplicaId, op: &SetOp) -> ORSet<u8> {
        match op {
            SetOp::Add(e) => s.add(r, *e),
            SetOp::Remove(e) => s.remove(e),
            SetOp::Clear => s.clear(),
        }
    }

    fn value(s: &ORSet<u8>) -> Vec<u8> {
        s.iter().copied().collect()
    }

    fn check_history(s: &ORSet<u8>, history: &[Event<Self>]) -> Result<(), TestCaseError> {
        for e in 0..ELEMENTS {
            let present = add_wins_present(
                history,
                |op| matches!(op, SetOp::Add(x) if *x == e),
                |op| {
                    matches!(op, SetOp::Add(x) | SetOp::Remove(x) if *x == e)
                        || matches!(op, SetOp::Clear)
                },
            );
            prop_assert_eq!(s.contains(&e), present, "element {}", e);
        }
        prop_assert_eq!(s.len(), s.iter().count());
        Ok(())
    }
}

laws!(orset, ORSetModel);
