//! Approvals (human-in-the-loop interrupts) and permission rules, as the API returns
//! them and the store keeps them.
//!
//! A risky tool call is checked against [`PermissionRule`]s; `ask` creates an
//! [`Approval`] that stops the run until a person decides. The decision is applied once:
//! the store's conditional update from `pending` picks the single winner.

use crate::ids::*;
use crate::time::Millis;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// What a rule does with a matching tool call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum PermissionAction {
    Allow,
    Ask,
    Deny,
}

/// One permission rule. `tool` and `pattern` take the wildcards `*` (any run of
/// characters, `/` included) and `?` (one character), and `\*`, `\?`, `\\` for
/// those characters themselves; `pattern` matches the tool's main argument (a path or a
/// command) and defaults to `*`. A pattern ending in ` *` also matches its prefix alone
/// (`git status *` matches `git status`). A pattern without wildcards names one whole
/// argument: for a command line, that exact line, all of it. Among matching rules the
/// last one wins.
///
/// An `ask` rule may also say how long its approvals wait and what then happens
/// (see [`Wait`] and [`OnTimeout`]); both are optional, so rules stored before them
/// stay valid.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PermissionRule {
    pub tool: String,
    #[serde(default = "any", skip_serializing_if = "is_any")]
    pub pattern: String,
    pub action: PermissionAction,
    /// How long an approval this rule asks for waits: `"10m"`, `"90s"`, `"2h"`,
    /// `"1d"`, a whole number of seconds, or `"never"`. Default: the server's approval
    /// TTL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, example = "10m")]
    pub timeout: Option<Wait>,
    /// What happens when nobody answered in time. Default: the run is cancelled.
    #[serde(default, rename = "onTimeout", alias = "on_timeout", skip_serializing_if = "Option::is_none")]
    pub on_timeout: Option<OnTimeout>,
}

/// What happens to an approval nobody answered within its rule's `timeout`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum OnTimeout {
    /// The call is rejected and the model is told why; the run goes on.
    Deny,
    /// The call is approved once (the rules are checked again before it runs).
    Allow,
    /// It keeps waiting, until the server's approval TTL (or for ever).
    Wait,
}

impl OnTimeout {
    pub fn as_str(self) -> &'static str {
        match self {
            OnTimeout::Deny => "deny",
            OnTimeout::Allow => "allow",
            OnTimeout::Wait => "wait",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "deny" => OnTimeout::Deny,
            "allow" => OnTimeout::Allow,
            "wait" => OnTimeout::Wait,
            _ => return None,
        })
    }
}

/// An approval's `expiresAt` when it never expires: the largest instant a JavaScript
/// `Date` holds (8.64e15 ms), so every client still parses it. Nothing arms a timer
/// for it, also not after a restart.
pub const NEVER_EXPIRES: Millis = 8_640_000_000_000_000;

/// The longest finite [`Wait`]: a year (longer is written `"never"`).
pub const LONGEST_WAIT_SECS: u64 = 366 * 24 * 3600;

/// How long an approval waits: some seconds, or for ever. Written `"10m"`, `"90s"`,
/// `"2h"`, `"1d"`, `"600"` or `600` (seconds), or `"never"`; written back in the
/// largest whole unit (`600` → `"10m"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    Secs(u64),
    Never,
}

impl Wait {
    /// The wait as milliseconds after `created`: [`NEVER_EXPIRES`] for `never`.
    pub fn expiry(self, created: Millis) -> Millis {
        match self {
            Wait::Never => NEVER_EXPIRES,
            Wait::Secs(s) => {
                created.saturating_add(i64::try_from(s.saturating_mul(1000)).unwrap_or(i64::MAX)).min(NEVER_EXPIRES)
            }
        }
    }

    /// Reads `"10m"`, `"90s"`, `"2h"`, `"1d"`, `"600"` or `"never"`; says what is
    /// wrong otherwise.
    pub fn parse(text: &str) -> Result<Self, String> {
        let t = text.trim();
        if t.eq_ignore_ascii_case("never") {
            return Ok(Wait::Never);
        }
        let digits = t.bytes().take_while(u8::is_ascii_digit).count();
        let (number, unit) = t.split_at(digits);
        let scale = match unit.trim() {
            "" | "s" => 1,
            "m" => 60,
            "h" => 3600,
            "d" => 86_400,
            _ => 0,
        };
        let secs = number.parse::<u64>().ok().filter(|_| scale != 0).and_then(|n| n.checked_mul(scale));
        match secs {
            None => Err(format!(
                "invalid timeout {text:?}: write a whole number with s, m, h or d (\"90s\", \"10m\", \"2h\", \"1d\"), seconds, or \"never\""
            )),
            Some(secs) => Self::from_secs(secs),
        }
    }

    /// A wait of `secs` seconds: more than none, at most [`LONGEST_WAIT_SECS`].
    pub fn from_secs(secs: u64) -> Result<Self, String> {
        if secs == 0 {
            return Err("invalid timeout 0: an approval must wait a while; write \"never\" to wait for ever".into());
        }
        if secs > LONGEST_WAIT_SECS {
            return Err(format!("invalid timeout of {secs} seconds: at most a year; write \"never\" to wait for ever"));
        }
        Ok(Wait::Secs(secs))
    }
}

