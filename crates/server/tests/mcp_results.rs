//! What a real MCP server's results become, with `@modelcontextprotocol/server-everything`
//! over stdio through a real Spool server: an image, structured content, resource links
//! and an embedded resource each reach the session (and so the model, which reads the
//! stored result) as the text README's MCP section promises: the image as its type and
//! size, never its base64; structured content once, not beside the text block that
//! already holds it; a link as its URI, name, type and description; an embedded text
//! resource as its text. And the tools are offered namespaced with the server's schema.

use crate::mcp_support::{allow, everything, everything_entry, serve, stdio_source};

use serde_json::{Value, json};

/// The one tool result a call of `tool` with `args` left in `session` (its text and
/// whether it is an error), after the results before it.
async fn call(server: &crate::common::TestServer, session: &str, tool: &str, args: Value) -> (String, bool) {
    let before = server.tool_results(session).await.len();
    let run = server.run_prompt(session, &format!("tool: everything_{tool} {args}")).await;
    assert_eq!(run["status"], "completed", "{run}");
    let mut results = server.tool_results(session).await;
    assert_eq!(results.len(), before + 1, "{results:?}");
    let (name, text, is_error) = results.pop().expect("a result");
    assert_eq!(name, format!("everything_{tool}"));
    (text, is_error)
}

#[tokio::test]
async fn images_structured_content_and_resources_reach_the_session_as_text() {
    let Some(index) = everything() else { return };
    let (server, session) = serve(stdio_source(everything_entry(&index))).await;
    allow(&server, &session, "everything_*").await;

    // The PNG's 4033 bytes, not the 5.4 KB of base64 the server sent.
    let (text, is_error) = call(&server, &session, "get-tiny-image", json!({})).await;
    assert!(!is_error, "{text}");
    let image = "Here's the image you requested:\n[image image/png, 4033 bytes]\nThe image above is the MCP logo.";
    assert_eq!(text, image);

    // The server sends the weather twice, as a JSON text block and as structured
    // content: the model reads it once.
    let (text, is_error) = call(&server, &session, "get-structured-content", json!({"location": "New York"})).await;
    assert!(!is_error, "{text}");
    let weather: Value = serde_json::from_str(&text).expect("one JSON value, not two");
    assert_eq!(weather, json!({"temperature": 33, "conditions": "Cloudy", "humidity": 82}));

    let (text, is_error) = call(&server, &session, "get-resource-links", json!({"count": 2})).await;
    assert!(!is_error, "{text}");
    let links = "Here are 2 resource links to resources available in this server:\n\
                 [resource link: demo://resource/dynamic/blob/1 (Blob Resource 1, text/plain): Resource 1: \
                 plaintext resource]\n\
                 [resource link: demo://resource/dynamic/text/2 (Text Resource 2, text/plain): Resource 2: plaintext \
                 resource]";
    assert_eq!(text, links);

    let args = json!({"resourceType": "Text", "resourceId": 3});
    let (text, is_error) = call(&server, &session, "get-resource-reference", args).await;
    assert!(!is_error, "{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert_eq!(lines[0], "Returning resource reference for Resource 3:");
    assert!(lines[1].starts_with("Resource 3: This is a plaintext resource created at "), "{text}");
    assert_eq!(lines[2], "You can access this resource using the URI: demo://resource/dynamic/text/3");
}

/// The tools as the model is offered them: namespaced, with the server's description and
/// its JSON schema for the arguments.
#[tokio::test]
async fn tools_are_offered_namespaced_with_the_servers_description_and_schema() {
    let Some(index) = everything() else { return };
    let source = stdio_source(everything_entry(&index));
    let project = tempfile::tempdir().expect("project");
    let root = project.path().canonicalize().expect("root");
    let scope = spool_engine::ToolScope { session_id: spool_protocol::SessionId::new(), root };
    let tools = spool_engine::ToolSource::tools(&*source, &scope).await;
    let spec = tools.iter().map(|t| t.spec()).find(|s| s.name == "everything_get-sum").expect("get-sum offered");
    assert_eq!(spec.description, "Returns the sum of two numbers");
    let schema = &spec.parameters;
    assert_eq!(schema["type"], "object", "{schema}");
    assert_eq!(schema["properties"]["a"], json!({"type": "number", "description": "First number"}), "{schema}");
    assert_eq!(schema["properties"]["b"], json!({"type": "number", "description": "Second number"}), "{schema}");
    assert_eq!(schema["required"], json!(["a", "b"]), "{schema}");
    assert!(tools.iter().all(|t| t.spec().name.starts_with("everything_")), "every tool namespaced");
}
