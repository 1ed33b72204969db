//! A push service for tests: the receiving side of RFC 8030 on a loopback port, so a
//! push a server sends goes through the whole real path — encrypted for a browser's
//! keys (RFC 8291), signed with the server's VAPID key (RFC 8292), posted over HTTP —
//! and the test reads what the browser would have read.
//!
//! [`PushService::subscribe`] mints what a browser's `PushSubscription.toJSON()` gives
//! a page (an endpoint here, a fresh P-256 key pair and auth secret of which only the
//! public parts leave), bound to the server's public key as `applicationServerKey`
//! binds a real subscription. Every push is checked as a real service would before it
//! is accepted: the `Authorization: vapid t=…, k=…` header's ES256 signature under `k`,
//! `k` being the key the subscription was made with, `aud` = this service's origin,
//! `exp` in the future and at most 24 h ahead, a `sub`; a `TTL`; `Content-Encoding:
//! aes128gcm`. Then the body is decrypted with the subscription's private key. A push
//! that fails any of it is answered 400 and kept in [`PushService::refused`]; one that
//! passes is answered 201 and its plaintext kept. A subscription marked [`gone`]
//! answers 410, as a browser's unsubscribed endpoint does.
//!
//! [`gone`]: PushService::gone

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use p256::ecdsa::signature::Verifier;
use p256::ecdsa::{Signature, VerifyingKey};
use p256::elliptic_curve::sec1::ToEncodedPoint;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Notify;

/// One push the service accepted.
#[derive(Clone, Debug)]
pub struct Received {
    /// The subscription's endpoint.
    pub endpoint: String,
    /// The decrypted body.
    pub plaintext: Vec<u8>,
    /// The encrypted body as it came.
    pub ciphertext: Vec<u8>,
    /// Header names in lower case.
    pub headers: HashMap<String, String>,
    /// The VAPID JWT's claims (`aud`, `exp`, `sub`).
    pub claims: serde_json::Value,
}

impl Received {
    /// The plaintext as JSON (a Spool push is JSON).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.plaintext).expect("the plaintext is JSON")
    }
}

struct Subscription {
    secret: p256::SecretKey,
    auth: [u8; 16],
    /// The server key it was made for (base64url), as `applicationServerKey`.
    server_key: String,
    gone: bool,
}

#[derive(Default)]
struct State {
    subscriptions: HashMap<String, Subscription>,
    received: Vec<Received>,
    refused: Vec<String>,
}

