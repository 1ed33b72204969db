//! The box a `bash` command runs in: a scrubbed environment and, on Linux, a Landlock
//! sandbox. A token holder who gets a command approved is a user, not the server's
//! account: the command must not see the server's secrets (its environment, the data
//! directory with the store and the config's provider keys) nor change files outside
//! the project. A confined MCP server ([`crate::confined`]) runs in the same box, with
//! the extra variables and write grants its config entry gives ([`Grants`]).
//!
//! - **Environment.** Cleared, then an allow-list copied from the server's own
//!   ([`BASE_ENV`], every `LC_*`, and the names the config adds), and `TMPDIR` set to
//!   a temp directory made for this one call and removed after it.
//! - **Files.** Landlock is an allow-list: a ruleset handles every file-system access
//!   the running kernel knows, then grants read-execute on everything except the
//!   excluded paths, and read-write only under the project directory, the call's temp
//!   dir and a few device files (`/dev/null`…). The excluded paths are the data
//!   directory, every file the server was given as a secret
//!   ([`SandboxSettings::secret_paths`]: its TLS key and certificate, its config file,
//!   credential files) and the system's secret files (`/etc/shadow`, host keys…; see
//!   [`files`]). Directories may be listed everywhere, but not read inside an excluded one.
//! - **Network.** TCP is judged by a second Landlock layer ([`net`], ABI 4+): with
//!   `network = false` no port may be connected to or bound; with the network on, every
//!   port may be connected to except those of Spool's own services, the store and the
//!   bus ([`SandboxSettings::services`]), on any host. A seccomp filter ([`filter`])
//!   refuses what Landlock cannot judge: creating UNIX sockets (the PostgreSQL socket),
//!   MPTCP sockets (which bypass the port rules) and io_uring rings, and with
//!   `network = false` every socket but netlink (UDP included). Abstract UNIX sockets
//!   outside the sandbox are scoped away too (ABI 6+).
//! - **Signals** (ABI 6+): the command cannot signal processes outside its sandbox,
//!   the server included.
//! - **The server's memory and environment** (`/proc/$PPID/environ`, `mem`, ptrace).
//!   Three locks, because each one alone has a way round it:
//!   - Landlock bars ptrace-class access from inside the sandbox to processes outside
//!     it, but not for a caller holding `CAP_SYS_PTRACE`: a server run as root (a
//!     container, CI) handed that to every command, which read the environment file.
//!   - So the command gets no capabilities at all: its bounding set is emptied (as
//!     root, `exec` would otherwise hand the full set back), ambient capabilities are
//!     cleared and the effective, permitted and inheritable sets are zeroed.
//!   - And the server marks itself non-dumpable ([`seal_server_process`]) before the
//!     first command, so a process of the same user without `CAP_SYS_PTRACE` cannot
//!     read its `/proc` files even where Landlock is missing. The price: no core dumps
//!     of the server, and a debugger or `perf -p` of the same user cannot attach to it
//!     (start it under the tool instead, or as root).
//!
//! The ruleset is built in the server before spawning (opening directories and
//! allocating are not allowed between fork and exec), and only raw system calls run in
//! the child in `pre_exec`: `prctl` (no new privileges, the capability drops), `capset`,
//! `landlock_restrict_self` (once per layer) and `seccomp`. All are async-signal-safe
//! and allocate nothing; the
//! crate's own `restrict_self` is not documented to be, so it is not called there. The
//! rulesets' descriptors are close-on-exec, so the command never holds them.
//!
//! Where Landlock is missing the ruleset comes out empty (best-effort compatibility),
//! the environment is still scrubbed, capabilities still dropped and commands still
//! run; [`probe`] says so once at start-up for the log and `/api/health`.

mod files;
mod filter;
mod net;
#[cfg(test)]
mod tests;

use crate::error::ToolError;
use filter::Filter;
use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, LandlockStatus, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus, Scope, path_beneath_rules,
};
use spool_engine::SandboxStatus;
use std::ffi::OsString;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::process::Command;

