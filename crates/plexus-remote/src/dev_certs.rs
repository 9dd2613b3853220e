//! A development certificate authority for the `tls` and `quic`
//! transports (rcgen): what the `plexus certs` binary writes to files, for
//! tests and demos that make their certificates in-process.
//!
//! Not for production: keys are generated and held unencrypted in memory.
//!
//! ```
//! use plexus_remote::dev_certs::DevCa;
//!
//! let ca = DevCa::generate()?;
//! let n1 = ca.node("n1", 365)?;
//! let tls = n1.tls_config(&ca)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;

use crate::identity::{node_id_of, IdentityError};
use plexus_transport::tls::{TlsConfig, TlsConfigError};

/// Why a certificate could not be made.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {detail}")]
pub struct DevCertError {
    what: &'static str,
    detail: String,
}

fn failed(what: &'static str) -> impl FnOnce(rcgen::Error) -> DevCertError {
    move |e| DevCertError {
        what,
        detail: e.to_string(),
    }
}

/// A self-signed CA ("Plexus dev CA" and a key fingerprint) that signs node
/// certificates.
pub struct DevCa {
    cert: Certificate,
    key: KeyPair,
}

impl std::fmt::Debug for DevCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DevCa").finish_non_exhaustive()
    }
}

/// A node's certificate and private key, PEM encoded.
#[derive(Debug, Clone)]
pub struct NodeCert {
    /// The certificate (valid for the node's name, `localhost` and
    /// `127.0.0.1`; server and client authentication).
    pub cert_pem: String,
    /// The private key (PKCS#8).
    pub key_pem: String,
}

impl DevCa {
    /// A new CA with a fresh key.
    ///
    /// # Errors
    ///
    /// [`DevCertError`] if key generation or signing fails.
    pub fn generate() -> Result<Self, DevCertError> {
        let key = KeyPair::generate().map_err(failed("generate CA key"))?;
        Self::from_key(key)
    }

    /// The CA of `key_pem` (a key written by [`key_pem`](DevCa::key_pem)):
    /// the CA certificate is rebuilt with the same name and key, so the
    /// certificates it signs chain to the `ca.pem` written earlier.
    ///
    /// # Errors
    ///
    /// [`DevCertError`] if the key cannot be parsed.
    pub fn from_key_pem(key_pem: &str) -> Result<Self, DevCertError> {
        let key = KeyPair::from_pem(key_pem).map_err(failed("CA key"))?;
        Self::from_key(key)
    }

    fn from_key(key: KeyPair) -> Result<Self, DevCertError> {
        let mut params =
            CertificateParams::new(Vec::<String>::new()).map_err(failed("CA parameters"))?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        // Named after its key: two dev CAs never share a name, so a
        // certificate from the wrong one is refused as from an unknown
        // issuer (not as a bad signature), and `from_key_pem` finds the
        // same name again.
        let id: String = key
            .public_key_raw()
            .iter()
            .skip(1)
            .take(6)
            .map(|b| format!("{b:02x}"))
            .collect();
        params
            .distinguished_name
            .push(DnType::CommonName, format!("Plexus dev CA {id}"));
        let cert = params
            .self_signed(&key)
            .map_err(failed("sign CA certificate"))?;
        Ok(Self { cert, key })
    }

    /// The CA certificate (what peers trust).
    pub fn cert_pem(&self) -> String {
        self.cert.pem()
    }

    /// The CA's private key.
    pub fn key_pem(&self) -> String {
        self.key.serialize_pem()
    }

    /// A certificate for node `name`, valid from an hour ago for `days`
    /// days, for DNS `name`, DNS `localhost` and IP `127.0.0.1`, with the
    /// serverAuth and clientAuth extended key usages, for a fresh key.
    ///
    /// # Errors
    ///
    /// [`DevCertError`] if `name` is not a valid DNS name or signing fails.
    pub fn node(&self, name: &str, days: i64) -> Result<NodeCert, DevCertError> {
        self.node_for(name, &SubjectNames::default(), days)
    }

