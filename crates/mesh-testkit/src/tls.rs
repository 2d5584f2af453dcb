//! A certificate authority and a server certificate for 127.0.0.1/localhost,
//! generated per server, so TLS tests never depend on files on the machine.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, SanType};

use crate::TestkitError;
use crate::error::io;

/// PEM files written into a directory: `ca.pem`, `server-cert.pem`, `server-key.pem`.
#[derive(Debug, Clone)]
pub struct TestCertificates {
    pub ca_pem: PathBuf,
    pub cert_pem: PathBuf,
    pub key_pem: PathBuf,
    /// The server certificate in DER, what a client sees on the wire (and pins).
    pub cert_der: Vec<u8>,
}

impl TestCertificates {
    pub fn generate(dir: &Path) -> Result<Self, TestkitError> {
        let mut one = Self::signed_by_one_ca(&[dir])?;
        Ok(one.pop().expect("one"))
    }

    /// Two server certificates for 127.0.0.1/localhost, each with its own key,
    /// signed by one CA, written into `dir_a` and `dir_b` under the same file
    /// names as [`Self::generate`] (each dir gets the CA). For proving a pin
    /// refuses a certificate the CA would vouch for.
    pub fn generate_siblings(dir_a: &Path, dir_b: &Path) -> Result<(Self, Self), TestkitError> {
        let mut two = Self::signed_by_one_ca(&[dir_a, dir_b])?;
        let b = two.pop().expect("two");
        let a = two.pop().expect("two");
        Ok((a, b))
    }

    /// A CA, and for each of `dirs` a server certificate of its own key that
    /// CA signed, written there with the CA.
    fn signed_by_one_ca(dirs: &[&Path]) -> Result<Vec<Self>, TestkitError> {
        let err = TestkitError::Certificate;
        let ca_key = KeyPair::generate().map_err(err)?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "mesh test CA");
        let ca_cert = ca_params.self_signed(&ca_key).map_err(err)?;
        let issuer = Issuer::new(ca_params, ca_key);

        let mut out = Vec::new();
        for dir in dirs {
            let key = KeyPair::generate().map_err(err)?;
            let mut params = CertificateParams::new(vec!["localhost".to_string()]).map_err(err)?;
            params
                .subject_alt_names
                .push(SanType::IpAddress([127, 0, 0, 1].into()));
            params
                .distinguished_name
                .push(DnType::CommonName, "mesh test server");
            let cert = params.signed_by(&key, &issuer).map_err(err)?;
            let certs = TestCertificates {
                ca_pem: dir.join("ca.pem"),
                cert_pem: dir.join("server-cert.pem"),
                key_pem: dir.join("server-key.pem"),
                cert_der: cert.der().to_vec(),
            };
            for (path, text) in [
                (&certs.ca_pem, ca_cert.pem()),
                (&certs.cert_pem, cert.pem()),
                (&certs.key_pem, key.serialize_pem()),
            ] {
                std::fs::write(path, text).map_err(io(format!("write {}", path.display())))?;
            }
            out.push(certs);
        }
        Ok(out)
    }
}
