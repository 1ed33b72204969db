//! Markdown to safe HTML for the web UI (`POST /api/markdown`): a pure function.
//!
//! A model's answer is untrusted input, so the HTML is made safe twice. First while it
//! is produced: pulldown-cmark parses CommonMark with GFM tables, strikethrough and task
//! lists, and the event stream is rewritten before any HTML exists — raw HTML in the
//! Markdown becomes text (an HTML block shows as a code block), a link whose destination
//! is not `http:`, `https:`, `mailto:`, relative or `#…` becomes its text, and an image
//! becomes a link to it labelled with its alt text (the page's CSP forbids remote images
//! anyway). Then ammonia cleans the result against an allowlist of exactly the tags and
//! attributes this module emits, so a mistake in the first step still cannot reach the
//! page. Code blocks are highlighted by syntect as `hl-…` CSS classes, never inline
//! styles (the CSP forbids those); `web/app/css/code.css` colours the classes. For the
//! same reason a table column's alignment (`:--`, `:-:`, `--:`), which pulldown-cmark
//! would write as `style="text-align: …"`, becomes a class on each of its cells
//! (`align-left`, `align-center`, `align-right`) that `markdown.css` styles.

use pulldown_cmark::{Alignment, CodeBlockKind, CowStr, Event, Options, Parser, Tag, TagEnd};
use std::collections::HashSet;
use std::sync::LazyLock;
use syntect::html::{ClassStyle, ClassedHTMLGenerator};
use syntect::parsing::SyntaxSet;
use syntect::util::LinesWithEndings;

/// Prefix of every highlighting class, so the sanitizer can keep those and no others.
const CLASS_PREFIX: &str = "hl-";
/// Code blocks longer than this are shown unhighlighted: syntect's backtracking
/// regexes cost milliseconds per kilobyte, and a huge block gains little from colour.
const MAX_HIGHLIGHT_BYTES: usize = 32 * 1024;
/// A language tag longer than this names no syntax and is dropped.
const MAX_LANG_CHARS: usize = 32;
/// The relation every link gets: the page that opens learns nothing of Spool.
const LINK_REL: &str = "noopener noreferrer nofollow";

/// The classes a table cell may carry: its column's alignment.
const ALIGN_CLASSES: [&str; 3] = ["align-left", "align-center", "align-right"];

/// The syntaxes syntect ships, loaded once (tens of milliseconds) on first use.
static SYNTAXES: LazyLock<SyntaxSet> = LazyLock::new(SyntaxSet::load_defaults_newlines);

/// The second line of defence: what the first step emits and nothing more.
static CLEANER: LazyLock<ammonia::Builder<'static>> = LazyLock::new(|| {
    let tags = [
        "a",
        "blockquote",
        "br",
        "code",
        "del",
        "em",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "hr",
        "input",
        "li",
        "ol",
        "p",
        "pre",
        "span",
        "strong",
        "table",
        "tbody",
        "td",
        "th",
        "thead",
        "tr",
        "ul",
    ];
    let mut builder = ammonia::Builder::empty();
    builder
        .tags(HashSet::from(tags))
        .tag_attributes(
            [
                ("a", HashSet::from(["href", "title"])),
                ("ol", HashSet::from(["start"])),
                ("input", HashSet::from(["type", "checked", "disabled"])),
                ("pre", HashSet::from(["class", "data-lang"])),
                ("span", HashSet::from(["class"])),
                ("th", HashSet::from(["class"])),
                ("td", HashSet::from(["class"])),
            ]
            .into(),
        )
        .attribute_filter(|element, attribute, value| match (element, attribute) {
            ("span", "class") => hl_classes(value).then(|| value.into()),
            ("pre", "class") => matches!(value, "code" | "code raw").then(|| value.into()),
            ("pre", "data-lang") => language(value).map(Into::into),
            ("th" | "td", "class") => ALIGN_CLASSES.contains(&value).then(|| value.into()),
            ("input", "type") => (value == "checkbox").then(|| value.into()),
            _ => Some(value.into()),
        })
        .url_schemes(HashSet::from(["http", "https", "mailto"]))
        .link_rel(Some(LINK_REL))
        .set_tag_attribute_value("a", "target", "_blank")
        .set_tag_attribute_value("input", "disabled", "");
    builder
});

