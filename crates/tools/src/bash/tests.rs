//! Tests of the `bash` tool: exit codes and output, timeouts and aborts that take every
//! process of the call down, the head-and-tail cut, the sandbox and argument checks.

use super::*;
use crate::{test_context, test_project};
use serde_json::json;
use spool_test_support::in_own_process;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// A bound against a test hanging, far below the 1,000 s the commands below sleep:
/// a call that waited for its processes instead of killing them (or leaving them)
/// fails here. It says nothing about speed.
pub(crate) const HANG: Duration = Duration::from_secs(60);

async fn within_hang<T>(what: &str, work: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(HANG, work).await.unwrap_or_else(|_| panic!("{what} still running after {HANG:?}"))
}

async fn bash(root: &Path, args: serde_json::Value) -> ToolOutput {
    Bash::default().call(args, &test_context(root)).await
}

/// Whether `pid` names a live process. A zombie counts as dead: it has been killed
/// and only waits for a parent (possibly a container's init that never reaps) to
/// collect it.
fn alive(pid: libc::pid_t) -> bool {
    // SAFETY: signal 0 only checks that the process exists; nothing is sent.
    let exists = unsafe { libc::kill(pid, 0) } == 0;
    let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat.rsplit_once(')').map(|(_, rest)| rest.trim_start().starts_with('Z')))
        .unwrap_or(false);
    exists && !zombie
}

/// How long a killed process may take to be gone: generous, since it bounds a wait
/// on a busy machine, not a speed (the wait ends as soon as the process is gone).
const KILL_WAIT: Duration = Duration::from_secs(15);

/// A `sleep` duration no other test (or test process) uses, so the test can find
/// its own processes in `/proc` by their arguments: inside the command's PID
/// namespace `$!` is not a pid the test could use.
pub(crate) fn marker(base: u32) -> String {
    use std::sync::atomic::AtomicU32;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let unique = std::process::id().wrapping_mul(1000) + NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{base}.{unique:09}")
}

/// Live (not zombie) processes running exactly `sleep <duration>`.
pub(crate) fn sleeping(duration: &str) -> Vec<libc::pid_t> {
    let wanted = format!("sleep\0{duration}\0");
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<libc::pid_t>().ok()))
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == wanted.as_bytes()) && alive(*pid)
        })
        .collect()
}

