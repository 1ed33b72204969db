use super::super::{ShadowRepos, SnapshotLimits};
use super::*;

/// A project directory and its shadow repositories, both temporary.
fn dirs() -> (tempfile::TempDir, std::path::PathBuf, ShadowRepos) {
    let temp = tempfile::tempdir().expect("temp dir");
    let project = temp.path().join("project");
    std::fs::create_dir_all(project.join("src")).expect("project dir");
    let repos = ShadowRepos::new(temp.path().join("data/snapshots"), SnapshotLimits::default());
    (temp, project, repos)
}

/// Every loose object of `project`'s repository, as ids.
fn loose(repos: &ShadowRepos, project: &str) -> HashSet<String> {
    let mut found = HashSet::new();
    for fan in std::fs::read_dir(repos.git_dir(project).join("objects")).expect("objects") {
        let fan = fan.expect("entry");
        let prefix = fan.file_name().to_string_lossy().into_owned();
        if prefix.len() != 2 {
            continue;
        }
        for object in std::fs::read_dir(fan.path()).expect("fan") {
            found.insert(format!("{prefix}{}", object.expect("entry").file_name().to_string_lossy()));
        }
    }
    found
}

/// Makes every loose object of `project` look written two hours ago.
fn age(repos: &ShadowRepos, project: &str) {
    for id in loose(repos, project) {
        age_one(repos, project, &id);
    }
}

/// Makes one loose object look written two hours ago.
fn age_one(repos: &ShadowRepos, project: &str, id: &str) {
    let path = repos.git_dir(project).join("objects").join(&id[..2]).join(&id[2..]);
    let then = SystemTime::now() - Duration::from_secs(2 * 3600);
    std::fs::File::open(&path).expect("object").set_modified(then).expect("set mtime");
}

const HOUR: Duration = Duration::from_secs(3600);

#[test]
fn pruning_keeps_what_a_named_tree_needs_and_deletes_an_old_unnamed_object() {
    let (_temp, project, repos) = dirs();
    let binary: Vec<u8> = (0..=255u8).rev().collect();
    std::fs::write(project.join("a.txt"), "first\n").expect("write");
    std::fs::write(project.join("src/b.bin"), &binary).expect("write");
    let first = repos.take("p", &project).expect("snapshot").tree;
    std::fs::write(project.join("a.txt"), "second\n").expect("write");
    let second = repos.take("p", &project).expect("snapshot").tree;
    let before = repos.files("p", &second).expect("read back");
    age(&repos, "p");

    // Both trees named: nothing goes.
    let both = [first.clone(), second.clone()];
    assert_eq!(repos.prune("p", &both, HOUR).expect("prune"), Pruned::default());
    assert_eq!(repos.files("p", &first).expect("the first snapshot")["a.txt"].bytes, b"first\n");

    // Only the second named: the first tree and the old a.txt go, nothing else.
    let objects = loose(&repos, "p");
    let pruned = repos.prune("p", std::slice::from_ref(&second), HOUR).expect("prune");
    assert_eq!(pruned.objects, 2, "the first root tree and its own a.txt");
    assert!(pruned.bytes > 0);
    let gone: HashSet<String> = objects.difference(&loose(&repos, "p")).cloned().collect();
    assert!(gone.contains(&first), "the first tree is gone: {gone:?}");
    assert!(repos.files("p", &first).is_err(), "the first snapshot can no longer be read");
    assert_eq!(repos.files("p", &second).expect("the named snapshot"), before, "byte for byte");
    assert_eq!(repos.files("p", &second).expect("read")["src/b.bin"].bytes, binary);
}

#[test]
fn a_young_object_and_what_the_index_holds_survive_with_nothing_named() {
    let (_temp, project, repos) = dirs();
    std::fs::write(project.join("a.txt"), "kept by the index\n").expect("write");
    std::fs::write(project.join("src/lib.rs"), "pub fn f() {}\n").expect("write");
    let tree = repos.take("p", &project).expect("snapshot").tree;
    age(&repos, "p");
    // Written just now and named by nothing: within the grace.
    let young = Repository::open_bare(repos.git_dir("p")).expect("repo").blob(b"young").expect("blob").to_string();
    let old = Repository::open_bare(repos.git_dir("p")).expect("repo").blob(b"old").expect("blob").to_string();
    age_one(&repos, "p", &old);

    let pruned = repos.prune("p", &[], HOUR).expect("prune");
    assert_eq!(pruned.objects, 1, "only the old unnamed blob");
    let left = loose(&repos, "p");
    assert!(left.contains(&young) && !left.contains(&old), "{left:?}");
    // The next snapshot reuses the index's cache for the unchanged files: they must
    // all still be there to be read back.
    let again = repos.take("p", &project).expect("snapshot");
    assert_eq!(again.tree, tree, "the same files, the same tree");
    let files = repos.files("p", &again.tree).expect("read back");
    assert_eq!(files["a.txt"].bytes, b"kept by the index\n");
    assert_eq!(files["src/lib.rs"].bytes, b"pub fn f() {}\n");
}

#[test]
fn forgetting_a_project_deletes_its_repository_and_projects_lists_the_rest() {
    let (_temp, project, repos) = dirs();
    assert_eq!(repos.projects().expect("list"), Vec::<String>::new(), "no snapshots directory yet");
    std::fs::write(project.join("a.txt"), "a").expect("write");
    repos.take("p1", &project).expect("snapshot");
    repos.take("p2", &project).expect("snapshot");
    assert_eq!(repos.projects().expect("list"), ["p1", "p2"]);
    repos.forget("p1").expect("forget");
    assert!(!repos.git_dir("p1").exists());
    assert_eq!(repos.projects().expect("list"), ["p2"]);
    repos.forget("p1").expect("forgetting twice is fine");
    assert_eq!(repos.prune("p1", &[], Duration::ZERO).expect("prune"), Pruned::default(), "nothing to prune");
}
