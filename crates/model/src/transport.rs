//! The part of a provider call both providers share: send the request, retry what is
//! worth retrying, read the server-sent events, and hand each one to the provider's
//! [`Decoder`], which turns it into `ModelEvent`s.
//!
//! The whole call lives inside the returned stream, not in `Model::stream` itself,
//! because retries are reported as events (`RetryStart` / `RetryEnd`) on that same
//! stream. It also means dropping the stream drops the request future or the response
//! body in the middle of whatever it was doing, which closes the connection at once:
//! that is how a run's abort reaches the provider.
//!
//! Retries happen only while nothing has been yielded from the answer. Both decoders
//! hold usage back until the end of the answer for that reason: an early usage report
//! (Anthropic sends one first) would otherwise count as output and rule out a retry of
//! a stream that broke before its first word.

use crate::failure::{Failure, MAX_ERROR_BODY, describe, from_status, provider_message, scrub, scrub_error};
use async_stream::stream;
use bytes::Bytes;
use futures::{Stream, StreamExt, TryStreamExt};
use spool_engine::{ModelEvent, ModelStream};
use spool_protocol::sse::{self, SseEvent};
use std::pin::pin;
use std::time::Duration;

/// How long connecting may take. There is no overall timeout: an answer may stream for
/// many minutes, and a local model may think for minutes before its first token.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Keepalive probes notice a peer that vanished without closing the connection, which a
/// stream with no overall timeout would otherwise wait on forever.
const TCP_KEEPALIVE: Duration = Duration::from_secs(30);

/// When and how often a failed call is tried again. Only 429, 5xx, connection failures
/// and streams that broke before any output are retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (0: never retry).
    pub max_retries: u32,
    /// The wait before the first retry; it doubles for each retry after that.
    pub initial_delay: Duration,
    /// The doubling stops here.
    pub max_delay: Duration,
    /// A provider's `retry-after` is honoured up to this long; a longer one is cut to
    /// it, so a run never sits silently for an hour on a header.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    /// Three retries after 0.5 s, 1 s and 2 s.
    fn default() -> Self {
        Self {
            max_retries: 3,
            initial_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(2),
            max_retry_after: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// The wait before retry number `retry` (from 1).
    fn delay(&self, retry: u32, retry_after: Option<Duration>) -> Duration {
        match retry_after {
            Some(asked) => asked.min(self.max_retry_after),
            None => {
                let factor = 2u32.saturating_pow(retry.saturating_sub(1));
                self.initial_delay.saturating_mul(factor).min(self.max_delay)
            }
        }
    }
}

/// The way to build the HTTP client failed (TLS set-up) or the configuration is unusable.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("invalid base URL {url:?}: {reason}")]
    BaseUrl { url: String, reason: String },
    #[error("could not set up the HTTP client: {0}")]
    Client(String),
}

/// A provider's connection settings: the client, the key to keep out of error texts,
/// and the retry policy. Cloned into every call; `reqwest::Client` is a shared handle.
#[derive(Clone, Debug)]
pub(crate) struct Http {
    pub client: reqwest::Client,
    pub secret: Option<String>,
    pub retry: RetryPolicy,
}

impl Http {
    pub fn new(secret: Option<String>, retry: RetryPolicy) -> Result<Self, BuildError> {
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_keepalive(TCP_KEEPALIVE)
            .build()
            .map_err(|e| BuildError::Client(describe(e)))?;
        Ok(Self { client, secret: secret.filter(|s| !s.is_empty()), retry })
    }
}

/// Checks a base URL and returns it without a trailing slash, ready for `{base}/path`.
pub(crate) fn base_url(url: &str) -> Result<String, BuildError> {
    let parsed =
        reqwest::Url::parse(url).map_err(|e| BuildError::BaseUrl { url: url.to_owned(), reason: e.to_string() })?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(BuildError::BaseUrl { url: url.to_owned(), reason: "the scheme must be http or https".into() });
    }
    Ok(url.trim_end_matches('/').to_owned())
}

