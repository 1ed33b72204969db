//! What a `bash` command line is made of, for permission rules: the list of simple
//! commands it runs, each as the text a rule's pattern is matched against.
//!
//! An allow rule such as `bash "git *"` was written for git commands; matched against
//! the whole line, it also let `git --version; curl … | sh` through. So the line is
//! parsed (with brush-parser, a maintained bash parser) and an allow rule must cover
//! every simple command of every list, pipeline and `&&`/`||` chain on its own.
//!
//! Whatever this module does not analyse is an opaque part (`None`), which only a
//! rule with the pattern `*` covers, so it asks under narrower allow rules: a command
//! or process substitution (`$(…)`, backticks, `<(…)`) anywhere in a word, a
//! redirection to or from a file (except the harmless `2>&1`-style duplications and
//! `/dev/null`), here-documents and here-strings, compound commands (subshells, brace
//! groups, `if`, loops, `case`, `[[ … ]]`, function definitions), and a line the
//! parser refuses. Erring towards asking is the point: a wrong guess here runs a
//! command nobody approved.

use brush_parser::ast::{
    Command, CommandPrefixOrSuffixItem, CompoundList, IoFileRedirectKind, IoFileRedirectTarget, IoRedirect, Pipeline,
    SimpleCommand, Word,
};
use spool_protocol::CallSubject;

/// The subject permission rules judge a `bash` call on: the whole line, and each simple
/// command (words joined by one space) or `None` for a part that is not analysed.
pub fn command_subject(command: &str) -> CallSubject {
    CallSubject { whole: Some(command.to_owned()), parts: command_parts(command) }
}

fn command_parts(command: &str) -> Vec<Option<String>> {
    let options = brush_parser::ParserOptions::default();
    let mut parser = brush_parser::Parser::new(std::io::Cursor::new(command.as_bytes()), &options);
    let program = match parser.parse_program() {
        Ok(program) => program,
        Err(_) => return vec![None],
    };
    let mut parts = Vec::new();
    for list in &program.complete_commands {
        compound_list(list, &mut parts);
    }
    if parts.is_empty() {
        // Nothing but comments or blanks: judged as the line itself.
        parts.push(Some(command.trim().to_owned()));
    }
    parts
}

fn compound_list(list: &CompoundList, parts: &mut Vec<Option<String>>) {
    // `;`, `&` and newlines separate items; `&&` and `||` chain pipelines. Each runs
    // (or may run), so each must be covered.
    for item in &list.0 {
        pipeline(&item.0.first, parts);
        for next in &item.0.additional {
            let (brush_parser::ast::AndOr::And(p) | brush_parser::ast::AndOr::Or(p)) = next;
            pipeline(p, parts);
        }
    }
}

fn pipeline(pipeline: &Pipeline, parts: &mut Vec<Option<String>>) {
    for command in &pipeline.seq {
        parts.push(match command {
            Command::Simple(simple) => simple_command(simple),
            // Subshells, groups, conditionals, loops, tests and functions: not analysed.
            Command::Compound(..) | Command::Function(_) | Command::ExtendedTest(..) => None,
        });
    }
}

/// The simple command's words joined by one space, or `None` when it holds anything
/// that could run or touch more than its words say.
fn simple_command(command: &SimpleCommand) -> Option<String> {
    let prefix = command.prefix.iter().flat_map(|p| p.0.iter());
    let suffix = command.suffix.iter().flat_map(|s| s.0.iter());
    let mut words: Vec<&str> = Vec::new();
    for item in prefix.clone() {
        // `NAME=value cmd`: the assignment is kept in the text, so `git *` does not
        // match `GIT_SSH_COMMAND=… git fetch`.
        item_words(item, &mut words)?;
    }
    if let Some(name) = &command.word_or_name {
        words.push(plain_word(name)?);
    }
    for item in suffix {
        item_words(item, &mut words)?;
    }
    Some(words.join(" "))
}

fn item_words<'a>(item: &'a CommandPrefixOrSuffixItem, words: &mut Vec<&'a str>) -> Option<()> {
    match item {
        CommandPrefixOrSuffixItem::Word(word) => words.push(plain_word(word)?),
        CommandPrefixOrSuffixItem::AssignmentWord(_, word) => words.push(plain_word(word)?),
        CommandPrefixOrSuffixItem::IoRedirect(redirect) => harmless_redirect(redirect).then_some(())?,
        CommandPrefixOrSuffixItem::ProcessSubstitution(..) => return None,
    }
    Some(())
}

/// The word's raw text, unless it holds a command or process substitution. Checked on
/// the raw text, quotes included: `'$(x)'` is literal to bash but asks here, which is
/// the safe side of the mistake.
fn plain_word(word: &Word) -> Option<&str> {
    let text = word.value.as_str();
    let substitutes = ["$(", "`", "<(", ">("].iter().any(|s| text.contains(s));
    (!substitutes).then_some(text)
}

/// Redirections that neither read nor write a file: duplicating a descriptor (`2>&1`,
/// `>&2`, `<&0`, `>&-`) and writing to `/dev/null`.
fn harmless_redirect(redirect: &IoRedirect) -> bool {
    let is_fd = |w: &Word| w.value == "-" || (!w.value.is_empty() && w.value.bytes().all(|b| b.is_ascii_digit()));
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
        assert_eq!(parts("a && b || c"), some(&["a", "b", "c"]));
        assert_eq!(parts("a | b |& c"), some(&["a", "b", "c"]));
        assert_eq!(parts("a & b\nc"), some(&["a", "b", "c"]));
        assert_eq!(parts("! a"), some(&["a"]));
        assert_eq!(parts("FOO=1 git status"), some(&["FOO=1 git status"]));
        assert_eq!(parts("git commit -m \"a; b\""), some(&["git commit -m \"a; b\""]));
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

    /// Words that are safe to join (no shell syntax of their own).
    fn word() -> impl Strategy<Value = String> {
        "[a-z0-9._/-]{1,8}"
    }

    fn command() -> impl Strategy<Value = String> {
        prop::collection::vec(word(), 1..4).prop_map(|w| w.join(" "))
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

        /// The analysis never panics, whatever the input.
        #[test]
        fn any_line_is_judged(line in ".{0,200}") {
            let subject = command_subject(&line);
            prop_assert!(!subject.parts.is_empty());
        }
    }
}
