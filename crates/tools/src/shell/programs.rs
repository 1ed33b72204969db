//! Programs that run other programs, judged as what they run.
//!
//! A deny rule for `rm *` means "never run rm", however the line gets there:
//! `/bin/rm`, `command rm`, `env X=1 rm`, `timeout 5 rm`, `xargs rm`, `sh -c 'rm …'`,
//! `find … -exec rm {} \;` and `find … -delete`. So each simple command is judged
//! under several spellings (see [`command`]), and a command that runs another adds
//! that one as a part of its own, recursively. A wrapper whose options this module
//! does not know, or whose inner command depends on an expansion, is a part that
//! cannot be judged (`None`), which asks under any narrower rule.
//!
//! Only the programs named here are looked into. A program that runs code it reads
//! from a file or from its arguments in a language of its own (`make`, `python -c`,
//! `perl -e`, `awk`'s `system()`, `npm run`) is judged as itself: a deny rule on
//! `rm` does not see the `os.remove` inside a Python one-liner, and an allow rule
//! for such a program allows what it runs.

use super::word::Word;
use super::{MAX_DEPTH, Parts};

/// The options a wrapper takes before the command it runs.
struct Options {
    /// Options without a value (`-p`, `--foreground`).
    flags: &'static [&'static str],
    /// Options with a value, attached (`-n5`, `--adjustment=5`) or as the next word.
    valued: &'static [&'static str],
    /// Short options whose value, if any, is attached only (`xargs -i`, `-e`, `-l`).
    attached: &'static [&'static str],
    /// `-N` with a number is an option (`nice -10`).
    numbers: bool,
    /// `NAME=value` words after the options set the environment (`env`, `sudo`).
    assignments: bool,
    /// Words after the options that are not the command (`timeout`'s duration).
    positional: usize,
}

const NONE: Options =
    Options { flags: &[], valued: &[], attached: &[], numbers: false, assignments: false, positional: 0 };

/// The wrappers: programs whose operands are a command they run as it is.
fn wrapper(name: &str) -> Option<Options> {
    Some(match name {
        "builtin" | "nohup" | "busybox" => NONE,
        "command" => Options { flags: &["-p"], ..NONE },
        "exec" => Options { flags: &["-c", "-l"], valued: &["-a"], ..NONE },
        "env" => Options {
            flags: &[
                "-",
                "-i",
                "--ignore-environment",
                "-0",
                "--null",
                "-v",
                "--debug",
                "--list-signal-handling",
                "--block-signal",
                "--default-signal",
                "--ignore-signal",
            ],
            // `-S`/`--split-string` is left out on purpose: its string becomes several
            // words by env's own rules, so such a line cannot be judged.
            valued: &["-u", "--unset", "-C", "--chdir"],
            assignments: true,
            ..NONE
        },
        "nice" => Options { valued: &["-n", "--adjustment"], numbers: true, ..NONE },
        "setsid" => Options { flags: &["-c", "--ctty", "-f", "--fork", "-w", "--wait"], ..NONE },
        "timeout" => Options {
            flags: &["--preserve-status", "--foreground", "-v", "--verbose"],
            valued: &["-s", "--signal", "-k", "--kill-after"],
            positional: 1,
            ..NONE
        },
        "stdbuf" => Options { valued: &["-i", "-o", "-e", "--input", "--output", "--error"], ..NONE },
        "time" => Options {
            flags: &["-p", "--portability", "-a", "--append", "-v", "--verbose", "-q", "--quiet"],
            valued: &["-f", "--format", "-o", "--output"],
            ..NONE
        },
        "ionice" => Options {
            flags: &["-t", "--ignore"],
            valued: &["-c", "--class", "-n", "--classdata", "-p", "--pid", "-P", "--pgid", "-u", "--uid"],
            ..NONE
        },
        "xargs" => Options {
            flags: &[
                "-0",
                "--null",
                "-o",
                "--open-tty",
                "-p",
                "--interactive",
                "-r",
                "--no-run-if-empty",
                "-t",
                "--verbose",
                "-x",
                "--exit",
                "--show-limits",
                "--eof",
                "--replace",
                "--max-lines",
            ],
            valued: &[
                "-a",
                "--arg-file",
                "-d",
                "--delimiter",
                "-E",
                "-I",
                "-L",
                "-n",
                "--max-args",
                "-P",
                "--max-procs",
                "-s",
                "--max-chars",
                "--process-slot-var",
            ],
            attached: &["-e", "-i", "-l"],
            ..NONE
        },
        "sudo" => Options {
            flags: &[
                "-A",
                "--askpass",
                "-b",
                "--background",
                "-E",
                "--preserve-env",
                "-H",
                "--set-home",
                "-i",
                "--login",
                "-K",
                "--remove-timestamp",
                "-k",
                "--reset-timestamp",
                "-n",
                "--non-interactive",
                "-P",
                "--preserve-groups",
                "-S",
                "--stdin",
                "-s",
                "--shell",
            ],
            valued: &[
                "-u",
                "--user",
                "-g",
                "--group",
                "-C",
                "--close-from",
                "-D",
                "--chdir",
                "-h",
                "--host",
                "-p",
                "--prompt",
                "-r",
                "--role",
                "-t",
                "--type",
                "-T",
                "--command-timeout",
                "-U",
                "--other-user",
            ],
            assignments: true,
            ..NONE
        },
        "doas" => Options { flags: &["-n", "-s"], valued: &["-u", "-C"], ..NONE },
        _ => return None,
    })
}

