//! Certificates for the secure-transport tests, made in-process by rcgen: a
//! CA, and node certificates it signs (valid for `localhost` and
//! 127.0.0.1, for server and client use, optionally expired).

use std::time::Duration;

use bytes::Bytes;
use plexus_transport::Link;
use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};

pub struct Ca {
    pub cert: Certificate,
    pub key: KeyPair,
}

pub fn new_ca(name: &str) -> Ca {
    let key = KeyPair::generate().expect("CA key");
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.distinguished_name.push(DnType::CommonName, name);
    let cert = params.self_signed(&key).expect("self-sign CA");
    Ca { cert, key }
}

/// A node's certificate and key (PEM), signed by `ca`; `expired` puts the
/// validity in the past.
pub fn node_pem(name: &str, ca: &Ca, expired: bool) -> (String, String) {
    let key = KeyPair::generate().expect("node key");
    let mut params =
        CertificateParams::new(vec![name.to_owned(), "localhost".to_owned()]).expect("params");
    params
        .subject_alt_names
        .push(SanType::IpAddress("127.0.0.1".parse().expect("ip")));
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    if expired {
        params.not_before = rcgen::date_time_ymd(2000, 1, 1);
        params.not_after = rcgen::date_time_ymd(2001, 1, 1);
    }
    let cert = params
        .signed_by(&key, &ca.cert, &ca.key)
        .expect("sign node");
    (cert.pem(), key.serialize_pem())
}

/// A client whose handshake "succeeded" (TLS 1.3: before the server
/// checked our certificate) sees its link closed, within `within`, without
/// a message.
pub async fn assert_refused_after_handshake(mut link: Link, within: Duration) {
    let _ = link.send(Bytes::from_static(b"hello")).await;
    let r = tokio::time::timeout(within, link.recv_message())
        .await
        .expect("the refused link closes");
    assert!(r.is_err(), "refused client received {r:?}");
}
