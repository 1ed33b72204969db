//! Credentials stay out of argv. A process's command line is readable by every process
//! of the machine (`/proc/PID/cmdline`, `ps`), commands the agent runs included, so a
//! database or Redis URL carrying a password is refused there with a pointer to the two
//! ways that keep it private: the environment variable (`SPOOL_DATABASE_URL`,
//! `SPOOL_REDIS_URL`), or a file named by `--database-url-file` / `--redis-url-file`
//! that only the server can read. A URL without a password may still be given as a flag.
//!
//! Clap fills a field from either its flag or its variable; [`refuse_credentials_in_argv`]
//! asks the parsed matches which one it came from, for every subcommand that takes the
//! flag (`serve`, `token …`, `auth …`).

use anyhow::{Context, bail};
use clap::ArgMatches;
use clap::parser::ValueSource;
use std::path::Path;

/// The flags that may carry a password, by clap id, with their variable and file flag.
const CREDENTIAL_FLAGS: [(&str, &str, &str, &str); 2] = [
    ("database_url", "--database-url", "SPOOL_DATABASE_URL", "--database-url-file"),
    ("redis_url", "--redis-url", "SPOOL_REDIS_URL", "--redis-url-file"),
];

/// Refuses a password given on the command line, in `matches` or any subcommand's.
pub fn refuse_credentials_in_argv(matches: &ArgMatches) -> anyhow::Result<()> {
    for (id, flag, var, file_flag) in CREDENTIAL_FLAGS {
        if matches.try_contains_id(id).unwrap_or(false)
            && matches.value_source(id) == Some(ValueSource::CommandLine)
            && matches.get_one::<String>(id).is_some_and(|url| has_password(url))
        {
            bail!(
                "{flag} was given a URL with a password on the command line, where every process on this \
                 machine can read it (/proc/PID/cmdline): set {var} in the server's environment instead, or put \
                 the URL in a file only the server can read and pass {file_flag} FILE"
            );
        }
    }
    match matches.subcommand() {
        Some((_, sub)) => refuse_credentials_in_argv(sub),
        None => Ok(()),
    }
}

/// Whether a URL carries a password: `scheme://user:PASSWORD@host…`, or a `password`
/// query parameter (PostgreSQL's URLs take one).
fn has_password(url: &str) -> bool {
    let Some((_, rest)) = url.split_once("://") else { return false };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or(rest);
    let in_userinfo = authority.rsplit_once('@').is_some_and(|(userinfo, _)| userinfo.contains(':'));
    let in_query = rest.split_once('?').is_some_and(|(_, query)| {
        query.split('&').any(|pair| pair.split('=').next().is_some_and(|k| k.eq_ignore_ascii_case("password")))
    });
    in_userinfo || in_query
}

/// A secret kept in a file (a URL, a key): read once, surrounding whitespace trimmed
/// (a trailing newline is almost always there). An empty file is an error, not "unset".
pub fn read_secret_file(path: &Path, flag: &str) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {flag} {}", path.display()))?;
    let secret = text.trim();
    if secret.is_empty() {
        bail!("{flag} {} is empty", path.display());
    }
    Ok(secret.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_found_in_userinfo_and_query() {
        assert!(has_password("postgres://spool:s3cret@db:5432/spool"));
        assert!(has_password("redis://:s3cret@cache:6379/2"));
        assert!(has_password("postgresql://db/spool?user=spool&password=s3cret"));
        assert!(!has_password("postgres://postgres@127.0.0.1:5432/postgres"));
        assert!(!has_password("redis://127.0.0.1:6379"));
        assert!(!has_password("postgres://db:5432/spool?sslmode=require"));
        // A colon after the host is the port, not a password.
        assert!(!has_password("redis://cache:6379/0?x=a@b"));
    }

    #[test]
    fn secret_files_are_trimmed_and_must_not_be_empty() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("url");
        std::fs::write(&file, "  redis://:pw@cache:6379\n").expect("write");
        assert_eq!(read_secret_file(&file, "--redis-url-file").expect("read"), "redis://:pw@cache:6379");
        std::fs::write(&file, "\n").expect("write");
        assert!(read_secret_file(&file, "--redis-url-file").is_err());
        assert!(read_secret_file(&dir.path().join("missing"), "--redis-url-file").is_err());
    }
}
