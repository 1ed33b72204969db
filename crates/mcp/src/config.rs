//! The `[[mcp]]` entries of config.toml: which MCP servers Spool may connect to, and
//! what each may do.
//!
//! ```toml
//! [[mcp]]
//! name = "everything"            # [a-z0-9_-]{1,32}, unique; tools appear as `everything_echo`
//! command = "node"               # a stdio server, run in the bash sandbox…
//! args = ["/opt/mcp/everything/dist/index.js"]
//! env = { LOG_LEVEL = "info" }   # set for it on top of the sandbox's allow-list
//! network = false                # default: no network for it
//! rw_paths = ["/srv/cache"]      # absolute; written besides the project
//!
//! [[mcp]]
//! name = "docs"
//! url = "https://mcp.example.com/mcp"   # …or a Streamable HTTP one
//! headers = { "X-Team" = "core" }
//! bearer_token_env = "DOCS_MCP_TOKEN"   # or bearer_token_file = "/run/secrets/docs"
//! enabled = true                 # default true
//! projects = ["/srv/app"]        # offered to these projects' sessions; absent: every project
//! trust_read_only = false        # plan mode may offer its read-only tools
//! sampling = false               # it may ask Spool's model for completions
//! call_timeout_secs = 120        # 1..=3600; restarted by every progress notification
//! ```
//!
//! `projects` is a default, not a fence: a person may turn a server on or off for one
//! session in the Rules panel, and that choice wins (`PUT /api/sessions/{id}/mcp/{server}`).
//!
//! [`McpEntry`] is an entry as written (unknown keys refused, as everywhere in the
//! config: a typo must not silently widen a sandbox); [`servers`] checks the whole list
//! and turns it into [`McpServerConfig`]s, one error naming the entry at fault.
//!
//! A bearer token is never in the config text: the entry names where to read it (an
//! environment variable or a file), so nothing built from the config can show it. An
//! `Authorization` header is refused for the same reason.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// A call's deadline when the entry sets none.
pub const DEFAULT_CALL_TIMEOUT_SECS: u64 = 120;
/// The longest `call_timeout_secs` an entry may set.
pub const MAX_CALL_TIMEOUT_SECS: u64 = 3600;
/// The longest server name: it prefixes every tool name, and those have a 64-character cap.
pub const MAX_NAME_LEN: usize = 32;

/// One `[[mcp]]` entry, as written.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpEntry {
    pub name: String,
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    pub network: Option<bool>,
    #[serde(default)]
    pub rw_paths: Vec<PathBuf>,
    pub url: Option<String>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    pub bearer_token_env: Option<String>,
    pub bearer_token_file: Option<PathBuf>,
    pub enabled: Option<bool>,
    #[serde(default)]
    pub projects: Vec<PathBuf>,
    #[serde(default)]
    pub trust_read_only: bool,
    #[serde(default)]
    pub sampling: bool,
    pub call_timeout_secs: Option<u64>,
}

/// A checked `[[mcp]]` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct McpServerConfig {
    pub name: String,
    pub transport: Transport,
    pub enabled: bool,
    /// The project directories whose sessions are offered it (absolute); empty: every
    /// project's. See [`McpServerConfig::serves_project`].
    pub projects: Vec<PathBuf>,
    /// Whether plan mode may offer the tools this server marks read-only.
    pub trust_read_only: bool,
    /// Whether the server may ask for sampling (completions from Spool's model).
    pub sampling: bool,
    pub call_timeout: Duration,
}

impl McpServerConfig {
    /// Whether sessions of the project at `root` (canonical, as a run names it) are
    /// offered this server when they chose nothing: with no `projects`, every project;
    /// otherwise one of them, compared as written and, where it exists, canonical (a
    /// path through a symbolic link names the directory it leads to).
    pub fn serves_project(&self, root: &std::path::Path) -> bool {
        self.projects.is_empty()
            || self.projects.iter().any(|p| p == root || std::fs::canonicalize(p).is_ok_and(|c| c == root))
    }
}