/// Shells, whose `-c` operand is a command line and whose other operand is a script.
const SHELLS: &[&str] = &["sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "yash", "posh", "rbash"];

/// Judges one simple command: `words` as parsed, the first `assignments` of them
/// `NAME=value` words before the program.
///
/// Spellings added as parts (the strictest decides, so a deny needs to match one and
/// an allow all of them): the words as written with their quotes removed; without
/// the leading assignments (`X=1 rm` is `rm`); with the program's path reduced to its
/// name (`/bin/rm` is `rm`); and a program without arguments with a space after its
/// name, so the pattern `rm *` covers a bare `rm`. A word whose value is not certain
/// adds a part that cannot be judged.
pub(super) fn command(parts: &mut Parts, words: &[Word], assignments: usize, depth: usize) {
    if words.iter().any(|w| w.value.is_none()) {
        parts.opaque();
    }
    parts.form(join(words));
    let run = &words[assignments.min(words.len())..];
    let Some((program, args)) = run.split_first() else { return };
    if assignments > 0 {
        parts.form(join(run));
    }
    let Some(path) = program.value.as_deref() else { return };
    let name = path.rsplit('/').next().unwrap_or(path);
    if name != path {
        let mut named = vec![Word::literal(name)];
        named.extend_from_slice(args);
        parts.form(join(&named));
    }
    if args.is_empty() {
        // `rm *` is about the program: bare `rm` is `rm` too (it matches `rm ` only).
        parts.form(format!("{name} "));
    }
    if depth >= MAX_DEPTH {
        parts.opaque();
        return;
    }
    runs(parts, name, run, depth + 1);
}

/// The commands `run` (a program and its arguments) runs besides itself, added as
/// parts.
fn runs(parts: &mut Parts, name: &str, run: &[Word], depth: usize) {
    let args = &run[1..];
    let arg = |i: usize| args.get(i).and_then(|w| w.value.as_deref());
    match name {
        // Only says what `rm` would be; runs nothing.
        "command" if matches!(arg(0), Some("-v" | "-V")) => {}
        "find" => find(parts, args, depth),
        "git" => {
            if super::git::runs_other_programs(args) {
                parts.opaque();
            }
        }
        "eval" => {
            let args = if arg(0) == Some("--") { &args[1..] } else { args };
            match args.iter().map(|w| w.value.clone()).collect::<Option<Vec<_>>>() {
                Some(words) => parts.line(&words.join(" "), depth),
                None => parts.opaque(),
            }
        }
        // `trap 'cmd' SIGNAL` runs cmd later in the same shell; `-p`, `-l` and `-` (reset)
        // run nothing.
        "trap" => {
            let at = usize::from(arg(0) == Some("--"));
            match args.get(at).map(|w| w.value.as_deref()) {
                Some(Some(action)) if at == 1 || !action.starts_with('-') => parts.line(action, depth),
                Some(Some(_)) | None => {}
                Some(None) => parts.opaque(),
            }
        }
        // They run the commands of a file this line does not show.
        "source" | "." => parts.opaque(),
        _ if SHELLS.contains(&name) => shell(parts, args, depth),
        _ => {
            let Some(options) = wrapper(name) else { return };
            let Some(start) = skip_options(run, &options) else {
                parts.opaque();
                return;
            };
            let mut inner = run.get(start..).unwrap_or_default().to_vec();
            let mut assignments = 0;
            if options.assignments {
                assignments = inner.iter().take_while(|w| w.value.as_deref().is_some_and(is_assignment)).count();
            }
            let positional = options.positional.min(inner.len().saturating_sub(assignments));
            inner.drain(assignments..assignments + positional);
            if name == "xargs" {
                if inner.len() == assignments {
                    inner.push(Word::literal("echo"));
                }
                // The words it reads are appended: `xargs rm` runs `rm {}`.
                inner.push(Word::literal("{}"));
            }
            if inner.len() > assignments {
                command(parts, &inner, assignments, depth);
            }
        }
    }
}

/// `find`'s actions: each `-exec`/`-execdir`/`-ok`/`-okdir … ;` (or `+`) is a command,
/// and `-delete` is `rm`.
fn find(parts: &mut Parts, args: &[Word], depth: usize) {
    let mut i = 0;
    while i < args.len() {
        match args[i].value.as_deref() {
            Some("-exec" | "-execdir" | "-ok" | "-okdir") => {
                let start = i + 1;
                let mut end = start;
                while end < args.len() && !matches!(args[end].value.as_deref(), Some(";" | "+")) {
                    end += 1;
                }
                if end > start {
                    command(parts, &args[start..end], 0, depth);
                }
                i = end + 1;
            }
            Some("-delete") => {
                command(parts, &[Word::literal("rm"), Word::literal("{}")], 0, depth);
                i += 1;
            }
            _ => i += 1,
        }
    }
}

/// A shell's operands: with `-c`, a command line judged like the outer one; without,
/// a script file or standard input, which cannot be judged.
fn shell(parts: &mut Parts, args: &[Word], depth: usize) {
    let mut command_string = false;
    let mut i = 0;
    while i < args.len() {
        let Some(arg) = args[i].value.as_deref() else {
            parts.opaque();
            return;
        };
        if arg == "--" || arg == "-" {
            i += 1;
            break;
        }
        if matches!(arg, "-o" | "+o" | "-O" | "+O" | "--rcfile" | "--init-file") {
            i += 2;
            continue;
        }
        if arg.starts_with("--") {
            i += 1;
            continue;
        }
        if let Some(cluster) = arg.strip_prefix('-').or_else(|| arg.strip_prefix('+')) {
            command_string |= arg.starts_with('-') && cluster.contains('c');
            if cluster.contains('s') {
                // Commands from standard input.
                parts.opaque();
                return;
            }
            i += 1;
            continue;
        }
        break;
    }
    match args.get(i) {
        Some(line) if command_string => match &line.value {
            Some(line) => parts.line(line, depth),
            None => parts.opaque(),
        },
        // A script, or standard input.
        _ => parts.opaque(),
    }
}

/// The index in `run` (program first) of the first word after the wrapper's options,
/// or `None` where an option is unknown or a word's value is not certain.
fn skip_options(run: &[Word], options: &Options) -> Option<usize> {
    let mut i = 1;
    while i < run.len() {
        let word = run[i].value.as_deref()?;
        if word == "--" {
            return Some(i + 1);
        }
        if word == "-" && options.flags.contains(&"-") {
            i += 1;
            continue;
        }
        if !word.starts_with('-') || word == "-" {
            return Some(i);
        }
        if word.starts_with("--") {
            let name = word.split('=').next().unwrap_or(word);
            let known = options.flags.contains(&name) || options.valued.contains(&name);
            if !known {
                return None;
            }
            i += if name == word && options.valued.contains(&name) { 2 } else { 1 };
            continue;
        }
        let cluster = &word[1..];
        if options.numbers && cluster.bytes().all(|b| b.is_ascii_digit()) {
            i += 1;
            continue;
        }
        let mut takes_next = false;
        for (at, c) in cluster.char_indices() {
            let option = format!("-{c}");
            if options.valued.contains(&option.as_str()) {
                takes_next = at + c.len_utf8() == cluster.len();
                break;
            }
            if options.attached.contains(&option.as_str()) {
                break;
            }
            if !options.flags.contains(&option.as_str()) {
                return None;
            }
        }
        i += if takes_next { 2 } else { 1 };
    }
    Some(i.min(run.len()))
}

fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// Words joined by one space, each by its value where certain.
pub(super) fn join(words: &[Word]) -> String {
    words.iter().map(Word::text).collect::<Vec<_>>().join(" ")
}
