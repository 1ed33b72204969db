//! What a `bash` command line is made of, for permission rules: the commands it runs,
//! each as the texts a rule's pattern is matched against.
//!
//! An allow rule such as `bash "git *"` was written for git commands; matched against
//! the whole line, it also let `git --version; curl … | sh` through. A deny rule such
//! as `bash "rm *"` was dodged by spelling: `/bin/rm`, `\rm`, `r''m`, `command rm`,
//! `find -delete`. So the line is parsed (with brush-parser, a maintained bash parser)
//! into its simple commands, through lists, pipelines, `&&`/`||` chains, subshells,
//! groups, conditionals, loops, functions and command substitutions; each word is
//! taken as the program will receive it, quotes and escapes removed ([`word`]); and
//! a command that runs another (`env`, `timeout`, `xargs`, `sh -c`, `find -exec`…)
//! adds that one too ([`programs`]). A rule must allow every part; a deny matching
//! any part denies.
//!
//! A part that cannot be judged is `None`, which only a rule with the pattern `*`
//! covers, so it asks under narrower allow rules, and it asks even under `*` while
//! the server denies anything for the tool (`evaluate_call`): a word whose value is
//! known only when it runs (`$x`, `$(…)`, a glob, `{a,b}`), a redirection to or from a
//! file (except the harmless `2>&1`-style duplications and `/dev/null`),
//! here-documents and here-strings, every compound command (its inner commands are
//! judged as well), `[[ … ]]`, a script run by a shell or `source`, a wrapper with
//! options it does not know, git pointed at other programs ([`git`]), and a line the
//! parser refuses. Erring towards asking is the point: a wrong guess here runs a
//! command nobody approved.

mod always;
mod git;
mod programs;
mod word;

pub use always::always_options;

use brush_parser::ast::{
    Command, CommandPrefixOrSuffixItem, CompoundCommand, CompoundList, IoFileRedirectKind, IoFileRedirectTarget,
    IoRedirect, Pipeline, SimpleCommand, Word as AstWord,
};
use spool_protocol::CallSubject;

/// How deep nested command lines (`sh -c`, `eval`, substitutions) and wrappers are
/// followed; past it a part cannot be judged.
const MAX_DEPTH: usize = 8;

/// The subject permission rules judge a `bash` call on: the whole line, and each
/// spelling of each command it runs, or `None` for a part that cannot be judged.
pub fn command_subject(command: &str) -> CallSubject {
    let mut parts = Parts::default();
    parts.line(command, 0);
    if parts.0.is_empty() {
        // Nothing but comments or blanks: judged as the line itself.
        parts.0.push(Some(command.trim().to_owned()));
    }
    CallSubject { whole: Some(command.to_owned()), parts: parts.0 }
}

/// The parts found so far.
#[derive(Default)]
struct Parts(Vec<Option<String>>);

impl Parts {
    fn opaque(&mut self) {
        self.0.push(None);
    }

    fn form(&mut self, text: String) {
        self.0.push(Some(text));
    }

    /// Adds the parts of a whole command line.
    fn line(&mut self, line: &str, depth: usize) {
        if depth > MAX_DEPTH {
            return self.opaque();
        }
        let options = brush_parser::ParserOptions::default();
        let mut parser = brush_parser::Parser::new(std::io::Cursor::new(line.as_bytes()), &options);
        match parser.parse_program() {
            Ok(program) => {
                for list in &program.complete_commands {
                    self.compound_list(list, depth);
                }
            }
            Err(_) => self.opaque(),
        }
    }

    fn compound_list(&mut self, list: &CompoundList, depth: usize) {
        // `;`, `&` and newlines separate items; `&&` and `||` chain pipelines. Each runs
        // (or may run), so each must be covered.
        for item in &list.0 {
            self.pipeline(&item.0.first, depth);
            for next in &item.0.additional {
                let (brush_parser::ast::AndOr::And(p) | brush_parser::ast::AndOr::Or(p)) = next;
                self.pipeline(p, depth);
            }
        }
    }

    fn pipeline(&mut self, pipeline: &Pipeline, depth: usize) {
        for command in &pipeline.seq {
            self.command(command, depth);
        }
    }