    /// As [`node`](DevCa::node), also valid for the DNS names and IP
    /// addresses of `also`: a pod's DNS name
    /// (`plexus-0.plexus.default.svc.cluster.local`) and its IP, so peers
    /// dialling it by either accept its certificate.
    ///
    /// # Errors
    ///
    /// [`DevCertError`] if a name is not a valid DNS name or signing fails.
    pub fn node_for(
        &self,
        name: &str,
        also: &SubjectNames,
        days: i64,
    ) -> Result<NodeCert, DevCertError> {
        let now = SystemTime::now();
        let day = Duration::from_secs(86_400);
        // Within a century: `time` refuses dates past year 9999.
        let days = days.clamp(-36_500, 36_500);
        let not_after = if days >= 0 {
            now + day * days.unsigned_abs() as u32
        } else {
            now - day * days.unsigned_abs() as u32
        };
        let key = KeyPair::generate().map_err(failed("generate node key"))?;
        self.sign(name, also, key, now - Duration::from_secs(3600), not_after)
    }

    /// As [`node`](DevCa::node), valid from `not_before` to `not_after`
    /// exactly: for tests of expired and not-yet-valid certificates.
    ///
    /// # Errors
    ///
    /// As [`node`](DevCa::node).
    pub fn node_valid(
        &self,
        name: &str,
        not_before: SystemTime,
        not_after: SystemTime,
    ) -> Result<NodeCert, DevCertError> {
        let key = KeyPair::generate().map_err(failed("generate node key"))?;
        self.sign(name, &SubjectNames::default(), key, not_before, not_after)
    }

    /// As [`node`](DevCa::node) for an existing key (`key_pem`, as in
    /// [`NodeCert::key_pem`]): a renewed certificate, which keeps the
    /// node id.
    ///
    /// # Errors
    ///
    /// [`DevCertError`] if the key cannot be parsed, or as
    /// [`node`](DevCa::node).
    pub fn node_with_key(
        &self,
        name: &str,
        key_pem: &str,
        days: u32,
    ) -> Result<NodeCert, DevCertError> {
        let key = KeyPair::from_pem(key_pem).map_err(failed("node key"))?;
        let now = SystemTime::now();
        let not_after = now + Duration::from_secs(86_400) * days.min(36_500);
        let also = SubjectNames::default();
        self.sign(name, &also, key, now - Duration::from_secs(3600), not_after)
    }

    fn sign(
        &self,
        name: &str,
        also: &SubjectNames,
        key: KeyPair,
        not_before: SystemTime,
        not_after: SystemTime,
    ) -> Result<NodeCert, DevCertError> {
        let mut params = CertificateParams::new(vec![name.to_owned(), "localhost".to_owned()])
            .map_err(failed("node name"))?;
        params
            .subject_alt_names
            .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        for dns in &also.dns {
            let dns = dns.clone().try_into().map_err(failed("DNS name"))?;
            params.subject_alt_names.push(SanType::DnsName(dns));
        }
        for ip in &also.ips {
            params.subject_alt_names.push(SanType::IpAddress(*ip));
        }
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        params.not_before = time::OffsetDateTime::from(not_before);
        params.not_after = time::OffsetDateTime::from(not_after);
        let cert = params
            .signed_by(&key, &self.cert, &self.key)
            .map_err(failed("sign node certificate"))?;
        Ok(NodeCert {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// Names a node certificate is valid for besides the node's name,
/// `localhost` and `127.0.0.1` ([`DevCa::node_for`]).
#[derive(Debug, Clone, Default)]
pub struct SubjectNames {
    /// More DNS names.
    pub dns: Vec<String>,
    /// IP addresses.
    pub ips: Vec<IpAddr>,
}

impl NodeCert {
    /// The part of a node id this certificate certifies (see
    /// [`identity`](crate::identity)), incarnation bits 0: the node's actor
    /// system must have an id with this part.
    ///
    /// # Errors
    ///
    /// [`IdentityError`] if the PEM does not hold a certificate.
    pub fn node_id(&self) -> Result<u64, IdentityError> {
        let der = CertificateDer::from_pem_slice(self.cert_pem.as_bytes())
            .map_err(|e| IdentityError::from_pem(e.to_string()))?;
        node_id_of(&der)
    }

    /// The node's [`TlsConfig`]: this certificate and key, trusting `ca`.
    ///
    /// # Errors
    ///
    /// As [`TlsConfig::from_pem`].
    pub fn tls_config(&self, ca: &DevCa) -> Result<TlsConfig, TlsConfigError> {
        TlsConfig::from_pem(
            self.cert_pem.as_bytes(),
            self.key_pem.as_bytes(),
            ca.cert_pem().as_bytes(),
        )
    }
}