/// How Spool reaches a server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transport {
    Stdio(StdioServer),
    Http(HttpServer),
}

/// A server Spool starts itself, in the bash sandbox, and speaks to over its pipes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StdioServer {
    pub command: String,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub network: bool,
    /// Absolute; checked against the data directory and the secrets when it starts.
    pub rw_paths: Vec<PathBuf>,
}

/// A server at a Streamable HTTP endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpServer {
    pub url: url::Url,
    pub headers: BTreeMap<String, String>,
    pub bearer: Option<BearerToken>,
}

/// Where a server's bearer token is read when connecting: never the token itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BearerToken {
    Env(String),
    File(PathBuf),
}

/// A refused `[[mcp]]` entry: which one, and why.
#[derive(Debug, thiserror::Error)]
#[error("[[mcp]] entry {entry}: {problem}")]
pub struct ConfigError {
    /// The entry's name in quotes, or its position when the name is what is wrong.
    pub entry: String,
    pub problem: String,
}

/// Checks every entry and returns them in the file's order.
pub fn servers(entries: Vec<McpEntry>) -> Result<Vec<McpServerConfig>, ConfigError> {
    let mut checked: Vec<McpServerConfig> = Vec::with_capacity(entries.len());
    for (index, entry) in entries.into_iter().enumerate() {
        let server = check(entry, index)?;
        if checked.iter().any(|s| s.name == server.name) {
            return Err(ConfigError { entry: format!("{:?}", server.name), problem: "the name is used twice".into() });
        }
        checked.push(server);
    }
    Ok(checked)
}

fn check(entry: McpEntry, index: usize) -> Result<McpServerConfig, ConfigError> {
    if !valid_name(&entry.name) {
        return Err(ConfigError {
            entry: format!("#{} (name {:?})", index + 1, entry.name),
            problem: format!("a name is 1 to {MAX_NAME_LEN} of a-z, 0-9, _ and -"),
        });
    }
    let refuse = |problem: String| ConfigError { entry: format!("{:?}", entry.name), problem };
    let call_timeout_secs = entry.call_timeout_secs.unwrap_or(DEFAULT_CALL_TIMEOUT_SECS);
    if !(1..=MAX_CALL_TIMEOUT_SECS).contains(&call_timeout_secs) {
        return Err(refuse(format!("call_timeout_secs must be 1 to {MAX_CALL_TIMEOUT_SECS}, not {call_timeout_secs}")));
    }
    let transport = match (&entry.command, &entry.url) {
        (Some(_), Some(_)) => {
            return Err(refuse(
                "both command and url are set; a server is either a command (stdio) or a url (HTTP)".into(),
            ));
        }
        (None, None) => return Err(refuse("neither command nor url is set".into())),
        (Some(command), None) => Transport::Stdio(stdio(&entry, command).map_err(refuse)?),
        (None, Some(url)) => Transport::Http(http(&entry, url).map_err(refuse)?),
    };
    if let Some(path) = entry.projects.iter().find(|p| !p.is_absolute()) {
        return Err(refuse(format!("projects entry {} must be an absolute path", path.display())));
    }
    Ok(McpServerConfig {
        transport,
        enabled: entry.enabled.unwrap_or(true),
        projects: entry.projects,
        trust_read_only: entry.trust_read_only,
        sampling: entry.sampling,
        call_timeout: Duration::from_secs(call_timeout_secs),
        name: entry.name,
    })
}

