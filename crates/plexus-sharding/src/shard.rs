//! Entity ids and the shard each one belongs to.
//!
//! The shard of an id depends only on the entity type's name, the id and
//! the type's shard count, so every member and every proxy computes the
//! same one without asking anybody.

use std::sync::Arc;

use plexus_cluster::ring::hash64;

/// The longest entity id, in bytes: ids travel in every message to an
/// entity and are kept per active entity, so they are bounded.
pub const MAX_ID_LEN: usize = 256;

/// An entity's id within its type: non-empty, at most [`MAX_ID_LEN`] bytes.
///
/// Shared, not copied: a region keeps an active entity's id in several
/// tables (its entry, its use order, its shard's set, the running actor),
/// and each holds the one string (a clone is a reference count).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EntityId(Arc<str>);

/// Why a string is not an [`EntityId`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EntityIdError {
    /// The id is the empty string.
    #[error("an entity id must not be empty")]
    Empty,
    /// The id is longer than [`MAX_ID_LEN`].
    #[error("entity id of {len} bytes is over the limit of {max}")]
    TooLong {
        /// The id's length in bytes.
        len: usize,
        /// [`MAX_ID_LEN`].
        max: usize,
    },
}

impl EntityId {
    /// `id` as an entity id.
    ///
    /// # Errors
    ///
    /// [`EntityIdError`] if it is empty or longer than [`MAX_ID_LEN`].
    pub fn new(id: &str) -> Result<Self, EntityIdError> {
        if id.is_empty() {
            return Err(EntityIdError::Empty);
        }
        if id.len() > MAX_ID_LEN {
            return Err(EntityIdError::TooLong {
                len: id.len(),
                max: MAX_ID_LEN,
            });
        }
        Ok(Self(id.into()))
    }

    /// The id as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for EntityId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A shard of an entity type: `0..shards`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ShardId(pub u32);

impl std::fmt::Display for ShardId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "shard {}", self.0)
    }
}

/// One hand-off of a shard, numbered by the coordinator that began it:
/// its messages (begin, ack, markers, hand-off, stopped) name it, so a
/// message of an earlier hand-off of the same shard, repeated or late, is
/// never taken for one of this one. Unique across coordinators: the high
/// 32 bits are the coordinator's epoch (its member's up-number and how
/// often that member became the coordinator), the low 32 a counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HandOffId(pub u64);

impl std::fmt::Display for HandOffId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "hand-off {:x}", self.0)
    }
}

/// The shard of entity `id` of type `entity_type`, among `shards` (at
/// least 1): the type's name and the id hashed together (BLAKE3, as the
/// cluster ring's keys), so two types' entities of one id spread apart.
pub fn shard_of(entity_type: &str, id: &EntityId, shards: u32) -> ShardId {
    let h = hash64(&[entity_type.as_bytes(), id.as_str().as_bytes()]);
    ShardId((h % u64::from(shards.max(1))) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_bounded_and_not_empty() {
        assert_eq!(EntityId::new(""), Err(EntityIdError::Empty));
        let long = "x".repeat(MAX_ID_LEN + 1);
        assert_eq!(
            EntityId::new(&long),
            Err(EntityIdError::TooLong {
                len: MAX_ID_LEN + 1,
                max: MAX_ID_LEN
            })
        );
        assert!(EntityId::new(&long[1..]).is_ok());
    }

    #[test]
    fn the_shard_is_stable_and_in_range() {
        let id = EntityId::new("42").unwrap();
        // The same on every member, build and run: a changed hash would
        // move every entity of a running cluster on an upgrade.
        assert_eq!(shard_of("cart", &id, 1000), shard_of("cart", &id, 1000));
        // Pinned when the hash was chosen (BLAKE3 of the length-prefixed
        // parts): a change here moves every running cluster's entities.
        assert_eq!(shard_of("cart", &id, 1000), ShardId(358));
        for n in 0..1000 {
            let id = EntityId::new(&n.to_string()).unwrap();
            assert!(shard_of("cart", &id, 7).0 < 7);
            assert_eq!(shard_of("cart", &id, 0), ShardId(0));
        }
    }

    #[test]
    fn ids_spread_over_the_shards() {
        let mut counts = [0u32; 16];
        for n in 0..16_000 {
            let id = EntityId::new(&format!("user-{n}")).unwrap();
            counts[shard_of("cart", &id, 16).0 as usize] += 1;
        }
        // 1,000 expected per shard; a binomial's spread is about 31.
        assert!(
            counts.iter().all(|&c| (850..1150).contains(&c)),
            "{counts:?}"
        );
    }
}
