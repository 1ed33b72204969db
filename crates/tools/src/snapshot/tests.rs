use super::*;

/// A project directory and a data directory beside it, both temporary.
fn dirs() -> (tempfile::TempDir, PathBuf, ShadowRepos) {
    let temp = tempfile::tempdir().expect("temp dir");
    let project = temp.path().join("project");
    std::fs::create_dir_all(project.join("src")).expect("project dir");
    let repos = ShadowRepos::new(temp.path().join("data/snapshots"), SnapshotLimits::default());
    (temp, project, repos)
}

/// Every path under `dir`, relative, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        for entry in std::fs::read_dir(&at).expect("read dir") {
            let path = entry.expect("entry").path();
            found.push(path.strip_prefix(dir).expect("beneath").to_string_lossy().into_owned());
            if path.is_dir() {
                stack.push(path);
            }
        }
    }
    found.sort();
    found
}

#[test]
fn a_snapshot_honours_gitignore_and_the_size_limit() {
    let (_temp, project, _) = dirs();
    let repos = ShadowRepos::new(
        _temp.path().join("data/snapshots"),
        SnapshotLimits { max_file_bytes: 1024, ..SnapshotLimits::default() },
    );
    std::fs::write(project.join(".gitignore"), "target/\n*.log\n").expect("write");
    std::fs::write(project.join("src/main.rs"), "fn main() {}\n").expect("write");
    std::fs::create_dir_all(project.join("target")).expect("dir");
    std::fs::write(project.join("target/out.bin"), b"built").expect("write");
    std::fs::write(project.join("run.log"), "noise").expect("write");
    std::fs::write(project.join("big.bin"), vec![7u8; 2048]).expect("write");
    let binary: Vec<u8> = (0..=255u8).collect();
    std::fs::write(project.join("bytes.bin"), &binary).expect("write");

    let taken = repos.take("p1", &project).expect("snapshot");
    let files = repos.files("p1", &taken.tree).expect("read back");
    let names: Vec<&str> = files.keys().map(String::as_str).collect();
    assert_eq!(names, [".gitignore", "bytes.bin", "src/main.rs"], "ignored and oversized files are not recorded");
    assert_eq!(files["bytes.bin"].bytes, binary, "contents byte for byte");
    assert_eq!(taken.skipped, Skipped { paths: vec!["big.bin".into()], count: 1 }, "the oversized file is reported");

    // A file that grows past the limit leaves the tree instead of keeping its old copy.
    std::fs::write(project.join("src/main.rs"), vec![b'x'; 4096]).expect("write");
    let grown = repos.take("p1", &project).expect("snapshot");
    let files = repos.files("p1", &grown.tree).expect("read back");
    assert!(!files.contains_key("src/main.rs"), "{:?}", files.keys());
    assert_eq!(grown.skipped.paths, ["big.bin", "src/main.rs"]);
}

#[test]
fn the_new_bytes_and_file_limits_leave_the_rest_out_and_say_so() {
    let (temp, project, _) = dirs();
    let limits = SnapshotLimits { max_file_bytes: 1000, max_new_bytes: 250, max_files: 100 };
    let repos = ShadowRepos::new(temp.path().join("data/snapshots"), limits);
    for i in 0..5 {
        std::fs::write(project.join(format!("f{i}.txt")), vec![b'a'; 100]).expect("write");
    }
    let taken = repos.take("p", &project).expect("snapshot");
    assert_eq!(repos.files("p", &taken.tree).expect("read").len(), 2, "250 bytes hold two 100-byte files");
    assert_eq!(taken.skipped.count, 3);

    let limits = SnapshotLimits { max_files: 3, ..SnapshotLimits::default() };
    let repos = ShadowRepos::new(temp.path().join("data/other"), limits);
    let taken = repos.take("p", &project).expect("snapshot");
    assert_eq!(repos.files("p", &taken.tree).expect("read").len(), 3);
    assert_eq!(taken.skipped.count, 2);
}