/// The newest Landlock ABI this code asks for; older kernels enforce what they can.
const TARGET_ABI: ABI = ABI::V7;

/// Variables a command gets from the server's environment, besides every `LC_*`.
pub const BASE_ENV: &[&str] = &["PATH", "HOME", "LANG", "LANGUAGE", "TERM", "USER", "LOGNAME", "SHELL", "TZ"];

/// Device files a command may write (`> /dev/null` is everywhere in scripts).
const WRITABLE_DEVICES: &[&str] = &["/dev/null", "/dev/zero", "/dev/full", "/dev/tty", "/dev/random", "/dev/urandom"];

/// What the operator configured for commands (`[sandbox]` in the config file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxSettings {
    /// More variable names passed through from the server's environment.
    pub env: Vec<String>,
    /// Whether commands may open network sockets (`network = false` blocks TCP connect
    /// and bind, UDP and every other socket family but netlink).
    pub network: bool,
    /// Spool's own services, the store and the bus: commands never connect to them,
    /// whatever `network` says. The server fills it from `--database-url` and
    /// `--redis-url`.
    pub services: Vec<Service>,
    /// Files and directories the server was given as secrets (its TLS key and
    /// certificate, its config file, credential files): commands cannot read them, as
    /// they cannot read the data directory. Paths that do not exist are skipped.
    pub secret_paths: Vec<PathBuf>,
}

impl Default for SandboxSettings {
    fn default() -> Self {
        Self { env: Vec::new(), network: true, services: Vec::new(), secret_paths: Vec::new() }
    }
}

/// Where one of Spool's own services listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Service {
    /// A TCP address. Landlock judges connections by port alone, so commands cannot
    /// connect to this port on any host.
    Tcp { host: String, port: u16 },
    /// A UNIX socket. Commands cannot create UNIX sockets at all (a seccomp filter
    /// refuses them), so this one is closed with every other; it is named for the record.
    Unix(PathBuf),
}

impl SandboxSettings {
    /// The TCP ports of Spool's own services.
    fn closed_ports(&self) -> Vec<u16> {
        self.services
            .iter()
            .filter_map(|s| match s {
                Service::Tcp { port, .. } => Some(*port),
                Service::Unix(_) => None,
            })
            .collect()
    }
}

/// Everything one call's child needs, made before it is spawned. Dropping it removes
/// the call's temp dir.
pub(crate) struct Prepared {
    /// The project directory as checked ([`crate::path::Root`]): the command starts in
    /// it by `fchdir`, never by its path, so a root swapped for a link between the
    /// check and the spawn cannot move the command's working directory elsewhere.
    root: OwnedFd,
    ruleset: Option<OwnedFd>,
    /// The TCP layer, shared by every call with the same settings ([`net`]).
    network: Option<Arc<OwnedFd>>,
    filter: Filter,
    env: Vec<(OsString, OsString)>,
    /// Held for its drop, which removes the directory.
    _temp: tempfile::TempDir,
}

impl Prepared {
    /// Makes the temp dir, the environment and the ruleset for a command in `root`
    /// (opened and checked: the write grant goes to that directory, not to its path).
    pub(crate) fn new(
        settings: &SandboxSettings,
        root: &crate::path::Root,
        data_dir: Option<&Path>,
    ) -> Result<Self, ToolError> {
        Self::with_grants(settings, root, data_dir, &Grants::default())
    }

