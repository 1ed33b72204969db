//! The engine's tool sources as a person sees them (`GET /api/mcp`, the Rules panel):
//! each configured source (an MCP server) with its state and tools, whether a session
//! is offered it, and the person's choice to turn one on or off for a session.
//!
//! A session is offered a source by the source's own default for its project
//! ([`ToolSource::serves`]: an MCP server's `projects`) unless the person chose
//! otherwise for that session; the choice is kept in the store and read at every turn
//! ([`crate::tool_source`]).

use super::*;
use crate::tool_source::{SourceChoices, source_enabled};
use crate::{SourceState, SourceStatus, ToolScope, ToolSource};

/// `engine.tool_sources()`: the configured tool sources and a session's choices.
#[derive(Clone, Copy)]
pub struct ToolSources<'a> {
    pub(crate) engine: &'a Engine,
}

/// One source, and, when asked about a session, whether that session is offered it.
#[derive(Clone, Debug, PartialEq)]
pub struct SourceView {
    pub status: SourceStatus,
    pub session: Option<SessionUse>,
}

/// Whether one session is offered a source, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionUse {
    /// Whether the session's next turn offers the source's tools.
    pub enabled: bool,
    /// What the source says for the session's project when the person chose nothing.
    pub by_default: bool,
    /// The person's choice for this session, if they made one.
    pub choice: Option<bool>,
}

/// A session as the sources see it: its scope and its choices.
struct SessionSide {
    scope: ToolScope,
    choices: SourceChoices,
}

impl ToolSources<'_> {
    /// Every configured source, in the order turns ask them; with `session` (one of
    /// `owner`'s), whether that session is offered each.
    pub async fn list(&self, owner: &UserId, session: Option<&SessionId>) -> Result<Vec<SourceView>> {
        let side = match session {
            Some(id) => Some(self.session_side(owner, id).await?),
            None => None,
        };
        Ok(self.sources().iter().map(|source| view(&**source, side.as_ref())).collect())
    }

    /// Turns the source named `name` on or off for `owner`'s session `id` from its next
    /// turn on (a run going on now included), and returns it as [`Self::list`] does.
    pub async fn choose(&self, owner: &UserId, id: &SessionId, name: &str, enabled: bool) -> Result<SourceView> {
        let source = self.sources().iter().find(|s| s.name() == name).ok_or(EngineError::NotFound("tool source"))?;
        let session = self.engine.owned_session(owner, id).await?;
        self.engine.store().set_source_choice(&session.id, &session.owner_id, name, enabled).await?;
        let side = self.session_side(owner, id).await?;
        Ok(view(&**source, Some(&side)))
    }

    /// Tries the source named `name` again if it was given up on ([`ToolSource::retry`]),
    /// and returns it as [`Self::list`] does (no session). Any signed-in person may: it
    /// only lets the next turn that needs the server start it again.
    pub fn retry(&self, name: &str) -> Result<(bool, SourceView)> {
        let source = self.sources().iter().find(|s| s.name() == name).ok_or(EngineError::NotFound("tool source"))?;
        let retried = source.retry();
        Ok((retried, view(&**source, None)))
    }

    fn sources(&self) -> &[Arc<dyn ToolSource>] {
        self.engine.inner.env.tools.sources()
    }

    async fn session_side(&self, owner: &UserId, id: &SessionId) -> Result<SessionSide> {
        let session = self.engine.owned_session(owner, id).await?;
        let store = self.engine.store();
        let project = store.get_project(&session.project_id).await?.ok_or(EngineError::NotFound("project"))?;
        // The root a run's turns name (`Loaded::root`), so a source judges the same path.
        let scope = ToolScope { session_id: session.id.clone(), root: PathBuf::from(project.path) };
        Ok(SessionSide { scope, choices: store.get_source_choices(&session.id).await? })
    }
}

fn view(source: &dyn ToolSource, side: Option<&SessionSide>) -> SourceView {
    let status = source.status().unwrap_or_else(|| SourceStatus {
        name: source.name(),
        transport: "other".into(),
        target: String::new(),
        state: SourceState::Idle,
        tools: Vec::new(),
        connections: 0,
    });
    let session = side.map(|side| SessionUse {
        enabled: source_enabled(source, &side.scope, &side.choices),
        by_default: source.serves(&side.scope),
        choice: side.choices.get(&source.name()).copied(),
    });
    SourceView { status, session }
}
