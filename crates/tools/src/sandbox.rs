//! The box a `bash` command runs in: a scrubbed environment and, on Linux, a Landlock
//! sandbox. A token holder who gets a command approved is a user, not the server's
//! account: the command must not see the server's secrets (its environment, the data
//! directory with the store and the config's provider keys) nor change files outside
//! the project.
//!
//! - **Environment.** Cleared, then an allow-list copied from the server's own
//!   ([`BASE_ENV`], every `LC_*`, and the names the config adds), and `TMPDIR` set to
//!   a temp directory made for this one call and removed after it.
//! - **Files.** Landlock is an allow-list: a ruleset handles every file-system access
//!   the running kernel knows, then grants read-execute on everything except the data
//!   directory, and read-write only under the project directory, the call's temp dir
//!   and a few device files (`/dev/null`…). "Everything except" cannot be said
//!   directly, so [`readable_roots`] walks from `/` down the data directory's ancestors
//!   and grants each sibling on the way; the ancestors themselves can be traversed but
//!   not listed.
//! - **Network** (`network = false`): TCP connect and bind are handled with no port
//!   granted (Landlock ABI 4+), and abstract UNIX sockets outside the sandbox are
//!   scoped away (ABI 6+). UDP is not covered by Landlock.
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
//! the child in `pre_exec`: `prctl` (no new privileges, the capability drops), `capset`
//! and `landlock_restrict_self`. All are async-signal-safe and allocate nothing; the
//! crate's own `restrict_self` is not documented to be, so it is not called there. The
//! ruleset's descriptor is close-on-exec, so the command never holds it.
//!
//! Where Landlock is missing the ruleset comes out empty (best-effort compatibility),
//! the environment is still scrubbed, capabilities still dropped and commands still
//! run; [`probe`] says so once at start-up for the log and `/api/health`.

use crate::error::ToolError;
use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, LandlockStatus, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus, Scope, path_beneath_rules,
};
use spool_engine::SandboxStatus;
use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
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
    /// Whether commands may open TCP connections and listen (`network = false` blocks).
    pub network: bool,
}

impl Default for SandboxSettings {
    fn default() -> Self {
        Self { env: Vec::new(), network: true }
    }
}

/// Everything one call's child needs, made before it is spawned. Dropping it removes
/// the call's temp dir.
pub(crate) struct Prepared {
    ruleset: Option<OwnedFd>,
    env: Vec<(OsString, OsString)>,
    /// Held for its drop, which removes the directory.
    _temp: tempfile::TempDir,
}

impl Prepared {
    /// Makes the temp dir, the environment and the ruleset for a command in `root`.
    pub(crate) fn new(settings: &SandboxSettings, root: &Path, data_dir: Option<&Path>) -> Result<Self, ToolError> {
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
        seal_server_process();
        let temp = tempfile::Builder::new()
            .prefix("spool-bash-")
            .tempdir()
            .map_err(|e| ToolError::Internal(format!("cannot create the command's temp dir: {e}")))?;
        let env = environment(settings, temp.path());
        let ruleset = ruleset(settings.network, root, temp.path(), data_dir.as_deref())
            .map_err(|e| ToolError::Internal(format!("cannot build the command's sandbox: {e}")))?;
        Ok(Self { ruleset, env, _temp: temp })
    }

