//! TLS for the accept loop (`spool serve --tls-cert FILE --tls-key FILE`): the
//! certificate chain and key are read once at startup into a [`TlsConfig`], and each
//! accepted connection is wrapped in it by `serve.rs`.
//!
//! Why Spool terminates TLS itself instead of leaving it to a proxy: a browser opens at
//! most six HTTP/1.1 connections per host, and every open tab holds long-lived streams,
//! so a few tabs exhaust them and the next page never loads. Browsers speak HTTP/2 only
//! over TLS, and with HTTP/2 all of a browser's requests to the server share one
//! connection. So the config offers ALPN `h2` first, then `http/1.1`, and the accept loop
//! serves whichever the client picked.
//!
//! Loading fails with an error naming the file and what is wrong with it (missing, too
//! large, not PEM, no certificate, no key, a key that is not the certificate's), so a
//! misconfigured server stops at startup instead of failing every handshake later.
//! rustls uses the `ring` provider (see the workspace manifest for why).

use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Largest certificate or key file read. A chain of a few certificates is a few KiB;
/// anything near this is the wrong file, and reading it whole would cost memory.
pub const MAX_PEM_FILE_BYTES: u64 = 1 << 20;

/// The protocols offered in the handshake, in order of preference.
const ALPN: [&[u8]; 2] = [b"h2", b"http/1.1"];

/// A certificate chain and its key, ready to accept connections. Cheap to clone.
#[derive(Clone, Debug)]
pub struct TlsConfig(Arc<rustls::ServerConfig>);

/// Why a certificate or key cannot be used. Each names the file it is about.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    // The causes are in the messages, not `#[source]`s: a startup error then reads as
    // one line that names the file and what is wrong with it.
    #[error("cannot read the TLS {what} file {}: {error}", path.display())]
    Read { what: &'static str, path: PathBuf, error: std::io::Error },
    #[error("the TLS {what} file {} is larger than {MAX_PEM_FILE_BYTES} bytes; is it the right file?", path.display())]
    TooLarge { what: &'static str, path: PathBuf },
    #[error("the TLS {what} file {} is not valid PEM: {message}", path.display())]
    NotPem { what: &'static str, path: PathBuf, message: String },
    #[error("the TLS certificate file {} holds no certificate (expected a PEM `BEGIN CERTIFICATE` block)", path.display())]
    NoCertificate { path: PathBuf },
    #[error(
        "the TLS key file {} holds no private key (expected a PEM `BEGIN PRIVATE KEY`, \
         `BEGIN RSA PRIVATE KEY` or `BEGIN EC PRIVATE KEY` block)",
        path.display()
    )]
    NoKey { path: PathBuf },
    #[error("the TLS key file {} does not hold the private key of the certificate in {}", key.display(), cert.display())]
    KeyMismatch { cert: PathBuf, key: PathBuf },
    #[error("the TLS certificate {} or key {} cannot be used: {error}", cert.display(), key.display())]
    Rejected { cert: PathBuf, key: PathBuf, error: rustls::Error },
}

impl TlsConfig {
    /// Reads a PEM certificate chain (the server's certificate first) and a PEM private
    /// key (PKCS#8, PKCS#1/RSA or SEC1/EC) and checks that they belong together.
    pub fn from_pem_files(cert: &Path, key: &Path) -> Result<Self, TlsError> {
        let cert_pem = read_limited("certificate", cert)?;
        let key_pem = read_limited("key", key)?;
        let not_pem =
            |what, path: &Path, e: pem::Error| TlsError::NotPem { what, path: path.into(), message: e.to_string() };
        let chain = CertificateDer::pem_slice_iter(&cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| not_pem("certificate", cert, e))?;
        if chain.is_empty() {
            return Err(TlsError::NoCertificate { path: cert.into() });
        }
        let private_key = match PrivateKeyDer::from_pem_slice(&key_pem) {
            Ok(k) => k,
            Err(pem::Error::NoItemsFound) => return Err(TlsError::NoKey { path: key.into() }),
            Err(e) => return Err(not_pem("key", key, e)),
        };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let rejected = |error| TlsError::Rejected { cert: cert.into(), key: key.into(), error };
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(rejected)?
            .with_no_client_auth()
            .with_single_cert(chain, private_key)
            .map_err(|e| match e {
                rustls::Error::InconsistentKeys(_) => TlsError::KeyMismatch { cert: cert.into(), key: key.into() },
                other => rejected(other),
            })?;
        config.alpn_protocols = ALPN.iter().map(|p| p.to_vec()).collect();
        Ok(TlsConfig(Arc::new(config)))
    }

    pub(crate) fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(self.0.clone())
    }
}

fn read_limited(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    use std::io::Read;
    let read_error = |error| TlsError::Read { what, path: path.into(), error };
    let file = std::fs::File::open(path).map_err(read_error)?;
    let mut bytes = Vec::new();
    // One byte past the limit tells "too large" from "exactly the limit".
    file.take(MAX_PEM_FILE_BYTES + 1).read_to_end(&mut bytes).map_err(read_error)?;
    if bytes.len() as u64 > MAX_PEM_FILE_BYTES {
        return Err(TlsError::TooLarge { what, path: path.into() });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A certificate for localhost and its key, written as PEM files in `dir`.
    fn write_pair(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let made = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("make a certificate");
        let (cert, key) = (dir.join(format!("{name}.crt")), dir.join(format!("{name}.key")));
        std::fs::write(&cert, made.cert.pem()).expect("write");
        std::fs::write(&key, made.signing_key.serialize_pem()).expect("write");
        (cert, key)
    }

    fn error(cert: &Path, key: &Path) -> String {
        TlsConfig::from_pem_files(cert, key).expect_err("refused").to_string()
    }

    #[test]
    fn a_matching_pair_loads_and_offers_h2_first() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (cert, key) = write_pair(dir.path(), "a");
        let config = TlsConfig::from_pem_files(&cert, &key).expect("usable");
        assert_eq!(config.0.alpn_protocols, [b"h2".to_vec(), b"http/1.1".to_vec()]);
    }

    #[test]
    fn each_wrong_file_is_named_with_what_is_wrong() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (cert, key) = write_pair(dir.path(), "a");
        let (_, other_key) = write_pair(dir.path(), "b");
        let missing = dir.path().join("missing.key");
        let garbage = dir.path().join("garbage.crt");
        std::fs::write(&garbage, "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n").expect("write");
        let huge = dir.path().join("huge.crt");
        std::fs::write(&huge, vec![b'a'; MAX_PEM_FILE_BYTES as usize + 1]).expect("write");

        let cases = [
            (&cert, &other_key, vec!["b.key", "does not hold the private key", "a.crt"]),
            (&cert, &missing, vec!["missing.key", "cannot read"]),
            (&cert, &cert, vec!["a.crt", "holds no private key"]),
            (&key, &key, vec!["a.key", "holds no certificate"]),
            (&garbage, &key, vec!["garbage.crt", "not valid PEM"]),
            (&huge, &key, vec!["huge.crt", "larger than"]),
        ];
        for (cert, key, words) in cases {
            let message = error(cert, key);
            for word in words {
                assert!(message.contains(word), "{word:?} in {message:?}");
            }
        }
    }
}
