//! Every CRDT decoded from arbitrary bytes: decoding never panics, what
//! decodes encodes back to the same state, and a state that passes
//! `validate` can be merged into a replica's state, diffed, read, pruned
//! and mutated further without a panic (forged counters near `u64::MAX`
//! included). The first byte picks the type, the rest is its postcard
//! encoding.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plexus_data::{
    Crdt, EwFlag, Flag, GCounter, GSet, LwwRegister, MvRegister, ORMap, ORSet, PNCounter, ReplicaId,
};

/// Small ids, so that forged states name the replicas the base state uses.
const R1: ReplicaId = ReplicaId(1);
const R2: ReplicaId = ReplicaId(2);
const R3: ReplicaId = ReplicaId(3);

/// Decodes `bytes` as `T`; if valid, merges it into a state that `mutate`
/// built at two replicas and exercises every method on the result.
fn exercise<T: Crdt>(bytes: &[u8], mutate: impl Fn(&mut T, ReplicaId), read: impl Fn(&T)) {
    let Ok(forged) = postcard::from_bytes::<T>(bytes) else {
        return;
    };
    let encoded = postcard::to_allocvec(&forged).expect("a decoded state encodes");
    let again: T = postcard::from_bytes(&encoded).expect("an encoded state decodes");
    assert_eq!(again, forged);
    if forged.validate().is_err() {
        return;
    }
    let mut base = T::default();
    mutate(&mut base, R1);
    mutate(&mut base, R2);
    mutate(&mut base, R1);
    let _ = forged.difference(&base);
    let _ = base.difference(&forged);
    let mut merged = base.clone();
    merged.merge(&forged);
    read(&merged);
    let _ = merged.validate();
    let _ = merged.difference(&base);
    for r in [R1, R2, R3] {
        let _ = merged.version_of(r);
        let _ = merged.needs_pruning_from(r);
    }
    let delta = {
        let mut m = merged.clone();
        mutate(&mut m, R3);
        mutate(&mut m, R1);
        read(&m);
        m
    };
    let mut pruned = merged.clone();
    pruned.prune(R2, R1);
    read(&pruned);
    let mut cleaned = merged.clone();
    cleaned.prune_cleanup(R2);
    cleaned.merge(&pruned);
    cleaned.merge(&delta);
    read(&cleaned);
}

fuzz_target!(|data: &[u8]| {
    let Some((&kind, bytes)) = data.split_first() else {
        return;
    };
    match kind % 10 {
        0 => exercise::<GCounter>(
            bytes,
            |s, r| {
                s.increment(r, 3);
            },
            |s| {
                let _ = s.value();
            },
        ),
        1 => exercise::<PNCounter>(
            bytes,
            |s, r| {
                s.increment(r, 2);
                s.decrement(r, 5);
            },
            |s| {
                let _ = s.value();
            },
        ),
        2 => exercise::<GSet<u16>>(
            bytes,
            |s, r| {
                s.insert(r.0 as u16);
            },
            |s| {
                let _ = (s.len(), s.iter().count(), s.contains(&1));
            },
        ),
        3 => exercise::<ORSet<u16>>(
            bytes,
            |s, r| {
                s.add(r, 1);
                s.add(r, r.0 as u16);
                s.remove(&2);
            },
            |s| {
                let _ = (s.len(), s.iter().count(), s.contains(&1));
            },
        ),
        4 => exercise::<LwwRegister<String>>(
            bytes,
            |s, r| {
                s.set(r, format!("v{}", r.0), 7);
            },
            |s| {
                let _ = (s.get(), s.timestamp());
            },
        ),
        5 => exercise::<MvRegister<u16>>(
            bytes,
            |s, r| {
                s.set(r, r.0 as u16);
            },
            |s| {
                let _ = s.values();
            },
        ),
        6 => exercise::<Flag>(
            bytes,
            |s, _| {
                s.enable();
            },
            |s| {
                let _ = s.is_enabled();
            },
        ),
        7 => exercise::<EwFlag>(
            bytes,
            |s, r| {
                s.enable(r);
                if r == R2 {
                    s.disable();
                }
            },
            |s| {
                let _ = s.is_enabled();
            },
        ),
        8 => exercise::<ORMap<u8, GCounter>>(
            bytes,
            |s, r| {
                s.update(r, 1, |c| c.increment(r, 1));
                s.update(r, r.0 as u8, |c| c.increment(r, 2));
                s.remove(&2);
            },
            |s| {
                let _ = s.iter().map(|(_, v)| v.value()).sum::<u128>();
                let _ = (s.len(), s.values_held(), s.get(&1));
            },
        ),
        _ => exercise::<ORMap<u8, ORSet<u16>>>(
            bytes,
            |s, r| {
                s.update(r, 1, |set| set.add(r, 4));
                s.update(r, 2, |set| set.remove(&4));
                s.remove(&3);
            },
            |s| {
                let _ = s.iter().map(|(_, v)| v.len()).sum::<usize>();
            },
        ),
    }
});
