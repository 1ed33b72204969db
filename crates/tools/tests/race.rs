//! The server-side file tools against a process racing them: a background thread swaps
//! a directory of the project with a symbolic link to a directory outside it
//! (`renameat2(RENAME_EXCHANGE)`, atomically, in a tight loop) while the model's `read`
//! and `write` calls go through that directory. A tool that checks a path and then
//! opens it by name can be made to follow the link between the two steps; one that
//! resolves beneath the project's directory cannot. The review found `read` returning
//! the outside file within a few tries and `write` creating files outside within ten.

use spool_engine::{Tool, ToolContext};
use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

const SECRET: &str = "TOP-SECRET provider key";
const CALLS: usize = 1_000;

/// Swaps `a` and `b` until `stop` is set; counts the swaps.
fn swapper(a: &Path, b: &Path, stop: Arc<AtomicBool>, swaps: Arc<AtomicU64>) -> std::thread::JoinHandle<()> {
    let a = CString::new(a.as_os_str().as_bytes()).expect("no NUL in a temp path");
    let b = CString::new(b.as_os_str().as_bytes()).expect("no NUL in a temp path");
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            // SAFETY: two valid NUL-terminated paths; renameat2 only reads them.
            let rc = unsafe {
                libc::renameat2(libc::AT_FDCWD, a.as_ptr(), libc::AT_FDCWD, b.as_ptr(), libc::RENAME_EXCHANGE)
            };
            assert_eq!(rc, 0, "renameat2: {}", std::io::Error::last_os_error());
            swaps.fetch_add(1, Ordering::Relaxed);
        }
    })
}

struct Racing {
    _base: tempfile::TempDir,
    root: std::path::PathBuf,
    outside: std::path::PathBuf,
    stop: Arc<AtomicBool>,
    swaps: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Racing {
    /// `root/d` a real directory with a harmless `secret.txt`, `root/l` a link to
    /// `outside`, which holds the real secret; the two swap places all the time.
    fn start() -> Racing {
        let base = tempfile::tempdir().expect("temp dir");
        let base_path = base.path().canonicalize().expect("canonical temp dir");
        let (root, outside) = (base_path.join("project"), base_path.join("outside"));
        fs::create_dir_all(root.join("d")).expect("mkdir");
        fs::create_dir(&outside).expect("mkdir");
        fs::write(root.join("d/secret.txt"), "harmless\n").expect("write");
        fs::write(outside.join("secret.txt"), format!("{SECRET}\n")).expect("write");
        std::os::unix::fs::symlink(&outside, root.join("l")).expect("symlink");
        let (stop, swaps) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
        let thread = swapper(&root.join("d"), &root.join("l"), stop.clone(), swaps.clone());
        // The calls start once the swapping has.
        while swaps.load(Ordering::Relaxed) == 0 {
            std::thread::yield_now();
        }
        Racing { _base: base, root, outside, stop, swaps, thread: Some(thread) }
    }

    fn swaps(&self) -> u64 {
        self.swaps.load(Ordering::Relaxed)
    }

    /// Returns once the swapper has swapped again: on a loaded machine with few cores,
    /// each call then starts while the swapper is running, not between its turns.
    fn next_swap(&self) {
        let now = self.swaps();
        while self.swaps() == now {
            std::thread::yield_now();
        }
    }

    fn ctx(&self) -> ToolContext {
        ToolContext {
            root: self.root.clone(),
            root_id: None,
            cancel: Default::default(),
            data_dir: None,
            progress: Default::default(),
            asker: Default::default(),
            sampler: Default::default(),
        }
    }

    /// Stops the swapping and says how many swaps there were.
    fn stop(&mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.join().expect("the swapper does not panic");
        }
        self.swaps.load(Ordering::Relaxed)
    }
}

impl Drop for Racing {
    fn drop(&mut self) {
        self.stop();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_never_returns_a_file_outside_while_a_directory_is_swapped_for_a_link() {
    let mut race = Racing::start();
    let ctx = race.ctx();
    let before = race.swaps();
    for i in 0..CALLS {
        race.next_swap();
        let out = spool_tools::Read.call(serde_json::json!({"path": "d/secret.txt"}), &ctx).await;
        assert!(!out.text.contains("TOP-SECRET"), "read {i} returned the file outside the project: {out:?}");
    }
    assert!(race.stop() > before, "the directory was not swapped while the tool ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_never_creates_a_file_outside_while_a_directory_is_swapped_for_a_link() {
    let mut race = Racing::start();
    let ctx = race.ctx();
    let before = race.swaps();
    let mut written = 0;
    for i in 0..CALLS {
        race.next_swap();
        let args = serde_json::json!({"path": format!("d/new-{i}.txt"), "content": "x"});
        let out = spool_tools::Write.call(args, &ctx).await;
        written += usize::from(out.text.starts_with("created"));
        let outside: Vec<_> =
            fs::read_dir(&race.outside).expect("list outside").flatten().map(|e| e.file_name()).collect();
        assert_eq!(outside, ["secret.txt"], "write {i} created a file outside the project: {out:?}");
    }
    assert!(race.stop() > before, "the directory was not swapped while the tool ran");
    // Every file it said it created is in the one real directory, wherever it is now,
    // and nothing else is (no temporary file left behind).
    let real = if race.root.join("d").is_symlink() { race.root.join("l") } else { race.root.join("d") };
    assert_eq!(fs::read_dir(real).expect("list").count(), written + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grep_and_list_never_show_what_is_outside_while_a_directory_is_swapped_for_a_link() {
    let mut race = Racing::start();
    fs::write(race.outside.join("outside-only.txt"), format!("{SECRET}\n")).expect("write");
    let ctx = race.ctx();
    let before = race.swaps();
    for i in 0..CALLS / 4 {
        race.next_swap();
        for (tool, args) in [
            ("grep", serde_json::json!({"pattern": "SECRET|harmless", "path": "d"})),
            ("grep", serde_json::json!({"pattern": "SECRET|harmless"})),
            ("list", serde_json::json!({"path": "d"})),
            ("glob", serde_json::json!({"pattern": "**/*.txt"})),
        ] {
            let out = match tool {
                "grep" => spool_tools::Grep.call(args, &ctx).await,
                "list" => spool_tools::List.call(args, &ctx).await,
                _ => spool_tools::Glob.call(args, &ctx).await,
            };
            assert!(
                !out.text.contains("TOP-SECRET") && !out.text.contains("outside-only"),
                "{tool} call {i} showed what is outside the project: {out:?}"
            );
        }
    }
    assert!(race.stop() > before, "the directory was not swapped while the tools ran");
}
