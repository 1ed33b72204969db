//! Traces over OTLP: with `--otlp-endpoint` (or the standard
//! `OTEL_EXPORTER_OTLP_ENDPOINT`), every span the server records — a `request` per HTTP
//! request, a `run` per run with a `model_call` and a `tool_call` child for each call —
//! goes to an OpenTelemetry collector as OTLP over HTTP (protobuf, `POST
//! {endpoint}/v1/traces`). Without it no layer is installed: spans cost what they cost
//! for the logs, nothing more.
//!
//! Spans are batched (the SDK's batch processor, on a thread of its own, every 5 s or
//! `OTEL_BSP_SCHEDULE_DELAY` ms) and flushed when the process ends, so a SIGTERM loses
//! none of them. The requests go through the workspace's own `reqwest` client on the
//! server's tokio runtime ([`RuntimeClient`]) rather than the exporter's built-in
//! blocking client, which would build a second HTTP stack.

use anyhow::Context;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use std::time::Duration;

/// How long one export may take before it is given up (the OTLP default).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The exporting side, kept by `main` until the command ends.
pub struct Traces {
    provider: SdkTracerProvider,
}

impl Traces {
    /// A tracer provider that batches spans to `endpoint` (a base URL such as
    /// `http://127.0.0.1:4318`; `/v1/traces` is appended, as the OTLP convention for the
    /// generic endpoint says). Must be called on the tokio runtime.
    pub fn start(endpoint: &str) -> anyhow::Result<Traces> {
        let url = format!("{}/v1/traces", endpoint.trim_end_matches('/'));
        reqwest::Url::parse(&url).with_context(|| format!("--otlp-endpoint {endpoint:?} is not a URL"))?;
        let http = reqwest::Client::builder().timeout(EXPORT_TIMEOUT).build().context("the OTLP HTTP client")?;
        let client = RuntimeClient { http, runtime: tokio::runtime::Handle::current() };
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client)
            .with_endpoint(url)
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .context("the OTLP span exporter")?;
        let resource = Resource::builder_empty()
            .with_service_name("spool")
            .with_attribute(opentelemetry::KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
            .build();
        let provider = SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource).build();
        Ok(Traces { provider })
    }

    /// The `tracing` layer that turns spans into OpenTelemetry spans for this provider.
    pub fn layer<S>(&self) -> impl tracing_subscriber::Layer<S> + Send + Sync + use<S>
    where
        S: tracing::Subscriber + Send + Sync + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
    {
        tracing_opentelemetry::layer().with_tracer(self.provider.tracer("spool"))
    }

    /// What is traced: spans and events at `info` and above from Spool's own crates
    /// (the request, run, model-call and tool-call spans and what happens in them), not
    /// the chatter of the HTTP and database libraries under them.
    pub fn filter() -> tracing_subscriber::filter::Targets {
        let crates =
            ["spool", "spool_engine", "spool_server", "spool_model", "spool_tools", "spool_store", "spool_bus"];
        tracing_subscriber::filter::Targets::new().with_targets(crates.map(|c| (c, tracing::Level::INFO)))
    }

    /// Exports what is still batched and stops the exporter. It blocks until the last
    /// export is answered (or times out), so it runs off the runtime's worker threads,
    /// which the export itself needs.
    pub async fn shutdown(self) {
        let provider = self.provider;
        let flushed = tokio::task::spawn_blocking(move || provider.shutdown()).await;
        if let Ok(Err(e)) = flushed {
            eprintln!("spool: the last traces could not be exported: {e}");
        }
    }
}

/// An OTLP HTTP client on the server's runtime: the batch processor's thread awaits the
/// request, which runs as a task on `runtime` with the workspace's `reqwest`.
#[derive(Debug)]
struct RuntimeClient {
    http: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl HttpClient for RuntimeClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let request = reqwest::Request::try_from(request)?;
        let http = self.http.clone();
        let answer = self.runtime.spawn(async move {
            let response = http.execute(request).await?;
            let (status, headers) = (response.status(), response.headers().clone());
            let body = response.bytes().await?;
            Ok::<_, reqwest::Error>((status, headers, body))
        });
        let (status, headers, body) = answer.await??;
        let mut response = Response::builder().status(status).body(body)?;
        *response.headers_mut() = headers;
        Ok(response)
    }
}
