//! Where a project may be: under its owner's project roots, and never overlapping
//! Spool's data directory.
//!
//! A token is a user, not the server's account, so with auth on a user registers
//! projects only under the roots configured for them (every user's `--workspace-root`
//! plus their own `[users.NAME] roots`); with none configured, registration is refused
//! with a message saying how to configure them. With auth off the one local user
//! already has a shell, so any directory is allowed unless roots are configured.
//!
//! The answer must not tell a user whether a path outside their roots exists. So the
//! path is first made absolute and its `..` worked out by hand; it must then lie under
//! a root as written. From that root's canonical form the path is walked one name at a
//! time, and every step that exists must stay under the roots: a symbolic link leaving
//! them (or dangling) is "outside" whether or not its target exists. The file system
//! is only ever asked about names inside a root, and "no such directory" is only said
//! about places inside one.
//!
//! The data directory holds the database and the config file with provider keys. A
//! project that contains it or lies inside it would hand both to the project's tools
//! (and a tool reading the live SQLite file inside the server drops SQLite's locks), so
//! such a project is refused with its own code, `data_dir`, whatever the roots say.
//!
//! Projects registered before roots were configured are judged again when a prompt
//! starts a run: one outside the roots, or overlapping the data directory, is refused
//! there (its history stays readable and it can be deleted).

use crate::error::{EngineError, Result};
use crate::store::Users;
use spool_protocol::UserId;
use std::collections::{BTreeMap, HashMap};
use std::path::{Component, Path, PathBuf};

/// The project roots as configured.
#[derive(Clone, Debug, Default)]
pub struct WorkspaceRoots {
    /// Roots every user may register projects under (`--workspace-root`).
    pub global: Vec<PathBuf>,
    /// More roots for one user, by user name (`[users.NAME] roots`).
    pub per_user: BTreeMap<String, Vec<PathBuf>>,
}

/// A root as configured (absolute, `..` worked out) and as the file system has it.
#[derive(Clone, Debug)]
struct Root {
    written: PathBuf,
    canonical: PathBuf,
}

/// The roots and the data directory, resolved once at start.
pub(crate) struct Fence {
    global: Vec<Root>,
    per_user: HashMap<UserId, Vec<Root>>,
    /// Whether any root is configured at all (then auth-off registration is bounded too).
    configured: bool,
    /// The data directory, canonical when it exists.
    data_dir: Option<PathBuf>,
}

/// Where a path leads when walked from a root.
enum Place {
    /// It exists; canonical.
    Found(PathBuf),
    /// It does not exist; where it would be.
    Missing(PathBuf),
    Outside,
}

impl Fence {
    /// Resolves the configured roots (each must be an existing directory) and the data
    /// directory. Users named in the config are created if needed, like a token would.
    pub(crate) async fn build(roots: &WorkspaceRoots, data_dir: Option<&Path>, store: &dyn Users) -> Result<Fence> {
        let global = roots.global.iter().map(|r| resolve_root(r)).collect::<Result<Vec<_>>>()?;
        let mut per_user: HashMap<UserId, Vec<Root>> = HashMap::new();
        for (name, dirs) in &roots.per_user {
            let id = store.ensure_user(name).await?;
            let dirs = dirs.iter().map(|r| resolve_root(r)).collect::<Result<Vec<_>>>()?;
            per_user.entry(id).or_default().extend(dirs);
        }
        let configured = !global.is_empty() || per_user.values().any(|r| !r.is_empty());
        let data_dir = data_dir.map(|d| d.canonicalize().unwrap_or_else(|_| lexical(d)));
        Ok(Fence { global, per_user, configured, data_dir })
    }

    /// The data directory, canonical, for the tools to stay out of.
    pub(crate) fn data_dir(&self) -> Option<&Path> {
        self.data_dir.as_deref()
    }

    /// The roots that bound `user`, or `None` when any directory is allowed.
    fn roots_for(&self, user: &UserId, auth_on: bool) -> Option<Vec<&Root>> {
        if !auth_on && !self.configured {
            return None;
        }
        Some(self.global.iter().chain(self.per_user.get(user).into_iter().flatten()).collect())
    }

    /// The canonical directory `requested` names, if `user` may register it as a
    /// project. Blocking: call it from `spawn_blocking`.
    pub(crate) fn place_project(&self, user: &UserId, auth_on: bool, requested: &str) -> Result<PathBuf> {
        let place = match self.roots_for(user, auth_on) {
            None => match Path::new(requested).canonicalize() {
                Ok(canonical) => Place::Found(canonical),
                Err(e) => {
                    return Err(EngineError::invalid("invalid_path", format!("cannot resolve {requested:?}: {e}")));
                }
            },
            Some(roots) if roots.is_empty() => return Err(no_roots()),
            Some(roots) => walk(&roots, requested),
        };
        let (Place::Found(at) | Place::Missing(at)) = &place else {
            return Err(outside());
        };
        self.check_data_dir(at, requested)?;
        match place {
            Place::Found(dir) if dir.is_dir() => Ok(dir),
            Place::Found(_) => Err(EngineError::invalid("invalid_path", format!("{requested:?} is not a directory"))),
            _ => Err(EngineError::invalid("invalid_path", format!("no such directory: {requested:?}"))),
        }
    }