    fn command(&mut self, command: &Command, depth: usize) {
        match command {
            Command::Simple(simple) => self.simple(simple, depth),
            // What runs inside depends on conditions and values, so the compound
            // command itself cannot be judged; the commands inside are judged too, so
            // a deny still finds `rm` in `(rm x)` or `for f in *; do rm $f; done`.
            Command::Compound(compound, _) => {
                self.opaque();
                self.compound(compound, depth);
            }
            Command::Function(function) => {
                self.opaque();
                self.compound(&function.body.0, depth);
            }
            Command::ExtendedTest(..) => self.opaque(),
        }
    }

    fn compound(&mut self, compound: &CompoundCommand, depth: usize) {
        match compound {
            CompoundCommand::Arithmetic(_) => {}
            CompoundCommand::ArithmeticForClause(c) => self.compound_list(&c.body.list, depth),
            CompoundCommand::BraceGroup(c) => self.compound_list(&c.list, depth),
            CompoundCommand::Subshell(c) => self.compound_list(&c.list, depth),
            CompoundCommand::ForClause(c) => self.compound_list(&c.body.list, depth),
            CompoundCommand::CaseClause(c) => {
                for case in &c.cases {
                    if let Some(list) = &case.cmd {
                        self.compound_list(list, depth);
                    }
                }
            }
            CompoundCommand::IfClause(c) => {
                self.compound_list(&c.condition, depth);
                self.compound_list(&c.then, depth);
                for other in c.elses.iter().flatten() {
                    if let Some(condition) = &other.condition {
                        self.compound_list(condition, depth);
                    }
                    self.compound_list(&other.body, depth);
                }
            }
            CompoundCommand::WhileClause(c) | CompoundCommand::UntilClause(c) => {
                self.compound_list(&c.0, depth);
                self.compound_list(&c.1.list, depth);
            }
            CompoundCommand::Coprocess(c) => self.command(&c.body, depth),
        }
    }

    /// A simple command: its words unquoted, judged by [`programs::command`], plus a
    /// part that cannot be judged for a redirection that touches a file, and the
    /// command lines of its substitutions.
    fn simple(&mut self, command: &SimpleCommand, depth: usize) {
        let mut words = Vec::new();
        for item in command.prefix.iter().flat_map(|p| p.0.iter()) {
            // `NAME=value cmd`: the assignment is kept in one spelling, so `git *` does
            // not match `GIT_SSH_COMMAND=… git fetch`.
            self.item(item, &mut words, depth);
        }
        let assignments = words.len();
        if let Some(name) = &command.word_or_name {
            words.push(word::parse(&name.value));
        }
        for item in command.suffix.iter().flat_map(|s| s.0.iter()) {
            self.item(item, &mut words, depth);
        }
        for substitution in words.iter().flat_map(|w| &w.substitutions) {
            self.line(substitution, depth + 1);
        }
        if !words.is_empty() {
            programs::command(self, &words, assignments, depth);
        }
    }

    fn item(&mut self, item: &CommandPrefixOrSuffixItem, words: &mut Vec<word::Word>, depth: usize) {
        match item {
            CommandPrefixOrSuffixItem::Word(w) | CommandPrefixOrSuffixItem::AssignmentWord(_, w) => {
                words.push(word::parse(&w.value));
            }
            CommandPrefixOrSuffixItem::IoRedirect(redirect) => {
                if !harmless_redirect(redirect) {
                    self.opaque();
                }
            }
            CommandPrefixOrSuffixItem::ProcessSubstitution(_, subshell) => {
                self.opaque();
                self.compound_list(&subshell.list, depth + 1);
            }
        }
    }
}

