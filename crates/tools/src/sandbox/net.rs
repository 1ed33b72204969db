//! The Landlock layer that decides where a command may open TCP connections: a second
//! ruleset, stacked on the per-call one for files, that handles only TCP.
//!
//! - `network = false`: connect and bind are handled and no port is granted.
//! - `network = true` with Spool's own services on TCP (a `--database-url` and a
//!   `--redis-url` on other hosts or ports than a UNIX socket): connect is handled and
//!   every port is granted except the services'. Landlock judges the port only, not the
//!   host, so such a port is closed on every host: a command cannot reach another
//!   PostgreSQL on 5432 either while the store is on 5432. Binding stays free.
//! - `network = true` and no TCP service (SQLite, the default): no layer at all.
//!
//! Landlock has no port ranges, so "every port but two" is 65,534 rules. Measured on
//! this machine's Linux 6.18 (release build, two cores under load): adding them takes
//! 23–46 ms, and `landlock_restrict_self` with such a ruleset 13–18 ms (the kernel
//! copies the rules into the new domain; a plain fork took well under 1 ms). So the
//! ruleset is built once per process and its descriptor applied to every command (a
//! ruleset can be enforced any number of times); the ~15 ms a command pays is the
//! kernel's copy, and only a deployment with a TCP store or bus pays it.

use landlock::{
    ABI, Access, AccessNet, CompatLevel, Compatible, NetPort, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetError,
};
use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};

/// What a layer is built from: the network setting and the closed ports, sorted.
type Key = (bool, Vec<u16>);
/// A built layer; `None` where there is nothing to enforce.
type Layer = Option<Arc<OwnedFd>>;

/// The layer's descriptor for these settings, or `None` when nothing is to be handled
/// or the kernel's Landlock does not handle TCP (ABI < 4).
pub(crate) fn layer(network: bool, closed: &[u16]) -> Result<Layer, RulesetError> {
    if network && closed.is_empty() {
        return Ok(None);
    }
    // One entry per distinct setting a process uses (one in a server; a few in tests),
    // so the map stays tiny. A std mutex: nothing awaits while it is held, and a second
    // caller waiting out the first build is what should happen.
    static LAYERS: Mutex<BTreeMap<Key, Layer>> = Mutex::new(BTreeMap::new());
    let mut closed = closed.to_vec();
    closed.sort_unstable();
    closed.dedup();
    let mut layers = LAYERS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let key = (network, closed);
    if let Some(layer) = layers.get(&key) {
        return Ok(layer.clone());
    }
    let layer = build(network, &key.1)?.map(Arc::new);
    layers.insert(key, layer.clone());
    Ok(layer)
}

fn build(network: bool, closed: &[u16]) -> Result<Option<OwnedFd>, RulesetError> {
    let rules = Ruleset::default().set_compatibility(CompatLevel::BestEffort);
    if !network {
        let created = rules.handle_access(AccessNet::from_all(ABI::V4))?.create()?;
        return Ok(created.into());
    }
    let mut created = rules.handle_access(AccessNet::ConnectTcp)?.create()?;
    for port in (0..=u16::MAX).filter(|p| closed.binary_search(p).is_err()) {
        created = created.add_rule(NetPort::new(port, AccessNet::ConnectTcp))?;
    }
    Ok(created.into())
}
