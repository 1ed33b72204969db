//! The secret values a run masks wherever it shows text (tool output, approval cards,
//! failures): those of the server's environment variables whose names say they are
//! secrets, and those the server was configured with elsewhere, such as the config
//! file's `[env]` provider keys, which never enter the environment.
//!
//! The configured ones are process-wide, like the environment they stand beside: the
//! server reads its config once, before the first run, and every engine in the process
//! masks them. Adding the same value twice keeps one copy.

use std::sync::RwLock;

/// Values configured besides the environment ([`remember`]).
static CONFIGURED: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// Whether a setting named `name` with `value` is a secret to mask: the name contains
/// KEY, TOKEN, SECRET or PASSWORD, and the value is long enough not to mask ordinary
/// words (8 bytes or more).
pub fn looks_secret(name: &str, value: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    value.len() >= 8 && ["KEY", "TOKEN", "SECRET", "PASSWORD"].iter().any(|w| upper.contains(w))
}

/// Masks, from now on, the values of the `settings` (name, value) that look secret,
/// as if they were in the server's environment.
pub fn remember<'a>(settings: impl IntoIterator<Item = (&'a str, &'a str)>) {
    let mut configured = CONFIGURED.write().unwrap_or_else(|poisoned| poisoned.into_inner());
    for (name, value) in settings {
        if looks_secret(name, value) && !configured.iter().any(|v| v == value) {
            configured.push(value.to_owned());
        }
    }
}

/// Every value to mask: the environment's secret-looking variables and the remembered
/// settings.
pub(crate) fn values() -> Vec<String> {
    let mut values: Vec<String> =
        std::env::vars().filter(|(name, value)| looks_secret(name, value)).map(|(_, value)| value).collect();
    values.extend(CONFIGURED.read().unwrap_or_else(|poisoned| poisoned.into_inner()).iter().cloned());
    values
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembered_settings_are_masked_when_their_names_say_secret() {
        remember([("SPOOL_MASK_TEST_API_KEY", "sk-remembered-7d6c5b"), ("SPOOL_MASK_TEST_BASE_URL", "http://x/v1")]);
        remember([("SPOOL_MASK_TEST_API_KEY", "sk-remembered-7d6c5b"), ("SPOOL_MASK_TEST_TOKEN", "short")]);
        let values = values();
        assert_eq!(values.iter().filter(|v| *v == "sk-remembered-7d6c5b").count(), 1);
        assert!(!values.iter().any(|v| v == "http://x/v1" || v == "short"), "{values:?}");
    }
}
