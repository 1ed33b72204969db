//! The git options and subcommands that make git run a program of the caller's
//! choosing, so that an allow rule for `git *` does not allow them.
//!
//! The review ran arbitrary commands under the README's own rule `bash "git *" allow`
//! with `git -c alias.x='!cmd' x` and `git -c core.pager=…`. A rule about git is
//! about git's own work; anything that points git at a program, a configuration, a
//! template or another repository (whose hooks and settings run programs) is asked
//! about instead, even under an allow rule:
//!
//! - global options: `-c`, `--config-env`, `--exec-path=…`, `-C`, `--git-dir`,
//!   `--work-tree`, `--bare`, and any global option not known to be harmless;
//! - configuration writes, except a short list of keys that name no program
//!   (`user.*`, `color.*`…); reads (`--get`, `--list`, one key) stay allowed;
//! - subcommands that run commands by design (`difftool`, `mergetool`,
//!   `filter-branch`, `bisect run`, `submodule foreach`, `daemon`, `instaweb`,
//!   `send-email`, `web--browse`), and options that name a program or a template
//!   (`--upload-pack`, `--receive-pack`, `--exec`, `rebase -x`, `grep -O`,
//!   `--template`, `clone -c`/`--config`, `-u` of clone/fetch/ls-remote/archive).
//!
//! What stays trusted: the repository's own configuration and hooks as they are. A
//! `git status` runs `core.fsmonitor` from `.git/config`; putting a program there takes
//! a change that asks (a `write`, a `bash` command, or `git config` above).

/// Whether `git` with `args` may run a program named on this command line or in a
/// configuration or repository it points to.
pub(super) fn runs_other_programs(args: &[super::word::Word]) -> bool {
    let Some(args) = args.iter().map(|w| w.value.as_deref()).collect::<Option<Vec<&str>>>() else {
        // Uncertain words already make the command one that cannot be judged.
        return false;
    };
    let mut i = 0;
    while let Some(&arg) = args.get(i) {
        if !arg.starts_with('-') {
            break;
        }
        let harmless = matches!(
            arg,
            "-p" | "--paginate"
                | "-P"
                | "--no-pager"
                | "--no-replace-objects"
                | "--no-lazy-fetch"
                | "--no-optional-locks"
                | "--no-advice"
                | "--literal-pathspecs"
                | "--glob-pathspecs"
                | "--noglob-pathspecs"
                | "--icase-pathspecs"
                | "--version"
                | "-v"
                | "--help"
                | "-h"
                | "--html-path"
                | "--man-path"
                | "--info-path"
                | "--exec-path"
        ) || arg.starts_with("--namespace=")
            || arg.starts_with("--list-cmds=");
        if !harmless {
            return true;
        }
        i += 1;
    }
    let Some((&subcommand, rest)) = args[i..].split_first() else { return false };
    let has = |options: &[&str]| {
        rest.iter().any(|a| {
            options
                .iter()
                .any(|o| a == o || a.strip_prefix(o).is_some_and(|v| o.starts_with("--") && v.starts_with('=')))
        })
    };
    match subcommand {
        "difftool" | "mergetool" | "filter-branch" | "daemon" | "instaweb" | "send-email" | "web--browse" => true,
        "bisect" => rest.first() == Some(&"run"),
        "submodule" => rest.contains(&"foreach"),
        "config" => config_writes_a_program(rest),
        "rebase" => has(&["--exec", "-i", "--interactive"]) || rest.iter().any(|a| short_cluster_has(a, 'x')),
        "grep" => has(&["--open-files-in-pager"]) || rest.iter().any(|a| short_cluster_has(a, 'O')),
        "clone" | "fetch" | "pull" | "ls-remote" | "archive" | "push" | "init" => {
            has(&["--upload-pack", "--receive-pack", "--exec", "--template", "--config", "--remote"])
                || (matches!(subcommand, "clone" | "fetch" | "pull" | "ls-remote" | "archive")
                    && rest.iter().any(|a| short_cluster_has(a, 'u')))
                || (subcommand == "clone" && rest.iter().any(|a| short_cluster_has(a, 'c')))
        }
        _ => false,
    }
}

/// Whether `arg` is a short option cluster (`-xyz`) holding `option`.
fn short_cluster_has(arg: &str, option: char) -> bool {
    arg.strip_prefix('-').is_some_and(|cluster| !cluster.starts_with('-') && cluster.contains(option))
}

/// Keys whose values name no program, no file to include and no command.
const SAFE_KEYS: &[&str] = &["user.", "color.", "advice.", "branch.", "log.", "status.", "column."];
const SAFE_EXACT: &[&str] = &[
    "pull.rebase",
    "push.default",
    "push.autosetupremote",
    "init.defaultbranch",
    "fetch.prune",
    "rebase.autostash",
    "merge.ff",
    "diff.renames",
];

/// `git config`: a read, or a write of a key in [`SAFE_KEYS`], is plain git; any other
/// write (`alias.*`, `core.*`, includes, drivers…), an edit or a section rename is not.
fn config_writes_a_program(args: &[&str]) -> bool {
    const READS: &[&str] = &[
        "--get",
        "--get-all",
        "--get-regexp",
        "--get-urlmatch",
        "--get-color",
        "--get-colorbool",
        "-l",
        "--list",
        "get",
        "list",
    ];
    const WITH_VALUE: &[&str] = &["-f", "--file", "--blob", "--type", "--default", "--comment"];
    const RISKY: &[&str] = &["-e", "--edit", "edit", "--rename-section", "rename-section"];
    if args.iter().any(|a| RISKY.contains(a)) {
        return true;
    }
    if args.iter().any(|a| READS.contains(a)) && !args.contains(&"set") {
        return false;
    }
    let mut positional = Vec::new();
    let mut i = 0;
    while let Some(&arg) = args.get(i) {
        if WITH_VALUE.contains(&arg) {
            i += 2;
            continue;
        }
        if !arg.starts_with('-') {
            positional.push(arg);
        }
        i += 1;
    }
    if positional.first() == Some(&"set") || positional.first() == Some(&"unset") {
        positional.remove(0);
    } else if positional.len() <= 1 {
        // `git config user.name`: a read.
        return false;
    }
    let Some(key) = positional.first() else { return false };
    let key = key.to_ascii_lowercase();
    !(SAFE_KEYS.iter().any(|p| key.starts_with(p)) || SAFE_EXACT.contains(&key.as_str()))
}
