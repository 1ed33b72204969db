//! The README's run command, as a newcomer types it on a fresh clone, must get as far
//! as running `spool serve`: `cargo run --release -- serve` once answered "could not
//! determine which binary to run" (the workspace has two binaries, `spool` and
//! `spool-bench`), and nothing in the tests noticed.
//!
//! A release build is minutes, too slow for every test run, so cargo runs the command
//! with a stand-in for rustc (`RUSTC_WRAPPER`): it answers cargo's questions about the
//! compiler with the real rustc, and "compiles" each crate by writing the files cargo
//! looks for, in no time; a binary it "compiles" is a shell script that writes down
//! how it was run. So the test sees every decision cargo makes — which package, which
//! binary, which arguments — in a few seconds, without compiling anything.
//! `scripts/readme-commands` runs both set-up commands for real, from a clean clone.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The stand-in for rustc. Cargo calls it as `WRAPPER RUSTC ARGS…`. Questions (no
/// `--crate-name`, or the `___` probe with `--print`) go to the real rustc. A crate is
/// written down in `$SPOOL_TEST_WRAPPER_LOG` as `compile CRATE PACKAGE KIND`, and gets
/// an empty dep-info file (cargo reads it afterwards) and empty library files; a
/// binary (a build script, or the program) is a script that appends `run NAME ARGS…`.
const WRAPPER: &str = r#"#!/bin/sh
log="$SPOOL_TEST_WRAPPER_LOG"
rustc="$1"; shift
name=""; out=""; extra=""; kind=""; prev=""
for arg in "$@"; do
  case "$prev" in
    --crate-name) name="$arg" ;;
    --out-dir) out="$arg" ;;
    --crate-type) kind="$arg" ;;
    -C) case "$arg" in extra-filename=*) extra="${arg#extra-filename=}" ;; esac ;;
  esac
  prev="$arg"
done
case " $* " in *" --print"*) exec "$rustc" "$@" ;; esac
if [ -z "$name" ] || [ "$name" = ___ ]; then exec "$rustc" "$@"; fi
echo "compile $name ${CARGO_PKG_NAME:-} $kind" >> "$log"
mkdir -p "$out"
: > "$out/$name$extra.d"
if [ "$kind" = bin ]; then
  printf '#!/bin/sh\necho "run ${0##*/} $*" >> "%s"\n' "$log" > "$out/$name$extra"
  chmod +x "$out/$name$extra"
else
  : > "$out/lib$name$extra.rlib"; : > "$out/lib$name$extra.rmeta"
fi
"#;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The commands of the README's "Set up" section: the lines of its `sh` blocks.
fn setup_commands(readme: &str) -> Vec<String> {
    let section = readme.split("\n## Set up\n").nth(1).expect("README has a \"## Set up\" section");
    let section = section.split("\n## ").next().unwrap_or(section);
    let mut commands = Vec::new();
    let mut in_block = false;
    for line in section.lines() {
        match (in_block, line.trim()) {
            (false, "```sh") => in_block = true,
            (true, "```") => in_block = false,
            (true, command) if !command.is_empty() => commands.push(command.to_owned()),
            _ => {}
        }
    }
    commands
}

#[test]
fn the_readmes_run_command_runs_spool_serve_on_a_fresh_clone() {
    let root = workspace_root();
    let readme = std::fs::read_to_string(root.join("README.md")).expect("read README.md");
    let commands = setup_commands(&readme);
    assert_eq!(commands.len(), 2, "the README's set-up is two commands: {commands:?}");
    let run = &commands[0];
    let words: Vec<&str> = run.split_whitespace().collect();
    assert_eq!(words.first(), Some(&"cargo"), "the first set-up command runs cargo: {run}");
    assert_eq!(commands[1], "scripts/test");

    let dir = tempfile::tempdir().expect("temp dir");
    let wrapper = dir.path().join("rustc-wrapper");
    std::fs::write(&wrapper, WRAPPER).expect("write the wrapper");
    std::fs::set_permissions(&wrapper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    let log = dir.path().join("log");
    let output = Command::new(env!("CARGO"))
        .args(&words[1..])
        .current_dir(&root)
        // A target directory of its own: nothing is fresh there, so every crate goes
        // through the wrapper (and a real release build elsewhere is never run).
        .env("CARGO_TARGET_DIR", dir.path().join("target"))
        .env("RUSTC_WRAPPER", &wrapper)
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env("SPOOL_TEST_WRAPPER_LOG", &log)
        // The crates are already downloaded (this test was built from them).
        .env("CARGO_NET_OFFLINE", "true")
        .env("CARGO_TERM_COLOR", "never")
        .output()
        .expect("run cargo");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let log = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(output.status.success(), "`{run}` failed:\n{stderr}");
    let lines: Vec<&str> = log.lines().collect();
    assert!(lines.contains(&"compile spool spool bin"), "cargo built the `spool` binary:\n{log}\n{stderr}");
    assert!(!log.contains("spool-bench"), "and not the benchmarks:\n{log}");
    assert_eq!(lines.last(), Some(&"run spool serve"), "then ran `spool serve`:\n{log}\n{stderr}");
}
