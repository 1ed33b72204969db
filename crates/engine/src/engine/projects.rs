//! The engine's projects: a directory a user works in, registered once, named, renamed
//! and deleted (its sessions stopped and unloaded with it).

use super::*;

/// `engine.projects()`: registering, naming and deleting a user's projects.
#[derive(Clone, Copy)]
pub struct Projects<'a> {
    pub(crate) engine: &'a Engine,
}

impl Projects<'_> {
    /// The canonical directory `path` names, if `owner` may have a project there: under
    /// their project roots (403 `outside_roots`, the same for existing and missing
    /// paths) and clear of the data directory (403 `data_dir`); see [`crate::roots`].
    pub async fn dir(&self, owner: &UserId, path: &str) -> Result<String> {
        if path.trim().is_empty() || path.len() > MAX_PATH {
            return Err(EngineError::invalid("invalid_path", format!("path must be 1 to {MAX_PATH} bytes")));
        }
        let auth_on = self.engine.inner.auth.auth_required().await?;
        let engine = self.engine.clone();
        let (user, requested) = (owner.clone(), path.to_owned());
        let canonical =
            tokio::task::spawn_blocking(move || engine.inner.fence.place_project(&user, auth_on, &requested))
                .await
                .map_err(|e| EngineError::invalid("invalid_path", format!("resolving the path failed: {e}")))??;
        Ok(canonical
            .to_str()
            .ok_or_else(|| EngineError::invalid("invalid_path", "the path is not valid UTF-8"))?
            .to_owned())
    }

    pub async fn create(&self, owner: &UserId, path: &str, name: Option<String>) -> Result<Project> {
        let canonical = self.dir(owner, path).await?;
        // Held until the project is stored: two users racing for one directory here
        // cannot both pass the check (see [`crate::overlap`]), nor one user's racing
        // registrations pass the cap together.
        let _registering = self.engine.inner.registering.lock().await;
        let caps = &self.engine.inner.config.caps;
        if self.engine.store().list_projects(owner).await?.len() >= caps.max_projects {
            return Err(crate::caps::projects_full(caps));
        }
        self.engine.check_claims(owner, &canonical, self.engine.inner.auth.auth_required().await?).await?;
        let name = match name {
            Some(n) => check_name(&n, "name")?,
            None => std::path::Path::new(&canonical)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| canonical.clone()),
        };
        let now = now_ms();
        let project = Project {
            id: ProjectId::new(),
            owner_id: owner.clone(),
            name,
            dir: crate::roots::dir_identity(std::path::Path::new(&canonical)),
            path: canonical,
            created_at: now,
            updated_at: now,
        };
        self.engine.store().insert_project(&project).await.map_err(|e| match e {
            crate::StoreError::Conflict(_) => EngineError::Conflict {
                code: "project_exists",
                message: format!("the directory {:?} is already registered as a project", project.path),
            },
            other => other.into(),
        })?;
        self.engine.inner.lists.projects_changed(&project.owner_id, &project.id);
        Ok(project)
    }

    pub async fn list(&self, owner: &UserId) -> Result<Vec<Project>> {
        Ok(self.engine.store().list_projects(owner).await?)
    }

    pub async fn get(&self, owner: &UserId, id: &ProjectId) -> Result<Project> {
        match self.engine.store().get_project(id).await? {
            Some(p) if &p.owner_id == owner => Ok(p),
            _ => Err(EngineError::NotFound("project")),
        }
    }

    pub async fn rename(&self, owner: &UserId, id: &ProjectId, name: &str) -> Result<Project> {
        let mut project = self.get(owner, id).await?;
        project.name = check_name(name, "name")?;
        project.updated_at = now_ms();
        self.engine.store().update_project(&project).await?;
        self.engine.inner.lists.projects_changed(&project.owner_id, &project.id);
        Ok(project)
    }

    /// Deletes a project and, with it, all its sessions, their messages and runs. Active
    /// runs are aborted first and open streams end. Files on disk are never touched.
    pub async fn delete(&self, owner: &UserId, id: &ProjectId) -> Result<()> {
        let project = self.get(owner, id).await?;
        let mut doomed = self.engine.store().list_sessions(&project.id, false).await?;
        doomed.extend(self.engine.store().list_sessions(&project.id, true).await?);
        let loaded: Vec<(SessionId, Arc<Loaded>)> = (self.engine.inner.sessions.all().into_iter())
            .filter(|l| l.events.read(|s| s.session.project_id == project.id))
            .map(|l| (l.events.session_id().clone(), l))
            .collect();
        // Under their control locks, so a stopped run's queue cannot start its next prompt
        // before the delete takes the queues with the sessions.
        let mut controls = Vec::with_capacity(loaded.len());
        for (_, l) in &loaded {
            controls.push(l.control.lock().await);
            stop_active(l).await;
        }
        // Delete first, then drop what is in memory: a stream opened meanwhile finds the
        // session gone instead of loading it back.
        let deleted = self.engine.store().delete_project(&project.id).await;
        drop(controls);
        for (session_id, l) in loaded {
            self.engine.unload(&session_id, &l).await;
        }
        // Sessions deleted before a failure stay deleted: tell pages either way.
        for session in doomed {
            self.engine.inner.lists.change(
                &project.owner_id,
                crate::lists::Change::SessionDeleted { session: session.id, project: project.id.clone() },
            );
        }
        self.engine.inner.lists.projects_changed(&project.owner_id, &project.id);
        deleted?;
        // Its files' snapshots go with it (retention also deletes a repository whose
        // project is gone, should this fail or another node hold it).
        if let Some(snapshots) = &self.engine.inner.config.snapshots {
            snapshots.forget(&project.id).await;
        }
        Ok(())
    }
}