impl std::fmt::Display for Wait {
    /// In the largest unit that divides it: `"10m"`, `"90s"`, `"never"`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Wait::Never => f.write_str("never"),
            Wait::Secs(s) if s % 86_400 == 0 => write!(f, "{}d", s / 86_400),
            Wait::Secs(s) if s % 3600 == 0 => write!(f, "{}h", s / 3600),
            Wait::Secs(s) if s % 60 == 0 => write!(f, "{}m", s / 60),
            Wait::Secs(s) => write!(f, "{s}s"),
        }
    }
}

impl Serialize for Wait {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Wait {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Wait;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a timeout: \"10m\", \"90s\", \"2h\", \"1d\", a number of seconds, or \"never\"")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Wait, E> {
                Wait::parse(v).map_err(E::custom)
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Wait, E> {
                Wait::from_secs(v).map_err(E::custom)
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Wait, E> {
                match u64::try_from(v) {
                    Ok(v) => self.visit_u64(v),
                    Err(_) => Err(E::custom(format!("invalid timeout {v}: a wait cannot be negative"))),
                }
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// What the rule behind an `ask` says about the wait: how long (`None`: the server's
/// approval TTL) and what then (`None`: the run is cancelled, as without a rule).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RuleTimeout {
    pub timeout: Option<Wait>,
    pub on_timeout: Option<OnTimeout>,
}

impl RuleTimeout {
    fn of(rule: &PermissionRule) -> Self {
        Self { timeout: rule.timeout, on_timeout: rule.on_timeout }
    }
}

/// A call's permission with the wait of the rule behind it, when it asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub action: PermissionAction,
    /// Meaningful for `ask` only: the timeout of the rule that made the call ask.
    pub wait: RuleTimeout,
}

fn any() -> String {
    "*".into()
}

fn is_any(p: &str) -> bool {
    p == "*"
}

impl PermissionRule {
    pub fn new(tool: &str, pattern: &str, action: PermissionAction) -> Self {
        Self { tool: tool.into(), pattern: pattern.into(), action, timeout: None, on_timeout: None }
    }

    /// This rule with a timeout and what happens then.
    pub fn with_timeout(mut self, timeout: Option<Wait>, on_timeout: Option<OnTimeout>) -> Self {
        self.timeout = timeout;
        self.on_timeout = on_timeout;
        self
    }
}

/// The action for a call of `tool` whose main argument is `argument`: the last matching
/// rule's, or `ask` when none matches (an unknown risk is a person's call).
pub fn evaluate(rules: &[PermissionRule], tool: &str, argument: Option<&str>) -> PermissionAction {
    last_match(rules, tool, argument, argument).unwrap_or(PermissionAction::Ask)
}

/// The last rule matching a call of `tool` on `argument` (one part of the call whose
/// whole main argument is `whole`), if any. An argument of `None` (missing, or a part
/// of a command line that cannot be analysed) is matched only by rules whose pattern is
/// `*`, or by a pattern without wildcards that is the whole argument: such a rule (an
/// "always" on exactly this command) covers every part of that one line.
fn last_match(
    rules: &[PermissionRule],
    tool: &str,
    argument: Option<&str>,
    whole: Option<&str>,
) -> Option<PermissionAction> {
    last_rule(rules, tool, argument, whole).map(|r| r.action)
}

/// The rule [`last_match`] takes its action from.
fn last_rule<'r>(
    rules: &'r [PermissionRule],
    tool: &str,
    argument: Option<&str>,
    whole: Option<&str>,
) -> Option<&'r PermissionRule> {
    rules.iter().rev().find(|r| {
        wildcard_match(&r.tool, tool)
            && (r.pattern == "*"
                || argument.is_some_and(|a| pattern_match(&r.pattern, a))
                || (is_literal(&r.pattern) && whole.is_some_and(|w| wildcard_match(&r.pattern, w))))
    })
}

/// A rule's pattern against one argument: [`wildcard_match`], and a pattern ending in
/// ` *` also matches the prefix alone, so `git status *` covers a bare `git status`
/// (the command a person approved with it).
pub fn pattern_match(pattern: &str, text: &str) -> bool {
    wildcard_match(pattern, text) || pattern.strip_suffix(" *").is_some_and(|prefix| wildcard_match(prefix, text))
}

/// Whether `pattern` has no wildcard: it matches one text only.
pub fn is_literal(pattern: &str) -> bool {
    tokens(pattern).iter().all(|t| matches!(t, Token::Char(_)))
}

/// `text` as a pattern that matches exactly it: `*`, `?` and `\` escaped.
pub fn escape_pattern(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

/// What one tool call is judged on: its whole main argument, and the parts a rule must
/// cover one by one. For most tools the one part is the argument itself; for `bash` it
/// is each simple command of the command line, with `None` for every construct that
/// cannot be analysed (a substitution, a redirection to a file, a subshell…), which only
/// a rule with the pattern `*` covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallSubject {
    pub whole: Option<String>,
    pub parts: Vec<Option<String>>,
}