    /// Whether a project registered earlier at `path` (canonical) may still run tools:
    /// the roots or the data directory may have come after it.
    pub(crate) fn check_existing(&self, user: &UserId, auth_on: bool, path: &Path) -> Result<()> {
        let shown = path.display().to_string();
        if let Some(roots) = self.roots_for(user, auth_on) {
            if roots.is_empty() {
                return Err(no_roots());
            }
            if !inside(&roots, path) {
                return Err(EngineError::Forbidden {
                    code: "outside_roots",
                    message: format!(
                        "this project's directory {shown:?} is outside your project roots (it was registered \
                         before they were configured): delete the project, or add a root that holds it"
                    ),
                });
            }
        }
        self.check_data_dir(path, &shown)
    }

    fn check_data_dir(&self, at: &Path, requested: &str) -> Result<()> {
        match &self.data_dir {
            Some(data) if at.starts_with(data) || data.starts_with(at) => Err(EngineError::Forbidden {
                code: "data_dir",
                message: format!(
                    "{requested:?} holds or lies inside Spool's data directory, which is never a project: \
                     register a directory that does not contain it, or move the data directory (--data-dir)"
                ),
            }),
            _ => Ok(()),
        }
    }
}

/// The device and inode of the directory at `path` (canonical), kept with a project
/// at registration. Following a link here is harmless: the tools open the path with
/// no link on the way, so an identity taken through one never matches again.
pub(crate) fn dir_identity(path: &Path) -> Option<spool_protocol::DirIdentity> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| spool_protocol::DirIdentity { dev: m.dev(), ino: m.ino() })
}

/// Whether the project directory at `path` (canonical when registered) is still the
/// directory registered as `expected`: no symbolic link on the way (a link swapped in
/// for it, or for a directory above it, would take the project's tools wherever it
/// points) and, when known, the same inode (`DirIdentity::same_dir` says why not the
/// device). The tools check again at every call, on the directory they open; this
/// refuses the prompt up front with a clear answer. Blocking, but a handful of `lstat`s.
pub(crate) fn check_identity(path: &Path, expected: Option<spool_protocol::DirIdentity>) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let moved = |why: &str| EngineError::Forbidden {
        code: "project_moved",
        message: format!(
            "this project's directory {:?} {why} since it was registered; its tools are refused: \
             delete the project and register the directory again",
            path.display().to_string()
        ),
    };
    for at in path.ancestors() {
        match at.symlink_metadata() {
            Ok(meta) if meta.file_type().is_symlink() => {
                return Err(moved("has been replaced by a symbolic link (or a directory above it has)"));
            }
            Ok(_) => {}
            Err(_) => return Err(moved("no longer exists")),
        }
    }
    match (expected, path.symlink_metadata()) {
        (Some(id), Ok(meta)) if !id.same_dir(spool_protocol::DirIdentity { dev: meta.dev(), ino: meta.ino() }) => {
            Err(moved("has been replaced by another directory"))
        }
        _ => Ok(()),
    }
}

impl Fence {
    /// The roots (canonical) that are not `user`'s alone: the other users' own roots,
    /// and the global roots when `global_shared` (another user exists, who has them
    /// too). A project may not be one of them, nor hold one (see [`crate::overlap`]).
    pub(crate) fn roots_shared_with_others(&self, user: &UserId, global_shared: bool) -> Vec<PathBuf> {
        let others = self.per_user.iter().filter(|(id, _)| *id != user).flat_map(|(_, roots)| roots);
        let global = self.global.iter().filter(|_| global_shared);
        global.chain(others).map(|r| r.canonical.clone()).collect()
    }
}

/// The one answer for every path outside the roots, existing or not: it does not even
/// repeat the path, so two answers can be compared byte for byte.
fn outside() -> EngineError {
    EngineError::Forbidden {
        code: "outside_roots",
        message: "the path is outside your project roots; projects may only be registered under them".into(),
    }
}

fn no_roots() -> EngineError {
    EngineError::Forbidden {
        code: "outside_roots",
        message: "no project roots are configured for you, and with tokens projects may only be registered under \
                  one: start the server with --workspace-root DIR (or SPOOL_WORKSPACE_ROOTS), or give the user \
                  roots in the config file ([users.NAME] roots = [\"DIR\"])"
            .into(),
    }
}

fn resolve_root(root: &Path) -> Result<Root> {
    let written = lexical(root);
    let canonical = written
        .canonicalize()
        .map_err(|e| EngineError::invalid("invalid_root", format!("project root {}: {e}", root.display())))?;
    if !canonical.is_dir() {
        return Err(EngineError::invalid(
            "invalid_root",
            format!("project root {} is not a directory", root.display()),
        ));
    }
    Ok(Root { written, canonical })
}

fn inside(roots: &[&Root], path: &Path) -> bool {
    roots.iter().any(|r| path.starts_with(&r.canonical))
}