/// A local push service; stops when dropped.
pub struct PushService {
    /// `http://127.0.0.1:PORT`.
    pub origin: String,
    state: Arc<Mutex<State>>,
    arrived: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for PushService {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl PushService {
    pub async fn start() -> PushService {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the push service");
        let origin = format!("http://{}", listener.local_addr().expect("bound"));
        let state = Arc::new(Mutex::new(State::default()));
        let arrived = Arc::new(Notify::new());
        let (state2, arrived2, origin2) = (state.clone(), arrived.clone(), origin.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { return };
                let (state, arrived, origin) = (state2.clone(), arrived2.clone(), origin2.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let (state, arrived, origin) = (state.clone(), arrived.clone(), origin.clone());
                        async move { Ok::<_, std::convert::Infallible>(receive(request, &state, &arrived, &origin).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        PushService { origin, state, arrived, task }
    }

    /// A new subscription made for the server whose VAPID public key is `server_key`
    /// (base64url, as `GET /api/push/key` gives it): what `PushSubscription.toJSON()`
    /// gives a page, `{endpoint, expirationTime, keys: {p256dh, auth}}`.
    pub fn subscribe(&self, server_key: &str) -> serde_json::Value {
        let secret = loop {
            if let Ok(secret) = p256::SecretKey::from_slice(&rand_bytes::<32>()) {
                break secret;
            }
        };
        let auth = rand_bytes::<16>();
        let id = B64.encode(rand_bytes::<12>());
        let endpoint = format!("{}/push/{id}", self.origin);
        let p256dh = B64.encode(secret.public_key().to_encoded_point(false).as_bytes());
        let subscription = Subscription { secret, auth, server_key: server_key.to_owned(), gone: false };
        self.state.lock().expect("not poisoned").subscriptions.insert(endpoint.clone(), subscription);
        serde_json::json!({"endpoint": endpoint, "expirationTime": null, "keys": {"p256dh": p256dh, "auth": B64.encode(auth)}})
    }

    /// From now on, pushes to `endpoint` are answered 410 Gone (the browser unsubscribed).
    pub fn gone(&self, endpoint: &str) {
        if let Some(s) = self.state.lock().expect("not poisoned").subscriptions.get_mut(endpoint) {
            s.gone = true;
        }
    }

    /// Every push accepted so far, in order.
    pub fn received(&self) -> Vec<Received> {
        self.state.lock().expect("not poisoned").received.clone()
    }

    /// Why each refused push was refused, in order.
    pub fn refused(&self) -> Vec<String> {
        self.state.lock().expect("not poisoned").refused.clone()
    }

    /// Waits until `n` pushes were accepted (panics after `within`) and returns them all.
    pub async fn wait_for(&self, n: usize, within: Duration) -> Vec<Received> {
        let wait = async {
            loop {
                let notified = self.arrived.notified();
                let received = self.received();
                if received.len() >= n {
                    return received;
                }
                notified.await;
            }
        };
        match tokio::time::timeout(within, wait).await {
            Ok(received) => received,
            Err(_) => panic!("{n} pushes did not arrive within {within:?}; refused: {:?}", self.refused()),
        }
    }
}

fn rand_bytes<const N: usize>() -> [u8; N] {
    rand::random()
}

async fn receive(
    request: Request<Incoming>,
    state: &Mutex<State>,
    arrived: &Notify,
    origin: &str,
) -> Response<Full<Bytes>> {
    let endpoint = format!("{origin}{}", request.uri().path());
    let headers: HashMap<String, String> = request
        .headers()
        .iter()
        .filter_map(|(k, v)| Some((k.as_str().to_owned(), v.to_str().ok()?.to_owned())))
        .collect();
    let method = request.method().clone();
    let body = match request.into_body().collect().await {
        Ok(body) => body.to_bytes().to_vec(),
        Err(_) => return answer(StatusCode::BAD_REQUEST),
    };
    let mut state = state.lock().expect("not poisoned");
    let Some(subscription) = state.subscriptions.get(&endpoint) else { return answer(StatusCode::NOT_FOUND) };
    if subscription.gone {
        return answer(StatusCode::GONE);
    }
    let checked = check(&method, &headers, &body, subscription, origin);
    match checked {
        Ok((plaintext, claims)) => {
            state.received.push(Received { endpoint, plaintext, ciphertext: body, headers, claims });
            arrived.notify_waiters();
            let mut response = answer(StatusCode::CREATED);
            response.headers_mut().insert(
                "location",
                format!("{origin}/message/{}", state.received.len()).parse().expect("a header value"),
            );
            response
        }
        Err(reason) => {
            state.refused.push(reason);
            arrived.notify_waiters();
            answer(StatusCode::BAD_REQUEST)
        }
    }
}

/// What a real push service checks, then the decryption; the plaintext and the JWT's claims.
fn check(
    method: &hyper::Method,
    headers: &HashMap<String, String>,
    body: &[u8],
    subscription: &Subscription,
    origin: &str,
) -> Result<(Vec<u8>, serde_json::Value), String> {
    if method != hyper::Method::POST {
        return Err(format!("{method}, not POST"));
    }
    headers.get("ttl").and_then(|t| t.parse::<u64>().ok()).ok_or("no TTL header")?;
    if headers.get("content-encoding").map(String::as_str) != Some("aes128gcm") {
        return Err("Content-Encoding is not aes128gcm".into());
    }
    let claims = check_vapid(headers.get("authorization").ok_or("no Authorization header")?, subscription, origin)?;
    let auth = web_push_native::Auth::clone_from_slice(&subscription.auth);
    let plaintext = web_push_native::decrypt(body.to_vec(), &subscription.secret, &auth)
        .map_err(|e| format!("the body does not decrypt: {e}"))?;
    Ok((plaintext, claims))
}

/// RFC 8292: `vapid t=<JWT>, k=<key>`, the JWT ES256 under `k`, for this origin.
fn check_vapid(header: &str, subscription: &Subscription, origin: &str) -> Result<serde_json::Value, String> {
    let params = header.strip_prefix("vapid ").ok_or("the Authorization scheme is not vapid")?;
    let mut jwt = None;
    let mut key = None;
    for param in params.split(',') {
        match param.trim().split_once('=') {
            Some(("t", value)) => jwt = Some(value),
            Some(("k", value)) => key = Some(value),
            _ => {}
        }
    }
    let (jwt, key) = (jwt.ok_or("no t=")?, key.ok_or("no k=")?);
    if key != subscription.server_key {
        return Err("k is not the key the subscription was made with".into());
    }
    let public = B64.decode(key).map_err(|_| "k is not base64url")?;
    let public = VerifyingKey::from_sec1_bytes(&public).map_err(|_| "k is not a P-256 point")?;
    let (signed, signature) = jwt.rsplit_once('.').ok_or("the JWT has no signature")?;
    let (header, claims) = signed.split_once('.').ok_or("the JWT has no claims")?;
    let header: serde_json::Value = decode_json(header)?;
    if header["alg"] != "ES256" {
        return Err(format!("alg is {}", header["alg"]));
    }
    let signature = B64.decode(signature).map_err(|_| "the signature is not base64url")?;
    let signature = Signature::from_slice(&signature).map_err(|_| "the signature is not 64 bytes of R‖S")?;
    public.verify(signed.as_bytes(), &signature).map_err(|_| "the JWT's signature does not verify")?;
    let claims: serde_json::Value = decode_json(claims)?;
    if claims["aud"] != origin {
        return Err(format!("aud is {}, not {origin}", claims["aud"]));
    }
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("after 1970").as_secs();
    let exp = claims["exp"].as_u64().ok_or("no exp")?;
    if exp <= now || exp > now + 24 * 60 * 60 {
        return Err(format!("exp {exp} is not within 24 h of now ({now})"));
    }
    let sub = claims["sub"].as_str().ok_or("no sub")?;
    if !(sub.starts_with("mailto:") || sub.starts_with("https:")) {
        return Err(format!("sub {sub} is neither mailto: nor https:"));
    }
    Ok(claims)
}

fn decode_json(part: &str) -> Result<serde_json::Value, String> {
    let bytes = B64.decode(part).map_err(|_| "a JWT part is not base64url")?;
    serde_json::from_slice(&bytes).map_err(|_| "a JWT part is not JSON".into())
}

fn answer(status: StatusCode) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = status;
    response
}
