//! The fuzz targets' checks over their committed seed corpus (`fuzz/corpus/<target>/`),
//! so a change that breaks what a target relies on fails `cargo test` and the targets
//! cannot rot unnoticed between fuzzing runs.

use spool_protocol::fuzzing;
use std::path::PathBuf;

/// Every file of one target's seed corpus. Fails when there are none: a moved or
/// emptied corpus must not turn this test into one that cannot fail.
fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus").join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no seed corpus in {}", dir.display());
    files.into_iter().map(|path| (path.clone(), std::fs::read(&path).expect("a corpus file"))).collect()
}

#[test]
fn sse_decoder_corpus() {
    for (path, bytes) in corpus("sse_decoder") {
        eprintln!("{}", path.display());
        fuzzing::sse_decoder(&bytes);
    }
}

#[test]
fn cursor_corpus() {
    for (path, bytes) in corpus("cursor") {
        eprintln!("{}", path.display());
        fuzzing::cursor(&bytes);
    }
}
