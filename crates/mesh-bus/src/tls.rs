//! Certificate pinning: a node that enrols trusts exactly the broker
//! certificate whose DER SHA-256 its token carries — not a CA, not a name.
//!
//! A CA would also vouch for any other certificate it signed (a second broker,
//! a test server, a leaked one); a pin names one certificate. The handshake's
//! signatures are still verified with the crypto provider, so a peer that
//! merely replays the pinned certificate without its key cannot finish it.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::{PemObject, SectionKind};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, OtherError, SignatureScheme};
use sha2::{Digest, Sha256};

/// The SHA-256 of one certificate's DER bytes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct CertPin([u8; 32]);

impl std::fmt::Debug for CertPin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CertPin({})", self.to_hex())
    }
}

/// Why a pin could not be made.
#[derive(Debug, thiserror::Error)]
pub enum PinError {
    #[error("could not read the certificate file {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{path} holds a private key, not a certificate; give the broker's certificate file (PEM, `BEGIN CERTIFICATE`)"
    )]
    KeyNotCertificate { path: PathBuf },
    #[error(
        "{path} holds no certificate; give the broker's certificate file (PEM, `BEGIN CERTIFICATE`)"
    )]
    NoCertificate { path: PathBuf },
    #[error("{path} is not readable PEM ({reason}); give the broker's certificate file")]
    BadPem { path: PathBuf, reason: String },
    #[error("a certificate fingerprint is 64 hex characters (a SHA-256); this one is not")]
    BadFingerprint,
}

/// The broker's certificate is not the pinned one. Its text is what a node's
/// operator sees at the end of the connect error's chain.
#[derive(thiserror::Error)]
#[error(
    "the broker's certificate (sha256 {got}) does not match the one in the token ({expected}); the address reaches another server or the broker's certificate changed since the token was issued: check the address, or issue a new token"
)]
pub struct PinMismatch {
    /// The pinned fingerprint, all 64 hex characters.
    pub expected: String,
    /// The presented certificate's fingerprint, all 64 hex characters.
    pub got: String,
}

/// rustls shows a `CertificateError::Other` with `{:?}`, so Debug is the
/// sentence too: otherwise the operator reads a struct dump.
impl std::fmt::Debug for PinMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl CertPin {
    pub fn of_der(der: &[u8]) -> Self {
        CertPin(Sha256::digest(der).into())
    }

    /// A fingerprint as written in a token (hex, either case).
    pub fn from_hex(hex_str: &str) -> Result<Self, PinError> {
        let bytes = hex::decode(hex_str).map_err(|_| PinError::BadFingerprint)?;
        Ok(CertPin(
            bytes.try_into().map_err(|_| PinError::BadFingerprint)?,
        ))
    }

    /// Lowercase hex, as a token carries it.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// A client configuration that accepts only the pinned certificate. Built
    /// from memory alone: no file and no system root store is read, so a
    /// reconnect storm costs no disk I/O on our side.
    pub fn client_config(&self) -> ClientConfig {
        let provider = provider();
        ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            // The provider is the stock one, whose defaults it supports.
            .expect("the crypto provider supports its default protocol versions")
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(PinVerifier {
                pin: *self,
                provider,
            }))
            .with_no_client_auth()
    }
}