impl CallSubject {
    /// A call judged on its main argument alone.
    pub fn single(argument: Option<String>) -> Self {
        Self { parts: vec![argument.clone()], whole: argument }
    }
}

/// The action for a call under the server's rules and a session's own rules.
///
/// - **A server deny is final.** Where the server's rules end in `deny`, for the whole
///   argument or any one part, the call is denied whatever the session says.
/// - **Within what the server does not deny, the session has the last word.** A session
///   rule (or an "always" decision, which adds one) may turn a server `allow` into `ask`
///   or `deny`, and a server `ask` into `allow` or `deny`. Loosening `ask` stays
///   possible on purpose: `ask` means "the session's owner decides", and a session rule
///   is that person deciding ahead of time, exactly like clicking "always" on the card.
///   An operator who wants something never to run writes `deny`, which nothing lifts.
/// - **Every part must be allowed.** Each part gets its own action (session over
///   server as above); the call's action is the strictest of them, so an allow rule
///   for `git *` does not carry `git status; curl … | sh` along with it.
/// - A deny matching the whole argument denies too (a pattern such as `*rm -rf*`
///   written against the full command line keeps working).
/// - **A part that cannot be judged never turns a server deny into an allow.** An
///   opaque part (`None`: `$x`, `$(…)`, a script…) might be what the server denies, so
///   while the server denies anything for the tool it asks at least, whatever a `*`
///   allow rule (the server's or the session's) says.
pub fn evaluate_call(
    server: &[PermissionRule],
    session: &[PermissionRule],
    tool: &str,
    subject: &CallSubject,
) -> PermissionAction {
    evaluate_call_verdict(server, session, tool, subject).action
}

/// [`evaluate_call`] with the wait of the rule behind an `ask` ([`Verdict::wait`]).
///
/// Each part that asks was made to by one rule (the session's last match, else the
/// server's). A session rule's timeout comes before a server rule's: the session's
/// owner set it for this very session. When parts of one command line ask under
/// different rules of the same side, the least forgiving outcome holds (the run
/// cancelled, then deny, then wait, then allow), so an `allow` on timeout never runs
/// a part whose own rule would not have let it through; the shortest timeout among
/// those rules applies. An `ask` no rule said (an opaque part under a server deny)
/// carries no timeout.
pub fn evaluate_call_verdict(
    server: &[PermissionRule],
    session: &[PermissionRule],
    tool: &str,
    subject: &CallSubject,
) -> Verdict {
    let whole = subject.whole.as_deref();
    // The action for one part, with the asking rule and whether it is the session's.
    let one = |argument: Option<&str>| -> (PermissionAction, Option<(&PermissionRule, bool)>) {
        let by_server = last_rule(server, tool, argument, whole);
        let server_action = by_server.map_or(PermissionAction::Ask, |r| r.action);
        if server_action == PermissionAction::Deny {
            return (PermissionAction::Deny, None);
        }
        let (action, rule) = match last_rule(session, tool, argument, whole) {
            Some(r) => (r.action, Some((r, true))),
            None => (server_action, by_server.map(|r| (r, false))),
        };
        if argument.is_none() && action == PermissionAction::Allow && server_denies_some(server, tool) {
            return (PermissionAction::Ask, None);
        }
        (action, rule)
    };
    let deny = Verdict { action: PermissionAction::Deny, wait: RuleTimeout::default() };
    if one(whole).0 == PermissionAction::Deny {
        return deny;
    }
    let judged: Vec<_> = if subject.parts.is_empty() {
        vec![one(whole)]
    } else {
        subject.parts.iter().map(|part| one(part.as_deref())).collect()
    };
    let action = judged.iter().map(|(a, _)| *a).max_by_key(|a| strictness(*a)).unwrap_or(PermissionAction::Ask);
    if action != PermissionAction::Ask {
        return Verdict { action, wait: RuleTimeout::default() };
    }
    // The rules that made parts ask; those without a rule (no timeout) count too.
    let asking: Vec<Option<(&PermissionRule, bool)>> =
        judged.into_iter().filter(|(a, _)| *a == PermissionAction::Ask).map(|(_, r)| r).collect();
    let by_session: Vec<&PermissionRule> = asking.iter().flatten().filter(|(_, s)| *s).map(|(r, _)| *r).collect();
    let candidates: Vec<RuleTimeout> = if by_session.is_empty() {
        asking.iter().map(|r| r.map_or_else(RuleTimeout::default, |(r, _)| RuleTimeout::of(r))).collect()
    } else {
        by_session.into_iter().map(RuleTimeout::of).collect()
    };
    Verdict { action, wait: least_forgiving(&candidates) }
}