/// `text` as sanitized HTML.
pub fn render(text: &str) -> String {
    let options = Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS;
    let events = Rewriter::default().rewrite(Parser::new_ext(text, options));
    let mut html = String::with_capacity(text.len() * 3 / 2);
    pulldown_cmark::html::push_html(&mut html, events.into_iter());
    CLEANER.clean(&html).to_string()
}

/// The event stream with everything unsafe turned into text, and code highlighted.
#[derive(Default)]
struct Rewriter<'a> {
    out: Vec<Event<'a>>,
    /// Inside a link whose start was dropped: its end is dropped too.
    dropped_link: bool,
    /// Inside any link: an image there becomes its alt text (links do not nest).
    in_link: bool,
    /// Inside an image: whether its start became a link (its end must close it).
    image: Option<bool>,
    /// Inside a code block (or an HTML block shown as one): its language and text.
    code: Option<(Option<String>, bool, String)>,
    /// Inside a table: its columns' alignments, whether the row is the head, and the
    /// column of the next cell.
    table: Option<(Vec<Alignment>, bool, usize)>,
}

impl<'a> Rewriter<'a> {
    fn rewrite(mut self, parser: Parser<'a>) -> Vec<Event<'a>> {
        for event in parser {
            self.event(event);
        }
        self.out
    }

    fn event(&mut self, event: Event<'a>) {
        if let Some((_, _, body)) = self.code.as_mut() {
            match event {
                Event::Text(t) | Event::Html(t) => return body.push_str(&t),
                Event::End(TagEnd::CodeBlock | TagEnd::HtmlBlock) => {
                    let (lang, raw, body) = self.code.take().expect("inside a code block");
                    return self.out.push(Event::Html(code_block(lang.as_deref(), raw, &body).into()));
                }
                _ => return,
            }
        }
        match event {
            Event::Start(Tag::CodeBlock(kind)) => {
                let lang = match kind {
                    CodeBlockKind::Fenced(info) => info.split_whitespace().next().and_then(language).map(str::to_owned),
                    CodeBlockKind::Indented => None,
                };
                self.code = Some((lang, false, String::new()));
            }
            Event::Start(Tag::HtmlBlock) => self.code = Some((None, true, String::new())),
            Event::Html(t) | Event::InlineHtml(t) => self.out.push(Event::Text(t)),
            Event::Start(Tag::Link { link_type, dest_url, title, id }) => {
                if safe_destination(&dest_url) {
                    self.in_link = true;
                    self.out.push(Event::Start(Tag::Link { link_type, dest_url, title, id }));
                } else {
                    self.dropped_link = true;
                }
            }
            Event::End(TagEnd::Link) => {
                self.in_link = false;
                if !std::mem::take(&mut self.dropped_link) {
                    self.out.push(Event::End(TagEnd::Link));
                }
            }
            Event::Start(Tag::Image { link_type, dest_url, title, id }) => {
                let linked = !self.in_link && safe_destination(&dest_url);
                if linked {
                    self.out.push(Event::Start(Tag::Link { link_type, dest_url, title, id }));
                }
                self.image = Some(linked);
            }
            Event::End(TagEnd::Image) => {
                if self.image.take() == Some(true) {
                    self.out.push(Event::End(TagEnd::Link));
                }
            }
            // Cells are written here, so that an alignment becomes a class rather than
            // the inline style pulldown-cmark writes (its own cell events never reach
            // it, so its table bookkeeping sees none).
            Event::Start(Tag::Table(alignments)) => {
                self.table = Some((alignments, false, 0));
                self.out.push(Event::Start(Tag::Table(Vec::new())));
            }
            Event::End(TagEnd::Table) => {
                self.table = None;
                self.out.push(Event::End(TagEnd::Table));
            }
            Event::Start(tag @ (Tag::TableHead | Tag::TableRow)) => {
                if let Some((_, head, column)) = self.table.as_mut() {
                    *head = matches!(tag, Tag::TableHead);
                    *column = 0;
                }
                self.out.push(Event::Start(tag));
            }
            Event::Start(Tag::TableCell) => {
                let (alignments, head, column) =
                    self.table.as_ref().map_or((&[][..], false, 0), |(a, h, c)| (&a[..], *h, *c));
                let name = if head { "th" } else { "td" };
                let class = match alignments.get(column) {
                    Some(Alignment::Left) => r#" class="align-left""#,
                    Some(Alignment::Center) => r#" class="align-center""#,
                    Some(Alignment::Right) => r#" class="align-right""#,
                    Some(Alignment::None) | None => "",
                };
                self.out.push(Event::Html(format!("<{name}{class}>").into()));
            }
            Event::End(TagEnd::TableCell) => {
                let head = self.table.as_mut().is_some_and(|(_, head, column)| {
                    *column += 1;
                    *head
                });
                self.out.push(Event::Html(if head { "</th>" } else { "</td>" }.into()));
            }
            // Math and footnotes are not enabled; should they appear, they are text.
            Event::InlineMath(t) | Event::DisplayMath(t) | Event::FootnoteReference(t) => self.out.push(Event::Text(t)),
            other => self.out.push(other),
        }
    }
}

/// One `<pre class="code">`: highlighted when its language is known and it is not too
/// long, otherwise escaped text. `raw` marks an HTML block shown as code.
fn code_block(lang: Option<&str>, raw: bool, body: &str) -> String {
    let body = body.strip_suffix('\n').unwrap_or(body);
    let class = if raw { "code raw" } else { "code" };
    let attrs = match lang {
        Some(lang) => format!(r#" class="{class}" data-lang="{lang}""#),
        None => format!(r#" class="{class}""#),
    };
    let inner = lang.and_then(|lang| highlight(lang, body)).unwrap_or_else(|| escape(body));
    format!("<pre{attrs}><code>{inner}</code></pre>\n")
}

/// `body` as syntect's classed spans, or `None` when the language is unknown, the block
/// too long, or syntect fails on it.
fn highlight(lang: &str, body: &str) -> Option<String> {
    if body.len() > MAX_HIGHLIGHT_BYTES {
        return None;
    }
    let syntax = SYNTAXES.find_syntax_by_token(lang)?;
    let mut generator = ClassedHTMLGenerator::new_with_class_style(
        syntax,
        &SYNTAXES,
        ClassStyle::SpacedPrefixed { prefix: CLASS_PREFIX },
    );
    for line in LinesWithEndings::from(body) {
        generator.parse_html_for_line_which_includes_newline(line).ok()?;
    }
    Some(generator.finalize())
}

/// A fence's language tag if it is one: short, and only characters language names use.
fn language(tag: &str) -> Option<&str> {
    let ok = !tag.is_empty()
        && tag.chars().count() <= MAX_LANG_CHARS
        && tag.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '_' | '.' | '#'));
    ok.then_some(tag)
}

/// True when every class is one syntect's classed output makes (`hl-` and a scope atom).
fn hl_classes(value: &str) -> bool {
    value.split(' ').all(|class| {
        class.strip_prefix(CLASS_PREFIX).is_some_and(|atom| {
            !atom.is_empty() && atom.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '+'))
        })
    })
}

