//! Which store `spool` keeps its records in: SQLite in the data directory (the
//! default, nothing to install) or PostgreSQL when `--database-url` (env
//! `SPOOL_DATABASE_URL`) names one, so several nodes can share it.
//!
//! The choice is made once, here, from the URL's scheme; everything after it sees only
//! `Arc<dyn Store>`. The enum stays concrete (rather than a bare trait object) because
//! closing the pool at shutdown is backend-specific.
//!
//! The data directory is the platform's (`$XDG_DATA_HOME/spool`, else
//! `~/.local/share/spool`) unless `--data-dir` names one; see [`default_data_dir`] for
//! what happens to an earlier version's `./.spool`.
//!
//! The data directory holds the database and the config file with provider keys, so
//! it is created `0700`, and an existing one that others may read is tightened to that
//! on every open (the store creates `spool.db` and its `-wal`/`-shm` files `0600`).

use anyhow::{Context, bail};
use clap::Args;
use spool_engine::Store;
use spool_store::{PgStore, SqliteStore};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where the records live: the flags every command that opens the store takes.
#[derive(Args)]
pub struct StoreArgs {
    /// Directory for the SQLite database (unless --database-url is given) and for
    /// config.toml; created on first start. Default: $XDG_DATA_HOME/spool, else
    /// ~/.local/share/spool; a ./.spool holding a spool.db (an earlier version's
    /// default) is still used, with a warning saying how to move it.
    #[arg(long = "data-dir", env = "SPOOL_DATA_DIR", value_name = "DIR")]
    data_dir_flag: Option<PathBuf>,
    /// The data directory in use, once [`StoreArgs::resolve_data_dir`] has chosen it.
    #[arg(skip)]
    data_dir: Option<PathBuf>,
    /// Keep every record in PostgreSQL instead of SQLite: a postgres:// or
    /// postgresql:// URL (postgres://USER:PASSWORD@HOST:PORT/DATABASE). The schema is
    /// created or upgraded on start. Nodes that share one database share sessions.
    /// A URL with a password is refused on the command line (every process can read
    /// argv): set the variable, or use --database-url-file.
    #[arg(long, env = "SPOOL_DATABASE_URL", value_name = "URL")]
    pub database_url: Option<String>,
    /// Read the --database-url from this file (read once at start, surrounding
    /// whitespace trimmed): for URLs with a password, kept out of argv.
    #[arg(long, env = "SPOOL_DATABASE_URL_FILE", value_name = "FILE", conflicts_with = "database_url")]
    pub database_url_file: Option<PathBuf>,
}

/// The schemes `--database-url` accepts; both are PostgreSQL's own spellings.
const POSTGRES_SCHEMES: [&str; 2] = ["postgres", "postgresql"];

/// An open store of either kind.
pub enum Database {
    Sqlite(SqliteStore),
    Postgres(PgStore),
}

impl StoreArgs {
    /// Takes the URL from `--database-url-file`, if one is named: call once, before
    /// anything asks for the store.
    pub fn read_url_file(&mut self) -> anyhow::Result<()> {
        if let Some(path) = &self.database_url_file {
            self.database_url = Some(crate::secrets::read_secret_file(path, "--database-url-file")?);
        }
        Ok(())
    }

    /// The credential files this store was configured with (for the sandbox to hide).
    pub fn secret_files(&self) -> Vec<PathBuf> {
        self.database_url_file.iter().cloned().collect()
    }

    /// The PostgreSQL URL, if one is configured; an empty variable counts as unset.
    /// Anything that is not a PostgreSQL URL is refused rather than taken for a path.
    fn postgres_url(&self) -> anyhow::Result<Option<&str>> {
        let Some(url) = self.database_url.as_deref().map(str::trim).filter(|u| !u.is_empty()) else {
            return Ok(None);
        };
        match url.split_once("://") {
            Some((scheme, _)) if POSTGRES_SCHEMES.contains(&scheme.to_ascii_lowercase().as_str()) => Ok(Some(url)),
            // Only the scheme is echoed: the rest may hold a password.
            Some((scheme, _)) => bail!(
                "--database-url has the unsupported scheme {scheme:?}: use a postgres:// or postgresql:// URL, \
                 or leave it unset to keep the data in SQLite under --data-dir"
            ),
            None => bail!("--database-url must be a postgres:// or postgresql:// URL"),
        }
    }

    fn sqlite_path(&self) -> PathBuf {
        self.data_dir().join(SQLITE_FILE)
    }

    /// Settles which data directory this command uses: the flag's (or the variable's),
    /// else the default (see [`default_data_dir`]). Call once, before anything asks
    /// for the data directory, with the logs set up (the default may warn).
    pub fn resolve_data_dir(&mut self) -> anyhow::Result<()> {
        let dir = match &self.data_dir_flag {
            Some(dir) => dir.clone(),
            None => default_data_dir()?,
        };
        self.data_dir = Some(dir);
        Ok(())
    }

    /// Opens (creating it if needed) the configured store.
    pub async fn open(&self) -> anyhow::Result<Database> {
        if let Some(url) = self.postgres_url()? {
            let store = PgStore::connect(url).await.context("opening the PostgreSQL database (--database-url)")?;
            return Ok(Database::Postgres(store));
        }
        self.create_data_dir()?;
        let path = self.sqlite_path();
        let store = SqliteStore::open(&path).await.with_context(|| format!("opening {}", path.display()))?;
        Ok(Database::Sqlite(store))
    }

    /// Whether the records live in SQLite in the data directory (no --database-url).
    pub fn uses_sqlite(&self) -> anyhow::Result<bool> {
        Ok(self.postgres_url()?.is_none())
    }

