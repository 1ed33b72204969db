//! What a command may read: the whole file system except a set of excluded paths, the
//! data directory, every file the server was given as a secret (its TLS key, its
//! config file, credential files) and the system's own secret files ([`SYSTEM_SECRETS`]).
//!
//! Landlock is an allow-list and cannot take a path back out of a grant, so "everything
//! except" is said by granting, for each directory on the way from `/` down to an
//! excluded path, every entry but the ones leading there ([`readable_roots`]). Every
//! directory may still be listed (the ruleset grants `ReadDir` on `/` alone): names are
//! not secrets, and `ls /etc` must keep working when `/etc/shadow` is out. Because the
//! grants are on the entries that exist when a call starts, a file created later
//! directly in a directory on the way (say a new file in `/etc`) is not readable by
//! that call.

use std::path::{Path, PathBuf};

/// System files that hold secrets: password hashes, host keys, private TLS keys. They
/// are excluded when they exist. As root a command owns them, so file modes alone do
/// not close them even without capabilities.
pub(crate) const SYSTEM_SECRETS: &[&str] = &[
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/security/opasswd",
    "/etc/ssl/private",
    "/etc/krb5.keytab",
    "/etc/sudoers",
    "/etc/sudoers.d",
];

/// The SSH host keys' directory: its private keys (`ssh_host_*_key`) are excluded, the
/// public halves and the configuration stay readable.
const SSH_DIR: &str = "/etc/ssh";

/// The system's secret files that exist here, resolved.
pub(crate) fn system_secrets() -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = SYSTEM_SECRETS.iter().filter_map(|p| Path::new(p).canonicalize().ok()).collect();
    if let Ok(entries) = std::fs::read_dir(SSH_DIR) {
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with("ssh_host_")
                && name.ends_with("_key")
                && let Ok(real) = entry.path().canonicalize()
            {
                found.push(real);
            }
        }
    }
    found
}

/// The paths that together cover the whole file system except `excluded` (canonical
/// paths, files or directories): for each directory from `/` down to an excluded path,
/// every entry that neither is one nor leads to one. An entry whose real path is an
/// excluded path, lies inside one or holds one (a symlink into the data directory, or
/// to an ancestor of it) is left out too; an entry that cannot be resolved (a dangling
/// link) has nothing to grant. A directory on the way that cannot be listed
/// contributes nothing.
pub(crate) fn readable_roots(excluded: &[PathBuf]) -> Vec<PathBuf> {
    let mut roots = Vec::new();
    if excluded.is_empty() {
        roots.push(PathBuf::from("/"));
    } else if !excluded.iter().any(|e| e == Path::new("/")) {
        cover(Path::new("/"), excluded, &mut roots);
    }
    roots.sort();
    roots
}

fn cover(dir: &Path, excluded: &[PathBuf], roots: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if excluded.contains(&path) {
            continue;
        }
        // An excluded path is canonical, so an entry that starts it is a real directory.
        if excluded.iter().any(|e| e.starts_with(&path)) {
            cover(&path, excluded, roots);
            continue;
        }
        match path.canonicalize() {
            Ok(real) if excluded.iter().any(|e| real.starts_with(e) || e.starts_with(&real)) => {}
            Ok(_) => roots.push(path),
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake file system: the roots must cover every entry on the way down to each
    /// excluded path except the way itself, leave out links that lead back into one,
    /// and never name an excluded path or anything inside one.
    #[test]
    fn readable_roots_cover_everything_but_the_excluded_paths() {
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
        // A secret file beside readable ones, and a link to it.
        std::fs::create_dir_all(base.join("etc/tls")).expect("mkdir");
        std::fs::write(base.join("etc/tls/key.pem"), "key").expect("write");
        std::fs::write(base.join("etc/tls/cert.pem"), "cert").expect("write");
        std::os::unix::fs::symlink(base.join("etc/tls/key.pem"), base.join("etc/key-link")).expect("symlink");
        let key = base.join("etc/tls/key.pem");

        let excluded = [data.clone(), key.clone()];
        let roots = readable_roots(&excluded);
        for granted in ["home/me/project", "home/other", "home/me/notes.txt", "home/me/.local/bin", "etc/tls/cert.pem"]
        {
            assert!(roots.contains(&base.join(granted)), "{granted} missing from {roots:?}");
        }
        for refused in [
            "home/me/link-into",
            "home/me/link-up",
            "home/me/dangling",
            "home",
            "home/me",
            "etc",
            "etc/tls",
            "etc/tls/key.pem",
            "etc/key-link",
        ] {
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
            for e in &excluded {
                assert!(!real.starts_with(e) && !e.starts_with(&real), "{} reaches {}", root.display(), e.display());
            }
        }
        // Above the temp dir, the system's own directories are granted.
        assert!(roots.contains(&PathBuf::from("/usr")), "{roots:?}");
    }

    #[test]
    fn nothing_excluded_grants_the_root() {
        assert_eq!(readable_roots(&[]), vec![PathBuf::from("/")]);
    }
}
