//! The models a server offers: a default plus any others configured, each with an
//! optional price. A session may pick one by name (`PATCH /api/sessions/:id {model}`);
//! a run uses its session's choice, else the default. With nothing configured the
//! default is the offline scripted model, and `GET /api/models` says so.

use crate::Model;
use serde::{Deserialize, Serialize};
use spool_protocol::Usage;
use std::collections::BTreeMap;
use std::sync::Arc;

/// US dollars per million tokens.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Price {
    #[serde(default)]
    pub input: f64,
    #[serde(default)]
    pub output: f64,
    #[serde(default)]
    pub cache_read: f64,
    #[serde(default)]
    pub cache_write: f64,
}

impl Price {
    /// The cost of `usage`. `input` counts the whole prompt; the parts read from or
    /// written to the provider's cache are priced at their own rates, so they are taken
    /// out of the plain input count.
    pub fn cost(&self, usage: &Usage) -> f64 {
        let fresh_input = usage.input.saturating_sub(usage.cache_read).saturating_sub(usage.cache_write);
        (fresh_input as f64 * self.input
            + usage.output as f64 * self.output
            + usage.cache_read as f64 * self.cache_read
            + usage.cache_write as f64 * self.cache_write)
            / 1_000_000.0
    }
}

#[derive(Clone)]
pub struct ModelEntry {
    pub model: Arc<dyn Model>,
    pub price: Option<Price>,
}

/// What `GET /api/models` lists.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelInfo {
    pub name: String,
    pub default: bool,
    pub price: Option<Price>,
    /// Which files besides text the model reads: a prompt with an image for a model
    /// without `images` (or a PDF without `pdf`) is refused, never sent without it.
    pub inputs: crate::model::Inputs,
}

#[derive(Clone)]
pub struct Models {
    default: String,
    entries: BTreeMap<String, ModelEntry>,
}

impl Models {
    /// A registry whose default (and only model so far) is `model`.
    pub fn new(model: Arc<dyn Model>) -> Self {
        let name = model.name();
        let mut entries = BTreeMap::new();
        entries.insert(name.clone(), ModelEntry { model, price: None });
        Self { default: name, entries }
    }

    /// Adds a model; `default` makes it the default.
    pub fn with(mut self, model: Arc<dyn Model>, price: Option<Price>, default: bool) -> Self {
        let name = model.name();
        if default {
            self.default = name.clone();
        }
        self.entries.insert(name, ModelEntry { model, price });
        self
    }

    /// Sets the price of a configured model; false if there is no such model.
    pub fn set_price(&mut self, name: &str, price: Price) -> bool {
        self.entries.get_mut(name).map(|e| e.price = Some(price)).is_some()
    }

    pub fn default_name(&self) -> &str {
        &self.default
    }

    pub fn get(&self, name: &str) -> Option<&ModelEntry> {
        self.entries.get(name)
    }

    /// The entry for a session's choice, falling back to the default when the choice
    /// is unset or no longer configured.
    pub fn resolve(&self, choice: Option<&str>) -> &ModelEntry {
        choice.and_then(|n| self.entries.get(n)).unwrap_or_else(|| &self.entries[&self.default])
    }

    pub fn list(&self) -> Vec<ModelInfo> {
        self.entries
            .iter()
            .map(|(name, e)| ModelInfo {
                name: name.clone(),
                default: *name == self.default,
                price: e.price,
                inputs: e.model.inputs(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_prices_fresh_and_cached_input_apart() {
        let price = Price { input: 3.0, output: 15.0, cache_read: 0.3, cache_write: 3.75 };
        let usage =
            Usage { input: 1_000_000, output: 100_000, cache_read: 400_000, cache_write: 0, ..Usage::default() };
        // 600k fresh × $3 + 100k × $15 + 400k × $0.30 per million.
        let cost = price.cost(&usage);
        assert!((cost - (1.8 + 1.5 + 0.12)).abs() < 1e-9, "{cost}");
    }
}