fn stdio(entry: &McpEntry, command: &str) -> Result<StdioServer, String> {
    let http_only = [
        ("headers", !entry.headers.is_empty()),
        ("bearer_token_env", entry.bearer_token_env.is_some()),
        ("bearer_token_file", entry.bearer_token_file.is_some()),
    ];
    if let Some((key, _)) = http_only.iter().find(|(_, set)| *set) {
        return Err(format!("{key} is for url servers; a command server gets its secrets through env"));
    }
    if command.trim().is_empty() {
        return Err("command is empty".into());
    }
    for (name, value) in &entry.env {
        if !valid_env_name(name) {
            return Err(format!("env name {name:?} is not a variable name"));
        }
        if name == "TMPDIR" {
            return Err("env cannot set TMPDIR: the sandbox gives the server a temp directory of its own".into());
        }
        if value.contains('\0') {
            return Err(format!("env {name} holds a NUL byte"));
        }
    }
    if let Some(path) = entry.rw_paths.iter().find(|p| !p.is_absolute()) {
        return Err(format!("rw_paths entry {} must be an absolute path", path.display()));
    }
    Ok(StdioServer {
        command: command.to_owned(),
        args: entry.args.clone(),
        env: entry.env.clone(),
        network: entry.network.unwrap_or(false),
        rw_paths: entry.rw_paths.clone(),
    })
}

fn http(entry: &McpEntry, url: &str) -> Result<HttpServer, String> {
    let stdio_only = [
        ("args", !entry.args.is_empty()),
        ("env", !entry.env.is_empty()),
        ("network", entry.network.is_some()),
        ("rw_paths", !entry.rw_paths.is_empty()),
    ];
    if let Some((key, _)) = stdio_only.iter().find(|(_, set)| *set) {
        return Err(format!("{key} is for command servers; Spool itself connects to a url server"));
    }
    let url = url::Url::parse(url).map_err(|e| format!("url {url:?} is not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err(format!("url {url} is not an http:// or https:// address"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("url holds credentials; use bearer_token_env or bearer_token_file".into());
    }
    for (name, value) in &entry.headers {
        let parsed = http::HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("header {name:?} is not a header name"))?;
        if parsed == http::header::AUTHORIZATION {
            return Err(
                "an Authorization header would be shown with the config; use bearer_token_env or bearer_token_file"
                    .into(),
            );
        }
        if http::HeaderValue::from_str(value).is_err() {
            return Err(format!("header {name}'s value is not a valid header value"));
        }
    }
    let bearer = match (&entry.bearer_token_env, &entry.bearer_token_file) {
        (Some(_), Some(_)) => return Err("both bearer_token_env and bearer_token_file are set; choose one".into()),
        (Some(name), None) if !valid_env_name(name) => {
            return Err(format!("bearer_token_env {name:?} is not a variable name"));
        }
        (Some(name), None) => Some(BearerToken::Env(name.clone())),
        (None, Some(path)) if !path.is_absolute() => {
            return Err(format!("bearer_token_file {} must be an absolute path", path.display()));
        }
        (None, Some(path)) => Some(BearerToken::File(path.clone())),
        (None, None) => None,
    };
    Ok(HttpServer { url, headers: entry.headers.clone(), bearer })
}

