//! A tool's server asking the person something while its call runs (an MCP
//! elicitation, an approval whose payload says `live`), at the terminal: the server's
//! message, then one field of the schema at a time, each line answering the field
//! shown. Enter keeps a field's default (or leaves an optional one out), a choice is
//! picked by its number or its words, several choices by numbers separated with
//! commas, and `/decline` declines the whole question. Once every field has an
//! answer, they are sent as one `fill`; the server reads numbers and yes/no from text.

use super::{View, decide_body};
use serde_json::{Map, Value};
use spool_client::Client;
use spool_client::protocol::api::DecideBody;
use spool_client::protocol::{Approval, ApprovalId, Decision, SessionId};

impl View {
    /// A tool's server asks while its call runs: who asks and what, then the first
    /// field's prompt once it is the question answered next.
    pub(super) fn ask_live(&mut self, approval: &Approval) {
        let payload = &approval.payload;
        let source = payload["source"].as_str().unwrap_or(&approval.tool);
        let question = payload["question"].as_str().unwrap_or("(no question given)");
        self.line_break();
        self.print(&format!("  ? {source} asks: {}\n", question.trim_end()));
        self.next_live();
    }

    /// Starts filling in the oldest unanswered question of a server, if no other is
    /// being filled in, and shows its first field.
    pub(super) fn next_live(&mut self) {
        if self.filling.is_some() {
            return;
        }
        let Some(approval) = self.unanswered().filter(|a| a.is_live_ask()) else { return };
        let filling = Filling::new(approval);
        let prompt = filling.prompt().unwrap_or_else(|| "    (Enter answers; /decline declines)".to_owned());
        self.filling = Some(filling);
        self.print(&format!("{prompt}\n"));
    }

    /// One line of the answer to a server's question: the current field's value, or
    /// `/decline`. The last field sends them all.
    pub(super) async fn answer_live(&mut self, client: &Client, session: &SessionId, approval: &Approval, text: &str) {
        if self.filling.as_ref().is_none_or(|f| f.approval != approval.id) {
            self.filling = Some(Filling::new(approval));
        }
        let step = self.filling.as_mut().expect("set above").answer(text);
        let decision = match step {
            Step::Next(prompt) | Step::Again(prompt) => return self.print(&format!("{prompt}\n")),
            Step::Done(fields) => Decision::Fill(fields),
            Step::Declined => Decision::Reject,
        };
        self.filling = None;
        let body = DecideBody { decision, ..decide_body() };
        let decided = client.decide(session, &approval.id, &body).await;
        self.decided(approval, decided);
        // The next server's question; or, when this answer was refused (a field the
        // server needs is missing, say), this one again from the top.
        self.next_live();
    }
}

/// What kind of answer a field takes.
enum Kind {
    Text,
    YesNo,
    Number,
    /// One of these values (with their labels).
    Choice(Vec<(Value, String)>),
    /// Any of these values.
    Many(Vec<(Value, String)>),
}

struct Field {
    name: String,
    title: String,
    description: Option<String>,
    required: bool,
    default: Option<Value>,
    kind: Kind,
}

/// A question being answered field by field.
pub(super) struct Filling {
    pub approval: ApprovalId,
    fields: Vec<Field>,
    at: usize,
    values: Map<String, Value>,
}

/// What one typed line did.
pub(super) enum Step {
    /// The next field's prompt.
    Next(String),
    /// Every field is answered: the fields to send.
    Done(Value),
    Declined,
    /// The line does not answer the field: why, and the field's prompt again.
    Again(String),
}

