//! `spool hub publish TYPE JSON`: publishes one seed 002 hub event through a running
//! server's `POST /api/hub/events`, for scripts and tests. It speaks HTTP to the
//! server like any publisher (rather than writing to the store), because only the
//! server holds the hub's channels, cursors and subscribers.
//!
//! The token comes from `--token` or `SPOOL_TOKEN` (a publisher token, from
//! `spool token create --publisher NAME`; none is needed while auth is off). On
//! success it prints the event's cursor; a refusal prints the server's error message
//! and exits non-zero.

use anyhow::{Context, bail};
use clap::Args;

#[derive(Args)]
pub struct PublishArgs {
    /// The event type, e.g. `ticket.created` (see README, "Hub event types").
    #[arg(value_name = "TYPE")]
    kind: String,
    /// The event's data, a JSON value matching the type's payload schema.
    #[arg(value_name = "JSON")]
    data: String,
    /// The channel, for channel types (global types ignore it).
    #[arg(long, value_name = "ID")]
    channel: Option<String>,
    /// Who may see the event: `public`, or user names separated by commas.
    #[arg(long, value_name = "public|USER,USER")]
    to: String,
    /// The server's base URL (http only).
    #[arg(long, env = "SPOOL_SERVER", default_value = "http://127.0.0.1:4747", value_name = "URL")]
    server: String,
    /// A publisher token (not needed while auth is off).
    #[arg(long, env = "SPOOL_TOKEN", value_name = "TOKEN", hide_env_values = true)]
    token: Option<String>,
}

pub async fn publish(args: PublishArgs) -> anyhow::Result<()> {
    let data: serde_json::Value =
        serde_json::from_str(&args.data).context("JSON: the event's data is not valid JSON")?;
    let audience = match args.to.trim() {
        "public" => serde_json::json!("public"),
        names => serde_json::json!(names.split(',').map(str::trim).filter(|n| !n.is_empty()).collect::<Vec<_>>()),
    };
    let body = serde_json::json!({
        "type": args.kind,
        "channel_id": args.channel,
        "data": data,
        "audience": audience,
    });
    let url = format!("{}/api/hub/events", args.server.trim_end_matches('/'));
    let mut request = reqwest::Client::new().post(&url).json(&body);
    if let Some(token) = &args.token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.with_context(|| format!("cannot reach {}", args.server))?;
    let status = response.status();
    let answer: serde_json::Value = response.json().await.context("the server's answer is not JSON")?;
    if !status.is_success() {
        let code = answer["error"]["code"].as_str().unwrap_or("error");
        let message = answer["error"]["message"].as_str().unwrap_or("");
        bail!("{status} {code}: {message}");
    }
    let cursor = answer["events"][0]["cursor"].as_str().context("the server's answer has no cursor")?;
    println!("{cursor}");
    Ok(())
}
