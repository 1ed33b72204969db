//! A test run again, alone, in a process of its own: for the tests about what a
//! process does with its environment (secrets the server redacts, variables a command
//! must not see, a setting read once at start).
//!
//! `std::env::set_var` from a test would race every other test thread's reads of the
//! environment, C's `getenv` included — why it is `unsafe` — and the code under test
//! reads the real environment, so the variables cannot be passed any other way. The
//! child is the same test binary, filtered to the one test with `--exact`, and must
//! report exactly one test passed, so a wrong name fails rather than running nothing.

/// Set in the child process [`in_own_process`] starts, to the test it runs.
const OWN_PROCESS_VAR: &str = "SPOOL_TEST_OWN_PROCESS";

/// Runs the test named `test` (its full libtest name, `module::…::function`) again,
/// alone, in a process of its own whose environment has `vars` from the start.
/// Returns `true` in that process, where the test goes on with its body, and `false`
/// in the calling one once the child passed (a failure there fails the calling test,
/// with the child's output).
pub fn in_own_process(test: &str, vars: &[(&str, &str)]) -> bool {
    if std::env::var_os(OWN_PROCESS_VAR).is_some_and(|running| running == test) {
        return true;
    }
    let out = std::process::Command::new(std::env::current_exe().expect("the test binary's path"))
        .args([test, "--exact", "--include-ignored", "--test-threads=1"])
        .env(OWN_PROCESS_VAR, test)
        .envs(vars.iter().copied())
        .output()
        .expect("run the test binary");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success() && stdout.contains("test result: ok. 1 passed"),
        "{test} in a process of its own: {}\n{stdout}\n{stderr}",
        out.status
    );
    false
}
