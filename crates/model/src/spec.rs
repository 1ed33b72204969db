//! `from_spec`: a model from a `PROVIDER:MODEL` string and the environment, so the CLI,
//! the config file and a session's model switch all name models the same way. The
//! environment comes in as a function so callers can layer a config file over the
//! process environment, and tests need not touch the real one.

use crate::anthropic::{self, AnthropicConfig, AnthropicModel};
use crate::openai::{OpenAiConfig, OpenAiModel};
use crate::scripted::ScriptedModel;
use spool_engine::Model;
use std::sync::Arc;
use std::time::Duration;

pub const OPENAI_DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
pub const OLLAMA_DEFAULT_BASE_URL: &str = "http://127.0.0.1:11434/v1";

/// The providers `from_spec` knows, for error texts and help.
pub const PROVIDERS: &[&str] = &["openai", "anthropic", "ollama", "openai-compatible", "scripted"];

/// Builds the model a spec names. The spec is `PROVIDER:MODEL`, split at the first
/// colon so model ids with colons (`ollama:llama3.1:8b`) stay whole; the label is the
/// spec as given.
///
/// | Provider | Base URL (default) | Key |
/// |---|---|---|
/// | `openai` | `OPENAI_BASE_URL` (`https://api.openai.com/v1`) | `OPENAI_API_KEY`, required |
/// | `anthropic` | `ANTHROPIC_BASE_URL` (`https://api.anthropic.com`) | `ANTHROPIC_API_KEY`, required |
/// | `ollama` | `OLLAMA_BASE_URL` (`http://127.0.0.1:11434/v1`) | none |
/// | `openai-compatible` | `SPOOL_OPENAI_COMPATIBLE_BASE_URL`, required | `SPOOL_OPENAI_COMPATIBLE_API_KEY`, optional |
/// | `scripted` | — (`scripted` alone is enough; `SPOOL_SCRIPTED_DELAY_MS` paces it) | none |
///
/// Variables set to an empty string count as unset.
pub fn from_spec(spec: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Arc<dyn Model>, String> {
    let var = |name: &str| env(name).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
    let spec = spec.trim();
    let (provider, model) = match spec.split_once(':') {
        Some((provider, model)) => (provider, model.trim()),
        None => (spec, ""),
    };
    if provider == "scripted" {
        let delay_ms = match var("SPOOL_SCRIPTED_DELAY_MS") {
            None => 0,
            Some(ms) => ms
                .parse::<u64>()
                .map_err(|_| format!("SPOOL_SCRIPTED_DELAY_MS must be a number of milliseconds, not {ms:?}"))?,
        };
        let scripted = ScriptedModel::new(Duration::from_millis(delay_ms));
        return Ok(Arc::new(if model == "text-only" { scripted.text_only() } else { scripted }));
    }
    if !PROVIDERS.contains(&provider) {
        return Err(format!(
            "unknown model provider {provider:?} in {spec:?}; expected PROVIDER:MODEL with PROVIDER one of {}",
            PROVIDERS.join(", ")
        ));
    }
    if model.is_empty() {
        return Err(format!("{spec:?} names no model; expected {provider}:MODEL"));
    }
    let required = |name: &str, what: &str| var(name).ok_or_else(|| format!("{spec} needs {what}: set {name}"));
    let openai = |base_url: String, api_key: Option<String>| -> Result<Arc<dyn Model>, String> {
        let mut config = OpenAiConfig::new(base_url, api_key, model);
        config.label = format!("{provider}:{model}");
        // A local server's model reads what its operator says it does (`images`, `pdf`),
        // nothing more by default: most local models have no vision.
        if provider != "openai" {
            let inputs = var(&format!("{}_INPUTS", inputs_var(provider))).unwrap_or_default();
            config.inputs.images = inputs.split(',').any(|i| i.trim() == "images");
            config.inputs.pdf = inputs.split(',').any(|i| i.trim() == "pdf");
        }
        Ok(Arc::new(OpenAiModel::new(config).map_err(|e| format!("{spec}: {e}"))?))
    };
    match provider {
        "openai" => openai(
            var("OPENAI_BASE_URL").unwrap_or_else(|| OPENAI_DEFAULT_BASE_URL.to_owned()),
            Some(required("OPENAI_API_KEY", "an API key")?),
        ),
        "ollama" => openai(var("OLLAMA_BASE_URL").unwrap_or_else(|| OLLAMA_DEFAULT_BASE_URL.to_owned()), None),
        "openai-compatible" => openai(
            required("SPOOL_OPENAI_COMPATIBLE_BASE_URL", "the server's base URL (…/v1)")?,
            var("SPOOL_OPENAI_COMPATIBLE_API_KEY"),
        ),
        "anthropic" => {
            let mut config = AnthropicConfig::new(required("ANTHROPIC_API_KEY", "an API key")?, model);
            config.base_url = var("ANTHROPIC_BASE_URL").unwrap_or_else(|| anthropic::DEFAULT_BASE_URL.to_owned());
            Ok(Arc::new(AnthropicModel::new(config).map_err(|e| format!("{spec}: {e}"))?))
        }
        _ => unreachable!("every provider in PROVIDERS is matched above"),
    }
}

/// The prefix of the variable that names what a local provider's models read:
/// `OLLAMA_INPUTS`, `SPOOL_OPENAI_COMPATIBLE_INPUTS`.
fn inputs_var(provider: &str) -> &'static str {
    if provider == "ollama" { "OLLAMA" } else { "SPOOL_OPENAI_COMPATIBLE" }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn build(spec: &str, vars: &[(&str, &str)]) -> Result<String, String> {
        let vars: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        from_spec(spec, &|name| vars.get(name).cloned()).map(|m| m.name())
    }

    #[test]
    fn specs_name_their_models() {
        assert_eq!(build("scripted", &[]), Ok("scripted".into()));
        assert_eq!(build("ollama:llama3.1:8b", &[]), Ok("ollama:llama3.1:8b".into()));
        assert_eq!(build("openai:gpt-4o", &[("OPENAI_API_KEY", "sk-x")]), Ok("openai:gpt-4o".into()));
        assert_eq!(build("anthropic:claude-x", &[("ANTHROPIC_API_KEY", "k")]), Ok("anthropic:claude-x".into()));
        assert_eq!(
            build("openai-compatible:qwen", &[("SPOOL_OPENAI_COMPATIBLE_BASE_URL", "http://127.0.0.1:8000/v1")]),
            Ok("openai-compatible:qwen".into())
        );
    }

    #[test]
    fn mistakes_get_clear_errors() {
        assert_eq!(
            build("gemini:pro", &[]),
            Err("unknown model provider \"gemini\" in \"gemini:pro\"; expected PROVIDER:MODEL with PROVIDER one of openai, anthropic, ollama, openai-compatible, scripted".into())
        );
        assert_eq!(
            build("openai:gpt-4o", &[("OPENAI_API_KEY", " ")]),
            Err("openai:gpt-4o needs an API key: set OPENAI_API_KEY".into())
        );
        assert_eq!(build("anthropic:c", &[]), Err("anthropic:c needs an API key: set ANTHROPIC_API_KEY".into()));
        assert_eq!(
            build("openai-compatible:q", &[]),
            Err("openai-compatible:q needs the server's base URL (…/v1): set SPOOL_OPENAI_COMPATIBLE_BASE_URL".into())
        );
        assert_eq!(build("openai", &[]), Err("\"openai\" names no model; expected openai:MODEL".into()));
        let bad_url = build("ollama:x", &[("OLLAMA_BASE_URL", "localhost:11434")]).expect_err("not a URL");
        assert!(bad_url.starts_with("ollama:x: invalid base URL \"localhost:11434\""), "{bad_url}");
        assert!(build("scripted", &[("SPOOL_SCRIPTED_DELAY_MS", "soon")]).is_err());
    }
}