#[test]
fn nothing_is_written_into_the_project_and_the_same_files_give_the_same_id() {
    let (temp, project, repos) = dirs();
    std::fs::write(project.join("src/lib.rs"), "pub fn f() {}\n").expect("write");
    std::fs::write(project.join("tool.sh"), "#!/bin/sh\necho hi\n").expect("write");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(project.join("tool.sh"), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::os::unix::fs::symlink("src/lib.rs", project.join("link")).expect("link");
    let before = listing(&project);

    let first = repos.take("p", &project).expect("snapshot");
    assert_eq!(listing(&project), before, "the project holds exactly what it held");
    assert!(temp.path().join("data/snapshots/p/HEAD").is_file(), "the repository is in the data directory");
    let second = repos.take("p", &project).expect("snapshot");
    assert_eq!(first.tree, second.tree, "unchanged files, the same id");

    let files = repos.files("p", &first.tree).expect("read back");
    assert_eq!(files["tool.sh"].mode, 0o100755, "the exec bit is kept");
    assert_eq!(files["link"], RecordedFile { mode: 0o120000, bytes: b"src/lib.rs".to_vec() }, "a link as a link");

    // A deleted file leaves the next tree; putting it back gives the first id again.
    std::fs::remove_file(project.join("src/lib.rs")).expect("rm");
    let without = repos.take("p", &project).expect("snapshot");
    assert_ne!(without.tree, first.tree);
    assert!(!repos.files("p", &without.tree).expect("read").contains_key("src/lib.rs"));
    std::fs::write(project.join("src/lib.rs"), "pub fn f() {}\n").expect("write");
    assert_eq!(repos.take("p", &project).expect("snapshot").tree, first.tree);
}

#[test]
fn the_projects_own_git_directory_and_nested_repositories_are_not_recorded() {
    let (_temp, project, repos) = dirs();
    git2::Repository::init(&project).expect("the project is a repository");
    std::fs::write(project.join("a.txt"), "a").expect("write");
    git2::Repository::init(project.join("vendor/lib")).expect("a nested repository");
    std::fs::write(project.join("vendor/lib/x.txt"), "x").expect("write");
    let taken = repos.take("p", &project).expect("snapshot");
    let files = repos.files("p", &taken.tree).expect("read back");
    let names: Vec<&str> = files.keys().map(String::as_str).collect();
    assert_eq!(names, ["a.txt"]);
    assert_eq!(taken.skipped.paths, ["vendor/lib/"], "the nested repository is reported");
}

#[test]
fn a_restore_puts_back_bytes_and_the_exec_bit_recreates_dirs_and_deletes_what_the_tree_lacks() {
    use std::os::unix::fs::PermissionsExt;
    let (_temp, project, repos) = dirs();
    std::fs::create_dir_all(project.join("src/deep")).expect("dir");
    std::fs::write(project.join("src/deep/a.txt"), "before\n").expect("write");
    std::fs::write(project.join("run.sh"), "#!/bin/sh\n").expect("write");
    std::fs::set_permissions(project.join("run.sh"), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let before = repos.take("p1", &project).expect("snapshot").tree;

    std::fs::remove_dir_all(project.join("src/deep")).expect("rm -r");
    std::fs::write(project.join("run.sh"), "changed\n").expect("write");
    std::fs::set_permissions(project.join("run.sh"), std::fs::Permissions::from_mode(0o644)).expect("chmod");
    std::fs::write(project.join("new.txt"), "created later\n").expect("write");

    let root = crate::path::Root::open(&project, None).expect("root");
    for path in ["src/deep/a.txt", "run.sh", "new.txt"] {
        repos.restore_file("p1", &root, &before, path).unwrap_or_else(|e| panic!("restore {path}: {e}"));
    }
    assert_eq!(std::fs::read(project.join("src/deep/a.txt")).expect("read"), b"before\n");
    assert_eq!(std::fs::read(project.join("run.sh")).expect("read"), b"#!/bin/sh\n");
    let mode = std::fs::metadata(project.join("run.sh")).expect("stat").permissions().mode();
    assert_eq!(mode & 0o111, 0o111, "executable again: {mode:o}");
    assert!(!project.join("new.txt").exists(), "a file the tree lacks is deleted");
    assert_eq!(repos.take("p1", &project).expect("snapshot").tree, before, "the files are the snapshot's again");
}

#[test]
fn a_restore_replaces_a_link_and_never_writes_through_it() {
    let (temp, project, repos) = dirs();
    std::fs::write(project.join("notes.txt"), "mine\n").expect("write");
    let before = repos.take("p1", &project).expect("snapshot").tree;

    // Since the snapshot, the file became a link to a file outside the project.
    let outside = temp.path().join("outside.txt");
    std::fs::write(&outside, "not the project's\n").expect("write");
    std::fs::remove_file(project.join("notes.txt")).expect("rm");
    std::os::unix::fs::symlink(&outside, project.join("notes.txt")).expect("link");

    let root = crate::path::Root::open(&project, None).expect("root");
    repos.restore_file("p1", &root, &before, "notes.txt").expect("restore");
    assert_eq!(std::fs::read(&outside).expect("read"), b"not the project's\n", "the link's target is untouched");
    let meta = std::fs::symlink_metadata(project.join("notes.txt")).expect("lstat");
    assert!(meta.is_file(), "the link itself was replaced by the file");
    assert_eq!(std::fs::read(project.join("notes.txt")).expect("read"), b"mine\n");

    // A directory on the way that became a link out of the project is refused.
    std::fs::create_dir_all(project.join("sub")).expect("dir");
    std::fs::write(project.join("sub/x.txt"), "x\n").expect("write");
    let with_sub = repos.take("p1", &project).expect("snapshot").tree;
    std::fs::remove_dir_all(project.join("sub")).expect("rm -r");
    std::os::unix::fs::symlink(temp.path(), project.join("sub")).expect("link");
    assert!(repos.restore_file("p1", &root, &with_sub, "sub/x.txt").is_err(), "a way out is refused");
    assert!(!temp.path().join("x.txt").exists(), "nothing was written outside");
}

#[test]
fn a_conflict_diff_shows_the_file_now_against_what_a_revert_would_write_and_is_cut() {
    let (_temp, project, repos) = dirs();
    std::fs::write(project.join("a.txt"), "one\ntwo\n").expect("write");
    let then = repos.take("p1", &project).expect("snapshot").tree;
    std::fs::write(project.join("a.txt"), "one\nTWO\n").expect("write");
    let now = repos.take("p1", &project).expect("snapshot").tree;
    let diff = repos.diff_file("p1", "a.txt", &now, &then, 64 * 1024).expect("diff");
    assert!(diff.contains("-TWO\n") && diff.contains("+two\n"), "{diff}");

    std::fs::write(project.join("a.txt"), "line\n".repeat(10_000)).expect("write");
    let long = repos.take("p1", &project).expect("snapshot").tree;
    let diff = repos.diff_file("p1", "a.txt", &long, &then, 1024).expect("diff");
    assert!(diff.len() <= 1024 && diff.ends_with("not shown\n"), "{} bytes: {}", diff.len(), &diff[diff.len() - 60..]);
}
