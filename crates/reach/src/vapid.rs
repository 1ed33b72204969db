//! VAPID (RFC 8292): how a push service knows which server sends to a subscription.
//!
//! Browsers subscribe with the server's public key (`applicationServerKey`); each push
//! then carries `Authorization: vapid t=<JWT>, k=<that key>`, the JWT signed with the
//! private half (ES256). Push services refuse a push whose key is not the one the
//! subscription was made with, so every node of a deployment signs with one key pair,
//! kept in `server_keys` under `vapid`.
//!
//! The JWT is written here rather than with a JWT crate: it is three fixed fields and
//! one ECDSA signature, and the crates that do more bring a second crypto backend
//! (BoringSSL or aws-lc) with them.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use p256::ecdsa::signature::Signer;
use p256::ecdsa::{Signature, SigningKey};
use p256::pkcs8::{DecodePrivateKey, EncodePrivateKey};

/// The `server_keys` row the key pair is kept in.
pub const KEY_NAME: &str = "vapid";

/// How long a signed header is good for. RFC 8292 allows at most 24 h; half a day is
/// what push services are used to and leaves room for a clock that is off.
pub const VALIDITY_SECS: u64 = 12 * 60 * 60;

/// The server's VAPID key pair.
#[derive(Clone)]
pub struct VapidKey {
    signing: SigningKey,
}

impl std::fmt::Debug for VapidKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VapidKey").field("public", &self.public_key()).finish_non_exhaustive()
    }
}

impl VapidKey {
    /// A new random key pair.
    pub fn generate() -> VapidKey {
        // 32 random bytes are a valid scalar but for a chance of about 2^-32 (zero or
        // past the curve's order); draw again then.
        loop {
            if let Ok(secret) = p256::SecretKey::from_slice(&rand::random::<[u8; 32]>()) {
                return VapidKey { signing: SigningKey::from(secret) };
            }
        }
    }

    /// The key pair as stored: PKCS#8 DER.
    pub fn to_pkcs8(&self) -> Vec<u8> {
        let secret = p256::SecretKey::from(&self.signing);
        secret.to_pkcs8_der().expect("a P-256 key always encodes").as_bytes().to_vec()
    }

    pub fn from_pkcs8(der: &[u8]) -> anyhow::Result<VapidKey> {
        let secret = p256::SecretKey::from_pkcs8_der(der).map_err(|e| anyhow::anyhow!("the stored VAPID key: {e}"))?;
        Ok(VapidKey { signing: SigningKey::from(secret) })
    }

    /// The public key as browsers take it (`applicationServerKey`) and as the header's
    /// `k`: the uncompressed point (65 bytes), base64url without padding.
    pub fn public_key(&self) -> String {
        let point = self.signing.verifying_key().to_encoded_point(false);
        B64.encode(point.as_bytes())
    }

    /// The `Authorization` header for a push to `endpoint`: a JWT for the endpoint's
    /// origin (`aud`), good until `now_secs + VALIDITY_SECS` (`exp`), naming `contact`
    /// (`sub`: a `mailto:` or `https:` address the push service may write to).
    pub fn authorization(&self, endpoint: &reqwest::Url, contact: &str, now_secs: u64) -> String {
        let header = B64.encode(br#"{"typ":"JWT","alg":"ES256"}"#);
        let claims = serde_json::json!({
            "aud": endpoint.origin().ascii_serialization(),
            "exp": now_secs + VALIDITY_SECS,
            "sub": contact,
        });
        let claims = B64.encode(claims.to_string());
        let signed = format!("{header}.{claims}");
        // JWS wants the fixed-size R‖S form (64 bytes), not DER.
        let signature: Signature = self.signing.sign(signed.as_bytes());
        let jwt = format!("{signed}.{}", B64.encode(signature.to_bytes()));
        format!("vapid t={jwt}, k={}", self.public_key())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use p256::ecdsa::VerifyingKey;
    use p256::ecdsa::signature::Verifier;

    #[test]
    fn the_header_is_a_jwt_the_public_key_verifies() {
        let key = VapidKey::generate();
        let again = VapidKey::from_pkcs8(&key.to_pkcs8()).expect("round trip");
        assert_eq!(again.public_key(), key.public_key());

        let endpoint: reqwest::Url = "https://push.example:8443/wpush/abc?x=1".parse().expect("url");
        let header = key.authorization(&endpoint, "mailto:ops@example.com", 1_000);
        let rest = header.strip_prefix("vapid t=").expect("scheme");
        let (jwt, k) = rest.split_once(", k=").expect("two parts");
        assert_eq!(k, key.public_key());
        let (signed, signature) = jwt.rsplit_once('.').expect("three parts");
        let public = VerifyingKey::from_sec1_bytes(&B64.decode(k).expect("b64")).expect("a point");
        let signature = Signature::from_slice(&B64.decode(signature).expect("b64")).expect("64 bytes");
        public.verify(signed.as_bytes(), &signature).expect("verifies");
        let claims: serde_json::Value =
            serde_json::from_slice(&B64.decode(signed.split('.').nth(1).expect("claims")).expect("b64")).expect("json");
        assert_eq!(claims["aud"], "https://push.example:8443");
        assert_eq!(claims["exp"], 1_000 + VALIDITY_SECS);
        assert_eq!(claims["sub"], "mailto:ops@example.com");
    }
}