/// Of several rules' timeouts, the outcome that forgives least and the shortest wait.
fn least_forgiving(candidates: &[RuleTimeout]) -> RuleTimeout {
    let forgiveness = |t: Option<OnTimeout>| match t {
        None => 0,
        Some(OnTimeout::Deny) => 1,
        Some(OnTimeout::Wait) => 2,
        Some(OnTimeout::Allow) => 3,
    };
    let on_timeout = candidates.iter().map(|c| c.on_timeout).min_by_key(|t| forgiveness(*t)).flatten();
    let length = |w: Option<Wait>| match w {
        Some(Wait::Secs(s)) => (0, s),
        // The server's TTL: unknown here, so after any set length.
        None => (1, 0),
        Some(Wait::Never) => (2, 0),
    };
    let timeout = candidates.iter().map(|c| c.timeout).min_by_key(|w| length(*w)).flatten();
    RuleTimeout { timeout, on_timeout }
}

/// Whether a server rule denies some calls of `tool` (not all: a deny of `*` already
/// denies every part, opaque ones included).
fn server_denies_some(server: &[PermissionRule], tool: &str) -> bool {
    server.iter().any(|r| r.action == PermissionAction::Deny && r.pattern != "*" && wildcard_match(&r.tool, tool))
}

/// Allow < ask < deny: the order in which actions get stricter.
fn strictness(action: PermissionAction) -> u8 {
    match action {
        PermissionAction::Allow => 0,
        PermissionAction::Ask => 1,
        PermissionAction::Deny => 2,
    }
}

/// One element of a pattern.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Token {
    /// `*`: any run of characters.
    Any,
    /// `?`: exactly one character.
    One,
    /// A character itself (`\*`, `\?` and `\\` are the escaped wildcards and backslash;
    /// a backslash before anything else is itself).
    Char(char),
}

fn tokens(pattern: &str) -> Vec<Token> {
    let mut out = Vec::with_capacity(pattern.len());
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        out.push(match c {
            '*' => Token::Any,
            '?' => Token::One,
            '\\' => match chars.peek() {
                Some(&next @ ('*' | '?' | '\\')) => {
                    chars.next();
                    Token::Char(next)
                }
                _ => Token::Char('\\'),
            },
            c => Token::Char(c),
        });
    }
    out
}

/// `*` matches any run of characters, `?` exactly one; `\*`, `\?` and `\\` match the
/// character itself; everything else literally. Iterative with one backtrack point, so
/// it is linear-ish and never recurses.
pub fn wildcard_match(pattern: &str, text: &str) -> bool {
    let p = tokens(pattern);
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == Token::One || p[pi] == Token::Char(t[ti])) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == Token::Any {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == Token::Any)
}

/// Whether some text matches both patterns (each as [`pattern_match`] reads it): a
/// walk over pairs of positions, one in each pattern, so it is at most the product of
/// their lengths.
pub fn patterns_overlap(a: &str, b: &str) -> bool {
    let forms = |p: &str| {
        let mut forms = vec![tokens(p)];
        if let Some(prefix) = p.strip_suffix(" *") {
            forms.push(tokens(prefix));
        }
        forms
    };
    forms(a).iter().any(|x| forms(b).iter().any(|y| tokens_overlap(x, y)))
}

fn tokens_overlap(a: &[Token], b: &[Token]) -> bool {
    let mut seen = vec![false; (a.len() + 1) * (b.len() + 1)];
    let mut todo = vec![(0usize, 0usize)];
    while let Some((i, j)) = todo.pop() {
        let slot = i * (b.len() + 1) + j;
        if seen[slot] {
            continue;
        }
        seen[slot] = true;
        if i == a.len() && j == b.len() {
            return true;
        }
        let (x, y) = (a.get(i).copied(), b.get(j).copied());
        // A star may match nothing.
        if x == Some(Token::Any) {
            todo.push((i + 1, j));
        }
        if y == Some(Token::Any) {
            todo.push((i, j + 1));
        }
        // Or both take one character that each accepts.
        let (Some(x), Some(y)) = (x, y) else { continue };
        let agree = match (x, y) {
            (Token::Char(c), Token::Char(d)) => c == d,
            _ => true,
        };
        if agree {
            let next = |t: Token, k: usize| if t == Token::Any { k } else { k + 1 };
            todo.push((next(x, i), next(y, j)));
        }
    }
    false
}

/// The rules every server starts from: reading is free, changing asks.
pub fn default_rules() -> Vec<PermissionRule> {
    use PermissionAction::*;
    vec![
        PermissionRule::new("*", "*", Ask),
        PermissionRule::new("list", "*", Allow),
        PermissionRule::new("read", "*", Allow),
        PermissionRule::new("glob", "*", Allow),
        PermissionRule::new("grep", "*", Allow),
        // Keeps the session's todo list and touches nothing else.
        PermissionRule::new("todo_write", "*", Allow),
        PermissionRule::new("write", "*", Ask),
        PermissionRule::new("edit", "*", Ask),
        PermissionRule::new("bash", "*", Ask),
    ]
}

