//! Transport drivers (being written).
