use futures::StreamExt;
use spool_client::protocol::api::PromptAnswer;
use spool_client::{Client, Event, StreamOptions, finished};

/// Asks `question` in a new session of the project directory `project` and returns the
/// answer once the run has ended, however often the connection dropped meanwhile.
async fn ask(server: &str, project: &str, question: &str) -> Result<String, Box<dyn std::error::Error>> {
    let client = Client::new(server)?; // `.with_token(token)` when auth is on
    let project = client.create_project(project, None).await?;
    let session = client.create_session(&project.id, None).await?.id;
    let mut stream = client.follow(&session, StreamOptions::default()).await?;
    let PromptAnswer::Started(run) = client.say(&session, question).await? else {
        return Err("a new session has no run to queue behind".into());
    };
    while let Some(update) = stream.next().await {
        match &update.event {
            Event::Disconnected { reason, retry_in } => eprintln!("lost the stream ({reason}); again in {retry_in:?}"),
            Event::Failed { error } => return Err(error.clone().into()),
            _ => {}
        }
        // `update.state` is the session folded from the snapshot and every frame since.
        if let Some(done) = finished(&update.state, &run.run_id) {
            return Ok(done.text);
        }
    }
    Err("the stream ended".into())
}
