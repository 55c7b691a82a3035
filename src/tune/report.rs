//! What `tune` prints: one table of each drafter's acceptance by position per prompt class, the
//! expected tokens per verify pass at each depth, the measured cost of that round against a
//! one-row pass and the expected speed-up over plain decoding; then a verdict line per drafter.
//! Built from a [`Profile`], so that a saved profile prints the same table.

use super::profile::{DrafterRun, Profile};
use super::verdict::{acceptance, expected_tokens, speedup, verdict, Accept, RelCost, Verdict};
use crate::engine::draft::MAX_DRAFT_DEPTH;

/// The class row that averages the others: what the server starts from.
pub const ALL_CLASSES: &str = "all (mean)";

fn fmt_accept(a: Option<f64>) -> String {
    a.map_or_else(|| "-".into(), |a| format!("{a:.2}"))
}

fn rows(out: &mut String, drafter: &str, class: &str, counts: (&[u64], &[u64]), a: &Accept, cost: &RelCost) {
    for d in 1..=MAX_DRAFT_DEPTH {
        let (v, k) = (counts.0.get(d - 1).copied().unwrap_or(0), counts.1.get(d - 1).copied().unwrap_or(0));
        out.push_str(&format!(
            "| {drafter} | {class} | {d} | {v} | {k} | {} | {:.2} | {:.2}x | {:.2}x | {:.2}x |\n",
            fmt_accept(a[d - 1]),
            expected_tokens(a, d),
            cost.pass_ratio(d),
            d as f64 * cost.draft_per_token,
            speedup(a, cost, d),
        ));
    }
}

fn summed(d: &DrafterRun, f: impl Fn(&super::profile::ClassRun) -> &Vec<u64>) -> Vec<u64> {
    let mut out = vec![0; MAX_DRAFT_DEPTH];
    for c in &d.classes {
        for (o, x) in out.iter_mut().zip(f(c)) {
            *o += x;
        }
    }
    out
}

/// The verdict on one drafter, from its acceptance averaged over classes.
pub fn drafter_verdict(p: &Profile, d: &DrafterRun) -> Verdict {
    verdict(&p.accept_of(d), &RelCost::from_secs(&p.pass_secs, d.draft_secs_per_token))
}

/// The whole printout: the table, then one verdict line per drafter.
pub fn table(p: &Profile) -> String {
    let mut s = String::from(
        "| drafter | class | depth d | verified at d | accepted at d | P(accept at d) | tokens/pass | (d+1)-row pass vs 1 row | drafting vs 1 row | speed-up vs plain |\n",
    );
    s.push_str("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for d in &p.drafters {
        let cost = RelCost::from_secs(&p.pass_secs, d.draft_secs_per_token);
        for c in &d.classes {
            let a = acceptance(&c.verified_by_depth, &c.accepted_by_depth);
            rows(&mut s, &d.name, &c.class, (&c.verified_by_depth, &c.accepted_by_depth), &a, &cost);
        }
        let (v, k) = (summed(d, |c| &c.verified_by_depth), summed(d, |c| &c.accepted_by_depth));
        rows(&mut s, &d.name, ALL_CLASSES, (&v, &k), &p.accept_of(d), &cost);
    }
    s.push('\n');
    for d in &p.drafters {
        s.push_str(&format!("verdict {}: {}\n", d.name, drafter_verdict(p, d)));
    }
    if p.drafters.is_empty() {
        s.push_str("verdict: no drafter was measured\n");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tune::profile::{ClassRun, FileKey, PROFILE_VERSION};

    #[test]
    fn the_table_has_a_row_per_depth_and_class_and_a_verdict_per_drafter() {
        let class = |name: &str, v: Vec<u64>, a: Vec<u64>| ClassRun {
            class: name.into(),
            tokens: 100,
            verified_by_depth: v,
            accepted_by_depth: a,
        };
        let p = Profile {
            version: PROFILE_VERSION,
            model: FileKey { name: "m.gguf".into(), bytes: 1 },
            threads: 2,
            mtp_head: None,
            max_tokens: 64,
            // A 2-row pass costs 1.5x: depth 1 at acceptance 0.9 gives 1.9 / 1.5.
            pass_secs: (0..9).map(|r| 0.010 + 0.005 * r as f64).collect(),
            batch_secs: vec![0.010; 9],
            drafters: vec![
                DrafterRun {
                    name: "ngram".into(),
                    draft_secs_per_token: 0.0,
                    classes: vec![class("editing", vec![10, 9], vec![9, 9]), class("chat", vec![10], vec![9])],
                },
                DrafterRun {
                    name: "mtp".into(),
                    draft_secs_per_token: 0.001,
                    classes: vec![class("chat", vec![20, 4], vec![4, 1])],
                },
            ],
        };
        let t = table(&p);
        let line = t.lines().find(|l| l.starts_with("| ngram | editing | 1 |")).expect("a depth-1 row");
        assert!(line.contains("| 10 | 9 | 0.90 | 1.90 | 1.50x | 0.00x | 1.27x |"), "{line}");
        assert_eq!(t.lines().filter(|l| l.starts_with("| ngram |")).count(), 3 * MAX_DRAFT_DEPTH);
        assert!(t.contains("| mtp | chat | 1 | 20 | 4 | 0.20 | 1.20 | 1.50x | 0.10x |"), "{t}");
        assert!(t.contains("verdict ngram: best depth"), "{t}");
        assert!(t.contains("verdict mtp: no depth beats plain decoding here"), "{t}");
    }
}
