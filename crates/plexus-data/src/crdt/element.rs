//! The bound on what the sets, registers and map keys hold.

use std::fmt;

use serde::de::DeserializeOwned;
use serde::Serialize;

/// What a [`GSet`](super::GSet), an [`ORSet`](super::ORSet), a register or
/// an [`ORMap`](super::ORMap) key can hold: totally ordered (the states are
/// ordered maps and sets, so two replicas holding the same elements encode
/// to the same bytes, and a register breaks its last ties by value),
/// cloneable, printable, serializable and shareable across threads.
///
/// Implemented for every type with those bounds; it only names them once.
pub trait Element:
    Ord + Clone + fmt::Debug + Serialize + DeserializeOwned + Send + Sync + 'static
{
}

impl<T> Element for T where
    T: Ord + Clone + fmt::Debug + Serialize + DeserializeOwned + Send + Sync + 'static
{
}