/// One provider's reading of its event stream.
pub(crate) trait Decoder: Send + 'static {
    /// Takes one server-sent event and pushes the model events it completes onto `out`.
    fn event(&mut self, event: &SseEvent, out: &mut Vec<ModelEvent>) -> Result<(), Failure>;

    /// The provider has said the answer is complete (`[DONE]`, `message_stop`) and the
    /// closing events are out; nothing more is read.
    fn is_done(&self) -> bool;

    /// The body ended before [`Decoder::is_done`]: push the closing events if the answer
    /// is complete all the same, or fail with `stream_cut`.
    fn end_of_body(&mut self, out: &mut Vec<ModelEvent>) -> Result<(), Failure>;
}

/// The stream that was cut: retryable, since a retry is only made while nothing of the
/// answer has been yielded.
pub(crate) fn stream_cut(detail: &str) -> Failure {
    Failure::retryable("stream_cut", format!("the provider's stream ended before the answer was complete: {detail}"))
}

/// Runs one model call: the request from `build` (called again for each attempt), the
/// answer read by a fresh decoder from `new_decoder` per attempt.
pub(crate) fn call<B, D, N>(http: Http, build: B, new_decoder: N) -> ModelStream
where
    B: Fn(&reqwest::Client) -> reqwest::RequestBuilder + Send + Sync + 'static,
    D: Decoder,
    N: Fn() -> D + Send + 'static,
{
    stream! {
        let secret = http.secret.as_deref();
        let policy = http.retry;
        let mut retries = 0u32;
        loop {
            let mut started = false;
            let failure = match open(&http, &build).await {
                Err(failure) => failure,
                Ok(response) => {
                    let bytes = response.bytes_stream().map_err(describe);
                    let mut answer = pin!(decode_sse(bytes, new_decoder()));
                    let mut failed = None;
                    while let Some(item) = answer.next().await {
                        match item {
                            Ok(event) => {
                                if !started {
                                    started = true;
                                    if retries > 0 {
                                        yield Ok(ModelEvent::RetryEnd { attempt: retries, success: true });
                                    }
                                }
                                yield Ok(event);
                            }
                            Err(failure) => {
                                failed = Some(failure);
                                break;
                            }
                        }
                    }
                    match failed {
                        None => return,
                        Some(failure) => failure,
                    }
                }
            };
            let can_retry = failure.retryable && !started;
            if !can_retry || retries >= policy.max_retries {
                let mut error = failure.error;
                if retries > 0 && !started {
                    yield Ok(ModelEvent::RetryEnd { attempt: retries, success: false });
                    if can_retry {
                        error.message = format!("{} (gave up after {retries} retries)", error.message);
                    }
                }
                yield Err(scrub_error(error, secret));
                return;
            }
            retries += 1;
            let delay = policy.delay(retries, failure.retry_after);
            yield Ok(ModelEvent::RetryStart {
                attempt: retries,
                max_attempts: policy.max_retries,
                delay_ms: u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                reason: scrub(&failure.error.message, secret),
            });
            tokio::time::sleep(delay).await;
        }
    }
    .boxed()
}

/// Sends the request and checks the answer is an event stream; anything else becomes a
/// classified failure.
async fn open<B>(http: &Http, build: &B) -> Result<reqwest::Response, Failure>
where
    B: Fn(&reqwest::Client) -> reqwest::RequestBuilder,
{
    let response = build(&http.client).send().await.map_err(|e| {
        if e.is_builder() {
            Failure::fatal("bad_request", format!("could not build the request: {}", describe(e)))
        } else {
            Failure::retryable("provider_error", format!("could not reach the provider: {}", describe(e)))
        }
    })?;
    let status = response.status().as_u16();
    let retry_after = retry_after(response.headers());
    let content_type =
        response.headers().get(reqwest::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    if !response.status().is_success() {
        return Err(from_status(status, &read_capped(response).await, retry_after));
    }
    // Some servers answer a streaming request with one JSON body, typically an error
    // they could not put in the status. Reading it as events would only say "cut".
    if content_type.starts_with("application/json") {
        let body = read_capped(response).await;
        let message = provider_message(&body);
        return Err(Failure::fatal(
            "provider_error",
            format!("the provider answered with JSON instead of an event stream: {message}"),
        ));
    }
    Ok(response)
}

/// `retry-after-ms` (milliseconds, sent by OpenAI) or `retry-after` (seconds). The
/// HTTP-date form is not used by these APIs and is ignored.
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let number = |name: &str| headers.get(name)?.to_str().ok()?.trim().parse::<f64>().ok().filter(|n| n.is_finite());
    let from_ms = number("retry-after-ms").map(|ms| ms / 1000.0);
    let seconds = from_ms.or_else(|| number("retry-after"))?;
    Duration::try_from_secs_f64(seconds.max(0.0)).ok()
}

