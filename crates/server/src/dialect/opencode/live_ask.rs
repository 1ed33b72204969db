//! A tool's server asking the person while its call runs (a live ask: an MCP
//! elicitation, an approval whose payload says `live`) as OpenCode's question request:
//! one question per field of the server's schema, in the order the schema's fields
//! are kept (by name) — a choice's
//! labels as options, yes/no as "Yes"/"No", several choices as a `multiple` question,
//! anything else the person's own words — the first one led by the server's message.
//! The reply's answers (one list per question) become the `fill` of those fields: a
//! picked label is its value again, and the engine reads numbers and yes/no from text.
//! A field answered with nothing is left out (its default applies).

use super::wire::{QuestionInfo, QuestionOption};
use serde_json::{Map, Value};
use spool_protocol::Approval;

/// One field of the schema: its name, what it asks, its choices (value and label) and
/// whether several may be picked.
struct Field {
    name: String,
    question: String,
    choices: Vec<(Value, String)>,
    multiple: bool,
}

fn choices(prop: &Value) -> Vec<(Value, String)> {
    let text = |v: &Value| v.as_str().map_or_else(|| v.to_string(), str::to_owned);
    if let Some(values) = prop["enum"].as_array() {
        let names = prop["enumNames"].as_array();
        let label = |i: usize, v: &Value| names.and_then(|n| n.get(i)?.as_str().map(str::to_owned)).unwrap_or(text(v));
        return values.iter().enumerate().map(|(i, v)| (v.clone(), label(i, v))).collect();
    }
    let of = prop["oneOf"].as_array().or(prop["anyOf"].as_array()).map(Vec::as_slice).unwrap_or_default();
    of.iter()
        .filter_map(|o| {
            let value = o.get("const")?.clone();
            Some((value.clone(), o["title"].as_str().map_or_else(|| text(&value), str::to_owned)))
        })
        .collect()
}

fn fields(approval: &Approval) -> Vec<Field> {
    let schema = &approval.payload["fields"];
    let Some(properties) = schema["properties"].as_object() else { return Vec::new() };
    properties
        .iter()
        .map(|(name, prop)| {
            let title = prop["title"].as_str().unwrap_or(name);
            let question = match prop["description"].as_str().filter(|d| !d.is_empty()) {
                Some(description) => format!("{title}: {description}"),
                None => title.to_owned(),
            };
            let (choices, multiple) = match prop["type"].as_str() {
                Some("array") => (choices(&prop["items"]), true),
                Some("boolean") => (vec![(true.into(), "Yes".into()), (false.into(), "No".into())], false),
                _ => (choices(prop), false),
            };
            Field { name: name.clone(), question, choices, multiple }
        })
        .collect()
}

/// The questions OpenCode shows for a live ask.
pub fn questions(approval: &Approval) -> Vec<QuestionInfo> {
    let source = approval.payload["source"].as_str().unwrap_or(&approval.tool).to_owned();
    let message = approval.payload["question"].as_str().unwrap_or_default();
    let mut questions: Vec<QuestionInfo> = fields(approval)
        .into_iter()
        .map(|f| QuestionInfo {
            question: f.question,
            header: source.clone(),
            options: f
                .choices
                .iter()
                .map(|(_, label)| QuestionOption { label: label.clone(), description: String::new() })
                .collect(),
            multiple: f.multiple,
            custom: true,
        })
        .collect();
    match questions.first_mut() {
        Some(first) => first.question = format!("{message}\n{}", first.question),
        None => questions.push(QuestionInfo {
            question: message.to_owned(),
            header: source,
            options: Vec::new(),
            multiple: false,
            custom: true,
        }),
    }
    questions
}

/// The fields a reply fills in: the i-th answer is the i-th field's.
pub fn fill(approval: &Approval, answers: &[Vec<String>]) -> Value {
    let mut out = Map::new();
    for (field, answer) in fields(approval).into_iter().zip(answers) {
        let value = |label: &String| {
            field
                .choices
                .iter()
                .find(|(_, l)| l == label)
                .map_or_else(|| Value::String(label.clone()), |(v, _)| v.clone())
        };
        let picked: Vec<Value> = answer.iter().filter(|a| !a.trim().is_empty()).map(value).collect();
        match (field.multiple, picked.len()) {
            (_, 0) => {}
            (true, _) => {
                out.insert(field.name, Value::Array(picked));
            }
            (false, _) => {
                out.insert(field.name, picked.into_iter().next().expect("one answer"));
            }
        }
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn approval() -> Approval {
        serde_json::from_value(json!({
            "id": "per_01jd0000000000000000000001", "runId": "run_01jd0000000000000000000002",
            "sessionId": "ses_01jd0000000000000000000003", "ownerId": "usr_01jd0000000000000000000004",
            "toolCallId": "c1", "tool": "everything_ask", "kind": "provide_input",
            "payload": {"live": true, "source": "everything", "question": "Who are you?", "fields": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "title": "Name"},
                    "ok": {"type": "boolean", "description": "Agree"},
                    "pet": {"type": "string", "enum": ["p1", "p2"], "enumNames": ["Cats", "Dogs"]},
                    "fish": {"type": "array", "items": {"anyOf": [{"const": "f1", "title": "Tuna"}, {"const": "f2", "title": "Trout"}]}},
                },
            }},
            "status": "pending", "createdAt": 0, "expiresAt": 1
        }))
        .expect("an approval")
    }

    #[test]
    fn each_field_is_a_question_and_the_answers_fill_them() {
        let approval = approval();
        // In the order the schema's fields are kept (by name).
        let asked = questions(&approval);
        let texts: Vec<&str> = asked.iter().map(|q| q.question.as_str()).collect();
        assert_eq!(texts, ["Who are you?\nfish", "Name", "ok: Agree", "pet"]);
        assert_eq!(asked[0].header, "everything");
        assert!(asked[0].multiple);
        assert_eq!(asked[2].options.iter().map(|o| o.label.as_str()).collect::<Vec<_>>(), ["Yes", "No"]);
        let answers =
            [vec!["Tuna".into(), "Trout".into()], vec!["Ada".into()], vec!["Yes".into()], vec!["Dogs".into()]];
        assert_eq!(fill(&approval, &answers), json!({"name": "Ada", "ok": true, "pet": "p2", "fish": ["f1", "f2"]}));
        assert_eq!(fill(&approval, &[vec![], vec!["Ada".into()]]), json!({"name": "Ada"}));
    }
}
