//! What `serve` tells the `bash` sandbox about the server itself: where its own
//! services listen (the store behind `--database-url`, the bus behind `--redis-url`,
//! its own HTTP port), so no command connects to them, and which files it was given as secrets, so no
//! command reads them. A command is a user, not the server's account: a PostgreSQL
//! connection from inside it could mint a token for anyone, a Redis one forge frames.
//!
//! The URLs are parsed by the clients that connect with them (sqlx, redis), so the
//! address closed to commands is the one the server really uses, defaults and
//! `?host=` parameters included.

use spool_tools::SandboxService as Service;
use sqlx::postgres::PgConnectOptions;
use std::path::PathBuf;
use std::str::FromStr;

/// The addresses of the store and the bus, from their URLs (already checked by the
/// code that connects with them; a URL that does not parse here names nothing).
pub fn services(database_url: Option<&str>, redis_url: Option<&str>) -> Vec<Service> {
    let mut services = Vec::new();
    if let Some(options) = database_url.and_then(|url| PgConnectOptions::from_str(url).ok()) {
        let port = options.get_port();
        let socket_dir = options
            .get_socket()
            .cloned()
            .or_else(|| options.get_host().starts_with('/').then(|| PathBuf::from(options.get_host())));
        match socket_dir {
            // PostgreSQL names its socket by the port it also listens on for TCP, and a
            // local server usually does both (with trust for local users, often): both
            // are closed.
            Some(dir) => services.extend([
                Service::Unix(dir.join(format!(".s.PGSQL.{port}"))),
                Service::Tcp { host: "localhost".to_owned(), port },
            ]),
            None => services.push(Service::Tcp { host: options.get_host().to_owned(), port }),
        }
    }
    if let Some(info) = redis_url.and_then(|url| redis::IntoConnectionInfo::into_connection_info(url).ok()) {
        match info.addr() {
            redis::ConnectionAddr::Tcp(host, port) | redis::ConnectionAddr::TcpTls { host, port, .. } => {
                services.push(Service::Tcp { host: host.clone(), port: *port })
            }
            redis::ConnectionAddr::Unix(path) => services.push(Service::Unix(path.clone())),
            // A kind of address this version does not know: nothing to name.
            _ => {}
        }
    }
    services
}

/// The server's own HTTP port, when `--addr` names one: with auth off a command could
/// call the server that runs it and allow itself everything. Port 0 (chosen at bind, as
/// tests do) is not known here and stays open.
pub fn listener(addr: std::net::SocketAddr) -> Option<Service> {
    (addr.port() != 0).then(|| Service::Tcp { host: addr.ip().to_string(), port: addr.port() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(host: &str, port: u16) -> Service {
        Service::Tcp { host: host.to_owned(), port }
    }

    #[test]
    fn the_store_and_the_bus_are_found_in_their_urls() {
        assert_eq!(
            services(Some("postgres://spool:pw@db.internal:6432/spool"), Some("redis://:pw@cache:6380/2")),
            vec![tcp("db.internal", 6432), tcp("cache", 6380)]
        );
        // Default ports.
        assert_eq!(
            services(Some("postgresql://db/spool"), Some("redis://cache")),
            vec![tcp("db", 5432), tcp("cache", 6379)]
        );
        // A socket directory, in the host or a parameter: the socket and its port.
        let socket = vec![Service::Unix("/var/run/postgresql/.s.PGSQL.5433".into()), tcp("localhost", 5433)];
        assert_eq!(services(Some("postgres:///spool?host=/var/run/postgresql&port=5433"), None), socket);
        assert_eq!(services(Some("postgres://%2Fvar%2Frun%2Fpostgresql:5433/spool"), None), socket);
        assert_eq!(services(None, Some("redis+unix:///run/redis.sock")), vec![Service::Unix("/run/redis.sock".into())]);
        assert_eq!(services(None, None), vec![]);
        let addr = |a: &str| a.parse().expect("an address");
        assert_eq!(listener(addr("127.0.0.1:4747")), Some(tcp("127.0.0.1", 4747)));
        assert_eq!(listener(addr("127.0.0.1:0")), None);
    }
}
