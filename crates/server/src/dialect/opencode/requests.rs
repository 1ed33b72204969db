//! The OpenCode API's request bodies and query parameters, as its SDKs send them, each
//! with the check its handler applies (`read`), so the routes in `routes/` and
//! the body fuzzing (`BODIES` there) parse a body the same way.

use super::wire::Reply;
use crate::error::ApiError;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use spool_engine::SessionPatch;
use spool_protocol::PermissionRule;
use utoipa::{IntoParams, ToSchema};

#[derive(Deserialize, Default, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct ListQuery {
    /// At most this many sessions.
    pub(crate) limit: Option<usize>,
    /// Only sessions whose title contains this (any case).
    pub(crate) search: Option<String>,
}

#[derive(Deserialize, Default, ToSchema)]
#[schema(as = opencode::CreateBody)]
pub(crate) struct CreateBody {
    pub(crate) title: Option<String>,
    #[serde(rename = "parentID")]
    pub(crate) parent_id: Option<String>,
}

impl CreateBody {
    pub(crate) fn read(bytes: &[u8]) -> Result<CreateBody, ApiError> {
        let body: CreateBody = body(bytes)?;
        if body.parent_id.is_some() {
            return Err(ApiError::bad_request("unsupported", "child sessions (parentID) are not supported"));
        }
        Ok(body)
    }
}

/// Distinguishes an absent field (`None`) from an explicit `null` (`Some(Null)`).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<serde_json::Value>, D::Error> {
    serde_json::Value::deserialize(d).map(Some)
}

#[derive(Deserialize, Default, ToSchema)]
#[schema(as = opencode::PatchTime)]
pub(crate) struct PatchTime {
    /// A timestamp archives the session; `null` or 0 restores it.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<f64>)]
    pub(crate) archived: Option<serde_json::Value>,
}

#[derive(Deserialize, ToSchema)]
#[schema(as = opencode::PatchRule)]
pub(crate) struct PatchRule {
    pub(crate) permission: String,
    pub(crate) pattern: Option<String>,
    pub(crate) action: spool_protocol::PermissionAction,
}

#[derive(Deserialize, Default, ToSchema)]
#[schema(as = opencode::PatchBody)]
pub(crate) struct PatchBody {
    pub(crate) title: Option<String>,
    pub(crate) time: Option<PatchTime>,
    pub(crate) permission: Option<Vec<PatchRule>>,
}

impl PatchBody {
    /// The body as the engine's patch.
    pub(crate) fn read(bytes: &[u8]) -> Result<SessionPatch, ApiError> {
        let body: PatchBody = body(bytes)?;
        // `time.archived` is a timestamp to archive, `null` or 0 to restore.
        let archived = body.time.and_then(|t| t.archived).map(|a| a.as_f64().is_some_and(|t| t > 0.0));
        let permissions = body.permission.map(|rules| {
            rules
                .into_iter()
                .map(|r| PermissionRule::new(&r.permission, r.pattern.as_deref().unwrap_or("*"), r.action))
                .collect()
        });
        Ok(SessionPatch { title: body.title, archived, permissions, ..SessionPatch::default() })
    }
}

#[derive(Deserialize, Default, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct MessagesQuery {
    /// The latest this many messages.
    pub(crate) limit: Option<usize>,
    /// Only messages before this message id of the session.
    pub(crate) before: Option<String>,
}

#[derive(Deserialize, ToSchema)]
#[schema(as = opencode::PartInput)]
pub(crate) struct PartInput {
    /// `text` or `file`; no other part can be prompted.
    #[serde(rename = "type")]
    pub(crate) kind: String,
    pub(crate) text: Option<String>,
    /// A `file` part's media type (the bytes are sniffed all the same).
    pub(crate) mime: Option<String>,
    /// A `file` part's name.
    pub(crate) filename: Option<String>,
    /// A `file` part's bytes: a `data:` URL (base64), or one of Spool's own
    /// `/api/attachments/att_…` URLs. Spool fetches no other URL, and a `file://` URL
    /// names a file on the client's machine, which Spool cannot read.
    pub(crate) url: Option<String>,
}

/// A prompt's model: seed 004's string (`"provider/model"`, or a bare model name) or the
/// SDK's `{providerID, modelID}`.
#[derive(Deserialize, ToSchema)]
#[schema(as = opencode::ModelChoice)]
#[serde(untagged)]
pub(crate) enum ModelChoice {
    Name(String),
    Ref {
        #[serde(rename = "providerID")]
        provider_id: Option<String>,
        #[serde(rename = "modelID")]
        model_id: String,
    },
}