/// One way to answer "always" on an approval of a command-running tool: the rules it
/// adds to the session (`bash`, each pattern, `allow`). The approval's payload offers
/// them as `alwaysOptions`, the exact command first; a decision names the patterns of
/// the one the person chose.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AlwaysOption {
    /// What a person reads: the exact command, or the patterns joined by `, `.
    pub label: String,
    /// Whether this is the exact command (what `always` without patterns allows).
    pub exact: bool,
    /// The patterns, one for each program the command runs (all must allow a later
    /// command); for the exact command, the whole line with its wildcards escaped.
    pub patterns: Vec<String>,
}

/// The options worth offering under the server's rules: the exact command (which the
/// server did not deny, or nobody would be asked) always; a broader one only
/// when none of its patterns is a bare wildcard or could match a command the server
/// denies for `tool` (a server deny is final, so an "always" for all of git beside a
/// `git push` deny would promise what never happens).
pub fn offerable(server: &[PermissionRule], tool: &str, options: Vec<AlwaysOption>) -> Vec<AlwaysOption> {
    let denied: Vec<&str> = server
        .iter()
        .filter(|r| r.action == PermissionAction::Deny && wildcard_match(&r.tool, tool))
        .map(|r| r.pattern.as_str())
        .collect();
    let broad = |p: &str| tokens(p).iter().all(|t| matches!(t, Token::Any | Token::One | Token::Char(' ')));
    options
        .into_iter()
        .filter(|o| o.exact || o.patterns.iter().all(|p| !broad(p) && !denied.iter().any(|d| patterns_overlap(p, d))))
        .collect()
}

/// What kind of answer an approval needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalKind {
    /// Run this tool call or not.
    ConfirmAction,
    /// Pick one of the payload's options.
    SelectOption,
    /// Fill in the fields the payload describes.
    ProvideInput,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalStatus {
    Pending,
    Resolved,
    Expired,
    Cancelled,
    /// Its call's target (the file a `write` or `edit` changes) was changed before the
    /// call ran: a new approval, with a fresh preview, asks for the same call instead.
    Superseded,
}

impl ApprovalStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalStatus::Pending => "pending",
            ApprovalStatus::Resolved => "resolved",
            ApprovalStatus::Expired => "expired",
            ApprovalStatus::Cancelled => "cancelled",
            ApprovalStatus::Superseded => "superseded",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "pending" => ApprovalStatus::Pending,
            "resolved" => ApprovalStatus::Resolved,
            "expired" => ApprovalStatus::Expired,
            "cancelled" => ApprovalStatus::Cancelled,
            "superseded" => ApprovalStatus::Superseded,
            _ => return None,
        })
    }
}

/// A person's answer. On the wire: `"once"`, `"always"`, `"reject"`, or
/// `{"fill": {…}}` (approve with these arguments / this input).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    /// Run this call.
    Once,
    /// Run this call and allow the same tool on this session from now on.
    Always,
    /// Do not run it. Alone, it cancels the run; with a message, the model is told
    /// (with the message) and the run goes on.
    Reject,
    /// Run it with these arguments instead (re-checked against the rules).
    Fill(serde_json::Value),
    /// The result of a client-side tool call ([`Approval::is_client_call`]), which the
    /// client ran itself: `{"output": {"output": …, "isError": false}}`.
    Output(ClientOutput),
}

/// What a client reports its tool call returned.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClientOutput {
    /// A string is given to the model as it is; anything else as compact JSON.
    #[schema(value_type = Object)]
    pub output: serde_json::Value,
    /// The call failed: the model is told so, with `output` as the error.
    #[serde(default)]
    pub is_error: bool,
}

impl Decision {
    pub fn approves(&self) -> bool {
        !matches!(self, Decision::Reject)
    }

    /// A short label for `lastApproval` and logs.
    pub fn label(&self) -> &'static str {
        match self {
            Decision::Once => "once",
            Decision::Always => "always",
            Decision::Reject => "reject",
            Decision::Fill(_) => "fill",
            Decision::Output(_) => "output",
        }
    }
}

/// A pending (or settled) human decision about one tool call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Approval {
    pub id: ApprovalId,
    pub run_id: RunId,
    pub session_id: SessionId,
    pub owner_id: UserId,
    pub tool_call_id: String,
    pub tool: String,
    pub kind: ApprovalKind,
    /// What a person sees: tool, argument summary, what it will change and, for a
    /// `write` or `edit`, a `preview` of the change against the file as it was when
    /// asked. For a command (`bash`), `alwaysOptions`: the [`AlwaysOption`]s an
    /// `always` decision may choose from (the exact command first, never all of the
    /// tool). For a tool that is not Spool's own (an MCP server's), `source`:
    /// `{server, tool, arguments}`, the server, the tool's name there and the
    /// arguments as canonical JSON. Redacted.
    pub payload: serde_json::Value,
    pub status: ApprovalStatus,
    pub decision: Option<Decision>,
    pub message: Option<String>,
    pub actor: Option<UserId>,
    pub created_at: Millis,
    pub expires_at: Millis,
    pub resolved_at: Option<Millis>,
}