/// The start of an error body, as text.
async fn read_capped(response: reqwest::Response) -> String {
    let mut body = Vec::new();
    let mut chunks = pin!(response.bytes_stream());
    // A body that breaks off is still worth quoting as far as it got.
    while let Some(Ok(chunk)) = chunks.next().await {
        body.extend_from_slice(&chunk);
        if body.len() >= MAX_ERROR_BODY {
            body.truncate(MAX_ERROR_BODY);
            break;
        }
    }
    String::from_utf8_lossy(&body).into_owned()
}

/// Reads server-sent events from `bytes` through `decoder`, with the SSE decoder every
/// Spool client uses (`spool_protocol::sse`). The last item is either the decoder's
/// closing events or one failure.
pub(crate) fn decode_sse<S, D>(bytes: S, mut decoder: D) -> impl Stream<Item = Result<ModelEvent, Failure>> + Send
where
    S: Stream<Item = Result<Bytes, String>> + Send + 'static,
    D: Decoder,
{
    stream! {
        let mut bytes = pin!(bytes);
        let mut events = sse::Decoder::new();
        let mut out = Vec::new();
        while let Some(chunk) = bytes.next().await {
            let chunk = match chunk {
                Ok(chunk) => chunk,
                Err(reason) => {
                    yield Err(stream_cut(&reason));
                    return;
                }
            };
            for event in events.push(&chunk) {
                let result = decoder.event(&event, &mut out);
                for model_event in out.drain(..) {
                    yield Ok(model_event);
                }
                if let Err(failure) = result {
                    yield Err(failure);
                    return;
                }
                if decoder.is_done() {
                    return;
                }
            }
            if events.discarded() > 0 {
                let limit = format!("an event over {} bytes", sse::Decoder::DEFAULT_MAX_EVENT);
                yield Err(Failure::malformed("a body that is not a valid event stream", &limit));
                return;
            }
        }
        let result = decoder.end_of_body(&mut out);
        for model_event in out.drain(..) {
            yield Ok(model_event);
        }
        if let Err(failure) = result {
            yield Err(failure);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap_and_retry_after_is_capped() {
        let policy = RetryPolicy::default();
        let ms = |d: Duration| d.as_millis();
        assert_eq!([1, 2, 3, 4].map(|n| ms(policy.delay(n, None))), [500, 1000, 2000, 2000]);
        assert_eq!(ms(policy.delay(1, Some(Duration::from_secs(7)))), 7000);
        assert_eq!(ms(policy.delay(1, Some(Duration::from_secs(3600)))), 30_000);
    }

    #[test]
    fn retry_after_reads_seconds_and_milliseconds() {
        let mut headers = reqwest::header::HeaderMap::new();
        assert_eq!(retry_after(&headers), None);
        headers.insert("retry-after", "2".parse().expect("a valid header value"));
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(2)));
        headers.insert("retry-after-ms", "250".parse().expect("a valid header value"));
        assert_eq!(retry_after(&headers), Some(Duration::from_millis(250)));
        headers.insert("retry-after-ms", "soon".parse().expect("a valid header value"));
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(2)));
    }

    #[test]
    fn base_urls_are_checked_and_trimmed() {
        assert_eq!(base_url("http://127.0.0.1:11434/v1/").expect("valid"), "http://127.0.0.1:11434/v1");
        assert!(base_url("127.0.0.1:11434").is_err());
        assert!(base_url("ftp://example.com").is_err());
    }
}