    /// As [`Prepared::new`], and `grants` on top: a confined server's own variables and
    /// the directories it may write besides the project.
    pub(crate) fn with_grants(
        settings: &SandboxSettings,
        root: &crate::path::Root,
        data_dir: Option<&Path>,
        grants: &Grants,
    ) -> Result<Self, ToolError> {
        let (root_dir, root) = (root, root.path());
        let data_dir =
            match data_dir {
                Some(d) => Some(d.canonicalize().or_else(|_| std::path::absolute(d)).map_err(|e| {
                    ToolError::Internal(format!("cannot resolve the data directory {}: {e}", d.display()))
                })?),
                None => None,
            };
        if let Some(data) = &data_dir
            && (root.starts_with(data) || data.starts_with(root))
        {
            // Landlock cannot take a directory back out of a grant, so a project holding
            // the data dir would hand the command the store and the keys.
            return Err(ToolError::Internal(
                "refusing to run: the project directory contains the server's data directory".into(),
            ));
        }
        let excluded = excluded_paths(settings, root, data_dir)?;
        let writable = grants.writable(&excluded)?;
        seal_server_process();
        let temp = tempfile::Builder::new()
            .prefix("spool-bash-")
            .tempdir()
            .map_err(|e| ToolError::Internal(format!("cannot create the command's temp dir: {e}")))?;
        let env = environment(settings, &grants.env, temp.path());
        let built = |e: landlock::RulesetError| ToolError::Internal(format!("cannot build the command's sandbox: {e}"));
        let ruleset = ruleset(root_dir, temp.path(), &writable, &excluded).map_err(built)?;
        let network = net::layer(settings.network, &settings.closed_ports()).map_err(built)?;
        let root = root_dir
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| ToolError::Internal(format!("cannot hold the project directory open: {e}")))?;
        Ok(Self { root, ruleset, network, filter: Filter::new(settings.network), env, _temp: temp })
    }

    /// Gives `command` the scrubbed environment, takes every capability away from it
    /// and, where Landlock works, confines it, between fork and exec. `self` must
    /// outlive the spawn (it holds the ruleset).
    pub(crate) fn apply(&self, command: &mut Command) {
        command.env_clear().envs(self.env.iter().map(|(k, v)| (k, v)));
        let layers = [self.ruleset.as_ref().map(|fd| fd.as_raw_fd()), self.network.as_ref().map(|fd| fd.as_raw_fd())];
        let filter = self.filter.clone();
        let root = self.root.as_raw_fd();
        // SAFETY: the closure runs in the forked child before exec and makes only raw
        // system calls, all async-signal-safe; it touches no lock and allocates nothing
        // (`last_os_error` reads errno into a plain value; the filter was built before
        // the fork). The rulesets' descriptors stay open in the parent until the spawn
        // returns, since `self` outlives it.
        unsafe {
            command.pre_exec(move || {
                if libc::fchdir(root) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                drop_capabilities()?;
                for fd in layers.into_iter().flatten() {
                    if libc::syscall(libc::SYS_landlock_restrict_self, fd, 0u32) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                filter.install()
            });
        }
    }
}

/// What a confined server gets beyond a `bash` command's defaults (its `[[mcp]]`
/// entry's `env` and `rw_paths`; [`crate::confined`]). Empty for `bash`.
#[derive(Clone, Debug, Default)]
pub(crate) struct Grants {
    /// Set on top of the allow-listed environment; `TMPDIR` stays the child's own.
    pub(crate) env: Vec<(String, String)>,
    /// Directories the child may write besides the project and its temp dir.
    pub(crate) rw_paths: Vec<PathBuf>,
}

impl Grants {
    /// The write grants, resolved, each refused when it is, holds or lies inside an
    /// excluded path: Landlock grants everything beneath a directory, so a grant on the
    /// data directory's parent would hand over the store and the keys.
    fn writable(&self, excluded: &[PathBuf]) -> Result<Vec<PathBuf>, ToolError> {
        self.rw_paths
            .iter()
            .map(|path| {
                let real = path
                    .canonicalize()
                    .map_err(|e| ToolError::Internal(format!("cannot grant writes to {}: {e}", path.display())))?;
                match excluded.iter().find(|x| real.starts_with(x) || x.starts_with(&real)) {
                    Some(x) => Err(ToolError::Internal(format!(
                        "refusing to grant writes to {}: it holds or lies inside {}, which the server keeps \
                         from confined processes",
                        path.display(),
                        x.display()
                    ))),
                    None => Ok(real),
                }
            })
            .collect()
    }
}