impl Approval {
    /// Whether this is a *live ask*: a running tool's question to the person (an MCP
    /// server's elicitation), its payload marked `"live": true`. The run is not parked
    /// while it waits; the call is.
    pub fn is_live_ask(&self) -> bool {
        self.payload.get("live") == Some(&serde_json::Value::Bool(true))
    }

    /// Whether this is a *client call*: a call of a tool the prompt declared and the
    /// client runs (payload marked `"client": true`), answered with
    /// [`Decision::Output`]. The run is parked while it waits.
    pub fn is_client_call(&self) -> bool {
        self.payload.get("client") == Some(&serde_json::Value::Bool(true))
    }

    /// Whether this is a *guardrail's* approval: a run that reached one of its limits
    /// (see [`crate::guardrails`]) asks whether to go on, tool `guardrail`, payload
    /// `{"guardrail": {limit, scope, value, used}}`. `once` raises the limit one step,
    /// `always` lifts it for the run, `reject` stops the run (`guardrail_stopped`).
    pub fn is_guardrail(&self) -> bool {
        self.tool == crate::guardrails::GUARDRAIL_TOOL && self.payload.get("guardrail").is_some_and(|g| g.is_object())
    }
}

/// The outcome of the last resolved approval, as snapshots show it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LastApproval {
    pub id: ApprovalId,
    /// `once`, `always`, `reject`, `fill`, `expired`, `cancelled` or `superseded`.
    pub decision: String,
    pub actor: Option<UserId>,
    pub at: Millis,
    /// How it was decided when not by a person in a client: `push` (a notification's
    /// action), `link` (a decision link) or `timeout` (the rule's `on_timeout`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use PermissionAction::*;

    #[test]
    fn wildcards() {
        assert!(wildcard_match("*", ""));
        assert!(wildcard_match("src/*.rs", "src/a/b.rs"));
        assert!(wildcard_match("?.txt", "a.txt"));
        assert!(!wildcard_match("?.txt", "ab.txt"));
        assert!(wildcard_match("git *", "git status"));
        assert!(!wildcard_match("git *", "rm -rf /"));
        assert!(wildcard_match("a*b*c", "aXXbYYc"));
        assert!(!wildcard_match("a*b*c", "aXXbYY"));
        assert!(wildcard_match("ünï*", "ünïcode"));
    }

    #[test]
    fn last_matching_rule_wins_and_defaults_ask_for_changes() {
        let mut rules = default_rules();
        assert_eq!(evaluate(&rules, "read", Some("a")), Allow);
        assert_eq!(evaluate(&rules, "write", Some("a")), Ask);
        assert_eq!(evaluate(&rules, "mystery", None), Ask);
        rules.push(PermissionRule::new("bash", "git *", Allow));
        rules.push(PermissionRule::new("bash", "git push*", Deny));
        assert_eq!(evaluate(&rules, "bash", Some("git status")), Allow);
        assert_eq!(evaluate(&rules, "bash", Some("git push origin")), Deny);
        assert_eq!(evaluate(&rules, "bash", Some("ls")), Ask);
        assert_eq!(evaluate(&[], "read", None), Ask);
    }

    fn parts(parts: &[&str]) -> CallSubject {
        CallSubject { whole: Some(parts.join("; ")), parts: parts.iter().map(|p| Some((*p).to_owned())).collect() }
    }

    #[test]
    fn a_server_deny_is_final_and_sessions_decide_within_the_rest() {
        let mut server = default_rules();
        server.push(PermissionRule::new("bash", "*", Deny));
        server.push(PermissionRule::new("read", "secret*", Deny));
        let loosen = [PermissionRule::new("*", "*", Allow)];
        assert_eq!(evaluate_call(&server, &loosen, "bash", &CallSubject::single(Some("ls".into()))), Deny);
        assert_eq!(evaluate_call(&server, &loosen, "read", &CallSubject::single(Some("secret.txt".into()))), Deny);
        // Not denied by the server: the session's allow decides (ask → allow).
        assert_eq!(evaluate_call(&server, &loosen, "write", &CallSubject::single(Some("a".into()))), Allow);
        // And a session may tighten what the server allows.
        let tighten = [PermissionRule::new("read", "*", Deny)];
        assert_eq!(evaluate_call(&server, &tighten, "read", &CallSubject::single(Some("a".into()))), Deny);
        assert_eq!(evaluate_call(&default_rules(), &[], "read", &CallSubject::single(Some("a".into()))), Allow);
    }

    #[test]
    fn every_part_must_be_allowed_and_any_denied_part_denies() {
        let mut server = default_rules();
        server.push(PermissionRule::new("bash", "git *", Allow));
        server.push(PermissionRule::new("bash", "git push*", Deny));
        assert_eq!(evaluate_call(&server, &[], "bash", &parts(&["git status", "git log"])), Allow);
        assert_eq!(evaluate_call(&server, &[], "bash", &parts(&["git status", "echo chained"])), Ask);
        assert_eq!(evaluate_call(&server, &[], "bash", &parts(&["echo x", "git push origin"])), Deny);
        // An opaque part is covered only by a `*` pattern.
        let opaque = CallSubject { whole: Some("git $(x)".into()), parts: vec![None] };
        assert_eq!(evaluate_call(&server, &[], "bash", &opaque), Ask);
        // Even a session's `*` allow does not lift it while the server denies some
        // commands (`git $(echo push)` might be one); without server denies it does.
        let always = [PermissionRule::new("bash", "*", Allow)];
        assert_eq!(evaluate_call(&server, &always, "bash", &opaque), Ask);
        assert_eq!(evaluate_call(&default_rules(), &always, "bash", &opaque), Allow);
        // A deny written against the whole line still denies.
        let whole_deny = [PermissionRule::new("bash", "*; echo chained", Deny)];
        assert_eq!(evaluate_call(&server, &whole_deny, "bash", &parts(&["git status", "echo chained"])), Deny);
    }

    #[test]
    fn escapes_trailing_stars_and_literal_patterns() {
        assert!(pattern_match("git status *", "git status"));
        assert!(pattern_match("git status *", "git status --short"));
        assert!(!pattern_match("git status *", "git statusx"));
        assert!(!pattern_match("git status *", "git"));
        let exact = escape_pattern("ls *.rs? a\\b");
        assert!(is_literal(&exact));
        assert!(wildcard_match(&exact, "ls *.rs? a\\b"));
        assert!(!wildcard_match(&exact, "ls x.rs? a\\b"));
        assert!(!is_literal("git *"));
        // A backslash before anything else is itself.
        assert!(wildcard_match("a\\b", "a\\b"));
    }

    #[test]
    fn an_exact_rule_covers_its_own_line_only() {
        let line = "git status | grep x";
        let subject = CallSubject {
            whole: Some(line.into()),
            parts: vec![Some("git status".into()), Some("grep x".into()), None],
        };
        let exact = [PermissionRule::new("bash", &escape_pattern(line), Allow)];
        assert_eq!(evaluate_call(&default_rules(), &exact, "bash", &subject), Allow);
        let other = CallSubject { whole: Some("git status".into()), parts: vec![Some("git status".into())] };
        assert_eq!(evaluate_call(&default_rules(), &exact, "bash", &other), Ask);
        // A server deny of a part still wins.
        let mut server = default_rules();
        server.push(PermissionRule::new("bash", "grep *", Deny));
        assert_eq!(evaluate_call(&server, &exact, "bash", &subject), Deny);
    }

    #[test]
    fn overlapping_patterns() {
        assert!(patterns_overlap("git *", "git push*"));
        assert!(!patterns_overlap("git status *", "git push*"));
        assert!(patterns_overlap("git status *", "*rm*"));
        assert!(patterns_overlap("rm *", "rm"));
        assert!(!patterns_overlap("ls *", "rm *"));
        assert!(patterns_overlap("a?c", "*c"));
        assert!(!patterns_overlap("a\\*", "ab"));
    }

    #[test]
    fn options_never_cover_a_server_deny_nor_everything() {
        let option = |p: &[&str]| AlwaysOption {
            label: p.join(", "),
            exact: p == ["git status"],
            patterns: p.iter().map(|s| s.to_string()).collect(),
        };
        let mut server = default_rules();
        server.push(PermissionRule::new("bash", "git push*", Deny));
        let offered = offerable(
            &server,
            "bash",
            vec![option(&["git status"]), option(&["git status *"]), option(&["git *"]), option(&["* "])],
        );
        assert_eq!(offered, vec![option(&["git status"]), option(&["git status *"])]);
    }

    #[test]
    fn decisions_on_the_wire() {
        assert_eq!(serde_json::to_string(&Decision::Once).unwrap(), "\"once\"");
        let fill: Decision = serde_json::from_str(r#"{"fill":{"path":"b"}}"#).unwrap();
        assert_eq!(fill, Decision::Fill(serde_json::json!({"path": "b"})));
        assert!(serde_json::from_str::<Decision>("\"maybe\"").is_err());
        let output: Decision = serde_json::from_str(r#"{"output":{"output":"sunny"}}"#).unwrap();
        assert_eq!(output, Decision::Output(ClientOutput { output: "sunny".into(), is_error: false }));
        assert_eq!(output.label(), "output");
        let failed: Decision = serde_json::from_str(r#"{"output":{"output":{"code":7},"isError":true}}"#).unwrap();
        assert!(matches!(failed, Decision::Output(ClientOutput { is_error: true, .. })));
    }

    #[test]
    fn timeouts_parse_from_units_seconds_and_never() {
        assert_eq!(Wait::parse("10m"), Ok(Wait::Secs(600)));
        assert_eq!(Wait::parse("90s"), Ok(Wait::Secs(90)));
        assert_eq!(Wait::parse("2h"), Ok(Wait::Secs(7200)));
        assert_eq!(Wait::parse("1d"), Ok(Wait::Secs(86_400)));
        assert_eq!(Wait::parse("600"), Ok(Wait::Secs(600)));
        assert_eq!(Wait::parse("never"), Ok(Wait::Never));
        let rule: PermissionRule =
            serde_json::from_str(r#"{"tool":"bash","action":"ask","timeout":"10m","onTimeout":"deny"}"#).unwrap();
        assert_eq!((rule.timeout, rule.on_timeout), (Some(Wait::Secs(600)), Some(OnTimeout::Deny)));
        // Seconds as a number, and the config file's snake_case key.
        let rule: PermissionRule =
            serde_json::from_str(r#"{"tool":"bash","action":"ask","timeout":600,"on_timeout":"wait"}"#).unwrap();
        assert_eq!((rule.timeout, rule.on_timeout), (Some(Wait::Secs(600)), Some(OnTimeout::Wait)));
        // Written back in the largest whole unit, under the API's own names.
        assert_eq!(
            serde_json::to_value(&rule).unwrap(),
            serde_json::json!({"tool":"bash","action":"ask","timeout":"10m","onTimeout":"wait"})
        );
        assert_eq!(Wait::Secs(90).to_string(), "90s");
        assert_eq!(Wait::Never.to_string(), "never");
        // A rule stored before timeouts existed is still valid, and unchanged.
        let old: PermissionRule = serde_json::from_str(r#"{"tool":"write","action":"ask"}"#).unwrap();
        assert_eq!(old, PermissionRule::new("write", "*", Ask));
        assert_eq!(serde_json::to_string(&old).unwrap(), r#"{"tool":"write","action":"ask"}"#);
    }

    #[test]
    fn bad_timeouts_are_refused_saying_what_to_write() {
        for bad in ["", "10x", "m", "-5", "1.5h", "ten minutes", "0", "0m", "400d"] {
            let error = Wait::parse(bad).expect_err(bad);
            assert!(error.contains("invalid timeout"), "{bad}: {error}");
        }
        assert!(Wait::parse("10x").unwrap_err().contains("\"never\""));
        let error = serde_json::from_str::<PermissionRule>(r#"{"tool":"bash","action":"ask","timeout":-1}"#);
        assert!(error.unwrap_err().to_string().contains("negative"));
        let error = serde_json::from_str::<PermissionRule>(r#"{"tool":"bash","action":"ask","timeout":"soon"}"#);
        assert!(error.unwrap_err().to_string().contains("invalid timeout \"soon\""));
        let error = serde_json::from_str::<PermissionRule>(r#"{"tool":"bash","action":"ask","onTimeout":"maybe"}"#);
        assert!(error.is_err());
    }

    #[test]
    fn a_wait_ends_at_its_length_or_never() {
        assert_eq!(Wait::Secs(600).expiry(1_000), 601_000);
        assert_eq!(Wait::Never.expiry(1_000), NEVER_EXPIRES);
        assert_eq!(Wait::Secs(LONGEST_WAIT_SECS).expiry(NEVER_EXPIRES - 1), NEVER_EXPIRES);
    }

    #[test]
    fn the_asking_rule_gives_the_wait_session_rule_first() {
        let deny_10m = |tool: &str, pattern: &str| {
            PermissionRule::new(tool, pattern, Ask).with_timeout(Some(Wait::Secs(600)), Some(OnTimeout::Deny))
        };
        let one = |arg: &str| CallSubject::single(Some(arg.into()));
        let mut server = default_rules();
        server.push(deny_10m("write", "*"));
        let verdict = evaluate_call_verdict(&server, &[], "write", &one("a.txt"));
        assert_eq!(verdict.action, Ask);
        assert_eq!(verdict.wait, RuleTimeout { timeout: Some(Wait::Secs(600)), on_timeout: Some(OnTimeout::Deny) });
        // A session rule that asks comes first.
        let session = [PermissionRule::new("write", "*", Ask).with_timeout(Some(Wait::Never), None)];
        let verdict = evaluate_call_verdict(&server, &session, "write", &one("a.txt"));
        assert_eq!(verdict.wait, RuleTimeout { timeout: Some(Wait::Never), on_timeout: None });
        // Allowed or denied: no wait.
        let verdict = evaluate_call_verdict(&server, &[], "read", &one("a.txt"));
        assert_eq!(verdict, Verdict { action: Allow, wait: RuleTimeout::default() });
        // Parts asking under rules that disagree: allow only if all allow.
        let allow_5m =
            PermissionRule::new("bash", "ls *", Ask).with_timeout(Some(Wait::Secs(300)), Some(OnTimeout::Allow));
        let subject =
            CallSubject { whole: Some("ls; rm x".into()), parts: vec![Some("ls".into()), Some("rm x".into())] };
        let rules = [deny_10m("bash", "*"), allow_5m];
        let verdict = evaluate_call_verdict(&[], &rules, "bash", &subject);
        assert_eq!(verdict.wait, RuleTimeout { timeout: Some(Wait::Secs(300)), on_timeout: Some(OnTimeout::Deny) });
    }
}
