//! `todo_write`: the agent's todo list for the session. The model sends the whole list
//! every time (as OpenCode's and Claude Code's todo tools do), so a call can never
//! leave it half-updated, and the run keeps it in the session's state (stored, shown
//! by every view; see `ToolOutput::todos`). The tool itself touches no file: it is safe,
//! and the built-in permission rules allow it.
//!
//! Checked strictly, before anything is kept, so the model reads exactly what to fix:
//! at most [`MAX_TODOS`] items; each `content` one line of 1 to [`MAX_CONTENT_CHARS`]
//! characters; `status` one of pending, in_progress, completed, cancelled; `priority`
//! (optional) high, medium or low; `id` (optional) 1 to [`MAX_ID_CHARS`] letters,
//! digits and `_-.`, unique in the list. **At most one item is `in_progress`**: the
//! list then always says what the agent is doing now, which is what a person watching
//! it (and the web UI's checklist) wants to know. An item without an `id` gets the
//! smallest number not already used as one (`"1"`, `"2"`, …), and the result lists
//! every id, so the model can keep naming its items.

use crate::call::parse_args;
use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};
use spool_engine::{Tool, ToolContext, ToolOutput, ToolSpec};
use spool_protocol::hub::{Todo, TodoPriority, TodoStatus};
use std::collections::HashSet;

/// The tool's name, as the model calls it.
pub(crate) const NAME: &str = "todo_write";
/// Most items one list holds.
pub const MAX_TODOS: usize = 100;
/// Longest `content`, in characters.
pub const MAX_CONTENT_CHARS: usize = 1000;
/// Longest `id`, in characters.
pub const MAX_ID_CHARS: usize = 64;

/// Replaces the session's todo list.
#[derive(Clone, Copy, Debug, Default)]
pub struct TodoWrite;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    todos: Vec<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Item {
    content: String,
    status: TodoStatus,
    priority: Option<TodoPriority>,
    id: Option<String>,
}

/// The arguments as the list to keep, or why they are refused (the model's error).
fn read(args: &Value) -> Result<Vec<Todo>, String> {
    let refused = |reason: String| format!("invalid arguments for {NAME}: {reason}");
    let parsed: Args = parse_args(NAME, args.clone()).map_err(|e| e.to_string())?;
    if parsed.todos.len() > MAX_TODOS {
        return Err(refused(format!("at most {MAX_TODOS} todos (got {})", parsed.todos.len())));
    }
    let mut items = Vec::with_capacity(parsed.todos.len());
    for (i, raw) in parsed.todos.into_iter().enumerate() {
        let item: Item = serde_json::from_value(raw).map_err(|e| refused(format!("todos[{i}]: {e}")))?;
        let content = item.content.trim();
        if content.is_empty() || content.chars().count() > MAX_CONTENT_CHARS || content.chars().any(char::is_control) {
            return Err(refused(format!("todos[{i}].content must be one line of 1 to {MAX_CONTENT_CHARS} characters")));
        }
        if let Some(id) = &item.id
            && (id.is_empty()
                || id.chars().count() > MAX_ID_CHARS
                || !id.chars().all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c)))
        {
            return Err(refused(format!("todos[{i}].id must be 1 to {MAX_ID_CHARS} letters, digits, `_`, `-` or `.`")));
        }
        items.push(Item { content: content.to_owned(), ..item });
    }
    let mut taken = HashSet::new();
    for (i, id) in items.iter().enumerate().filter_map(|(i, t)| Some((i, t.id.as_deref()?))) {
        if !taken.insert(id.to_owned()) {
            return Err(refused(format!("todos[{i}].id {id:?} is used twice; ids are unique")));
        }
    }
    let working: Vec<usize> =
        items.iter().enumerate().filter(|(_, t)| t.status == TodoStatus::InProgress).map(|(i, _)| i).collect();
    if working.len() > 1 {
        let at: Vec<String> = working.iter().map(|i| format!("todos[{i}]")).collect();
        return Err(refused(format!(
            "at most one todo is in_progress at a time ({} are); finish one or set it back to pending",
            at.join(", ")
        )));
    }
    let mut next = 0u64;
    Ok(items
        .into_iter()
        .map(|item| {
            let id = item.id.unwrap_or_else(|| {
                loop {
                    next += 1;
                    if !taken.contains(&next.to_string()) {
                        break next.to_string();
                    }
                }
            });
            Todo {
                content: item.content,
                status: item.status,
                active_form: None,
                priority: item.priority,
                id: Some(id),
            }
        })
        .collect())
}

