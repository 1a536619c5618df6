//! A certificate authority made for one test, which nothing trusts unless the test tells it to:
//! it signs certificates for servers the test starts (a PostgreSQL over TLS), and a second one
//! stands for "the wrong CA".

use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose,
};

pub struct Authority {
    certificate: Certificate,
    key: KeyPair,
}

/// A certificate an [`Authority`] signed, and its private key, both PEM.
pub struct Issued {
    pub certificate_pem: String,
    pub key_pem: String,
}

impl Authority {
    /// A new self-signed CA named `name` (its subject's common name).
    pub fn new(name: &str) -> Authority {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().expect("a CA key");
        let certificate = params.self_signed(&key).expect("a CA certificate");
        Authority { certificate, key }
    }

    /// Its certificate, PEM: what a client that should trust it is given.
    pub fn pem(&self) -> String {
        self.certificate.pem()
    }

    /// A server certificate for `names` (host names, or IP addresses such as `127.0.0.1`).
    pub fn issue(&self, names: &[&str]) -> Issued {
        let names: Vec<String> = names.iter().map(|name| (*name).to_owned()).collect();
        let params = CertificateParams::new(names).expect("server certificate parameters");
        let key = KeyPair::generate().expect("a server key");
        let certificate = params
            .signed_by(&key, &self.certificate, &self.key)
            .expect("a server certificate");
        Issued {
            certificate_pem: certificate.pem(),
            key_pem: key.serialize_pem(),
        }
    }
}
