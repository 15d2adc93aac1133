//! The order of phases over runs that do not all have the same phases: a leaf both the
//! comparison's rows and the paired cycles read.

use super::RunRecord;

/// A phase and its round.
pub(super) type Key = (String, u32);

/// Phase names in run order over every run of both sides.
pub(super) fn phase_names(runs: &[RunRecord]) -> Vec<String> {
    let mut order: Vec<Key> = Vec::new();
    for r in runs {
        let mut keys: Vec<Key> = Vec::new();
        for p in &r.phases {
            let k = (p.name.clone(), 0);
            if !keys.contains(&k) {
                keys.push(k);
            }
        }
        order = merge_order(&order, &keys);
    }
    order.into_iter().map(|(n, _)| n).collect()
}

/// `first`'s keys in order, with each key only `second` has placed after its predecessor there.
pub(super) fn merge_order(first: &[Key], second: &[Key]) -> Vec<Key> {
    let mut out: Vec<Key> = Vec::new();
    for k in first {
        if !out.contains(k) {
            out.push(k.clone());
        }
    }
    for (i, k) in second.iter().enumerate() {
        if out.contains(k) {
            continue;
        }
        let at = match i
            .checked_sub(1)
            .and_then(|p| out.iter().position(|o| *o == second[p]))
        {
            Some(prev) => prev + 1,
            None if i == 0 => 0,
            None => out.len(),
        };
        out.insert(at, k.clone());
    }
    out
}