/// Waits until a process `sleep <duration>` runs (the command got that far).
pub(crate) async fn started(duration: &str) {
    let start = Instant::now();
    while sleeping(duration).is_empty() {
        assert!(start.elapsed() < HANG, "sleep {duration} never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits up to [`KILL_WAIT`] until no `sleep <duration>` is left; `false` (after
/// killing the survivors, so a failing test leaves nothing behind) if one is.
pub(crate) async fn none_left(duration: &str) -> bool {
    let start = Instant::now();
    while start.elapsed() < KILL_WAIT {
        if sleeping(duration).is_empty() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for pid in sleeping(duration) {
        // SAFETY: a test's own leftover sleep, found by its unique arguments.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    false
}

/// Background processes in every form that leaves the process group or the
/// parent: plain `&`, `setsid nohup … &`, and a double fork `( … &)`.
fn escapes(m: &[String; 3]) -> String {
    format!("sleep {} & setsid nohup sleep {} >/dev/null 2>&1 & (sleep {} &) ;", m[0], m[1], m[2])
}

/// Asserts that none of the [`escapes`] processes outlived `what`. Without a PID
/// namespace the `setsid` one is known to (and is killed here, not asserted).
async fn assert_all_ended(m: &[String; 3], what: &str) {
    assert!(none_left(&m[0]).await, "background `sleep {}` outlived {what}", m[0]);
    assert!(none_left(&m[2]).await, "double-forked `sleep {}` outlived {what}", m[2]);
    let escaped_ended = none_left(&m[1]).await;
    if namespaced() {
        assert!(escaped_ended, "`setsid nohup sleep {}` outlived {what}", m[1]);
    }
}

fn markers() -> [String; 3] {
    [marker(300), marker(301), marker(302)]
}

/// Whether this machine gives commands a PID namespace; without one, processes
/// that left the group (setsid) are known to outlive the call.
pub(crate) fn namespaced() -> bool {
    let on = crate::process::probe();
    if !on {
        eprintln!("skipped in part: no PID namespace for commands on this machine (process group only)");
    }
    on
}

#[tokio::test]
async fn returns_the_exit_code_and_both_streams() {
    let (_dir, root) = test_project();
    let out = bash(&root, json!({"command": "echo out; echo err >&2; echo more"})).await;
    assert!(!out.is_error, "{}", out.text);
    assert!(out.text.starts_with("exit code 0\n"), "{}", out.text);
    for line in ["out\n", "err\n", "more\n"] {
        assert!(out.text.contains(line), "{line:?} missing from {}", out.text);
    }
    assert_eq!(bash(&root, json!({"command": "true"})).await, ToolOutput::ok("exit code 0\n(no output)"));
}

#[tokio::test]
async fn a_non_zero_exit_is_an_error() {
    let (_dir, root) = test_project();
    let out = bash(&root, json!({"command": "echo failing; exit 3"})).await;
    assert_eq!(out, ToolOutput::error("exit code 3\nfailing\n"));
}

#[tokio::test]
async fn runs_in_the_project_directory_with_empty_stdin() {
    let (_dir, root) = test_project();
    let out = bash(&root, json!({"command": "pwd"})).await;
    assert_eq!(out, ToolOutput::ok(format!("exit code 0\n{}\n", root.display())));
    // `cat` would wait forever on an inherited terminal; /dev/null ends it at once.
    assert_eq!(bash(&root, json!({"command": "cat"})).await, ToolOutput::ok("exit code 0\n(no output)"));
}

/// The sandbox is prepared on the directory that was checked; a root swapped for a
/// link between that check and the spawn must not move the command: it starts in
/// the directory that was checked (`fchdir` on the held descriptor), where its
/// writes land, and never in the link's target.
#[tokio::test]
async fn a_root_swapped_after_the_check_does_not_move_the_command() {
    let (_dir, base) = test_project();
    let (root, moved, elsewhere) = (base.join("proj"), base.join("proj-moved"), base.join("elsewhere"));
    std::fs::create_dir(&root).expect("project dir");
    std::fs::create_dir(&elsewhere).expect("the link's target");
    let checked = crate::path::Root::open(&root, None).expect("open the project");
    let prepared = Prepared::new(&SandboxSettings::default(), &checked, None).expect("sandbox");
    std::fs::rename(&root, &moved).expect("move the project away");
    std::os::unix::fs::symlink(&elsewhere, &root).expect("a link in its place");

    let child = spawn("pwd -P; echo hi > here.txt", &prepared).expect("spawn");
    let out = within_hang("the command", child.wait_with_output()).await.expect("output");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), moved.display().to_string());
    assert!(moved.join("here.txt").exists(), "the write lands in the checked directory");
    assert!(!elsewhere.join("here.txt").exists(), "nothing lands in the link's target");
}

#[tokio::test]
async fn a_timeout_kills_the_command_and_everything_it_started() {
    let (_dir, root) = test_project();
    let m = markers();
    let command = format!("echo before; {} sleep 1000", escapes(&m));
    let call = tokio::spawn({
        let root = root.clone();
        async move { bash(&root, json!({"command": command, "timeout": 5})).await }
    });
    for duration in &m {
        started(duration).await;
    }
    let out = within_hang("the call", call).await.expect("the call task");
    assert_eq!(
        out,
        ToolOutput::error("timed out after 5 s; the command and every process it started were killed\nbefore\n")
    );
    assert_all_ended(&m, "the timeout").await;
}

#[tokio::test]
async fn aborting_the_run_kills_everything_the_command_started() {
    let (_dir, root) = test_project();
    let ctx = test_context(&root);
    let cancel = ctx.cancel.clone();
    let m = markers();
    let command = format!("{} wait", escapes(&m));
    let call = tokio::spawn(async move { Bash::default().call(json!({"command": command}), &ctx).await });
    for duration in &m {
        started(duration).await;
    }
    cancel.cancel();
    let out = within_hang("the aborted call", call).await.expect("the call task");
    assert_eq!(out, ToolOutput::error("aborted"));
    assert_all_ended(&m, "the abort").await;
}

#[tokio::test]
async fn dropping_the_call_kills_everything_the_command_started() {
    let (_dir, root) = test_project();
    let ctx = test_context(&root);
    let m = markers();
    let command = format!("{} wait", escapes(&m));
    let call = tokio::spawn(async move { Bash::default().call(json!({"command": command}), &ctx).await });
    for duration in &m {
        started(duration).await;
    }
    call.abort();
    assert!(call.await.expect_err("aborted task").is_cancelled());
    assert_all_ended(&m, "the drop").await;
}

/// The review's finding: processes a call left in the background outlived it, and
/// no later call could stop them. They end with the call now, however they left
/// the shell, and the call still returns at once.
#[tokio::test]
async fn a_calls_background_processes_end_with_the_call() {
    let (_dir, root) = test_project();
    let m = markers();
    let command = format!("{} echo started", escapes(&m));
    let out = within_hang("the call", bash(&root, json!({"command": command}))).await;
    assert_eq!(out, ToolOutput::ok("exit code 0\nstarted\n"));
    assert_all_ended(&m, "the call").await;
}

/// Where no PID namespace can be made, the process group is the fallback: what
/// stays in it ends with the call (the group is killed once the shell exits), and
/// only a process that left it (`setsid`) outlives the call, as documented.
#[tokio::test]
async fn without_a_pid_namespace_the_process_group_ends_with_the_call() {
    const TEST: &str = "bash::tests::without_a_pid_namespace_the_process_group_ends_with_the_call";
    if !in_own_process(TEST, &[("SPOOL_TEST_NO_PID_NAMESPACE", "1")]) {
        return;
    }
    assert!(!crate::process::probe(), "the fallback is what this test is about");
    let (_dir, root) = test_project();
    let m = markers();
    // The shell ends only once all three run (the setsid one has left the group).
    let running = m.iter().map(|d| format!("pgrep -x -f 'sleep {d}' >/dev/null")).collect::<Vec<_>>();
    let command = format!("{} until {}; do sleep 0.01; done; echo started", escapes(&m), running.join(" && "));
    let out = within_hang("the call", bash(&root, json!({"command": command}))).await;
    assert_eq!(out, ToolOutput::ok("exit code 0\nstarted\n"));
    assert!(none_left(&m[0]).await, "background `sleep {}` outlived the call", m[0]);
    assert!(none_left(&m[2]).await, "double-forked `sleep {}` outlived the call", m[2]);
    // The known gap of the fallback; the test cleans it up.
    let escaped = sleeping(&m[1]);
    for pid in &escaped {
        // SAFETY: the test's own sleep, found by its unique arguments.
        unsafe { libc::kill(*pid, libc::SIGKILL) };
    }
    assert!(!escaped.is_empty(), "setsid left the group, so the sweep cannot reach it");
}

#[tokio::test]
async fn a_chatty_stderr_does_not_deadlock() {
    let (_dir, root) = test_project();
    // Far more than a pipe buffer on stderr before anything on stdout.
    let out = bash(&root, json!({"command": "head -c 1000000 /dev/zero | tr '\\0' e >&2; echo done"})).await;
    // The command finished (it was not killed at its timeout) and succeeded. Where
    // "done" lands among the last stderr bytes is up to the scheduler (two pipes
    // have no common order), and the long output keeps only its head and tail, so
    // the test does not look for it.
    assert!(out.text.starts_with("exit code 0\n"), "{}", &out.text[..100]);
    assert!(!out.is_error, "a deadlock would end at the timeout, as an error");
}

#[tokio::test]
async fn long_output_keeps_head_and_tail_with_a_note() {
    let (_dir, root) = test_project();
    let out = bash(&root, json!({"command": "seq 1 100000"})).await;
    let full: String = (1..=100_000).map(|i| format!("{i}\n")).collect();
    let head = &full[..HEAD_BYTES];
    let tail = &full[full.len() - TAIL_BYTES..];
    let omitted = full.len() - HEAD_BYTES - TAIL_BYTES;
    assert_eq!(out, ToolOutput::ok(format!("exit code 0\n{head}\n… {omitted} bytes of output omitted …\n{tail}")));
}

#[test]
fn output_cuts_fall_on_character_boundaries() {
    let mut output = Output::default();
    // Two-byte characters, so a cut at an even byte count of the head is mid-way
    // when the head starts one byte off.
    output.push(b"x");
    for _ in 0..HEAD_BYTES {
        output.push("é".as_bytes());
    }
    let text = output.render();
    assert!(!text.contains('\u{FFFD}'), "a cut split a character");
    let (head, tail) = text.split_once("\n… ").expect("a note");
    let tail = tail.split_once("…\n").expect("note end").1;
    let shown = head.len() + tail.len();
    assert!(text.contains(&format!("… {} bytes of output omitted …", 1 + 2 * HEAD_BYTES - shown)));
}

/// Whether this kernel confines commands; the Landlock tests say "skipped" without.
pub(crate) fn landlock() -> bool {
    let on = crate::sandbox::probe(&SandboxSettings::default()).landlock;
    if !on {
        eprintln!("skipped: this kernel has no Landlock");
    }
    on
}

/// A project and, beside it, a data dir holding a secret and a directory outside both.
pub(crate) fn sandboxed() -> (tempfile::TempDir, PathBuf, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let base = dir.path().canonicalize().expect("canonical");
    let (root, data, outside) = (base.join("project"), base.join("data"), base.join("outside"));
    for d in [&root, &data, &outside] {
        std::fs::create_dir_all(d).expect("mkdir");
    }
    std::fs::write(data.join("config.toml"), "OPENAI_API_KEY = \"sk-in-the-data-dir\"\n").expect("write");
    std::fs::write(outside.join("readable.txt"), "readable from anywhere\n").expect("write");
    (dir, root, data, outside)
}

async fn sandboxed_bash(settings: SandboxSettings, root: &Path, data: &Path, command: &str) -> ToolOutput {
    let ctx = ToolContext {
        root: root.to_path_buf(),
        root_id: None,
        cancel: CancellationToken::new(),
        data_dir: Some(data.into()),
        progress: Default::default(),
        asker: Default::default(),
        sampler: Default::default(),
    };
    Bash::new(settings).call(json!({ "command": command }), &ctx).await
}

#[tokio::test]
async fn writes_land_only_in_the_project_and_the_calls_temp_dir() {
    if !landlock() {
        return;
    }
    let (_dir, root, data, outside) = sandboxed();
    let command = format!(
        "echo in > inside.txt && echo tmp > \"$TMPDIR/t\" && cat \"$TMPDIR/t\" && echo $TMPDIR > tmpdir.txt; \
         echo out > {0}/escaped.txt; touch {0}/readable.txt; echo $?",
        outside.display()
    );
    let out = sandboxed_bash(SandboxSettings::default(), &root, &data, &command).await;
    assert_eq!(std::fs::read_to_string(root.join("inside.txt")).expect("written in the project"), "in\n");
    assert!(out.text.contains("tmp\n"), "the temp dir is writable: {}", out.text);
    assert!(!outside.join("escaped.txt").exists(), "a write outside the project landed: {}", out.text);
    assert!(out.text.contains("Permission denied"), "{}", out.text);
    // The call's temp dir is gone once the call is over.
    let tmpdir = std::fs::read_to_string(root.join("tmpdir.txt")).expect("tmpdir noted");
    assert!(tmpdir.trim().contains("spool-bash-"), "{tmpdir}");
    assert!(!Path::new(tmpdir.trim()).exists(), "the temp dir was left behind");
}

#[tokio::test]
async fn the_data_dir_cannot_be_read_and_the_rest_can() {
    if !landlock() {
        return;
    }
    let (_dir, root, data, outside) = sandboxed();
    let command = format!(
        "cat {0}/readable.txt; cat {1}/config.toml; ls {1}; cat {1}/../data/config.toml",
        outside.display(),
        data.display()
    );
    let out = sandboxed_bash(SandboxSettings::default(), &root, &data, &command).await;
    assert!(out.text.contains("readable from anywhere"), "{}", out.text);
    assert!(!out.text.contains("sk-in-the-data-dir"), "the data dir was read: {}", out.text);
    assert!(out.text.contains("Permission denied"), "{}", out.text);
    // System tools still run and read what they need.
    let out = sandboxed_bash(SandboxSettings::default(), &root, &data, "ls /usr/bin >/dev/null && echo listed").await;
    assert_eq!(out, ToolOutput::ok("exit code 0\nlisted\n"));
}

#[tokio::test]
async fn network_false_blocks_tcp_connect_and_the_default_allows_it() {
    if !landlock() {
        return;
    }
    let (_dir, root, data, _) = sandboxed();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let command = format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected");
    let open = sandboxed_bash(SandboxSettings::default(), &root, &data, &command).await;
    assert_eq!(open, ToolOutput::ok("exit code 0\nconnected\n"));
    let closed = SandboxSettings { network: false, ..SandboxSettings::default() };
    let out = sandboxed_bash(closed.clone(), &root, &data, &command).await;
    assert!(out.is_error && !out.text.contains("connected"), "{}", out.text);
    assert!(out.text.contains("Permission denied"), "{}", out.text);
}

#[tokio::test]
async fn the_servers_environment_stays_out_of_commands() {
    const SECRET: &str = "sk-server-env-3c2b1a";
    // The variables are the process's own from its start: `set_var` here would race
    // the other test threads' reads of the environment.
    let vars = [("SPOOL_SANDBOX_TEST_KEY", SECRET), ("SPOOL_SANDBOX_TEST_PASSED", "passed-through")];
    if !in_own_process("bash::tests::the_servers_environment_stays_out_of_commands", &vars) {
        return;
    }
    let (_dir, root, data, _) = sandboxed();
    let settings = SandboxSettings { env: vec!["SPOOL_SANDBOX_TEST_PASSED".into()], ..SandboxSettings::default() };
    let command = "echo \"[$SPOOL_SANDBOX_TEST_KEY]\" \"[$SPOOL_SANDBOX_TEST_PASSED]\"; env";
    let out = sandboxed_bash(settings, &root, &data, command).await;
    assert!(out.text.contains("[] [passed-through]"), "{}", out.text);
    assert!(out.text.contains("PATH="), "{}", out.text);
    assert!(!out.text.contains(SECRET), "the server's environment leaked: {}", out.text);
}

/// The server's own environment file is closed to a command, with the secret really
/// in the process's environment (`set_var` would leave `/proc/self/environ` alone).
/// Found open when the server ran as root (as in CI): Landlock's ptrace barrier
/// gives way to `CAP_SYS_PTRACE`, which every command then had. Closed whether or
/// not the kernel has Landlock: the command has no capabilities and the server is
/// non-dumpable (sandbox.rs).
#[tokio::test]
async fn the_servers_environment_file_is_closed_to_commands() {
    const SECRET: &str = "sk-server-environ-8e7f6a";
    if !in_own_process(
        "bash::tests::the_servers_environment_file_is_closed_to_commands",
        &[("SPOOL_SANDBOX_TEST_ENVIRON_KEY", SECRET)],
    ) {
        return;
    }
    let (_dir, root, data, _) = sandboxed();
    // Each open is refused; `mem` would give "Input/output error" at offset 0 if
    // it opened at all.
    // The server's pid as the server knows it: inside the command's PID namespace
    // `$PPID` is 0.
    let server = std::process::id();
    for command in [
        format!("cat /proc/{server}/environ"),
        format!("cat /proc/{server}/task/{server}/environ"),
        format!("head -c 1 /proc/{server}/mem"),
    ] {
        let out = sandboxed_bash(SandboxSettings::default(), &root, &data, &command).await;
        assert!(!out.text.contains(SECRET), "`{command}` read the server's environment: {}", out.text);
        assert!(out.text.contains("Permission denied"), "`{command}`: {}", out.text);
    }
}

/// A command holds no capability, whoever runs the server: as root (CI, containers)
/// it would otherwise hold them all, `CAP_SYS_PTRACE` and `CAP_DAC_OVERRIDE` among
/// them. As root the bounding set is empty too, so nothing comes back on exec.
#[tokio::test]
async fn a_command_holds_no_capabilities() {
    let (_dir, root, data, _) = sandboxed();
    let out = sandboxed_bash(SandboxSettings::default(), &root, &data, "grep ^Cap /proc/self/status").await;
    let field = |name: &str| {
        out.text
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .map(|v| v.trim().to_owned())
            .unwrap_or_else(|| panic!("no {name} in {}", out.text))
    };
    for name in ["CapInh:", "CapPrm:", "CapEff:", "CapAmb:"] {
        assert_eq!(field(name), "0000000000000000", "{name} of a command: {}", out.text);
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        assert_eq!(field("CapBnd:"), "0000000000000000", "a root server's command: {}", out.text);
    }
}

#[tokio::test]
async fn bad_arguments_are_tool_errors() {
    let (_dir, root) = test_project();
    let cases = [
        (json!({"command": "  "}), "invalid arguments for bash: command must not be empty"),
        (
            json!({"command": "ls", "timeout": 0}),
            "invalid arguments for bash: timeout must be between 1 and 600 seconds, got 0",
        ),
        (
            json!({"command": "ls", "timeout": 601}),
            "invalid arguments for bash: timeout must be between 1 and 600 seconds, got 601",
        ),
    ];
    for (args, expected) in cases {
        assert_eq!(bash(&root, args.clone()).await, ToolOutput::error(expected), "{args}");
    }
    for args in [
        json!({}),
        json!({"command": 1}),
        json!({"command": "ls", "timeout": 1.5}),
        json!({"command": "ls", "timeout": -1}),
    ] {
        let out = bash(&root, args.clone()).await;
        assert!(out.is_error && out.text.starts_with("invalid arguments for bash: "), "{args}: {}", out.text);
    }
}