/// What the model reads back: the list as kept, one line per item with its id.
fn summary(todos: &[Todo]) -> String {
    if todos.is_empty() {
        return "The todo list is now empty.".into();
    }
    let count = |s: TodoStatus| todos.iter().filter(|t| t.status == s).count();
    let mut counts = Vec::new();
    for status in [TodoStatus::InProgress, TodoStatus::Pending, TodoStatus::Completed, TodoStatus::Cancelled] {
        if count(status) > 0 {
            counts.push(format!("{} {}", count(status), status.as_str().replace('_', " ")));
        }
    }
    let items = if todos.len() == 1 { "1 item".to_owned() } else { format!("{} items", todos.len()) };
    let mut out = format!("Todo list saved: {items} ({}).", counts.join(", "));
    for todo in todos {
        let mark = match todo.status {
            TodoStatus::Pending => "[ ]",
            TodoStatus::InProgress => "[>]",
            TodoStatus::Completed => "[x]",
            TodoStatus::Cancelled => "[-]",
        };
        let id = todo.id.as_deref().unwrap_or("?");
        out.push_str(&format!("\n{mark} {id}: {}", todo.content));
        if let Some(p) = todo.priority {
            out.push_str(&format!(" ({} priority)", p.as_str()));
        }
    }
    out
}