/// Redirections that neither read nor write a file: duplicating a descriptor (`2>&1`,
/// `>&2`, `<&0`, `>&-`) and writing to `/dev/null`.
fn harmless_redirect(redirect: &IoRedirect) -> bool {
    let is_fd = |w: &AstWord| w.value == "-" || (!w.value.is_empty() && w.value.bytes().all(|b| b.is_ascii_digit()));
    match redirect {
        IoRedirect::File(_, kind, target) => match (kind, target) {
            (_, IoFileRedirectTarget::Fd(_)) => true,
            (
                IoFileRedirectKind::DuplicateInput | IoFileRedirectKind::DuplicateOutput,
                IoFileRedirectTarget::Duplicate(w),
            ) => is_fd(w),
            (
                IoFileRedirectKind::Write | IoFileRedirectKind::Append | IoFileRedirectKind::Clobber,
                IoFileRedirectTarget::Filename(w),
            ) => w.value == "/dev/null",
            _ => false,
        },
        IoRedirect::OutputAndError(w, _) => w.value == "/dev/null",
        IoRedirect::HereDocument(..) | IoRedirect::HereString(..) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use spool_protocol::approval::{PermissionAction, PermissionRule, default_rules, evaluate_call};

    fn parts(command: &str) -> Vec<Option<String>> {
        command_subject(command).parts
    }

    fn some(parts: &[&str]) -> Vec<Option<String>> {
        parts.iter().map(|p| Some((*p).to_owned())).collect()
    }

    /// The README's rule set: git allowed, git push denied, everything else asks.
    fn git_rules() -> Vec<PermissionRule> {
        let mut rules = default_rules();
        rules.push(PermissionRule::new("bash", "git *", PermissionAction::Allow));
        rules.push(PermissionRule::new("bash", "git push*", PermissionAction::Deny));
        rules
    }

    fn judge(command: &str) -> PermissionAction {
        evaluate_call(&git_rules(), &[], "bash", &command_subject(command))
    }

    #[test]
    fn lists_chains_and_pipelines_split_into_simple_commands() {
        assert_eq!(parts("git status"), some(&["git status"]));
        assert_eq!(parts("git   log  --oneline"), some(&["git log --oneline"]));
        assert_eq!(parts("git --version; echo chained"), some(&["git --version", "echo chained"]));
        assert_eq!(parts("a 1 && b 2 || c 3"), some(&["a 1", "b 2", "c 3"]));
        assert_eq!(parts("a 1 | b 2 |& c 3"), some(&["a 1", "b 2", "c 3"]));
        assert_eq!(parts("a 1 & b 2\nc 3"), some(&["a 1", "b 2", "c 3"]));
        assert_eq!(parts("! a 1"), some(&["a 1"]));
        // A bare program also matches `a *`.
        assert_eq!(parts("a"), some(&["a", "a "]));
        // The assignment stays in one spelling, so `git *` does not cover it.
        assert_eq!(parts("FOO=1 git status"), some(&["FOO=1 git status", "git status"]));
        // Quotes are removed: the program receives `a; b`.
        assert_eq!(parts("git commit -m \"a; b\""), some(&["git commit -m a; b"]));
        assert_eq!(parts("git status # ; rm -rf /"), some(&["git status"]));
        assert_eq!(parts("git log 2>&1 >/dev/null"), some(&["git log"]));
    }

    #[test]
    fn what_is_not_analysed_is_opaque() {
        for command in [
            "git log $(rm -rf ~)",
            "git log `id`",
            "git log \"$(id)\"",
            "git diff <(cat /etc/passwd)",
            "git log > /etc/motd",
            "git log >> out.txt",
            "git apply < patch",
            "git log &> out",
            "git log <<< text",
            "git log <<EOF\nhi\nEOF\n",
            "(git status)",
            "{ git status; }",
            "if git status; then git log; fi",
            "for x in a; do git log; done",
            "[[ -f x ]]",
            "f() { git log; }",
            "git log >&out",
            "git log $branch",
            "git add *.rs",
            "git fetch {a,b}",
        ] {
            assert!(parts(command).contains(&None), "{command:?} → {:?}", parts(command));
            assert_eq!(judge(command), PermissionAction::Ask, "{command:?}");
        }
        // Unparseable: one opaque part.
        assert_eq!(parts("git log 'unterminated"), vec![None]);
    }

    #[test]
    fn the_readme_rule_allows_git_and_nothing_chained_to_it() {
        assert_eq!(judge("git status"), PermissionAction::Allow);
        assert_eq!(judge("git status && git log -1 | git hash-object --stdin"), PermissionAction::Allow);
        assert_eq!(judge("git --version; echo chained"), PermissionAction::Ask);
        assert_eq!(judge("git log | sh"), PermissionAction::Ask);
        assert_eq!(judge("git status && git push origin main"), PermissionAction::Deny);
        assert_eq!(judge("echo x; git push"), PermissionAction::Deny);
    }

    /// The review's config: `rm *` and `curl *` denied.
    fn deny_rules() -> Vec<PermissionRule> {
        let mut rules = default_rules();
        rules.push(PermissionRule::new("bash", "rm *", PermissionAction::Deny));
        rules.push(PermissionRule::new("bash", "curl *", PermissionAction::Deny));
        rules
    }

    /// The session's loosest rule ("always" on a bash card): a server deny must hold.
    fn allow_all() -> Vec<PermissionRule> {
        vec![PermissionRule::new("bash", "*", PermissionAction::Allow)]
    }

    fn judge_denied(command: &str) -> (PermissionAction, PermissionAction) {
        let subject = command_subject(command);
        (
            evaluate_call(&deny_rules(), &[], "bash", &subject),
            evaluate_call(&deny_rules(), &allow_all(), "bash", &subject),
        )
    }

    /// Issue 35, point 7: spellings and wrappers of a denied program are denied, with
    /// or without a session rule allowing everything.
    #[test]
    fn a_server_deny_holds_however_the_program_is_spelled() {
        use PermissionAction::Deny;
        for command in [
            "rm -rf x",
            "/bin/rm -rf x",
            "/usr/bin/rm x",
            "./rm x",
            "\\rm -rf x",
            "r''m -rf x",
            "r\"\"m x",
            "\"rm\" -rf x",
            "'rm' x",
            "$'rm' x",
            "$'\\x72m' x",
            "$'\\162\\155' x",
            "\\r\\m x",
            "command rm x",
            "command -p rm x",
            "builtin rm x",
            "env rm x",
            "env -i FOO=1 BAR=2 rm x",
            "/usr/bin/env -u HOME -- rm x",
            "exec rm x",
            "exec -a name rm x",
            "nice rm x",
            "nice -n 5 rm x",
            "nice -10 rm x",
            "nohup rm x",
            "setsid -f rm x",
            "timeout 5 rm x",
            "timeout -s KILL -k 1 5 rm x",
            "timeout --signal=KILL 5 rm x",
            "stdbuf -o0 -eL rm x",
            "time rm x",
            "time -p rm x",
            "ionice -c3 rm x",
            "sudo rm x",
            "sudo -u root -E rm x",
            "doas rm x",
            "busybox rm x",
            "FOO=1 rm x",
            "xargs rm",
            "echo x | xargs -0 -n1 rm -f",
            "xargs -I{} rm {}",
            "sh -c 'rm x'",
            "bash -c \"rm x\"",
            "bash -ec 'echo; rm x'",
            "bash --norc -o pipefail -c 'rm x'",
            "sh -c \"sh -c 'rm x'\"",
            "sh -c 'xargs sh -c \"r\\m x\"'",
            "eval rm x",
            "eval 'rm x'",
            "trap 'rm x' EXIT",
            "trap -- 'rm x' EXIT",
            "eval -- 'rm x'",
            "find . -delete",
            "find . -name '*.o' -delete",
            "find . -exec rm {} \\;",
            "find . -execdir /bin/rm {} +",
            "find . -ok rm {} ';'",
            "true && rm x",
            "echo $(rm x)",
            "echo `rm x`",
            "echo \"$(r''m x)\"",
            "(rm x)",
            "{ rm x; }",
            "if true; then rm x; fi",
            "for f in a b; do rm $f; done",
            "while false; do rm x; done",
            "f() { rm x; }",
            "case a in a) rm x;; esac",
            "rm $x",
            "cat <(rm x)",
            "curl http://x",
            "cur''l http://x",
            "\\curl x",
            "/usr/bin/curl x",
            "env curl x",
        ] {
            assert_eq!(judge_denied(command), (Deny, Deny), "{command:?} → {:?}", command_subject(command).parts);
        }
    }

    /// What cannot be resolved before it runs is never allowed while the server denies
    /// something, not even by a session's `*` allow: it asks.
    #[test]
    fn a_program_known_only_when_it_runs_asks_under_a_server_deny() {
        for command in [
            "$x -rf /",
            "x=rm; $x y",
            "${RM:-rm} y",
            "$(echo rm) y",
            "r* y",
            "env -S 'rm y'",
            "env --unknown rm y",
            "sh script.sh",
            "bash < script.sh",
            "echo rm y | sh",
            "source script.sh",
            ". ./script.sh",
            "sh -c \"$cmd\"",
            "eval \"$cmd\"",
            "timeout --nonsense 5 rm y",
        ] {
            let verdicts = judge_denied(command);
            assert!(
                verdicts.0 != PermissionAction::Allow && verdicts.1 != PermissionAction::Allow,
                "{command:?} → {verdicts:?}"
            );
            assert_eq!(verdicts.1, PermissionAction::Ask, "{command:?}");
        }
        // Printing where rm is runs nothing.
        assert_eq!(judge_denied("command -v rm"), (PermissionAction::Ask, PermissionAction::Allow));
    }

    /// Issue 35, point 8: under the README's `git *` allow, git's own work runs, and
    /// git pointed at another program, configuration or repository asks.
    #[test]
    fn git_pointed_at_another_program_asks_under_an_allow() {
        use PermissionAction::{Allow, Ask};
        for command in [
            "git status",
            "git log --oneline -5",
            "git -P log",
            "git --no-pager diff HEAD~1",
            "git config user.name 'A B'",
            "git config --get core.pager",
            "git config --list",
            "git config core.pager",
            "git commit -m 'x'",
            "git fetch origin",
            "git rebase main",
            "git grep -n foo",
            "git --exec-path",
        ] {
            assert_eq!(judge(command), Allow, "{command:?} → {:?}", command_subject(command).parts);
        }
        for command in [
            "git -c alias.x='!touch /tmp/p' x",
            "git -c core.pager='touch /tmp/p' log",
            "git -ccore.pager=x log",
            "git --config-env=core.pager=EVIL log",
            "git --config-env core.pager=EVIL log",
            "git --exec-path=/tmp/bin status",
            "git -C ../other status",
            "git --git-dir=/elsewhere/.git log",
            "git --work-tree=/ status",
            "git --bare log",
            "git --unheard-of log",
            "git config alias.x '!sh -c id'",
            "git config --global core.pager 'touch /tmp/p'",
            "git config --add core.fsmonitor x",
            "git config set core.editor x",
            "git config --file .git/config include.path /tmp/c",
            "git config -e",
            "git config --rename-section foo alias",
            "git difftool",
            "git mergetool",
            "git bisect run make",
            "git submodule foreach 'rm x'",
            "git filter-branch --tree-filter 'touch x' HEAD",
            "git rebase -x 'touch x' main",
            "git rebase --exec='touch x' main",
            "git rebase -i main",
            "git grep -O foo",
            "git grep --open-files-in-pager=vi foo",
            "git fetch --upload-pack='touch x' origin",
            "git clone -u 'touch x' /repo",
            "git clone --config core.fsmonitor=x /repo",
            "git clone -c core.fsmonitor=x /repo",
            "git clone --template=/tmp/t /repo",
            "git init --template /tmp/t",
            "git ls-remote --upload-pack=x origin",
            "git archive --remote=x HEAD",
            "GIT_PAGER='touch x' git log",
            "env GIT_SSH_COMMAND='touch x' git fetch",
            "/tmp/git status",
        ] {
            assert_eq!(judge(command), Ask, "{command:?} → {:?}", command_subject(command).parts);
        }
    }

    /// The same for other programs that run commands: an allow rule for the program is
    /// not an allow for what it runs.
    #[test]
    fn an_allowed_runner_does_not_allow_what_it_runs() {
        use PermissionAction::{Allow, Ask};
        let mut rules = default_rules();
        for pattern in ["find *", "xargs *", "env *", "timeout *", "grep *", "sh -c *"] {
            rules.push(PermissionRule::new("bash", pattern, Allow));
        }
        let judge = |command: &str| evaluate_call(&rules, &[], "bash", &command_subject(command));
        assert_eq!(judge("find . -name '*.rs'"), Allow);
        assert_eq!(judge("find . -name x -exec grep -n foo {} +"), Allow);
        assert_eq!(judge("find . -exec touch {} \\;"), Ask);
        assert_eq!(judge("find . -delete"), Ask);
        assert_eq!(judge("xargs grep foo"), Allow);
        assert_eq!(judge("xargs touch"), Ask);
        assert_eq!(judge("env LC_ALL=C grep foo x"), Ask);
        assert_eq!(judge("timeout 5 grep foo x"), Allow);
        assert_eq!(judge("timeout 5 touch x"), Ask);
        assert_eq!(judge("sh -c 'grep foo x'"), Allow);
        assert_eq!(judge("sh -c 'touch x'"), Ask);
    }

    /// Words that are safe to join (no shell syntax of their own).
    fn word() -> impl Strategy<Value = String> {
        "[a-z0-9._/-]{1,8}"
    }

    fn command() -> impl Strategy<Value = String> {
        prop::collection::vec(word(), 1..4).prop_map(|w| w.join(" "))
    }

    /// One character of a word written one of the ways bash reads back as itself.
    fn spelled(c: char, how: u8) -> String {
        match how {
            0 => c.to_string(),
            1 => format!("\\{c}"),
            2 => format!("'{c}'"),
            3 => format!("\"{c}\""),
            4 => format!("$'{c}'"),
            5 => format!("$'\\x{:02x}'", c as u32),
            6 => format!("$'\\{:03o}'", c as u32),
            7 => format!("{c}''"),
            _ => format!("\"\"{c}"),
        }
    }

    /// Single quotes around any text, for nesting a command line into `sh -c`.
    fn single_quoted(text: &str) -> String {
        format!("'{}'", text.replace('\'', "'\\''"))
    }

    proptest! {
        /// However a git command is chained to a non-git one, the allow rule for git
        /// does not cover the line.
        #[test]
        fn a_chained_command_outside_the_allow_rule_always_asks(
            args in prop::collection::vec(word(), 0..3),
            other in command().prop_filter("not git", |c| !c.starts_with("git ")),
            separator in prop::sample::select(vec![";", "&&", "||", "|", "&", "\n", "|&"]),
            git_first in any::<bool>(),
        ) {
            let git = format!("git {}", args.join(" "));
            let line = if git_first { format!("{git} {separator} {other}") } else { format!("{other} {separator} {git}") };
            let verdict = judge(&line);
            prop_assert!(verdict != PermissionAction::Allow, "{line:?} was allowed");
        }

        /// A substitution hidden in an allowed command always asks.
        #[test]
        fn a_substitution_always_asks(inner in command(), form in 0usize..4) {
            let hidden = match form {
                0 => format!("git log $({inner})"),
                1 => format!("git log `{inner}`"),
                2 => format!("git log \"x$({inner})y\""),
                _ => format!("git diff <({inner})"),
            };
            prop_assert_eq!(judge(&hidden), PermissionAction::Ask, "{}", hidden);
        }

        /// Quoting or escaping a denied program's name, giving it a path, or putting
        /// a wrapper in front, never makes a server deny anything but a deny, even
        /// under a session rule that allows everything.
        #[test]
        fn a_denied_word_stays_denied_however_it_is_quoted(
            program in prop::sample::select(vec!["rm", "curl"]),
            hows in prop::collection::vec(0u8..9, 4),
            path in prop::sample::select(vec!["", "/bin/", "/usr/bin/", "./"]),
            wrapper in prop::sample::select(vec![
                "", "command ", "env ", "env A=1 ", "exec ", "nice -n 3 ", "nohup ", "timeout 9 ", "stdbuf -o0 ",
                "sudo ", "time ", "builtin ", "setsid ", "eval ",
            ]),
            args in prop::collection::vec(word(), 0..3),
            nest in 0usize..3,
        ) {
            let name: String = program.chars().zip(hows.iter().cycle()).map(|(c, how)| spelled(c, *how)).collect();
            let mut line = format!("{wrapper}{path}{name} {}", args.join(" "));
            for level in 0..nest {
                line = if level % 2 == 0 { format!("sh -c {}", single_quoted(&line)) } else { format!("bash -c {}", single_quoted(&line)) };
            }
            let subject = command_subject(&line);
            prop_assert_eq!(evaluate_call(&deny_rules(), &[], "bash", &subject), PermissionAction::Deny, "{} → {:?}", line, subject.parts);
            prop_assert_eq!(evaluate_call(&deny_rules(), &allow_all(), "bash", &subject), PermissionAction::Deny, "{}", line);
        }

        /// The analysis never panics, whatever the input.
        #[test]
        fn any_line_is_judged(line in ".{0,200}") {
            let subject = command_subject(&line);
            prop_assert!(!subject.parts.is_empty());
        }
    }
}
