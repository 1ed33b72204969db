//! `[[webhook]]` and `[webhooks]` of `config.toml` (issue 41): the receivers of
//! Standard Webhooks and the outbox's retry schedule, checked at start-up.
//!
//! ```toml
//! [[webhook]]
//! name = "ci"
//! url = "https://ci.example.com/spool"
//! secret_file = "/run/secrets/spool-ci"   # or secret = "whsec_…"
//! events = ["run.settled", "approval.requested"]   # default: all
//! users = ["alice"]                                 # default: everyone's
//! timeout_secs = 15
//!
//! [webhooks]
//! retry_secs = [5, 300, 1800]   # default: Standard Webhooks' schedule over a day
//! ```

use anyhow::{Context, bail};
use serde::Deserialize;
use spool_protocol::reach::EventType;
use spool_reach::webhook::{DEFAULT_TIMEOUT, WebhookEndpoint, parse_secret};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// One `[[webhook]]`, as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookEntry {
    pub name: String,
    pub url: String,
    /// `whsec_…`; or several, space-separated, the newest first, while rotating.
    pub secret: Option<String>,
    /// A file holding the secret (relative paths from the config file's directory).
    pub secret_file: Option<PathBuf>,
    #[serde(default)]
    pub events: Vec<String>,
    pub users: Option<Vec<String>>,
    pub timeout_secs: Option<u64>,
}

/// `[webhooks]`: how deliveries are retried.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhooksConfig {
    /// Seconds to wait after each failed try, in order; dead after the last.
    pub retry_secs: Option<Vec<u64>>,
}

impl WebhooksConfig {
    pub fn dispatch(&self) -> spool_reach::dispatch::DispatchSettings {
        let mut settings = spool_reach::dispatch::DispatchSettings::default();
        if let Some(retry) = &self.retry_secs {
            settings.retry = retry.iter().map(|s| Duration::from_secs(*s)).collect();
        }
        settings
    }
}