    /// Creates the data directory `0700` if it is missing, and takes group and other
    /// permissions away from an existing one.
    pub fn create_data_dir(&self) -> anyhow::Result<()> {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        let dir = self.data_dir();
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("creating the data directory {}", dir.display()))?;
        let mode = std::fs::metadata(dir).with_context(|| format!("reading {}", dir.display()))?.permissions().mode();
        if mode & 0o077 != 0 {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode & 0o700))
                .with_context(|| format!("making the data directory {} private (0700)", dir.display()))?;
            tracing::info!(data_dir = %dir.display(), "made the data directory private (0700)");
        }
        Ok(())
    }

    /// Whether auth is on (a token was created and `spool auth disable` was not run).
    /// A SQLite store that does not exist yet has it off, and is not created by asking,
    /// so a refused start leaves no files behind.
    pub async fn auth_enabled(&self) -> anyhow::Result<bool> {
        if self.postgres_url()?.is_none() && !self.sqlite_path().is_file() {
            return Ok(false);
        }
        let database = self.open().await?;
        let enabled = database.store().auth_enabled().await;
        database.close().await;
        Ok(enabled?)
    }

    /// How to name this store in a hint about another command (`--data-dir DIR`, the
    /// URL file it was read from, or the URL flag without its value, which may hold a
    /// password).
    pub fn flag_hint(&self) -> String {
        match (self.postgres_url(), &self.database_url_file) {
            (Ok(Some(_)), Some(file)) => format!("--database-url-file {}", file.display()),
            (Ok(Some(_)), None) => "--database-url URL".to_owned(),
            _ => format!("--data-dir {}", self.data_dir().display()),
        }
    }

    /// The data directory, where config.toml is looked for whichever store is used.
    pub fn data_dir(&self) -> &Path {
        self.data_dir.as_deref().expect("main resolves the data directory before any command uses it")
    }
}

/// The SQLite database's file name inside the data directory.
const SQLITE_FILE: &str = "spool.db";

/// The data directory of earlier versions, relative to the working directory. Inside a
/// repository it made the repository (and every directory above it) refused as a
/// project, since the data directory is never part of one.
const EARLIER_DEFAULT: &str = ".spool";

/// The default data directory: the platform's (`$XDG_DATA_HOME/spool` when that
/// variable is an absolute path, as the XDG specification wants, else
/// `~/.local/share/spool`), the same whatever directory `spool` starts in.
///
/// A `./.spool` that holds a store is an earlier version's default with someone's
/// sessions in it: it is still used (never silently left behind for an empty store),
/// and a warning says what that costs and how to move it. Moving it here instead would
/// race a server still running on it and could cross file systems; a person does it
/// once with the server stopped.
fn default_data_dir() -> anyhow::Result<PathBuf> {
    let xdg = std::env::var_os("XDG_DATA_HOME").map(PathBuf::from).filter(|dir| dir.is_absolute());
    let home = std::env::home_dir().filter(|dir| !dir.as_os_str().is_empty());
    let platform = match (xdg, home) {
        (Some(xdg), _) => xdg.join("spool"),
        (None, Some(home)) => home.join(".local/share/spool"),
        (None, None) => bail!(
            "no data directory: neither XDG_DATA_HOME nor HOME is set; name one with --data-dir DIR \
             (or the SPOOL_DATA_DIR variable)"
        ),
    };
    let earlier = Path::new(EARLIER_DEFAULT);
    if !earlier.join(SQLITE_FILE).is_file() {
        return Ok(platform);
    }
    let earlier = earlier.canonicalize().with_context(|| format!("reading ./{EARLIER_DEFAULT}"))?;
    let here = earlier.parent().unwrap_or(&earlier);
    // `mv` needs the new parent (often a missing ~/.local/share), and would put the
    // directory inside an existing one rather than in its place.
    let parent = match platform.parent() {
        Some(parent) if !parent.exists() => format!("mkdir -p {} && ", parent.display()),
        _ => String::new(),
    };
    let aside = match platform.exists() {
        true => format!(" after moving the existing {} aside", platform.display()),
        false => String::new(),
    };
    tracing::warn!(
        data_dir = %earlier.display(),
        "using the data directory {earlier} because it holds the store of an earlier Spool, whose default \
         was ./{EARLIER_DEFAULT}; the default is now {platform}. While the data directory is in {here}, \
         that directory and the ones above it cannot be registered as projects (403 data_dir). \
         To move it, stop the server and run `{parent}mv {earlier} {platform}`{aside}; \
         or keep it where it is with --data-dir {earlier}",
        earlier = earlier.display(),
        platform = platform.display(),
        here = here.display(),
    );
    Ok(earlier)
}

impl Database {
    pub fn store(&self) -> &dyn Store {
        match self {
            Database::Sqlite(store) => store,
            Database::Postgres(store) => store,
        }
    }

    /// A shared handle for the engine.
    pub fn shared(&self) -> Arc<dyn Store> {
        match self {
            Database::Sqlite(store) => Arc::new(store.clone()),
            Database::Postgres(store) => Arc::new(store.clone()),
        }
    }

    /// Which kind of store, for the start-up log line.
    pub fn kind(&self) -> &'static str {
        match self {
            Database::Sqlite(_) => "sqlite",
            Database::Postgres(_) => "postgres",
        }
    }

    /// Closes every connection, waiting for queries in flight.
    pub async fn close(&self) {
        match self {
            Database::Sqlite(store) => store.close().await,
            Database::Postgres(store) => store.close().await,
        }
    }
}
