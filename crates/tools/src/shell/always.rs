//! What "always" on a `bash` card may allow from then on: this exact command, or the
//! prefixes of the programs it runs, never all of bash.
//!
//! Clicking "always" used to add `bash *`, so one approved `git status` let every
//! later command run, `rm -rf` included. The choices are built from the same parts
//! permission rules judge ([`super::command_subject`]): since every part of a later
//! command must be allowed, an option has one pattern per program the command runs
//! (`git status | grep x` → `git status *` and `grep *`), each spelling of a part
//! (`FOO=1 git log` is also `git log`) gets its own, and a command with a part that
//! cannot be judged (`$x`, `$(…)`, a redirection) is offered as the exact command only,
//! because no prefix pattern would ever cover that part.

use super::command_subject;
use spool_protocol::AlwaysOption;
use spool_protocol::approval::escape_pattern;

/// Programs whose first argument names what they do (`git status`, `cargo test`): for
/// them a "program and subcommand" pattern is offered between the exact command and
/// the whole program. Any other program's first argument is an operand (`grep x`,
/// `cat a.txt`), which makes a poor prefix.
const WITH_SUBCOMMANDS: &[&str] = &[
    "apt",
    "apt-get",
    "brew",
    "bun",
    "bundle",
    "cabal",
    "cargo",
    "composer",
    "deno",
    "docker",
    "dotnet",
    "gh",
    "git",
    "go",
    "gradle",
    "helm",
    "just",
    "kubectl",
    "make",
    "mix",
    "mvn",
    "nix",
    "npm",
    "npx",
    "pip",
    "pip3",
    "pnpm",
    "podman",
    "poetry",
    "rustup",
    "stack",
    "swift",
    "systemctl",
    "terraform",
    "uv",
    "yarn",
    "zig",
];

/// The options for `command`, most precise first: the exact command, then each part's
/// program with its subcommand, then each part's program alone (duplicates dropped).
pub fn always_options(command: &str) -> Vec<AlwaysOption> {
    let exact = AlwaysOption { label: command.to_owned(), exact: true, patterns: vec![escape_pattern(command)] };
    let subject = command_subject(command);
    let Some(parts) = subject.parts.into_iter().collect::<Option<Vec<String>>>() else {
        return vec![exact];
    };
    let mut options = vec![exact];
    for with_subcommand in [true, false] {
        let mut patterns: Vec<String> = Vec::new();
        for part in &parts {
            let Some(pattern) = prefix(part, with_subcommand) else { return options };
            if !patterns.contains(&pattern) {
                patterns.push(pattern);
            }
        }
        if !options.iter().any(|o| o.patterns == patterns) {
            options.push(AlwaysOption { label: patterns.join(", "), exact: false, patterns });
        }
    }
    options
}

/// The prefix pattern for one part (its words joined by single spaces): leading
/// `NAME=value` words kept as they are, the program, and with `with_subcommand` the
/// subcommand of a program that has them; then ` *`. `None` for a part without a
/// program.
fn prefix(part: &str, with_subcommand: bool) -> Option<String> {
    let mut words = part.split(' ').filter(|w| !w.is_empty()).peekable();
    let mut kept = Vec::new();
    while let Some(word) = words.next_if(|w| is_assignment(w)) {
        kept.push(escape_pattern(word));
    }
    let program = words.next()?;
    kept.push(escape_pattern(program));
    let name = program.rsplit('/').next().unwrap_or(program);
    if with_subcommand
        && WITH_SUBCOMMANDS.contains(&name)
        && let Some(sub) = words.next().filter(|w| is_subcommand(w))
    {
        kept.push(sub.to_owned());
    }
    Some(format!("{} *", kept.join(" ")))
}

fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// A word that reads as a subcommand: lower-case letters, digits and `-`, `_`, `:`.
fn is_subcommand(word: &str) -> bool {
    word.starts_with(|c: char| c.is_ascii_lowercase())
        && word.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '_' | ':'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use spool_protocol::approval::{PermissionAction, PermissionRule, default_rules, evaluate_call};

    fn patterns(command: &str) -> Vec<Vec<String>> {
        always_options(command).into_iter().map(|o| o.patterns).collect()
    }

    fn v(patterns: &[&str]) -> Vec<String> {
        patterns.iter().map(|p| (*p).to_owned()).collect()
    }

    #[test]
    fn a_command_offers_itself_its_subcommand_and_its_program() {
        assert_eq!(
            patterns("git status --short"),
            vec![v(&["git status --short"]), v(&["git status *"]), v(&["git *"])]
        );
        assert_eq!(patterns("rm -rf x"), vec![v(&["rm -rf x"]), v(&["rm *"])]);
        assert_eq!(patterns("ls"), vec![v(&["ls"]), v(&["ls *"])]);
        assert_eq!(
            patterns("git status | grep x"),
            vec![v(&["git status | grep x"]), v(&["git status *", "grep *"]), v(&["git *", "grep *"]),]
        );
        assert_eq!(
            patterns("FOO=1 cargo test"),
            vec![
                v(&["FOO=1 cargo test"]),
                v(&["FOO=1 cargo test *", "cargo test *"]),
                v(&["FOO=1 cargo *", "cargo *"]),
            ]
        );
        assert_eq!(patterns("ls *.rs"), vec![v(&["ls \\*.rs"])]);
        assert_eq!(patterns("echo $(id)"), vec![v(&["echo $(id)"])]);
    }

    /// Whatever the command, each option allows the command it was offered for, and no
    /// option allows a command with another program in it.
    #[test]
    fn every_option_allows_its_own_command_and_not_a_chained_rm() {
        for command in ["git status", "git status -s | grep -v x", "timeout 5 cargo test", "ls", "make test && ls -la"]
        {
            for option in always_options(command) {
                let rules: Vec<PermissionRule> =
                    option.patterns.iter().map(|p| PermissionRule::new("bash", p, PermissionAction::Allow)).collect();
                let judge = |c: &str| evaluate_call(&default_rules(), &rules, "bash", &command_subject(c));
                assert_eq!(judge(command), PermissionAction::Allow, "{command:?} under {option:?}");
                assert_eq!(judge(&format!("{command}; rm -rf x")), PermissionAction::Ask, "{option:?}");
            }
        }
    }
}