impl ModelChoice {
    /// The configured model it names, if any: the whole name first (Spool's own names
    /// may hold a `/`), then the model part after the provider.
    pub(crate) fn configured<'a>(&self, models: impl IntoIterator<Item = &'a str> + Clone) -> Option<&'a str> {
        let whole = match self {
            ModelChoice::Name(name) => name.clone(),
            ModelChoice::Ref { provider_id: Some(provider), model_id } => format!("{provider}/{model_id}"),
            ModelChoice::Ref { provider_id: None, model_id } => model_id.clone(),
        };
        let model = match self {
            ModelChoice::Name(name) => name.split_once('/').map_or(name.as_str(), |(_, model)| model),
            ModelChoice::Ref { model_id, .. } => model_id,
        };
        [whole.as_str(), model].into_iter().find_map(|wanted| models.clone().into_iter().find(|m| *m == wanted))
    }
}

#[derive(Deserialize, ToSchema)]
#[schema(as = opencode::PromptBody)]
pub(crate) struct PromptBody {
    pub(crate) parts: Vec<PartInput>,
    #[serde(rename = "messageID")]
    pub(crate) message_id: Option<String>,
    pub(crate) model: Option<ModelChoice>,
    #[serde(rename = "noReply", default)]
    pub(crate) no_reply: bool,
}

impl PromptBody {
    /// The prompt's text (its text parts, one per line) and the rest of the body; its
    /// `file` parts are [`PromptBody::files`].
    pub(crate) fn read(bytes: &[u8]) -> Result<(String, PromptBody), ApiError> {
        let body: PromptBody =
            serde_json::from_slice(bytes).map_err(|e| ApiError::bad_request("invalid_body", e.to_string()))?;
        if body.no_reply {
            return Err(ApiError::bad_request("unsupported", "noReply is not supported: every prompt runs"));
        }
        let mut texts = Vec::new();
        for part in &body.parts {
            match (part.kind.as_str(), &part.text) {
                ("text", Some(text)) => texts.push(text.as_str()),
                ("file", _) => match part.url.as_deref() {
                    Some(url) if url.starts_with("file:") => {
                        return Err(ApiError::bad_request(
                            "unsupported_file_url",
                            "a file:// URL names a file on the client's machine, which Spool cannot read: \
                             send the file as a data URL",
                        ));
                    }
                    Some(_) => {}
                    None => return Err(ApiError::bad_request("invalid_part", "a file part needs a `url`")),
                },
                (kind, _) => {
                    return Err(ApiError::bad_request(
                        "unsupported_part",
                        format!("only text and file parts can be prompted, not {kind:?}"),
                    ));
                }
            }
        }
        Ok((texts.join("\n"), body))
    }

    /// The `file` parts, as the native prompt's (read and stored on submit).
    pub(crate) fn files(&self) -> Vec<spool_protocol::api::PromptPart> {
        let files = self.parts.iter().filter(|part| part.kind == "file");
        let file = |part: &PartInput| {
            let url = part.url.clone().unwrap_or_default();
            crate::dialect::shared::file_part(url, part.mime.clone(), part.filename.clone())
        };
        files.map(file).collect()
    }
}

#[derive(Deserialize, ToSchema)]
#[schema(as = opencode::RespondBody)]
pub(crate) struct RespondBody {
    pub(crate) response: Reply,
}

#[derive(Deserialize, ToSchema)]
#[schema(as = opencode::ReplyBody)]
pub(crate) struct ReplyBody {
    pub(crate) reply: Reply,
    pub(crate) message: Option<String>,
}

/// `POST /question/:id/reply`: one answer per question, each the labels picked (or the
/// person's own words).
#[derive(Deserialize, ToSchema)]
#[schema(as = opencode::QuestionReplyBody)]
pub(crate) struct QuestionReplyBody {
    pub(crate) answers: Vec<Vec<String>>,
}

impl QuestionReplyBody {
    pub(crate) fn read(bytes: &[u8]) -> Result<QuestionReplyBody, ApiError> {
        serde_json::from_slice(bytes).map_err(|e| ApiError::bad_request("invalid_body", e.to_string()))
    }

    /// The answer to Spool's one question: its labels, joined by ", " (empty when the
    /// person picked nothing).
    pub(crate) fn answer(&self) -> String {
        self.answers.first().map(|labels| labels.join(", ")).unwrap_or_default()
    }
}

#[derive(Deserialize, Default, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct EventQuery {
    /// `legacy`: also seed 004's per-token `message.part.updated` (text so far + delta).
    pub(crate) deltas: Option<String>,
}

impl RespondBody {
    pub(crate) fn read(bytes: &[u8]) -> Result<RespondBody, ApiError> {
        serde_json::from_slice(bytes).map_err(|e| ApiError::bad_request("invalid_body", e.to_string()))
    }
}

impl ReplyBody {
    pub(crate) fn read(bytes: &[u8]) -> Result<ReplyBody, ApiError> {
        serde_json::from_slice(bytes).map_err(|e| ApiError::bad_request("invalid_body", e.to_string()))
    }
}

/// A JSON body that may be absent (the SDK sends none for `session.create()`); a JSON
/// `null` says the same, as the document's nullable request body promises.
fn body<T: DeserializeOwned + Default>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice::<Option<T>>(bytes)
        .map(Option::unwrap_or_default)
        .map_err(|e| ApiError::bad_request("invalid_body", e.to_string()))
}