/// `path` made absolute (against the working directory) with `.` and `..` worked out
/// on the text alone, the way a shell's `cd -L` does.
fn lexical(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut out = PathBuf::new();
    for component in absolute.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// Walks `requested` from the root it lies under as written, one name at a time.
fn walk(roots: &[&Root], requested: &str) -> Place {
    let path = lexical(Path::new(requested));
    for root in roots {
        let Some(rest) = path.strip_prefix(&root.written).ok().or_else(|| path.strip_prefix(&root.canonical).ok())
        else {
            continue;
        };
        let mut at = root.canonical.clone();
        let mut names = rest.components();
        let place = loop {
            let Some(name) = names.next() else { break Place::Found(at) };
            let next = at.join(name);
            match next.canonicalize() {
                Ok(canonical) if inside(roots, &canonical) => at = canonical,
                Ok(_) => break Place::Outside,
                // A name that is there but does not resolve is a link to nowhere (or a
                // loop): where it leads is not knowable without looking outside.
                Err(_) if next.symlink_metadata().is_ok() => break Place::Outside,
                Err(_) => break Place::Missing(next.join(names.as_path())),
            }
        };
        if !matches!(place, Place::Outside) {
            return place;
        }
    }
    Place::Outside
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn fence(roots: &[&Path], data_dir: Option<&Path>) -> Fence {
        let global = roots.iter().map(|r| resolve_root(r).expect("root")).collect();
        Fence {
            global,
            per_user: HashMap::new(),
            configured: !roots.is_empty(),
            data_dir: data_dir.map(|d| d.canonicalize().expect("data dir")),
        }
    }

    fn code(r: Result<PathBuf>) -> String {
        match r {
            Ok(p) => format!("ok {}", p.display()),
            Err(e) => format!("{} {}", e.code(), e),
        }
    }

    #[test]
    fn paths_outside_get_one_answer_whether_or_not_they_exist() {
        let dir = tempfile::tempdir().expect("temp dir");
        let base = dir.path().canonicalize().expect("canonical");
        let (ws, other) = (base.join("ws"), base.join("other"));
        fs::create_dir_all(ws.join("a")).expect("mkdir");
        fs::create_dir_all(other.join("there")).expect("mkdir");
        std::os::unix::fs::symlink(&other, ws.join("link")).expect("symlink");
        std::os::unix::fs::symlink(other.join("gone"), ws.join("dangling")).expect("symlink");
        let f = fence(&[&ws], None);
        let user = UserId::new();
        let s = |p: &Path| p.to_str().expect("utf-8").to_owned();
        let answer = |p: String| code(f.place_project(&user, true, &p));

        let outside =
            "outside_roots the path is outside your project roots; projects may only be registered under them";
        for p in [
            s(&other.join("there")),
            s(&other.join("missing")),
            s(&ws.join("link/there")),
            s(&ws.join("link/missing")),
            s(&ws.join("link")),
            s(&ws.join("dangling")),
            s(&ws.join("../other/there")),
            s(&ws.join("../other/missing")),
            "/".to_owned(),
            "/etc".to_owned(),
        ] {
            assert_eq!(answer(p.clone()), outside, "{p}");
        }
        assert_eq!(answer(s(&ws.join("a"))), format!("ok {}", ws.join("a").display()));
        assert_eq!(answer(s(&ws.join("link/../a"))), format!("ok {}", ws.join("a").display()));
        assert!(answer(s(&ws.join("nope"))).starts_with("invalid_path no such directory"));
        // Auth off with no roots: anything goes; with tokens and no roots: refused.
        let open = fence(&[], None);
        assert_eq!(code(open.place_project(&user, false, &s(&other))), format!("ok {}", other.display()));
        assert!(code(open.place_project(&user, true, &s(&other))).contains("--workspace-root"));
    }

    #[test]
    fn the_data_directory_is_never_a_project() {
        let dir = tempfile::tempdir().expect("temp dir");
        let base = dir.path().canonicalize().expect("canonical");
        let data = base.join("data");
        fs::create_dir_all(data.join("inner")).expect("mkdir");
        fs::create_dir_all(base.join("sibling")).expect("mkdir");
        let user = UserId::new();
        for f in [fence(&[], Some(&data)), fence(&[&base], Some(&data))] {
            for p in [&base, &data, &data.join("inner")] {
                let answer = code(f.place_project(&user, false, p.to_str().expect("utf-8")));
                assert!(answer.starts_with("data_dir "), "{p:?}: {answer}");
            }
            assert!(
                code(f.place_project(&user, false, base.join("sibling").to_str().expect("utf-8"))).starts_with("ok")
            );
            assert_eq!(f.check_existing(&user, false, &base).expect_err("holds data").code(), "data_dir");
        }
        // Inside a root, a missing path in the data directory is refused like an existing one.
        let missing = data.join("missing");
        let answer = code(fence(&[&base], Some(&data)).place_project(&user, true, missing.to_str().expect("utf-8")));
        assert!(answer.starts_with("data_dir "), "{answer}");
    }
}