#[async_trait]
impl Tool for TodoWrite {
    /// It changes the session's list, not the project, so plan mode offers it too.
    fn available_in(&self, _mode: spool_protocol::SessionMode) -> bool {
        true
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: NAME.into(),
            description: "Replace your todo list for this session with `todos`, the whole list every time. Use it \
                          to plan work of several steps and to show progress: mark an item in_progress when you \
                          start it (at most one at a time) and completed as soon as it is done; cancel items that \
                          no longer apply. The person sees the list as a checklist."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "todos": {
                        "type": "array",
                        "maxItems": MAX_TODOS,
                        "description": "The whole list, in order.",
                        "items": {
                            "type": "object",
                            "properties": {
                                "content": {"type": "string", "maxLength": MAX_CONTENT_CHARS, "description": "The task, in one line."},
                                "status": {"type": "string", "enum": ["pending", "in_progress", "completed", "cancelled"]},
                                "priority": {"type": "string", "enum": ["high", "medium", "low"]},
                                "id": {"type": "string", "maxLength": MAX_ID_CHARS, "description": "Keep an item's id when you rewrite the list; new items may leave it out."}
                            },
                            "required": ["content", "status"],
                            "additionalProperties": false
                        }
                    }
                },
                "required": ["todos"],
                "additionalProperties": false
            }),
        }
    }

    fn describe(&self, args: &Value) -> String {
        match args.get("todos").and_then(Value::as_array) {
            Some(todos) => format!("{NAME} ({} items)", todos.len()),
            None => NAME.into(),
        }
    }

    fn check(&self, args: &Value) -> Result<(), String> {
        read(args).map(drop)
    }

    async fn call(&self, args: Value, _ctx: &ToolContext) -> ToolOutput {
        match read(&args) {
            Ok(todos) => ToolOutput::ok(summary(&todos)).with_todos(todos),
            Err(reason) => ToolOutput::error(reason),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> ToolContext {
        ToolContext {
            root: std::env::temp_dir(),
            root_id: None,
            cancel: tokio_util::sync::CancellationToken::new(),
            data_dir: None,
            progress: Default::default(),
            asker: Default::default(),
            sampler: Default::default(),
        }
    }

    #[tokio::test]
    async fn the_whole_list_is_kept_with_ids_given_to_items_without_one() {
        let args = json!({"todos": [
            {"content": "  Read the code  ", "status": "completed", "id": "2"},
            {"content": "Write the tool", "status": "in_progress", "priority": "high"},
            {"content": "Test it", "status": "pending", "priority": null},
            {"content": "Port to Go", "status": "cancelled", "priority": "low"},
        ]});
        let out = TodoWrite.call(args, &ctx()).await;
        assert!(!out.is_error, "{out:?}");
        let todos = out.todos.expect("a new list");
        let ids: Vec<&str> = todos.iter().filter_map(|t| t.id.as_deref()).collect();
        assert_eq!(ids, ["2", "1", "3", "4"], "numbers not taken by a given id, in order");
        assert_eq!(todos[0].content, "Read the code", "trimmed");
        assert_eq!(todos[1].priority, Some(TodoPriority::High));
        assert_eq!(todos[2].priority, None);
        assert_eq!(
            out.text,
            "Todo list saved: 4 items (1 in progress, 1 pending, 1 completed, 1 cancelled).\n\
             [x] 2: Read the code\n[>] 1: Write the tool (high priority)\n[ ] 3: Test it\n\
             [-] 4: Port to Go (low priority)"
        );
        let cleared = TodoWrite.call(json!({"todos": []}), &ctx()).await;
        assert_eq!(cleared.todos, Some(vec![]), "an empty list clears it");
        assert_eq!(cleared.text, "The todo list is now empty.");
    }

    #[tokio::test]
    async fn lists_past_the_limits_are_refused_whole_saying_what_to_fix() {
        let item = |status: &str| json!({"content": "x", "status": status});
        let many: Vec<Value> = (0..=MAX_TODOS).map(|_| item("pending")).collect();
        let long = "é".repeat(MAX_CONTENT_CHARS + 1);
        let id_64 = "a".repeat(MAX_ID_CHARS);
        assert!(
            TodoWrite
                .check(
                    &json!({"todos": [{"content": "é".repeat(MAX_CONTENT_CHARS), "status": "pending", "id": id_64}]})
                )
                .is_ok()
        );
        let refused = [
            (json!({"todos": many}), "at most 100 todos (got 101)"),
            (
                json!({"todos": [item("in_progress"), item("pending"), item("in_progress")]}),
                "at most one todo is in_progress at a time (todos[0], todos[2] are)",
            ),
            (
                json!({"todos": [{"content": long, "status": "pending"}]}),
                "todos[0].content must be one line of 1 to 1000 characters",
            ),
            (
                json!({"todos": [item("pending"), {"content": " \t", "status": "pending"}]}),
                "todos[1].content must be one line",
            ),
            (json!({"todos": [{"content": "two\nlines", "status": "pending"}]}), "todos[0].content must be one line"),
            (
                json!({"todos": [item("done")]}),
                "todos[0]: unknown variant `done`, expected one of `pending`, `in_progress`, `completed`, `cancelled`",
            ),
            (
                json!({"todos": [{"content": "x", "status": "pending", "priority": "urgent"}]}),
                "todos[0]: unknown variant `urgent`, expected one of `high`, `medium`, `low`",
            ),
            (json!({"todos": [{"content": "x"}]}), "todos[0]: missing field `status`"),
            (json!({"todos": [{"content": "x", "status": "pending", "done": true}]}), "todos[0]: unknown field `done`"),
            (json!({"todos": ["x"]}), "todos[0]: invalid type: string \"x\""),
            (json!({"todos": [{"content": "x", "status": "pending", "id": "a b"}]}), "todos[0].id must be 1 to 64"),
            (
                json!({"todos": [{"content": "x", "status": "pending", "id": "a".repeat(65)}]}),
                "todos[0].id must be 1 to 64",
            ),
            (
                json!({"todos": [{"content": "a", "status": "pending", "id": "7"}, {"content": "b", "status": "pending", "id": "7"}]}),
                "todos[1].id \"7\" is used twice",
            ),
            (json!({"todos": {"content": "x"}}), "invalid type: map, expected a sequence"),
            (json!({}), "missing field `todos`"),
        ];
        for (args, reason) in refused {
            let why = TodoWrite.check(&args).expect_err("refused");
            assert!(why.starts_with(&format!("invalid arguments for todo_write: {reason}")), "{args}: {why}");
            let out = TodoWrite.call(args.clone(), &ctx()).await;
            assert!(out.is_error && out.todos.is_none(), "{args}: nothing is kept: {out:?}");
        }
    }
}