/// The endpoints, checked: unique names, http(s) URLs, a whsec_ secret from exactly one
/// place, known event types, a timeout of 1 to 60 s (shorter than a claim's lease).
pub fn endpoints(entries: &[WebhookEntry], base: &Path) -> anyhow::Result<Vec<WebhookEndpoint>> {
    let mut out: Vec<WebhookEndpoint> = Vec::new();
    for entry in entries {
        let name = &entry.name;
        let what = || format!("[[webhook]] {name:?}");
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
            bail!("{}: a name is letters, digits, - and _", what());
        }
        if out.iter().any(|e| &e.name == name) {
            bail!("{}: two webhooks have this name", what());
        }
        let url = reqwest::Url::parse(&entry.url).with_context(|| format!("{}: url", what()))?;
        if !matches!(url.scheme(), "http" | "https") {
            bail!("{}: url must be http or https", what());
        }
        let secret = match (&entry.secret, &entry.secret_file) {
            (Some(secret), None) => secret.clone(),
            (None, Some(file)) => std::fs::read_to_string(base.join(file))
                .with_context(|| format!("{}: reading secret_file {}", what(), file.display()))?,
            _ => bail!("{}: give secret or secret_file (one of them)", what()),
        };
        let keys = secret
            .split_whitespace()
            .map(|s| parse_secret(s).map_err(|e| anyhow::anyhow!("{}: {e}", what())))
            .collect::<anyhow::Result<Vec<_>>>()?;
        if keys.is_empty() {
            bail!("{}: the secret is empty", what());
        }
        for event in &entry.events {
            if event != "*" && EventType::parse(event).is_none() {
                let known: Vec<_> = EventType::ALL.iter().map(|t| t.as_str()).collect();
                bail!("{}: unknown event {event:?} (known: {})", what(), known.join(", "));
            }
        }
        let timeout = entry.timeout_secs.map_or(DEFAULT_TIMEOUT, Duration::from_secs);
        if !(1..=60).contains(&timeout.as_secs()) {
            bail!("{}: timeout_secs is 1 to 60", what());
        }
        out.push(WebhookEndpoint {
            name: name.clone(),
            url,
            keys,
            events: entry.events.clone(),
            users: entry.users.clone(),
            timeout,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(toml_text: &str) -> Vec<WebhookEntry> {
        #[derive(Deserialize)]
        struct File {
            webhook: Vec<WebhookEntry>,
        }
        toml::from_str::<File>(toml_text).expect("toml").webhook
    }

    #[test]
    fn a_webhook_is_checked_at_start() {
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let ok = entry(&format!(
            "[[webhook]]\nname = \"ci\"\nurl = \"https://ci.example.com/h\"\nsecret = \"{secret}\"\nevents = [\"run.settled\"]\n"
        ));
        let checked = endpoints(&ok, Path::new(".")).expect("valid");
        assert_eq!((checked[0].keys.len(), checked[0].timeout), (1, DEFAULT_TIMEOUT));
        let bad_event = entry(&format!(
            "[[webhook]]\nname = \"ci\"\nurl = \"https://x\"\nsecret = \"{secret}\"\nevents = [\"run.done\"]\n"
        ));
        assert!(format!("{:#}", endpoints(&bad_event, Path::new(".")).unwrap_err()).contains("unknown event"));
        let no_secret = entry("[[webhook]]\nname = \"ci\"\nurl = \"https://x\"\n");
        assert!(endpoints(&no_secret, Path::new(".")).is_err());
        let not_whsec = entry("[[webhook]]\nname = \"ci\"\nurl = \"https://x\"\nsecret = \"hunter2\"\n");
        assert!(endpoints(&not_whsec, Path::new(".")).is_err());
    }
}

/// `spool webhook …`: the outbox's deliveries, every user's, read and replayed on the
/// store (like `spool token`), with or without a server running.
#[derive(clap::Subcommand)]
pub enum WebhookCommand {
    /// List deliveries, newest first (id, event, type, target, status, attempts, last error).
    List {
        /// Only these: pending, delivered, dead or skipped.
        #[arg(long)]
        status: Option<String>,
        #[command(flatten)]
        store: crate::database::StoreArgs,
    },
    /// List the dead letters.
    Dead {
        #[command(flatten)]
        store: crate::database::StoreArgs,
    },
    /// Send a finished delivery again from its first try, under the same event id.
    Replay {
        id: String,
        #[command(flatten)]
        store: crate::database::StoreArgs,
    },
    /// Enable a webhook its receiver disabled (it answered 410 Gone).
    Enable {
        name: String,
        #[command(flatten)]
        store: crate::database::StoreArgs,
    },
}

impl WebhookCommand {
    pub fn store_mut(&mut self) -> &mut crate::database::StoreArgs {
        match self {
            WebhookCommand::List { store, .. }
            | WebhookCommand::Dead { store }
            | WebhookCommand::Replay { store, .. }
            | WebhookCommand::Enable { store, .. } => store,
        }
    }
}

pub async fn command(mut cmd: WebhookCommand) -> anyhow::Result<()> {
    use spool_engine::DeliveryStatus;
    use std::io::Write;
    let database = cmd.store_mut().open().await?;
    let store = database.store();
    let mut out = std::io::stdout().lock();
    let status = match &cmd {
        WebhookCommand::List { status: Some(text), .. } => Some(
            DeliveryStatus::parse(text)
                .ok_or_else(|| anyhow::anyhow!("--status is pending, delivered, dead or skipped"))?,
        ),
        WebhookCommand::Dead { .. } => Some(DeliveryStatus::Dead),
        _ => None,
    };
    match &cmd {
        WebhookCommand::List { .. } | WebhookCommand::Dead { .. } => {
            for d in store.list_deliveries(None, status, 1_000).await? {
                let error = d.last_error.as_deref().unwrap_or("");
                writeln!(
                    out,
                    "{}\t{}\t{}\t{}\t{}\t{}\t{error}",
                    d.id,
                    d.event.id,
                    d.event.kind,
                    d.target,
                    d.status.as_str(),
                    d.attempts
                )?;
            }
            for disabled in store.disabled_webhooks().await? {
                eprintln!("webhook {} is disabled: {}", disabled.name, disabled.reason);
            }
        }
        WebhookCommand::Replay { id, .. } => {
            let id = id.parse().map_err(|e| anyhow::anyhow!("{e}"))?;
            if !store.replay_delivery(&id, None, spool_protocol::time::now_ms()).await? {
                bail!("no finished delivery {id}");
            }
            writeln!(out, "replaying {id}")?;
        }
        WebhookCommand::Enable { name, .. } => {
            if !store.enable_webhook(name).await? {
                bail!("webhook {name} is not disabled");
            }
            writeln!(out, "enabled {name}")?;
        }
    }
    drop(out);
    database.close().await;
    Ok(())
}