/// `http:`, `https:`, `mailto:`, or no scheme at all (relative, `#…`). A scheme is what
/// precedes the first `:` when no `/`, `?` or `#` comes before it; browsers drop tabs
/// and newlines inside a scheme, so any whitespace or control character there refuses it.
fn safe_destination(dest: &CowStr<'_>) -> bool {
    let dest = dest.trim_start_matches(|c: char| c.is_whitespace() || c.is_control());
    let Some(colon) = dest.find(':') else { return true };
    let scheme = &dest[..colon];
    if scheme.contains(['/', '?', '#']) {
        return true;
    }
    matches!(scheme.to_ascii_lowercase().as_str(), "http" | "https" | "mailto")
}

/// Text as HTML body text (`&`, `<`, `>` escaped): what the code element holds.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn commonmark_and_gfm_become_elements() {
        let html = render(
            "# Title\n\nSome *italic*, **bold**, ~~gone~~ and `code`.\n\n- one\n- two\n\n1. first\n\n\
             > quoted\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n- [x] done\n- [ ] todo\n\n[site](https://example.org/x)\n",
        );
        for needle in [
            "<h1>Title</h1>",
            "<em>italic</em>",
            "<strong>bold</strong>",
            "<del>gone</del>",
            "<code>code</code>",
            "<ul>",
            "<ol>",
            "<blockquote>",
            "<table>",
            "<td>2</td>",
            r#"<input disabled="" type="checkbox" checked="">"#,
            r#"<a href="https://example.org/x" target="_blank" rel="noopener noreferrer nofollow">site</a>"#,
        ] {
            assert!(html.contains(needle), "{needle} missing from {html}");
        }
    }

    #[test]
    fn table_alignment_becomes_classes_not_styles() {
        let html = render("| a | b | c | d |\n|:--|:-:|--:|---|\n| 1 | 2 | 3 | 4 |\n");
        assert_eq!(
            html,
            "<table><thead><tr><th class=\"align-left\">a</th><th class=\"align-center\">b</th>\
             <th class=\"align-right\">c</th><th>d</th></tr></thead><tbody>\n\
             <tr><td class=\"align-left\">1</td><td class=\"align-center\">2</td>\
             <td class=\"align-right\">3</td><td>4</td></tr>\n</tbody></table>\n"
        );
        // A cell beyond the header's columns has no alignment; a class that is not an
        // alignment never survives the cleaner.
        assert!(!render("| a |\n|--:|\n| 1 | 2 |\n").contains("style"));
        assert_eq!(
            CLEANER.clean(r#"<table><tr><td class="x align-left">1</td></tr></table>"#).to_string(),
            "<table><tbody><tr><td>1</td></tr></tbody></table>"
        );
    }

    #[test]
    fn raw_html_is_text() {
        let html = render("Hi <img src=x onerror=\"window.pwned=1\"> there\n\n<script>window.pwned=1</script>\n");
        assert!(html.contains("Hi &lt;img src=x onerror=\"window.pwned=1\"&gt; there"), "{html}");
        assert!(
            html.contains(r#"<pre class="code raw"><code>&lt;script&gt;window.pwned=1&lt;/script&gt;</code></pre>"#),
            "{html}"
        );
        assert!(!html.contains("<img") && !html.contains("<script"), "{html}");
    }

    #[test]
    fn unsafe_links_become_their_text() {
        for link in [
            "[x](javascript:window.pwned=1)",
            "[x](JavaScript:alert(1))",
            "[x](java&#9;script:alert(1))",
            "[x](data:text/html,hi)",
            "[x](vbscript:x)",
            "<javascript:alert(1)>",
        ] {
            let html = render(link);
            assert!(!html.contains("<a"), "{link} gave {html}");
        }
        assert!(render("[x](#part)").contains(r##"href="#part""##));
        assert!(render("[x](docs/a.md)").contains(r#"href="docs/a.md""#));
        assert!(render("[x](mailto:a@b.c)").contains(r#"href="mailto:a@b.c""#));
    }

    #[test]
    fn images_become_links_labelled_with_their_alt_text() {
        let html = render(
            "![a cat](https://example.org/cat.png) ![bad](javascript:x) [![inner](https://i/x.png)](https://o/)",
        );
        assert!(
            html.contains(
                r#"<a href="https://example.org/cat.png" target="_blank" rel="noopener noreferrer nofollow">a cat</a>"#
            ),
            "{html}"
        );
        assert!(html.contains(" bad "), "{html}");
        assert!(
            html.contains(r#"<a href="https://o/" target="_blank" rel="noopener noreferrer nofollow">inner</a>"#),
            "{html}"
        );
        assert!(!html.contains("<img"), "{html}");
    }

    #[test]
    fn code_blocks_are_highlighted_with_classes_only() {
        let html = render("```rust\nfn main() { let x = \"<b>\"; }\n```\n");
        assert!(
            html.starts_with(r#"<pre class="code" data-lang="rust"><code><span class="hl-source hl-rust">"#),
            "{html}"
        );
        assert!(html.contains("hl-keyword") && html.contains("&lt;b&gt;"), "{html}");
        assert!(!html.contains("style"), "{html}");
        let plain = render("```nosuchlanguage\na < b\n```\n");
        assert_eq!(plain, "<pre class=\"code\" data-lang=\"nosuchlanguage\"><code>a &lt; b</code></pre>\n");
        let hostile_lang = render("```\"><script>\nx\n```\n");
        assert_eq!(hostile_lang, "<pre class=\"code\"><code>x</code></pre>\n");
    }

    #[test]
    fn a_huge_code_block_is_shown_unhighlighted() {
        let body = "let x = 1;\n".repeat(MAX_HIGHLIGHT_BYTES / 8);
        let html = render(&format!("```rust\n{body}```\n"));
        assert!(!html.contains("<span"), "highlighted {} bytes", body.len());
        assert!(html.contains("let x = 1;"));
    }

    /// Every tag of `html` with its attributes, as ammonia serializes them
    /// (`<name a="v" b="">`, values with `"` escaped): enough to check what a browser
    /// would act on. Text is escaped, so every `<` starts a tag.
    fn tags(html: &str) -> Vec<(String, Vec<(String, String)>)> {
        let mut found = Vec::new();
        for chunk in html.split('<').skip(1) {
            let tag = &chunk[..chunk.find('>').expect("every tag is closed")];
            let mut parts = tag.trim_end_matches('/').splitn(2, ' ');
            let name = parts.next().unwrap_or_default().to_ascii_lowercase();
            let mut attrs = Vec::new();
            let mut rest = parts.next().unwrap_or_default();
            while let Some(eq) = rest.find("=\"") {
                let key = rest[..eq].trim().to_ascii_lowercase();
                let after = &rest[eq + 2..];
                let end = after.find('"').expect("attribute values are quoted");
                attrs.push((key, after[..end].to_owned()));
                rest = &after[end + 1..];
            }
            found.push((name, attrs));
        }
        found
    }

    fn pieces() -> impl Strategy<Value = String> {
        let piece = prop::sample::select(vec![
            "<script>",
            "</script>",
            "<img src=x onerror=alert(1)>",
            "<a href=\"javascript:x\">",
            "javascript:",
            "JaVaScRiPt:",
            "data:",
            "[",
            "]",
            "(",
            ")",
            "![",
            "<",
            ">",
            "\"",
            "'",
            "`",
            "```",
            "```js\n",
            "\n",
            "\n\n",
            " ",
            "*",
            "_",
            "~~",
            "|",
            "-",
            "# ",
            "> ",
            "&#9;",
            "&colon;",
            "onload=",
            "style=",
            "x",
            "http://a",
            "<!--",
            "-->",
            "\\",
            "    ",
            "- [ ] ",
            "1. ",
            "<div>",
            "<svg onload=1>",
        ]);
        prop::collection::vec(piece, 0..40).prop_map(|v| v.concat())
    }

    proptest! {
        #[test]
        fn no_input_yields_script_handlers_or_javascript_links(text in pieces()) {
            let html = render(&text);
            prop_assert!(!html.to_ascii_lowercase().contains("<script"), "{}", html);
            for (name, attrs) in tags(&html) {
                prop_assert!(name != "img" && name != "svg" && name != "div", "<{}> in {}", name, html);
                for (key, value) in attrs {
                    prop_assert!(!key.starts_with("on") && key != "style", "{}= in {}", key, html);
                    let squeezed: String = value.chars().filter(|c| !c.is_whitespace() && !c.is_control()).collect();
                    prop_assert!(!squeezed.to_ascii_lowercase().starts_with("javascript:"), "{} in {}", value, html);
                }
            }
        }
    }
}
