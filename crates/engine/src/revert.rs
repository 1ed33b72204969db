//! Planning a revert (issue 39): given the step snapshots of the turns being undone and
//! the files as they are now, which files go back to what, which are conflicts (changed
//! by someone other than those steps, so never overwritten) and which no snapshot
//! covers. Pure: it compares file identities (a blob id and mode, or anything `Eq`)
//! and touches nothing; applying the plan is a separate step.
//!
//! The rule, per file the steps changed (`D_i = before_i → after_i`):
//! * its target is what the first step's `before` held (absent: delete it);
//! * it is a **conflict** when it changed between the steps or since the last one
//!   (`after_i → before_{i+1}`, `after_last → now`): a person or another session
//!   touched it, and their change must not be lost silently;
//! * it is **uncovered** when a snapshot of the range left it out (too large, past a
//!   limit), since neither side of it is known;
//! * otherwise it is restored, unless it already holds its target.
//!
//! A step with no `after` (its run stopped inside it) counts as ending where the next
//! step began, or at `now` for the last step.

use std::collections::{BTreeMap, BTreeSet};

/// A recorded state of the project's files: path → identity.
pub type Files<F> = BTreeMap<String, F>;

/// One undone step's snapshots.
#[derive(Clone, Debug)]
pub struct StepFiles<F> {
    pub before: Files<F>,
    pub after: Option<Files<F>>,
    /// Paths either snapshot of the step left out.
    pub skipped: BTreeSet<String>,
}

/// What a file becomes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target<F> {
    Write(F),
    Delete,
}

/// What a revert will do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan<F> {
    /// Files to put back, by path.
    pub restore: BTreeMap<String, Target<F>>,
    /// Files the steps changed and something else changed since: left alone.
    pub conflicts: BTreeSet<String>,
    /// Files the steps may have changed that no snapshot recorded: left alone.
    pub uncovered: BTreeSet<String>,
}

/// Plans the revert of `steps` (in order) with the files `now` (see the module docs).
pub fn plan<F: Clone + Eq>(steps: &[StepFiles<F>], now: &Files<F>) -> Plan<F> {
    let mut plan = Plan { restore: BTreeMap::new(), conflicts: BTreeSet::new(), uncovered: BTreeSet::new() };
    let Some(first) = steps.first() else { return plan };
    let mut changed = BTreeSet::new();
    let mut touched_by_others = BTreeSet::new();
    let mut skipped = BTreeSet::new();
    for (i, step) in steps.iter().enumerate() {
        let next = steps.get(i + 1).map_or(now, |s| &s.before);
        let end = step.after.as_ref().unwrap_or(next);
        changed.extend(differing(&step.before, end));
        touched_by_others.extend(differing(end, next));
        skipped.extend(step.skipped.iter().cloned());
    }
    for path in changed.into_iter().chain(skipped.iter().cloned()) {
        if skipped.contains(&path) {
            plan.uncovered.insert(path);
        } else if touched_by_others.contains(&path) {
            plan.conflicts.insert(path);
        } else if first.before.get(&path) != now.get(&path) {
            let target = first.before.get(&path).map_or(Target::Delete, |f| Target::Write(f.clone()));
            plan.restore.insert(path, target);
        }
    }
    plan
}

/// The paths whose identity differs between `a` and `b` (present in one only included).
fn differing<F: Eq>(a: &Files<F>, b: &Files<F>) -> BTreeSet<String> {
    let mut paths: BTreeSet<String> = a.iter().filter(|(p, f)| b.get(*p) != Some(*f)).map(|(p, _)| p.clone()).collect();
    paths.extend(b.keys().filter(|p| !a.contains_key(*p)).cloned());
    paths
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(entries: &[(&str, u32)]) -> Files<u32> {
        entries.iter().map(|(p, f)| (p.to_string(), *f)).collect()
    }

    fn step(before: &[(&str, u32)], after: Option<&[(&str, u32)]>) -> StepFiles<u32> {
        StepFiles { before: files(before), after: after.map(files), skipped: BTreeSet::new() }
    }

    fn set(paths: &[&str]) -> BTreeSet<String> {
        paths.iter().map(|p| p.to_string()).collect()
    }

    #[test]
    fn what_the_steps_wrote_edited_and_removed_goes_back_to_the_first_before() {
        let steps = [
            // write new.txt, edit a.txt
            step(&[("a", 1), ("b", 1)], Some(&[("a", 2), ("b", 1), ("new", 1)])),
            // bash rm b, sed -i a
            step(&[("a", 2), ("b", 1), ("new", 1)], Some(&[("a", 3), ("new", 1)])),
        ];
        let now = files(&[("a", 3), ("new", 1)]);
        let plan = plan(&steps, &now);
        let expected: BTreeMap<String, Target<u32>> = [
            ("a".to_string(), Target::Write(1)),
            ("b".to_string(), Target::Write(1)),
            ("new".to_string(), Target::Delete),
        ]
        .into();
        assert_eq!(plan.restore, expected);
        assert!(plan.conflicts.is_empty() && plan.uncovered.is_empty());
    }

    #[test]
    fn a_file_changed_since_or_between_the_steps_is_a_conflict_left_alone() {
        let steps = [
            step(&[("a", 1), ("c", 1)], Some(&[("a", 2), ("c", 2)])),
            // Between the steps someone changed c.
            step(&[("a", 2), ("c", 9)], Some(&[("a", 3), ("c", 9)])),
        ];
        // And after the last step someone changed a.
        let now = files(&[("a", 8), ("c", 9)]);
        let plan = plan(&steps, &now);
        assert!(plan.restore.is_empty(), "{plan:?}");
        assert_eq!(plan.conflicts, set(&["a", "c"]));
    }

    #[test]
    fn a_file_no_snapshot_recorded_is_uncovered_and_one_already_back_is_not_touched() {
        let mut big = step(&[("a", 1)], Some(&[("a", 2)]));
        big.skipped = set(&["huge.bin"]);
        let steps = [big, step(&[("a", 2)], Some(&[("a", 1)]))];
        let plan = plan(&steps, &files(&[("a", 1)]));
        assert_eq!(plan.uncovered, set(&["huge.bin"]));
        assert!(plan.restore.is_empty(), "a holds its target already: {plan:?}");
    }

    #[test]
    fn a_step_without_an_after_ends_where_the_next_began_or_now() {
        // The run stopped inside the only step: what it did is what differs now.
        let steps = [step(&[("a", 1)], None)];
        let plan = plan(&steps, &files(&[("a", 2), ("b", 1)]));
        let expected: BTreeMap<String, Target<u32>> =
            [("a".to_string(), Target::Write(1)), ("b".to_string(), Target::Delete)].into();
        assert_eq!(plan.restore, expected);
        assert!(plan.conflicts.is_empty());
    }

    #[test]
    fn no_steps_plan_nothing() {
        assert_eq!(plan::<u32>(&[], &files(&[("a", 1)])).restore, BTreeMap::new());
    }
}
