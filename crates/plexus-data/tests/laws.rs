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

use common::{add_wins_present, alive_adds, Event, Model};
use plexus_data::{
    EwFlag, Flag, GCounter, GSet, LwwRegister, MvRegister, ORMap, ORSet, PNCounter, ReplicaId,
};
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

struct LwwModel;

impl Model for LwwModel {
    type State = LwwRegister<u8>;
    /// `(value, clock)`: few clocks, so writes tie.
    type Op = (u8, u64);
    type Value = Option<u8>;

    fn op() -> BoxedStrategy<(u8, u64)> {
        (0..3u8, 0..6u64).boxed()
    }

    fn apply(s: &mut LwwRegister<u8>, r: ReplicaId, &(v, clock): &(u8, u64)) -> LwwRegister<u8> {
        s.set(r, v, clock)
    }

    fn value(s: &LwwRegister<u8>) -> Option<u8> {
        s.get().copied()
    }

    fn check_history(s: &LwwRegister<u8>, history: &[Event<Self>]) -> Result<(), TestCaseError> {
        for ev in history {
            let (clock, replica) = ev
                .delta
                .timestamp()
                .expect("these writes always win locally");
            prop_assert!(clock >= ev.op.1 && replica == ev.replica);
        }
        let last = history
            .iter()
            .map(|ev| (ev.delta.timestamp(), ev.delta.get().copied()))
            .max();
        prop_assert_eq!(
            (s.timestamp(), s.get().copied()),
            last.unwrap_or((None, None))
        );
        Ok(())
    }
}

laws!(lww_register, LwwModel);

struct MvModel;

impl Model for MvModel {
    type State = MvRegister<u8>;
    type Op = u8;
    type Value = Vec<u8>;

    fn op() -> BoxedStrategy<u8> {
        (0..3u8).boxed()
    }

    fn apply(s: &mut MvRegister<u8>, r: ReplicaId, v: &u8) -> MvRegister<u8> {
        s.set(r, *v)
    }

    fn value(s: &MvRegister<u8>) -> Vec<u8> {
        s.values().into_iter().copied().collect()
    }

    fn check_history(s: &MvRegister<u8>, history: &[Event<Self>]) -> Result<(), TestCaseError> {
        let expected: BTreeSet<u8> = alive_adds(history, |_| true, |_| true)
            .into_iter()
            .map(|i| history[i].op)
            .collect();
        prop_assert_eq!(Self::value(s), expected.into_iter().collect::<Vec<_>>());
        Ok(())
    }
}

laws!(mv_register, MvModel);

struct FlagModel;

impl Model for FlagModel {
    type State = Flag;
    type Op = ();
    type Value = bool;

    fn op() -> BoxedStrategy<()> {
        Just(()).boxed()
    }

    fn apply(s: &mut Flag, _r: ReplicaId, _op: &()) -> Flag {
        s.enable()
    }

    fn value(s: &Flag) -> bool {
        s.is_enabled()
    }

    fn check_history(s: &Flag, history: &[Event<Self>]) -> Result<(), TestCaseError> {
        prop_assert_eq!(s.is_enabled(), !history.is_empty());
        Ok(())
    }
}

laws!(flag, FlagModel);

struct EwFlagModel;

impl Model for EwFlagModel {
    type State = EwFlag;
    /// Enable (true) or disable.
    type Op = bool;
    type Value = bool;

    fn op() -> BoxedStrategy<bool> {
        any::<bool>().boxed()
    }

    fn apply(s: &mut EwFlag, r: ReplicaId, &on: &bool) -> EwFlag {
        if on {
            s.enable(r)
        } else {
            s.disable()
        }
    }

    fn value(s: &EwFlag) -> bool {
        s.is_enabled()
    }

    fn check_history(s: &EwFlag, history: &[Event<Self>]) -> Result<(), TestCaseError> {
        prop_assert_eq!(
            s.is_enabled(),
            add_wins_present(history, |&on| on, |_| true)
        );
        Ok(())
    }
}

laws!(ew_flag, EwFlagModel);

/// The keys map operations draw from.
const KEYS: u8 = 3;

#[derive(Clone, Debug)]
enum CounterMapOp {
    Increment(u8, u64),
    Remove(u8),
}

impl CounterMapOp {
    fn key(&self) -> u8 {
        match self {
            Self::Increment(k, _) | Self::Remove(k) => *k,
        }
    }
}

struct CounterMapModel;

impl Model for CounterMapModel {
    type State = ORMap<u8, GCounter>;
    type Op = CounterMapOp;
    type Value = Vec<(u8, u128)>;

