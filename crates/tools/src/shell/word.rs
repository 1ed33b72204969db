//! One shell word as the program will receive it: quotes removed, escapes applied,
//! when that value is certain before the command runs.
//!
//! A permission rule is matched against what runs, not against how it was spelled:
//! `\rm`, `r''m`, `"rm"` and `$'\x72m'` all run `rm`. brush-parser splits the word
//! into its pieces (quoted, escaped, expanded); this module puts the literal ones back
//! together. A word whose value is decided only when it runs (a parameter, a command
//! substitution, arithmetic, a glob that may match files, a brace expansion that
//! becomes several words) has no certain value: [`Word::value`] is `None`, and the
//! caller treats the command as one it cannot judge.

use brush_parser::word::{WordPiece, WordPieceWithSource};

/// A word of a command line: its text as written, its value when certain, and the
/// command lines of any command substitutions inside it (those run too).
#[derive(Clone, Debug, Default)]
pub(super) struct Word {
    pub raw: String,
    pub value: Option<String>,
    pub substitutions: Vec<String>,
}

impl Word {
    /// A word made up by the analysis (a placeholder, a program a wrapper implies).
    pub(super) fn literal(text: &str) -> Self {
        Self { raw: text.to_owned(), value: Some(text.to_owned()), substitutions: Vec::new() }
    }

    /// The value when certain, else the text as written (for matching deny patterns
    /// such as `rm *` against `rm $x`).
    pub(super) fn text(&self) -> &str {
        self.value.as_deref().unwrap_or(&self.raw)
    }
}

/// Parses the raw text of one word.
pub(super) fn parse(raw: &str) -> Word {
    let mut word = Word { raw: raw.to_owned(), value: None, substitutions: Vec::new() };
    let options = brush_parser::ParserOptions::default();
    let Ok(pieces) = brush_parser::word::parse(raw, &options) else { return word };
    let mut value = String::new();
    let mut certain = true;
    let mut unquoted_brace = false;
    for piece in &pieces {
        certain &= append(&piece.piece, false, &mut value, &mut word.substitutions, &mut unquoted_brace);
    }
    // `{a,b}` and `{1..3}` become several words; a lone `{}` (find's placeholder) or
    // `{` stays one.
    if unquoted_brace && (raw.contains(',') || raw.contains("..")) {
        certain = false;
    }
    if certain {
        word.value = Some(value);
    }
    word
}

/// Appends a piece's value to `out`; `false` when the value is not certain.
fn append(
    piece: &WordPiece,
    quoted: bool,
    out: &mut String,
    substitutions: &mut Vec<String>,
    unquoted_brace: &mut bool,
) -> bool {
    match piece {
        WordPiece::Text(text) => {
            if !quoted {
                *unquoted_brace |= text.contains('{');
                if is_glob(text) {
                    return false;
                }
            }
            out.push_str(text);
            true
        }
        WordPiece::SingleQuotedText(text) => {
            out.push_str(text);
            true
        }
        WordPiece::AnsiCQuotedText(text) => match ansi_c(text) {
            Some(text) => {
                out.push_str(&text);
                true
            }
            None => false,
        },
        WordPiece::DoubleQuotedSequence(inner) | WordPiece::GettextDoubleQuotedSequence(inner) => {
            let mut certain = true;
            for WordPieceWithSource { piece, .. } in inner {
                certain &= append(piece, true, out, substitutions, unquoted_brace);
            }
            certain
        }
        WordPiece::EscapeSequence(escape) => {
            // `\x` is `x`; a backslash before a newline joins lines and is nothing.
            let escaped = escape.strip_prefix('\\').unwrap_or(escape);
            if escaped != "\n" {
                out.push_str(escaped);
            }
            true
        }
        WordPiece::TildeExpansion(_) => {
            // The home directory is fixed for a command; `~` stands for it in patterns.
            out.push('~');
            true
        }
        WordPiece::CommandSubstitution(line) | WordPiece::BackquotedCommandSubstitution(line) => {
            substitutions.push(line.clone());
            false
        }
        WordPiece::ParameterExpansion(_) | WordPiece::ArithmeticExpression(_) => false,
    }
}

