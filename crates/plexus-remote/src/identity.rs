//! Node identity bound to a certificate: the id a node may claim is derived
//! from the public key of the certificate it authenticates with, plus an
//! incarnation that is new each time the node starts.
//!
//! ```text
//! node id = certified part (48 bits)                  | incarnation (16 bits)
//!         = first 6 bytes of BLAKE3(SubjectPublicKeyInfo DER) | random, not 0
//! ```
//!
//! Why the public key and not a name the CA writes into the certificate:
//!
//! - **Unforgeable without the private key.** TLS proves that the peer holds
//!   the private key of the certificate it presents (`CertificateVerify`),
//!   and the CA vouches for the certificate. The certified part derived from
//!   that key cannot be claimed by anyone else, whatever their CA lets them
//!   do: peers check it ([`certifies`]).
//! - **Any PKI works.** Nothing special has to be written into the
//!   certificate: certificates from `plexus certs`, a corporate CA or an
//!   ACME issuer all give a node id, and two certificates never share one
//!   unless they share a key.
//!
//! Why an incarnation: actor ids are (node id, serial), and a restarted
//! process numbers its actors from 1 again. With the same node id, refs to
//! the old process's actors would reach whichever new actor got the same
//! serial. A fresh incarnation per start (picked when
//! [`NodeConfig::tls`](crate::NodeConfig::tls) takes the certificate) makes
//! the restarted node a new node, as with random ids, while the certified
//! part stays bound to the key.
//!
//! 48 certified bits: a collision between two nodes of one cluster needs
//! about 2²⁴ keys (birthday bound); aiming at a given node's part needs
//! about 2⁴⁸ key generations *and* a certificate from the cluster's CA for
//! the result. The id 0 is reserved (refs forged from a URI use it): the
//! incarnation is never 0.
//!
//! The certified part is the first 12 hex digits of the id (`NodeId`'s
//! format), which are the first 12 hex digits of `b3sum` over the SPKI DER:
//! `openssl x509 -in n1.pem -pubkey -noout | openssl pkey -pubin -outform der | b3sum`.

use rustls_pki_types::CertificateDer;

/// Why no node id could be derived from a certificate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot derive a node id from the certificate: {0}")]
pub struct IdentityError(String);

impl IdentityError {
    #[cfg(feature = "tls")]
    pub(crate) fn from_pem(detail: String) -> Self {
        Self(detail)
    }
}

/// The part of a node id certified by `cert` (an end-entity certificate,
/// DER), with incarnation bits 0: see the [module docs](self).
///
/// # Errors
///
/// [`IdentityError`] if the certificate does not parse as X.509.
pub fn node_id_of(cert: &CertificateDer<'_>) -> Result<u64, IdentityError> {
    let parsed =
        webpki::EndEntityCert::try_from(cert).map_err(|e| IdentityError(format!("{e:?}")))?;
    let spki = parsed.subject_public_key_info();
    let hash = blake3::hash(spki.as_ref());
    let mut first = [0u8; 8];
    first.copy_from_slice(&hash.as_bytes()[..8]);
    Ok(u64::from_be_bytes(first) & !INCARNATION_MASK)
}

/// The bits of a node id that are the node's incarnation (the rest is the
/// part its certificate certifies).
pub const INCARNATION_MASK: u64 = 0xffff;

/// Whether a node claiming `node` is the holder of a certificate whose
/// [`node_id_of`] is `certified`: the certified parts are equal, and `node`
/// has an incarnation (not 0: an id without one would be the same after
/// every restart).
pub fn certifies(certified: u64, node: u64) -> bool {
    (certified ^ node) & !INCARNATION_MASK == 0 && node & INCARNATION_MASK != 0
}

/// A node id for a new incarnation of the node `certified` (a
/// [`node_id_of`]): its certified part and a random incarnation, never 0.
pub fn new_incarnation(certified: u64) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    // Not a secret, only distinct from the last start's: the standard
    // library's randomly keyed hasher is enough.
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    let incarnation = (random % INCARNATION_MASK) + 1;
    (certified & !INCARNATION_MASK) | incarnation
}

/// The certified part of the node id of a link's peer: [`node_id_of`] the
/// certificate its transport authenticated, if it did.
///
/// # Errors
///
/// As [`node_id_of`].
pub fn certified_peer(
    identity: Option<&plexus_transport::PeerIdentity>,
) -> Result<Option<u64>, IdentityError> {
    identity.map(|i| node_id_of(&i.certificate)).transpose()
}

// The certificates come from the development CA, which needs `tls`.
#[cfg(all(test, feature = "tls"))]
mod tests {
    use super::*;
    use crate::dev_certs::DevCa;
    use rustls_pki_types::pem::PemObject;

    fn der(pem: &str) -> CertificateDer<'static> {
        CertificateDer::from_pem_slice(pem.as_bytes()).expect("PEM certificate")
    }

    #[test]
    fn node_id_follows_the_key_not_the_certificate() {
        let ca = DevCa::generate().expect("CA");
        let a = ca.node("a", 1).expect("a");
        let b = ca.node("b", 1).expect("b");
        let id_a = node_id_of(&der(&a.cert_pem)).expect("id a");
        let id_b = node_id_of(&der(&b.cert_pem)).expect("id b");
        assert_ne!(id_a, id_b, "two keys, two ids");
        assert_eq!(a.node_id().expect("id"), id_a);
        // The same key in another certificate (another CA, another name)
        // certifies the same id.
        let other = DevCa::generate().expect("other CA");
        let again = other
            .node_with_key("renamed", &a.key_pem, 1)
            .expect("same key");
        assert_eq!(node_id_of(&der(&again.cert_pem)).expect("id"), id_a);
    }

    #[test]
    fn incarnations_differ_and_keep_the_certified_part() {
        let ca = DevCa::generate().expect("CA");
        let a = node_id_of(&der(&ca.node("a", 1).expect("a").cert_pem)).expect("id");
        let b = node_id_of(&der(&ca.node("b", 1).expect("b").cert_pem)).expect("id");
        assert_eq!(a & INCARNATION_MASK, 0);
        let ids: std::collections::HashSet<u64> = (0..64).map(|_| new_incarnation(a)).collect();
        assert!(ids.len() > 60, "fresh incarnations: {}", ids.len());
        for id in ids {
            assert_ne!(id & INCARNATION_MASK, 0, "incarnation 0 is reserved");
            assert!(certifies(a, id));
            assert!(!certifies(b, id), "another key's part");
        }
        assert!(!certifies(a, a), "incarnation 0 is not a node id");
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let e = node_id_of(&CertificateDer::from(vec![0x30, 0x03, 1, 2, 3])).unwrap_err();
        assert!(e.to_string().starts_with("cannot derive a node id"), "{e}");
    }
}
