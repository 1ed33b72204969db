//! The `request_json` fuzz target's check over its committed seed corpus
//! (`fuzz/corpus/request_json/`), so the target cannot rot between fuzzing runs: every
//! seed must parse or be refused with a 4xx on every route, and every route must accept
//! at least one seed (so the corpus reaches past the parser into each route's checks).

use spool_server::fuzzing;
use std::collections::BTreeSet;
use std::path::PathBuf;

#[test]
fn request_json_corpus() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/request_json");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no seed corpus in {}", dir.display());

    let mut accepted = BTreeSet::new();
    for path in files {
        eprintln!("{}", path.display());
        accepted.extend(fuzzing::request_json(&std::fs::read(&path).expect("a corpus file")));
    }
    let missed: Vec<_> = fuzzing::request_routes().into_iter().filter(|r| !accepted.contains(r)).collect();
    assert!(missed.is_empty(), "no seed is a valid body for {missed:?}");
}