/// Whether unquoted text holds a pattern bash would expand against file names.
fn is_glob(text: &str) -> bool {
    text.contains('*') || text.contains('?') || text.find('[').is_some_and(|open| text[open..].contains(']'))
}

/// The value of `$'…'` text (bash's escapes), or `None` for an escape whose value is
/// not plain text (`\c` control characters are decoded; a NUL ends the word in bash,
/// which is not worth imitating).
fn ansi_c(text: &str) -> Option<String> {
    let mut out = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(e) = chars.next() else {
            out.push('\\');
            break;
        };
        let simple = match e {
            'a' => Some('\x07'),
            'b' => Some('\x08'),
            'e' | 'E' => Some('\x1b'),
            'f' => Some('\x0c'),
            'n' => Some('\n'),
            'r' => Some('\r'),
            't' => Some('\t'),
            'v' => Some('\x0b'),
            '\\' | '\'' | '"' | '?' => Some(e),
            _ => None,
        };
        if let Some(s) = simple {
            out.push(s);
            continue;
        }
        let (radix, max) = match e {
            '0'..='7' => (8, 3),
            'x' => (16, 2),
            'u' => (16, 4),
            'U' => (16, 8),
            'c' => {
                let control = chars.next()?;
                out.push(char::from(u8::try_from(control.to_ascii_uppercase()).ok()? ^ 0x40));
                continue;
            }
            _ => {
                out.push('\\');
                out.push(e);
                continue;
            }
        };
        let mut digits = String::new();
        if radix == 8 {
            digits.push(e);
        }
        while digits.len() < max && chars.peek().is_some_and(|d| d.is_digit(radix)) {
            digits.push(chars.next()?);
        }
        if digits.is_empty() {
            // `\x` without digits stays as written.
            out.push('\\');
            out.push(e);
            continue;
        }
        let code = u32::from_str_radix(&digits, radix).ok()?;
        if code == 0 {
            return None;
        }
        // `\xHH` and octal are bytes; a byte past ASCII is not a character on its own.
        if matches!(e, 'x' | '0'..='7') && code > 0x7f {
            return None;
        }
        out.push(char::from_u32(code)?);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(raw: &str) -> Option<String> {
        parse(raw).value
    }

    #[test]
    fn quotes_and_escapes_are_removed() {
        for raw in [
            "rm",
            "\\rm",
            "r''m",
            "\"rm\"",
            "'rm'",
            "r\"\"m",
            "\\r\\m",
            "$'rm'",
            "$'\\x72m'",
            "$'\\162m'",
            "$'\\u0072m'",
            "\"r\"'m'",
        ] {
            assert_eq!(value(raw).as_deref(), Some("rm"), "{raw}");
        }
        assert_eq!(value("\"a b\"").as_deref(), Some("a b"));
        assert_eq!(value("\"\\$x\"").as_deref(), Some("$x"));
        assert_eq!(value("\"\\x\"").as_deref(), Some("\\x"));
        assert_eq!(value("'$(x)'").as_deref(), Some("$(x)"));
        assert_eq!(value("{}").as_deref(), Some("{}"));
        assert_eq!(value("'{a,b}'").as_deref(), Some("{a,b}"));
        assert_eq!(value("'*.rs'").as_deref(), Some("*.rs"));
        assert_eq!(value("~/bin/rm").as_deref(), Some("~/bin/rm"));
    }

    #[test]
    fn expansions_have_no_certain_value() {
        for raw in ["$x", "\"$x\"", "${x}", "$(echo rm)", "`echo rm`", "$((1))", "r*", "r?", "[r]m", "{r,}m", "{1..3}"]
        {
            assert_eq!(value(raw), None, "{raw}");
        }
        assert_eq!(parse("a$(rm -rf x)b").substitutions, vec!["rm -rf x".to_owned()]);
    }
}