    /// Gives `command` the scrubbed environment, takes every capability away from it
    /// and, where Landlock works, confines it, between fork and exec. `self` must
    /// outlive the spawn (it holds the ruleset).
    pub(crate) fn apply(&self, command: &mut Command) {
        command.env_clear().envs(self.env.iter().map(|(k, v)| (k, v)));
        let ruleset = self.ruleset.as_ref().map(|fd| fd.as_raw_fd());
        // SAFETY: the closure runs in the forked child before exec and makes only raw
        // system calls, all async-signal-safe; it touches no lock and allocates nothing
        // (`last_os_error` reads errno into a plain value). The ruleset's descriptor
        // stays open in the parent until the spawn returns, since `self` outlives it.
        unsafe {
            command.pre_exec(move || {
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                drop_capabilities()?;
                if let Some(fd) = ruleset
                    && libc::syscall(libc::SYS_landlock_restrict_self, fd, 0u32) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
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

/// The command's environment: the allow-listed variables the server has, and `TMPDIR`.
fn environment(settings: &SandboxSettings, temp: &Path) -> Vec<(OsString, OsString)> {
    let allowed = |name: &str| {
        name != "TMPDIR"
            && (BASE_ENV.contains(&name) || name.starts_with("LC_") || settings.env.iter().any(|e| e == name))
    };
    let mut env: Vec<(OsString, OsString)> =
        std::env::vars_os().filter(|(k, _)| k.to_str().is_some_and(allowed)).collect();
    if !env.iter().any(|(k, _)| k == "PATH") {
        env.push(("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()));
    }
    env.push(("TMPDIR".into(), temp.as_os_str().to_owned()));
    env
}

/// The ruleset's descriptor, or `None` where the kernel has no Landlock.
fn ruleset(
    network: bool,
    root: &Path,
    temp: &Path,
    data_dir: Option<&Path>,
) -> Result<Option<OwnedFd>, landlock::RulesetError> {
    let mut rules =
        Ruleset::default().set_compatibility(CompatLevel::BestEffort).handle_access(AccessFs::from_all(TARGET_ABI))?;
    rules = rules.scope(Scope::Signal)?;
    if !network {
        rules = rules.handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)?.scope(Scope::AbstractUnixSocket)?;
    }
    let readable = match data_dir {
        Some(data) => readable_roots(data),
        None => vec![PathBuf::from("/")],
    };
    let created = rules
        .create()?
        .add_rules(path_beneath_rules(&readable, AccessFs::from_read(TARGET_ABI)))?
        .add_rules(path_beneath_rules([root, temp], AccessFs::from_all(TARGET_ABI)))?
        .add_rules(path_beneath_rules(WRITABLE_DEVICES, AccessFs::from_file(TARGET_ABI)))?;
    Ok(created.into())
}

/// The paths that together cover the whole file system except `data_dir` (canonical):
/// for each directory from `/` down to the data directory's parent, every entry but the
/// next one on the way. An entry whose real path leads to or into the data directory
/// (a symlink to an ancestor, or into it) is left out too; an entry that cannot be
/// resolved (a dangling link) has nothing to grant. A directory on the way that cannot
/// be listed contributes nothing.
pub(crate) fn readable_roots(data_dir: &Path) -> Vec<PathBuf> {
    let mut roots = Vec::new();
    let mut dir = PathBuf::from("/");
    for component in data_dir.components().skip(1) {
        let next = dir.join(component);
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for entry in entries.flatten() {
                let path = entry.path();
                if path == next {
                    continue;
                }
                match path.canonicalize() {
                    Ok(real) if real.starts_with(data_dir) || data_dir.starts_with(&real) => {}
                    Ok(_) => roots.push(path),
                    Err(_) => {}
                }
            }
        }
        dir = next;
    }
    roots.sort();
    roots
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
            .scope(Scope::Signal)?;
        if !network {
            rules =
                rules.handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)?.scope(Scope::AbstractUnixSocket)?;
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
    SandboxStatus {
        landlock: enforced != RulesetStatus::NotEnforced,
        fully_enforced: enforced == RulesetStatus::FullyEnforced,
        abi,
        network,
        env: BASE_ENV
            .iter()
            .map(|s| (*s).to_owned())
            .chain(["LC_*".to_owned()])
            .chain(settings.env.iter().cloned())
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake file system: the roots must cover every entry on the data dir's way down
    /// except the way itself, leave out links that lead back into it, and never name
    /// the data dir or anything inside it.
    #[test]
    fn readable_roots_cover_everything_but_the_data_dir() {
        let dir = tempfile::tempdir().expect("temp dir");
        let base = dir.path().canonicalize().expect("canonical");
        let data = base.join("home/me/.local/share/spool");
        std::fs::create_dir_all(&data).expect("mkdir");
        std::fs::write(data.join("spool.db"), "secret").expect("write");
        std::fs::create_dir_all(base.join("home/me/project")).expect("mkdir");
        std::fs::create_dir_all(base.join("home/other")).expect("mkdir");
        std::fs::write(base.join("home/me/notes.txt"), "x").expect("write");
        std::fs::create_dir_all(base.join("home/me/.local/bin")).expect("mkdir");
        std::os::unix::fs::symlink(&data, base.join("home/me/link-into")).expect("symlink");
        std::os::unix::fs::symlink(base.join("home"), base.join("home/me/link-up")).expect("symlink");
        std::os::unix::fs::symlink(base.join("nowhere"), base.join("home/me/dangling")).expect("symlink");

        let roots = readable_roots(&data);
        for granted in ["home/me/project", "home/other", "home/me/notes.txt", "home/me/.local/bin"] {
            assert!(roots.contains(&base.join(granted)), "{granted} missing from {roots:?}");
        }
        for refused in ["home/me/link-into", "home/me/link-up", "home/me/dangling", "home", "home/me"] {
            assert!(!roots.contains(&base.join(refused)), "{refused} granted: {roots:?}");
        }
        for root in &roots {
            // Other tests make and remove temp files beside ours in /tmp at the same
            // time, so an entry outside our own directory may be gone by now; inside
            // it, every granted path must resolve (the dangling link is not granted).
            let real = match root.canonicalize() {
                Ok(real) => real,
                Err(_) if !root.starts_with(&base) => continue,
                Err(e) => panic!("{} is granted but does not resolve: {e}", root.display()),
            };
            assert!(!real.starts_with(&data) && !data.starts_with(&real), "{} reaches the data dir", root.display());
        }
        // Above the temp dir, the system's own directories are granted.
        assert!(roots.contains(&PathBuf::from("/usr")), "{roots:?}");
    }

    #[test]
    fn the_environment_is_an_allow_list_with_a_private_tmpdir() {
        let temp = Path::new("/tmp/spool-bash-test");
        let settings = SandboxSettings { env: vec!["CARGO_HOME".into()], network: true };
        let env = environment(&settings, temp);
        let names: Vec<&str> = env.iter().filter_map(|(k, _)| k.to_str()).collect();
        assert!(names.contains(&"PATH"));
        assert!(
            names.iter().all(|n| BASE_ENV.contains(n) || n.starts_with("LC_") || *n == "TMPDIR" || *n == "CARGO_HOME")
        );
        assert_eq!(env.iter().filter(|(k, _)| k == "TMPDIR").count(), 1);
        assert!(env.contains(&("TMPDIR".into(), temp.as_os_str().to_owned())));
    }
}