    fn op() -> BoxedStrategy<CounterMapOp> {
        prop_oneof![
            3 => (0..KEYS, 0..4u64).prop_map(|(k, n)| CounterMapOp::Increment(k, n)),
            1 => (0..KEYS).prop_map(CounterMapOp::Remove),
        ]
        .boxed()
    }

    fn apply(s: &mut ORMap<u8, GCounter>, r: ReplicaId, op: &CounterMapOp) -> ORMap<u8, GCounter> {
        match *op {
            CounterMapOp::Increment(k, n) => s.update(r, k, |c| c.increment(r, n)),
            CounterMapOp::Remove(k) => s.remove(&k),
        }
    }

    fn value(s: &ORMap<u8, GCounter>) -> Vec<(u8, u128)> {
        s.iter().map(|(k, v)| (*k, v.value())).collect()
    }

    fn check_history(
        s: &ORMap<u8, GCounter>,
        history: &[Event<Self>],
    ) -> Result<(), TestCaseError> {
        for k in 0..KEYS {
            let alive = alive_adds(
                history,
                |op| matches!(op, CounterMapOp::Increment(x, _) if *x == k),
                |op| op.key() == k,
            );
            let Some(value) = s.get(&k) else {
                prop_assert!(alive.is_empty(), "key {} lost", k);
                continue;
            };
            prop_assert!(
                !alive.is_empty(),
                "key {} present, though every update was removed",
                k
            );
            let n = |i: usize| match history[i].op {
                CounterMapOp::Increment(_, n) => u128::from(n),
                CounterMapOp::Remove(_) => 0,
            };
            let at_least: u128 = alive.iter().map(|&i| n(i)).sum();
            let at_most: u128 = (0..history.len())
                .filter(|&i| history[i].op.key() == k)
                .map(n)
                .sum();
            prop_assert!(
                (at_least..=at_most).contains(&value.value()),
                "key {}: {} not in {}..={}",
                k,
                value.value(),
                at_least,
                at_most
            );
        }
        Ok(())
    }
}

laws!(ormap_of_counters, CounterMapModel);

#[derive(Clone, Debug)]
enum SetMapOp {
    /// Updates a key's set with a set operation.
    Update(u8, SetOp),
    Remove(u8),
}

impl SetMapOp {
    fn key(&self) -> u8 {
        match self {
            Self::Update(k, _) | Self::Remove(k) => *k,
        }
    }
}

struct SetMapModel;

impl Model for SetMapModel {
    type State = ORMap<u8, ORSet<u8>>;
    type Op = SetMapOp;
    type Value = Vec<(u8, Vec<u8>)>;

    fn op() -> BoxedStrategy<SetMapOp> {
        prop_oneof![
            4 => (0..KEYS, set_op()).prop_map(|(k, op)| SetMapOp::Update(k, op)),
            1 => (0..KEYS).prop_map(SetMapOp::Remove),
        ]
        .boxed()
    }

    fn apply(s: &mut ORMap<u8, ORSet<u8>>, r: ReplicaId, op: &SetMapOp) -> ORMap<u8, ORSet<u8>> {
        match op {
            SetMapOp::Update(k, op) => s.update(r, *k, |set| ORSetModel::apply(set, r, op)),
            SetMapOp::Remove(k) => s.remove(k),
        }
    }

    fn value(s: &ORMap<u8, ORSet<u8>>) -> Vec<(u8, Vec<u8>)> {
        s.iter().map(|(k, v)| (*k, ORSetModel::value(v))).collect()
    }

    fn check_history(
        s: &ORMap<u8, ORSet<u8>>,
        history: &[Event<Self>],
    ) -> Result<(), TestCaseError> {
        for k in 0..KEYS {
            let alive = alive_adds(
                history,
                |op| matches!(op, SetMapOp::Update(x, _) if *x == k),
                |op| op.key() == k,
            );
            prop_assert_eq!(s.contains_key(&k), !alive.is_empty(), "key {}", k);
            let Some(set) = s.get(&k) else { continue };
            // An add whose update no other operation on the key saw is in
            // the key's set; an element in it was added by someone.
            for &i in &alive {
                if let SetMapOp::Update(_, SetOp::Add(e)) = history[i].op {
                    prop_assert!(set.contains(&e), "key {}: element {} lost", k, e);
                }
            }
            for e in set.iter() {
                prop_assert!(history.iter().any(|ev| matches!(
                    ev.op,
                    SetMapOp::Update(x, SetOp::Add(y)) if x == k && y == *e
                )));
            }
        }
        Ok(())
    }
}

laws!(ormap_of_sets, SetMapModel);
