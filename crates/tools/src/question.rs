//! The `question` tool: the model asks the person to pick an option or type an answer,
//! and the run waits for it — seed 003's `select_option` / `provide_input` interrupts,
//! shown on the hub as `agent.ask_user`. It is answered through the approval routes
//! like any approval: `{"fill": {"answer": "…"}}` (with the call's other arguments, or
//! without them: only `answer` is read); a reject tells the model the person declined.
//!
//! An "Other" free-text answer is always allowed (seed 002: "an implicit Other option is
//! always available"), so an answer need not be one of the options. The tool itself
//! does nothing but hand the answer back; every call asks (see `Tool::asks`), so no
//! rule can let the model answer its own question — a rule can only deny it.

use crate::call::parse_args;
use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};
use spool_engine::{Ask, Tool, ToolContext, ToolOutput, ToolSpec};
use spool_protocol::ApprovalKind;

/// The tool's name, as the model calls it.
pub(crate) const NAME: &str = "question";
/// Longest question, option label or description, and answer, in bytes.
const MAX_TEXT: usize = 4096;
/// Most options one question offers.
const MAX_OPTIONS: usize = 20;

/// Asks the person a question and returns the answer.
#[derive(Clone, Copy, Debug, Default)]
pub struct Question;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct QuestionArgs {
    question: String,
    #[serde(default)]
    options: Vec<Choice>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Choice {
    label: String,
    description: Option<String>,
}

impl QuestionArgs {
    /// The arguments, checked against the limits the schema states.
    fn read(args: &Value) -> Result<Self, String> {
        let parsed: QuestionArgs = parse_args(NAME, args.clone()).map_err(|e| e.to_string())?;
        if parsed.question.trim().is_empty() {
            return Err("question: `question` is empty".into());
        }
        if parsed.options.len() > MAX_OPTIONS {
            return Err(format!("question: at most {MAX_OPTIONS} options"));
        }
        let texts = parsed.options.iter().flat_map(|c| std::iter::once(&c.label).chain(c.description.as_ref()));
        if std::iter::once(&parsed.question).chain(texts).any(|t| t.len() > MAX_TEXT) {
            return Err(format!("question: a question, option or answer is longer than {MAX_TEXT} bytes"));
        }
        Ok(parsed)
    }
}

#[async_trait]
impl Tool for Question {
    /// It changes nothing, so plan mode offers it too.
    fn available_in(&self, _mode: spool_protocol::SessionMode) -> bool {
        true
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: NAME.into(),
            description: "Ask the person a question and wait for the answer. Offer options when there are a few \
                          sensible answers; the person may always answer in their own words instead."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "question": {"type": "string", "description": "The question, in one or two sentences."},
                    "options": {
                        "type": "array",
                        "maxItems": MAX_OPTIONS,
                        "items": {
                            "type": "object",
                            "properties": {
                                "label": {"type": "string"},
                                "description": {"type": "string"}
                            },
                            "required": ["label"],
                            "additionalProperties": false
                        }
                    }
                },
                "required": ["question"],
                "additionalProperties": false
            }),
        }
    }

    fn main_argument(&self, args: &Value) -> Option<String> {
        args.get("question")?.as_str().map(str::to_owned)
    }

    fn describe(&self, args: &Value) -> String {
        match self.main_argument(args) {
            Some(q) => format!("question: {q}"),
            None => "question".into(),
        }
    }

    fn check(&self, args: &Value) -> Result<(), String> {
        // The model never fills in `answer`: only a person's decision does.
        QuestionArgs::read(args).map(drop)
    }

    fn asks(&self, args: &Value) -> Option<Ask> {
        // A malformed call asks nothing: `check` failed it already.
        let parsed = QuestionArgs::read(args).ok()?;
        let kind = if parsed.options.is_empty() { ApprovalKind::ProvideInput } else { ApprovalKind::SelectOption };
        let options: Vec<Value> =
            parsed.options.iter().map(|c| json!({"label": c.label, "description": c.description})).collect();
        let mut payload = serde_json::Map::new();
        payload.insert("question".into(), parsed.question.into());
        payload.insert("options".into(), options.into());
        payload.insert("other".into(), true.into());
        Some(Ask { kind, payload })
    }

    async fn call(&self, args: Value, _ctx: &ToolContext) -> ToolOutput {
        // Only the answer counts: a decision may fill in `{"answer": …}` alone.
        match args.get("answer") {
            Some(Value::String(answer)) if answer.len() > MAX_TEXT => {
                ToolOutput::error(format!("question: the answer is longer than {MAX_TEXT} bytes"))
            }
            Some(Value::String(answer)) if !answer.trim().is_empty() => {
                ToolOutput::ok(format!("The person answered: {answer}"))
            }
            Some(Value::String(_)) | None | Some(Value::Null) => {
                ToolOutput::error("The person went on without answering the question.")
            }
            Some(_) => ToolOutput::error("question: `answer` must be a string"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_make_a_choice_and_none_an_input_with_other_always_allowed() {
        let choice = Question.asks(&json!({"question": "Which?", "options": [{"label": "a"}, {"label": "b"}]}));
        let choice = choice.expect("asks");
        assert_eq!(choice.kind, ApprovalKind::SelectOption);
        assert_eq!(choice.payload["options"][1]["label"], "b");
        assert_eq!(choice.payload["other"], true);
        let input = Question.asks(&json!({"question": "Name?"})).expect("asks");
        assert_eq!(input.kind, ApprovalKind::ProvideInput);
        assert_eq!(Question.asks(&json!({"question": "  "})), None, "an empty question asks nothing");
        assert_eq!(Question.asks(&json!({"question": "x", "colour": 1})), None, "unknown arguments ask nothing");
        let answered_by_the_model = Question.check(&json!({"question": "x", "answer": "mine"}));
        assert!(answered_by_the_model.is_err(), "the model cannot answer its own question");
        let many: Vec<Value> = (0..=MAX_OPTIONS).map(|i| json!({"label": i.to_string()})).collect();
        assert_eq!(Question.asks(&json!({"question": "x", "options": many})), None);
    }

    #[test]
    fn arguments_against_the_schema_are_refused_before_anything_is_asked() {
        let valid = json!({"question": "Which?", "options": [{"label": "a", "description": "the first"}]});
        assert_eq!(Question.check(&valid), Ok(()));
        let broken = [
            (json!({"question": 42}), "invalid type: integer `42`, expected a string"),
            (json!({"question": "x", "options": "a"}), "invalid type: string \"a\", expected a sequence"),
            (json!({"question": "x", "options": [{"label": 1}]}), "invalid type: integer `1`, expected a string"),
            (json!({"options": []}), "missing field `question`"),
            (json!({"question": "x", "options": [{}]}), "missing field `label`"),
            (json!({"question": "x", "verbose": true}), "unknown field `verbose`"),
            (json!([valid.clone()]), "expected a JSON object, got an array"),
        ];
        for (args, reason) in broken {
            let refused = Question.check(&args).expect_err("refused");
            assert!(refused.starts_with(&format!("invalid arguments for question: {reason}")), "{args}: {refused}");
            assert_eq!(Question.asks(&args), None, "{args} asks nothing");
        }
    }

    #[tokio::test]
    async fn the_answer_comes_back_and_no_answer_says_so() {
        let ctx = ToolContext {
            root: std::env::temp_dir(),
            root_id: None,
            cancel: tokio_util::sync::CancellationToken::new(),
            data_dir: None,
            progress: Default::default(),
            asker: Default::default(),
            sampler: Default::default(),
        };
        let answered = Question.call(json!({"question": "Which?", "answer": "blue"}), &ctx).await;
        assert_eq!(answered, ToolOutput::ok("The person answered: blue"));
        let silent = Question.call(json!({"question": "Which?"}), &ctx).await;
        assert!(silent.is_error, "{silent:?}");
        let filled_alone = Question.call(json!({"answer": "red"}), &ctx).await;
        assert_eq!(filled_alone, ToolOutput::ok("The person answered: red"), "a fill may carry the answer alone");
        let bad = Question.call(json!({"answer": 3}), &ctx).await;
        assert!(bad.is_error && bad.text.contains("string"), "{bad:?}");
    }
}
