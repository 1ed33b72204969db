//! `--redis-url`: joining the other nodes of a deployment through Redis: PUB/SUB
//! (`spool_bus::RedisCluster`), so an abort sent to any node reaches the node running
//! the session and list notifications reach the pages on every node, and the frame bus
//! (`spool_bus::RedisBus`), so a client follows any session on any node and resumes on
//! any other with its cursor.
//!
//! Nodes are only meaningful on a shared store: with SQLite every process is alone and
//! all are named `local`, so the flag is refused there rather than quietly mixing up
//! separate servers. Errors name the server but never the URL's password.
//!
//! What a node writes to Redis is sealed with the deployment's cluster key (see
//! `spool_bus`'s `seal.rs`), taken in this order: the variable `SPOOL_CLUSTER_KEY`,
//! the file `--cluster-key-file`, else the key stored in the shared PostgreSQL database
//! (the first node to start stores a random one), so the nodes of one database agree
//! without any configuration, and a key can still be kept out of the database.

use anyhow::{Context, bail};
use spool_bus::{BusConfig, ClusterKey, RedisBus, RedisCluster};
use spool_store::PgStore;
use std::path::Path;
use std::time::Duration;

/// The variable that may hold the cluster key itself.
const KEY_VAR: &str = "SPOOL_CLUSTER_KEY";

/// How long reaching Redis may take at start before the start fails.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The Redis URL, if one is configured; an empty variable counts as unset.
pub fn redis_url(raw: Option<&str>) -> anyhow::Result<Option<&str>> {
    let Some(url) = raw.map(str::trim).filter(|u| !u.is_empty()) else { return Ok(None) };
    match url.split_once("://") {
        Some((scheme, _)) if scheme.eq_ignore_ascii_case("redis") => Ok(Some(url)),
        // Only the scheme is echoed: the rest may hold a password.
        Some((scheme, _)) => bail!(
            "--redis-url has the unsupported scheme {scheme:?}: use a redis:// URL \
             (redis://[:PASSWORD@]HOST:PORT[/DB]); TLS (rediss://) is not built in"
        ),
        None => bail!("--redis-url must be a redis:// URL (redis://[:PASSWORD@]HOST:PORT[/DB])"),
    }
}

/// Joins the cluster as `node`: the cluster channel, and the frame bus that carries
/// session streams.
pub async fn join(url: &str, node: &str, key: ClusterKey) -> anyhow::Result<(RedisCluster, RedisBus)> {
    let server = server_of(url);
    let both = async {
        let cluster = RedisCluster::connect(url, node, key.clone()).await?;
        let bus = RedisBus::connect(url, BusConfig::default(), key).await?;
        Ok::<_, spool_bus::BusError>((cluster, bus))
    };
    match tokio::time::timeout(CONNECT_TIMEOUT, both).await {
        Ok(Ok(joined)) => Ok(joined),
        Ok(Err(e)) => bail!("cannot connect to Redis at {server} (--redis-url): {}", redact(&e.to_string(), url)),
        Err(_) => bail!("cannot connect to Redis at {server} (--redis-url): no answer within {CONNECT_TIMEOUT:?}"),
    }
}

/// The deployment's cluster key: `SPOOL_CLUSTER_KEY`, else `--cluster-key-file`, else
/// the one kept in the database (stored now by the first node).
pub async fn cluster_key(file: Option<&Path>, store: &PgStore) -> anyhow::Result<ClusterKey> {
    let configured = std::env::var(KEY_VAR).ok().map(|k| k.trim().to_owned()).filter(|k| !k.is_empty());
    let (secret, source) = match (configured, file) {
        (Some(_), Some(_)) => bail!("the cluster key is given twice: set {KEY_VAR} or --cluster-key-file, not both"),
        (Some(key), None) => (key.into_bytes(), KEY_VAR),
        (None, Some(path)) => {
            (crate::secrets::read_secret_file(path, "--cluster-key-file")?.into_bytes(), "--cluster-key-file")
        }
        (None, None) => {
            let stored = store.cluster_key(&ClusterKey::generate()).await.context("reading the cluster key")?;
            (stored, "the database")
        }
    };
    tracing::info!(source, "sealing bus messages with the cluster key");
    ClusterKey::new(&secret).with_context(|| format!("the cluster key from {source}"))
}

/// `HOST:PORT[/DB]` of a URL, without user or password.
fn server_of(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    rest.split('?').next().unwrap_or(rest)
}

/// A client error may quote the URL; never show its password.
fn redact(message: &str, url: &str) -> String {
    message.replace(url, server_of(url))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_redis_urls_are_taken_and_passwords_never_shown() {
        assert_eq!(redis_url(None).expect("unset"), None);
        assert_eq!(redis_url(Some("  ")).expect("empty is unset"), None);
        assert_eq!(redis_url(Some("redis://127.0.0.1:6379")).expect("ok"), Some("redis://127.0.0.1:6379"));
        let refused = redis_url(Some("rediss://:secret@cache:6380")).expect_err("no TLS").to_string();
        assert!(refused.contains(r#""rediss""#) && !refused.contains("secret"), "{refused}");
        assert!(redis_url(Some("127.0.0.1:6379")).is_err());
        assert_eq!(server_of("redis://user:secret@cache:6379/2"), "cache:6379/2");
        assert_eq!(server_of("redis://cache:6379"), "cache:6379");
    }
}