/// `capset`'s header and one of its two data words (`linux/capability.h`, version 3:
/// 64 capabilities in two 32-bit halves). Written out because `libc` has no binding.
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// Leaves the calling process (the forked child) with no capability now or after exec.
/// Runs between fork and exec: raw system calls only.
///
/// The bounding set goes first, while `CAP_SETPCAP` may still be held: as root, exec
/// grants every capability left in it. A process without `CAP_SETPCAP` gets `EPERM`
/// there, which is fine when it is not root (exec under no-new-privileges grants a
/// non-root process nothing). Numbers past the kernel's last capability give `EINVAL`.
unsafe fn drop_capabilities() -> std::io::Result<()> {
    for cap in 0..64 {
        // SAFETY: plain prctl calls with integer arguments.
        unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) };
    }
    // SAFETY: as above; clearing ambient capabilities needs no privilege.
    if unsafe { libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let header = CapHeader { version: CAPABILITY_VERSION_3, pid: 0 };
    let data = [CapData { effective: 0, permitted: 0, inheritable: 0 }; 2];
    // SAFETY: both pointers refer to live, correctly laid out values for the call.
    if unsafe { libc::syscall(libc::SYS_capset, &header as *const CapHeader, data.as_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Marks the server's process non-dumpable, once: its `/proc/PID/environ`, `mem` and
/// friends then belong to root and need `CAP_SYS_PTRACE`, which no command has (see the
/// module docs). Called at start-up by [`probe`] and again before every command, so no
/// embedding can run a command without it.
pub fn seal_server_process() {
    static SEALED: std::sync::Once = std::sync::Once::new();
    SEALED.call_once(|| {
        // SAFETY: a plain prctl call on this process with integer arguments.
        if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
            tracing::warn!(error = %std::io::Error::last_os_error(), "cannot mark the server non-dumpable");
        }
    });
}

/// The command's environment: the allow-listed variables the server has, then `extra`
/// (a confined server's own), then `TMPDIR`.
fn environment(settings: &SandboxSettings, extra: &[(String, String)], temp: &Path) -> Vec<(OsString, OsString)> {
    let allowed = |name: &str| {
        name != "TMPDIR"
            && (BASE_ENV.contains(&name) || name.starts_with("LC_") || settings.env.iter().any(|e| e == name))
    };
    let mut env: Vec<(OsString, OsString)> =
        std::env::vars_os().filter(|(k, _)| k.to_str().is_some_and(allowed)).collect();
    if !env.iter().any(|(k, _)| k == "PATH") {
        env.push(("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()));
    }
    for (name, value) in extra.iter().filter(|(name, _)| name != "TMPDIR") {
        env.retain(|(k, _)| k != name.as_str());
        env.push((name.into(), value.into()));
    }
    env.push(("TMPDIR".into(), temp.as_os_str().to_owned()));
    env
}

/// Every path a command must not read, resolved: the data directory, the secret paths
/// that exist and the system's secret files. A project directory that holds one, or
/// lies inside one, is refused: Landlock cannot take a path back out of the project's
/// read-write grant.
fn excluded_paths(
    settings: &SandboxSettings,
    root: &Path,
    data_dir: Option<PathBuf>,
) -> Result<Vec<PathBuf>, ToolError> {
    let secrets: Vec<PathBuf> = settings.secret_paths.iter().filter_map(|p| p.canonicalize().ok()).collect();
    for secret in &secrets {
        if secret.starts_with(root) || root.starts_with(secret) {
            return Err(ToolError::Internal(format!(
                "refusing to run: the project directory holds {}, a file the server keeps secret from commands; \
                 move it out of the project",
                secret.display()
            )));
        }
    }
    let mut excluded: Vec<PathBuf> = data_dir.into_iter().chain(secrets).chain(files::system_secrets()).collect();
    excluded.sort();
    excluded.dedup();
    Ok(excluded)
}

/// The per-call ruleset's descriptor (files, signals, abstract sockets), or `None`
/// where the kernel has no Landlock.
fn ruleset(
    root: &crate::path::Root,
    temp: &Path,
    writable: &[PathBuf],
    excluded: &[PathBuf],
) -> Result<Option<OwnedFd>, landlock::RulesetError> {
    let rules = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(TARGET_ABI))?
        .scope(Scope::Signal)?
        .scope(Scope::AbstractUnixSocket)?;
    let created = rules
        .create()?
        .add_rules(path_beneath_rules(files::readable_roots(excluded), AccessFs::from_read(TARGET_ABI)))?
        // Names may be listed everywhere; the excluded paths' contents stay closed.
        .add_rules(path_beneath_rules(["/"], AccessFs::ReadDir))?
        // The project by its checked descriptor: a path opened again here could be a
        // link swapped in since (to the data directory, to another user's project).
        .add_rule(landlock::PathBeneath::new(root.as_fd(), AccessFs::from_all(TARGET_ABI)))?
        .add_rules(path_beneath_rules([temp], AccessFs::from_all(TARGET_ABI)))?
        .add_rules(path_beneath_rules(writable, AccessFs::from_all(TARGET_ABI)))?
        .add_rules(path_beneath_rules(WRITABLE_DEVICES, AccessFs::from_file(TARGET_ABI)))?;
    Ok(created.into())
}

/// What Landlock does for commands on this machine, tried once: a full ruleset is
/// applied to a short-lived thread of our own (Landlock confines only the calling
/// thread), and its enforcement status is read back.
pub fn probe(settings: &SandboxSettings) -> SandboxStatus {
    seal_server_process();
    let network = settings.network;
    let outcome = std::thread::spawn(move || {
        let mut rules = Ruleset::default()
            .set_compatibility(CompatLevel::BestEffort)
            .handle_access(AccessFs::from_all(TARGET_ABI))?
            .scope(Scope::Signal)?
            .scope(Scope::AbstractUnixSocket)?;
        if !network {
            rules = rules.handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)?;
        }
        rules.create()?.add_rules(path_beneath_rules(["/"], AccessFs::from_read(TARGET_ABI)))?.restrict_self()
    })
    .join();
    let (enforced, abi) = match outcome {
        Ok(Ok(status)) => {
            let abi = match status.landlock {
                LandlockStatus::Available { effective_abi, kernel_abi } => {
                    kernel_abi.and_then(|k| u32::try_from(k).ok()).unwrap_or(effective_abi as u32)
                }
                _ => 0,
            };
            (status.ruleset, abi)
        }
        _ => (RulesetStatus::NotEnforced, 0),
    };
    if !filter::supported() {
        tracing::warn!("no seccomp filter for commands on this architecture: they can make UNIX and MPTCP sockets");
    }
    let closed = settings.closed_ports();
    if abi < 4 && !closed.is_empty() {
        tracing::warn!(
            abi,
            "this kernel's Landlock cannot close the store's, the bus's and the server's own ports to commands (ABI 4+)"
        );
    } else if !closed.is_empty() {
        tracing::info!(ports = ?closed, "commands cannot connect to these ports (the store's, the bus's and the server's own), on any host");
    }
    SandboxStatus {
        landlock: enforced != RulesetStatus::NotEnforced,
        fully_enforced: enforced == RulesetStatus::FullyEnforced,
        abi,
        network,
        pid_namespace: crate::process::probe(),
        env: BASE_ENV
            .iter()
            .map(|s| (*s).to_owned())
            .chain(["LC_*".to_owned()])
            .chain(settings.env.iter().cloned())
            .collect(),
    }
}