impl Filling {
    pub(super) fn new(approval: &Approval) -> Filling {
        let schema = &approval.payload["fields"];
        let required: Vec<&str> =
            schema["required"].as_array().map(|r| r.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
        let fields = schema["properties"]
            .as_object()
            .map(|p| p.iter().map(|(name, prop)| field(name, prop, required.contains(&name.as_str()))).collect())
            .unwrap_or_default();
        Filling { approval: approval.id.clone(), fields, at: 0, values: Map::new() }
    }

    /// The prompt of the field to answer now; `None` when there is none (a question
    /// without fields is answered by any line but `/decline`).
    pub(super) fn prompt(&self) -> Option<String> {
        self.fields.get(self.at).map(|f| f.prompt(self.at + 1, self.fields.len()))
    }

    /// Takes one typed line as the answer to the current field.
    pub(super) fn answer(&mut self, text: &str) -> Step {
        let text = text.trim();
        if text == "/decline" {
            return Step::Declined;
        }
        let Some(field) = self.fields.get(self.at) else { return Step::Done(Value::Object(self.values.clone())) };
        match field.read(text) {
            Ok(Some(value)) => {
                self.values.insert(field.name.clone(), value);
            }
            Ok(None) => {}
            Err(why) => return Step::Again(format!("{why}\n{}", field.prompt(self.at + 1, self.fields.len()))),
        }
        self.at += 1;
        match self.prompt() {
            Some(next) => Step::Next(next),
            None => Step::Done(Value::Object(self.values.clone())),
        }
    }
}

fn choices(prop: &Value) -> Option<Vec<(Value, String)>> {
    if let Some(values) = prop["enum"].as_array() {
        let names = prop["enumNames"].as_array();
        let label = |i: usize, v: &Value| {
            names.and_then(|n| n.get(i)?.as_str().map(str::to_owned)).unwrap_or_else(|| text_of(v))
        };
        return Some(values.iter().enumerate().map(|(i, v)| (v.clone(), label(i, v))).collect());
    }
    let of = prop["oneOf"].as_array().or(prop["anyOf"].as_array())?;
    of.iter()
        .map(|o| {
            let value = o.get("const")?.clone();
            let label = o["title"].as_str().map_or_else(|| text_of(&value), str::to_owned);
            Some((value, label))
        })
        .collect()
}

fn text_of(value: &Value) -> String {
    value.as_str().map_or_else(|| value.to_string(), str::to_owned)
}

fn field(name: &str, prop: &Value, required: bool) -> Field {
    let kind = match (prop["type"].as_str(), choices(prop)) {
        (Some("array"), _) => choices(&prop["items"]).map_or(Kind::Text, Kind::Many),
        (_, Some(choices)) => Kind::Choice(choices),
        (Some("boolean"), _) => Kind::YesNo,
        (Some("number" | "integer"), _) => Kind::Number,
        _ => Kind::Text,
    };
    Field {
        name: name.to_owned(),
        title: prop["title"].as_str().unwrap_or(name).to_owned(),
        description: prop["description"].as_str().filter(|d| !d.is_empty()).map(str::to_owned),
        required,
        default: prop.get("default").filter(|d| !d.is_null()).cloned(),
        kind,
    }
}

impl Field {
    fn prompt(&self, n: usize, of: usize) -> String {
        let mut out = format!("    [{n}/{of}] {}", self.title);
        if self.required {
            out.push_str(" (required)");
        }
        if let Some(description) = &self.description {
            out.push_str(&format!(" — {description}"));
        }
        let listed = |choices: &[(Value, String)]| {
            choices
                .iter()
                .enumerate()
                .map(|(i, (_, label))| format!("{}. {label}", i + 1))
                .collect::<Vec<_>>()
                .join("  ")
        };
        match &self.kind {
            Kind::YesNo => out.push_str("\n      y or n"),
            Kind::Choice(choices) => out.push_str(&format!("\n      {}", listed(choices))),
            Kind::Many(choices) => out.push_str(&format!("\n      {}  (numbers, comma-separated)", listed(choices))),
            Kind::Text | Kind::Number => {}
        }
        let keep = match &self.default {
            Some(default) => format!("Enter keeps {}", self.shown(default)),
            None if self.required => "an answer is needed".to_owned(),
            None => "Enter leaves it out".to_owned(),
        };
        out.push_str(&format!("\n      ({keep}; /decline declines)"));
        out
    }