fn valid_name(name: &str) -> bool {
    (1..=MAX_NAME_LEN).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

fn valid_env_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct File {
        #[serde(default)]
        mcp: Vec<McpEntry>,
    }

    fn parse(text: &str) -> Result<Vec<McpServerConfig>, String> {
        let file: File = toml::from_str(text).map_err(|e| e.to_string())?;
        servers(file.mcp).map_err(|e| e.to_string())
    }

    /// The error for `text`, which must name `entry` and say `why`.
    fn refused(text: &str, entry: &str, why: &str) {
        let err = parse(text).expect_err(text);
        assert!(err.contains(&format!("[[mcp]] entry {entry}")), "{err}");
        assert!(err.contains(why), "{err}");
    }

    #[test]
    fn a_stdio_and_an_http_server_parse_with_their_defaults() {
        let servers = parse(
            r#"
            [[mcp]]
            name = "everything"
            command = "node"
            args = ["index.js", "stdio"]
            env = { LOG_LEVEL = "info" }
            rw_paths = ["/srv/cache"]

            [[mcp]]
            name = "docs-2"
            url = "https://mcp.example.com/mcp"
            headers = { "X-Team" = "core" }
            bearer_token_env = "DOCS_TOKEN"
            enabled = false
            trust_read_only = true
            sampling = true
            call_timeout_secs = 3600
            "#,
        )
        .expect("valid");
        assert_eq!(
            servers[0],
            McpServerConfig {
                name: "everything".into(),
                transport: Transport::Stdio(StdioServer {
                    command: "node".into(),
                    args: vec!["index.js".into(), "stdio".into()],
                    env: [("LOG_LEVEL".to_owned(), "info".to_owned())].into(),
                    network: false,
                    rw_paths: vec!["/srv/cache".into()],
                }),
                enabled: true,
                projects: Vec::new(),
                trust_read_only: false,
                sampling: false,
                call_timeout: Duration::from_secs(DEFAULT_CALL_TIMEOUT_SECS),
            }
        );
        let Transport::Http(http) = &servers[1].transport else { panic!("{:?}", servers[1]) };
        assert_eq!(http.url.as_str(), "https://mcp.example.com/mcp");
        assert_eq!(http.headers["X-Team"], "core");
        assert_eq!(http.bearer, Some(BearerToken::Env("DOCS_TOKEN".into())));
        assert!(!servers[1].enabled && servers[1].trust_read_only && servers[1].sampling);
        assert_eq!(servers[1].call_timeout, Duration::from_secs(3600));
        let file =
            parse("[[mcp]]\nname = \"f\"\nurl = \"http://127.0.0.1:3001/mcp\"\nbearer_token_file = \"/run/t\"\n")
                .expect("valid");
        let Transport::Http(http) = &file[0].transport else { panic!() };
        assert_eq!(http.bearer, Some(BearerToken::File("/run/t".into())));
        assert_eq!(parse("").expect("no servers"), []);
    }

    #[test]
    fn names_must_be_short_lowercase_and_unique() {
        for bad in ["", "Upper", "has space", "dot.ted", "ünï", &"x".repeat(33)] {
            refused(&format!("[[mcp]]\nname = {bad:?}\ncommand = \"x\"\n"), "#1", "a name is 1 to 32");
        }
        parse(&format!("[[mcp]]\nname = \"{}\"\ncommand = \"x\"\n", "a_-9".repeat(8))).expect("32 characters");
        refused(
            "[[mcp]]\nname = \"a\"\ncommand = \"x\"\n[[mcp]]\nname = \"a\"\nurl = \"http://h/\"\n",
            "\"a\"",
            "used twice",
        );
    }

    #[test]
    fn a_server_is_a_command_or_a_url_never_both() {
        refused("[[mcp]]\nname = \"a\"\ncommand = \"x\"\nurl = \"http://h/\"\n", "\"a\"", "both command and url");
        refused("[[mcp]]\nname = \"a\"\n", "\"a\"", "neither command nor url");
        refused("[[mcp]]\nname = \"a\"\ncommand = \" \"\n", "\"a\"", "command is empty");
        for key in ["headers = { X = \"y\" }", "bearer_token_env = \"T\"", "bearer_token_file = \"/t\""] {
            refused(&format!("[[mcp]]\nname = \"a\"\ncommand = \"x\"\n{key}\n"), "\"a\"", "is for url servers");
        }
        for key in ["args = [\"x\"]", "env = { X = \"y\" }", "network = true", "rw_paths = [\"/x\"]"] {
            refused(&format!("[[mcp]]\nname = \"a\"\nurl = \"http://h/\"\n{key}\n"), "\"a\"", "is for command servers");
        }
    }

    #[test]
    fn stdio_env_and_paths_are_checked() {
        refused("[[mcp]]\nname = \"a\"\ncommand = \"x\"\nenv = { \"A=B\" = \"y\" }\n", "\"a\"", "not a variable name");
        refused("[[mcp]]\nname = \"a\"\ncommand = \"x\"\nenv = { \"1A\" = \"y\" }\n", "\"a\"", "not a variable name");
        refused("[[mcp]]\nname = \"a\"\ncommand = \"x\"\nenv = { A = \"y\\u0000\" }\n", "\"a\"", "NUL");
        refused("[[mcp]]\nname = \"a\"\ncommand = \"x\"\nrw_paths = [\"rel\"]\n", "\"a\"", "absolute");
        refused("[[mcp]]\nname = \"a\"\ncommand = \"x\"\nenv = { TMPDIR = \"/tmp\" }\n", "\"a\"", "cannot set TMPDIR");
    }

    #[test]
    fn urls_headers_and_tokens_are_checked() {
        let http = |extra: &str| format!("[[mcp]]\nname = \"a\"\nurl = \"https://h/mcp\"\n{extra}\n");
        for url in ["not a url", "ftp://h/mcp", "file:///tmp/x"] {
            refused(&format!("[[mcp]]\nname = \"a\"\nurl = {url:?}\n"), "\"a\"", "url");
        }
        refused("[[mcp]]\nname = \"a\"\nurl = \"https://u:p@h/mcp\"\n", "\"a\"", "holds credentials");
        refused(&http("headers = { \"Authorization\" = \"Bearer sk-x\" }"), "\"a\"", "Authorization header");
        refused(&http("headers = { \"authorization\" = \"Bearer sk-x\" }"), "\"a\"", "Authorization header");
        refused(&http("headers = { \"bad name\" = \"v\" }"), "\"a\"", "not a header name");
        refused(&http("headers = { X = \"line\\nbreak\" }"), "\"a\"", "not a valid header value");
        refused(&http("bearer_token_env = \"T\"\nbearer_token_file = \"/t\""), "\"a\"", "choose one");
        refused(&http("bearer_token_env = \"NOT-A-VAR\""), "\"a\"", "not a variable name");
        refused(&http("bearer_token_file = \"token.txt\""), "\"a\"", "absolute");
    }

    #[test]
    fn projects_are_absolute_and_absent_means_every_project() {
        // A directory of this process's own (no temp-dir crate here), removed at the end.
        let dir = std::env::temp_dir().join(format!("spool-mcp-projects-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let real = std::fs::canonicalize(&dir).expect("canonical");
        std::os::unix::fs::symlink(&real, real.join("link")).expect("symlink");
        let text = format!("[[mcp]]\nname = \"a\"\ncommand = \"x\"\nprojects = [{:?}]\n", real.join("link"));
        let listed = parse(&text).expect("valid");
        assert!(listed[0].serves_project(&real), "named through a link to it");
        assert!(!listed[0].serves_project(std::path::Path::new("/elsewhere")));
        let every = parse("[[mcp]]\nname = \"a\"\ncommand = \"x\"\n").expect("valid");
        assert!(every[0].projects.is_empty() && every[0].serves_project(std::path::Path::new("/elsewhere")));
        refused("[[mcp]]\nname = \"a\"\ncommand = \"x\"\nprojects = [\"rel\"]\n", "\"a\"", "projects entry rel");
        std::fs::remove_dir_all(&real).expect("clean up");
    }

    #[test]
    fn timeouts_are_1_to_3600_seconds_and_typos_are_refused() {
        refused(
            "[[mcp]]\nname = \"a\"\ncommand = \"x\"\ncall_timeout_secs = 0\n",
            "\"a\"",
            "call_timeout_secs must be 1 to 3600",
        );
        refused("[[mcp]]\nname = \"a\"\ncommand = \"x\"\ncall_timeout_secs = 3601\n", "\"a\"", "not 3601");
        let one = parse("[[mcp]]\nname = \"a\"\ncommand = \"x\"\ncall_timeout_secs = 1\n").expect("valid");
        assert_eq!(one[0].call_timeout, Duration::from_secs(1));
        let typo = parse("[[mcp]]\nname = \"a\"\ncommand = \"x\"\nnetwrok = true\n").expect_err("typo");
        assert!(typo.contains("unknown field `netwrok`"), "{typo}");
    }
}