/// A client configuration trusting exactly the CA certificates in a PEM file
/// (the mesh's, never the system's).
pub fn ca_client_config(pem: &[u8]) -> Result<ClientConfig, rustls::Error> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject as _;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert =
            cert.map_err(|e| rustls::Error::General(format!("not a PEM certificate: {e}")))?;
        roots.add(cert)?;
    }
    if roots.is_empty() {
        return Err(rustls::Error::General(
            "no certificate in the CA file".into(),
        ));
    }
    Ok(ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("the crypto provider supports its default protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// The provider async-nats already brings in (its default `ring` feature),
/// made once: a second provider would be a second crypto stack to keep current.
fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    PROVIDER
        .get_or_init(|| Arc::new(rustls::crypto::ring::default_provider()))
        .clone()
}

/// The fingerprint (lowercase hex SHA-256 of the DER) of the first
/// certificate in a PEM file: what a token pins.
pub fn fingerprint_of_pem_file(path: &Path) -> Result<String, PinError> {
    let bytes = std::fs::read(path).map_err(|source| PinError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let mut saw_key = false;
    for section in <(SectionKind, Vec<u8>)>::pem_slice_iter(&bytes) {
        let (kind, der) = section.map_err(|e| PinError::BadPem {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        match kind {
            SectionKind::Certificate => return Ok(CertPin::of_der(&der).to_hex()),
            SectionKind::PrivateKey | SectionKind::RsaPrivateKey | SectionKind::EcPrivateKey => {
                saw_key = true
            }
            _ => {}
        }
    }
    // A key given by mistake gets its own words: "no certificate" would send
    // the operator looking for a broken file rather than the other one.
    if saw_key {
        return Err(PinError::KeyNotCertificate {
            path: path.to_path_buf(),
        });
    }
    Err(PinError::NoCertificate {
        path: path.to_path_buf(),
    })
}

#[derive(Debug)]
struct PinVerifier {
    pin: CertPin,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for PinVerifier {
    /// The name is not checked: the pin names one certificate, and the token's
    /// address may be an IP the certificate was never issued for. Validity
    /// dates are not checked either: the pinned certificate is trusted as the
    /// genesis made it, until a new token pins another.
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let got = CertPin::of_der(end_entity.as_ref());
        if got == self.pin {
            return Ok(ServerCertVerified::assertion());
        }
        Err(rustls::Error::InvalidCertificate(CertificateError::Other(
            OtherError(Arc::new(PinMismatch {
                // Whole: two prints cut to a prefix can look identical.
                expected: self.pin.to_hex(),
                got: got.to_hex(),
            })),
        )))
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The pin verifier's refusal, wherever the client put it: rustls reports it
/// as an I/O error whose inner error is the rustls error.
pub fn pin_mismatch<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a PinMismatch> {
    let mut cur: Option<&'a (dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(p) = e.downcast_ref::<PinMismatch>() {
            return Some(p);
        }
        if let Some(r) = e.downcast_ref::<rustls::Error>()
            && let Some(p) = rustls_pin(r)
        {
            return Some(p);
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && let Some(inner) = io.get_ref()
        {
            if let Some(r) = inner.downcast_ref::<rustls::Error>()
                && let Some(p) = rustls_pin(r)
            {
                return Some(p);
            }
            if let Some(p) = inner.downcast_ref::<PinMismatch>() {
                return Some(p);
            }
        }
        cur = e.source();
    }
    None
}

fn rustls_pin(e: &rustls::Error) -> Option<&PinMismatch> {
    match e {
        rustls::Error::InvalidCertificate(rustls::CertificateError::Other(other)) => {
            other.0.downcast_ref::<PinMismatch>()
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert_and_key() -> (String, String, Vec<u8>) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        (cert.pem(), key.serialize_pem(), cert.der().to_vec())
    }

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn fingerprint_is_sha256_of_the_der_whatever_the_line_endings() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, _, der) = cert_and_key();
        let want = hex::encode(Sha256::digest(&der));
        let lf = write(dir.path(), "lf.pem", &cert);
        let crlf = write(dir.path(), "crlf.pem", &cert.replace('\n', "\r\n"));
        assert!(std::fs::read_to_string(&crlf).unwrap().contains("\r\n"));
        assert_eq!(fingerprint_of_pem_file(&lf).unwrap(), want);
        assert_eq!(fingerprint_of_pem_file(&crlf).unwrap(), want);
    }

    #[test]
    fn the_first_certificate_of_a_chain_is_the_one_pinned() {
        let dir = tempfile::tempdir().unwrap();
        let (first, _, der) = cert_and_key();
        let (second, _, _) = cert_and_key();
        let p = write(dir.path(), "chain.pem", &format!("{first}{second}"));
        assert_eq!(
            fingerprint_of_pem_file(&p).unwrap(),
            hex::encode(Sha256::digest(&der))
        );
    }

    #[test]
    fn a_key_file_is_refused_as_a_key() {
        let dir = tempfile::tempdir().unwrap();
        let (_, key, _) = cert_and_key();
        let p = write(dir.path(), "key.pem", &key);
        let err = fingerprint_of_pem_file(&p).unwrap_err();
        assert!(matches!(err, PinError::KeyNotCertificate { .. }), "{err}");
        assert!(err.to_string().contains("private key, not a certificate"));
        // The key's material never reaches the message.
        let body: String = key.lines().nth(1).unwrap().chars().take(20).collect();
        assert!(!err.to_string().contains(&body));
    }

    #[test]
    fn a_file_without_certificate_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        for text in ["", "not pem at all\n"] {
            let p = write(dir.path(), "empty.pem", text);
            let err = fingerprint_of_pem_file(&p).unwrap_err();
            assert!(matches!(err, PinError::NoCertificate { .. }), "{err}");
        }
        let err = fingerprint_of_pem_file(&dir.path().join("missing.pem")).unwrap_err();
        assert!(matches!(err, PinError::Read { .. }), "{err}");
    }

    #[test]
    fn hex_round_trips_and_bad_hex_is_refused() {
        let pin = CertPin::of_der(b"x");
        assert_eq!(CertPin::from_hex(&pin.to_hex()).unwrap(), pin);
        assert_eq!(
            CertPin::from_hex(&pin.to_hex().to_uppercase()).unwrap(),
            pin
        );
        for bad in ["", "ab", &"zz".repeat(32), &"ab".repeat(33)] {
            assert!(matches!(
                CertPin::from_hex(bad),
                Err(PinError::BadFingerprint)
            ));
        }
    }

    #[test]
    fn the_verifier_accepts_the_pinned_certificate_only() {
        let (_, _, der) = cert_and_key();
        let (_, _, other) = cert_and_key();
        let v = PinVerifier {
            pin: CertPin::of_der(&der),
            provider: provider(),
        };
        let name = ServerName::try_from("localhost").unwrap();
        let now = UnixTime::now();
        assert!(
            v.verify_server_cert(&CertificateDer::from(der.clone()), &[], &name, &[], now)
                .is_ok()
        );
        let err = v
            .verify_server_cert(&CertificateDer::from(other.clone()), &[], &name, &[], now)
            .unwrap_err()
            .to_string();
        assert!(err.contains("does not match the one in the token"), "{err}");
        assert!(err.contains(&CertPin::of_der(&der).to_hex()), "{err}");
        assert!(err.contains(&CertPin::of_der(&other).to_hex()), "{err}");
    }
}