    /// A value as the person knows it: a choice's label, several as a list of labels.
    fn shown(&self, value: &Value) -> String {
        let label = |choices: &[(Value, String)], v: &Value| {
            choices.iter().find(|(c, _)| c == v).map_or_else(|| text_of(v), |(_, label)| label.clone())
        };
        match (&self.kind, value) {
            (Kind::Choice(choices), v) => label(choices, v),
            (Kind::Many(choices), Value::Array(vs)) => {
                vs.iter().map(|v| label(choices, v)).collect::<Vec<_>>().join(", ")
            }
            (Kind::YesNo, Value::Bool(yes)) => if *yes { "yes" } else { "no" }.to_owned(),
            _ => text_of(value),
        }
    }

    /// The value a typed line gives the field: `None` leaves it to the default (or out).
    fn read(&self, text: &str) -> Result<Option<Value>, String> {
        if text.is_empty() {
            return match (&self.default, self.required) {
                (None, true) => Err(format!("{} needs an answer", self.title)),
                _ => Ok(None),
            };
        }
        let pick = |choices: &[(Value, String)], word: &str| -> Option<Value> {
            let word = word.trim();
            if let Some(i) = word.parse::<usize>().ok().and_then(|n| n.checked_sub(1)) {
                return choices.get(i).map(|(v, _)| v.clone());
            }
            choices
                .iter()
                .find(|(v, label)| label.eq_ignore_ascii_case(word) || text_of(v).eq_ignore_ascii_case(word))
                .map(|(v, _)| v.clone())
        };
        match &self.kind {
            Kind::Text | Kind::Number | Kind::YesNo => Ok(Some(Value::String(text.to_owned()))),
            Kind::Choice(choices) => {
                pick(choices, text).map(Some).ok_or_else(|| format!("{text:?} is not one of the choices"))
            }
            Kind::Many(choices) => {
                let picked: Option<Vec<Value>> = text.split(',').map(|w| pick(choices, w)).collect();
                picked.map(|p| Some(Value::Array(p))).ok_or_else(|| format!("{text:?} names a choice not offered"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn approval(fields: Value) -> Approval {
        serde_json::from_value(json!({
            "id": "per_01jd0000000000000000000001", "runId": "run_01jd0000000000000000000002",
            "sessionId": "ses_01jd0000000000000000000003", "ownerId": "usr_01jd0000000000000000000004",
            "toolCallId": "c1", "tool": "everything_ask", "kind": "provide_input",
            "payload": {"live": true, "source": "everything", "question": "Who?", "fields": fields},
            "status": "pending", "createdAt": 0, "expiresAt": 1
        }))
        .expect("an approval")
    }

    #[test]
    fn each_line_answers_one_field_and_the_last_sends_them_all() {
        let ask = approval(json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "title": "Name"},
                "pet": {"type": "string", "enum": ["cat", "dog"], "enumNames": ["Cats", "Dogs"], "default": "cat"},
                "tools": {"type": "array", "items": {"anyOf": [{"const": "g", "title": "Guitar"}, {"const": "p", "title": "Piano"}]}},
                "ok": {"type": "boolean"},
            },
            "required": ["name"],
        }));
        let mut filling = Filling::new(&ask);
        assert!(filling.prompt().expect("a first field").contains("Name (required)"));
        assert!(matches!(filling.answer(""), Step::Again(why) if why.contains("needs an answer")));
        // The fields come by name: name, ok, pet, tools.
        assert!(matches!(filling.answer("Ada"), Step::Next(p) if p.contains("y or n")));
        // A default shows as the person knows it: the choice's label, not its value.
        assert!(
            matches!(filling.answer("y"), Step::Next(p) if p.contains("1. Cats  2. Dogs") && p.contains("Enter keeps Cats;"))
        );
        assert!(matches!(filling.answer("7"), Step::Again(_)));
        assert!(matches!(filling.answer("dogs"), Step::Next(p) if p.contains("comma-separated")));
        let Step::Done(fields) = filling.answer("2, guitar") else { panic!("all answered") };
        assert_eq!(fields, json!({"name": "Ada", "pet": "dog", "tools": ["p", "g"], "ok": "y"}));
    }

    #[test]
    fn decline_declines_at_any_field() {
        let mut filling = Filling::new(&approval(json!({"properties": {"a": {"type": "string"}}})));
        assert!(matches!(filling.answer("/decline"), Step::Declined));
    }
}
