//! The tune profile: round trip, refusal of another model, thread count or version, broken
//! files named with what was wrong, and what the server does with each at start.

use super::profile::*;
use super::startup::prior_for;
use crate::engine::draft::MAX_DRAFT_DEPTH;
use crate::model::test_models::temp_dir;
use std::path::Path;

fn key() -> FileKey {
    FileKey { name: "m.gguf".into(), bytes: 1234 }
}

fn head() -> FileKey {
    FileKey { name: "m.mtp.safetensors".into(), bytes: 99 }
}

fn profile() -> Profile {
    let class = |name: &str, v: Vec<u64>, a: Vec<u64>| ClassRun {
        class: name.into(),
        tokens: 64,
        verified_by_depth: v,
        accepted_by_depth: a,
    };
    Profile {
        version: PROFILE_VERSION,
        model: key(),
        threads: 2,
        mtp_head: Some(head()),
        max_tokens: 64,
        pass_secs: (1..=9).map(|r| 0.01 * r as f64).collect(),
        batch_secs: (1..=9).map(|r| 0.012 * r as f64).collect(),
        drafters: vec![
            DrafterRun {
                name: "ngram".into(),
                draft_secs_per_token: 0.0,
                classes: vec![class("chat", vec![10, 5], vec![2, 1]), class("editing", vec![10, 8], vec![8, 6])],
            },
            DrafterRun {
                name: "mtp".into(),
                draft_secs_per_token: 0.001,
                classes: vec![class("chat", vec![8], vec![2])],
            },
        ],
    }
}

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn a_profile_round_trips_and_averages_acceptance_over_classes() {
    let dir = temp_dir("tune-roundtrip");
    let path = dir.join("sub/p.json");
    profile().save(&path).unwrap();
    let back = Profile::load(&path).unwrap();
    assert_eq!(back, profile());
    back.check(&path, &key(), 2).unwrap();
    let prior = back.prior(Some(&head()));
    assert_eq!(prior.pass_secs, profile().pass_secs);
    let ngram = prior.accept_for("ngram").unwrap();
    // Position 1: chat 0.2, editing 0.8; position 2: chat 0.2, editing 0.75.
    assert!((ngram[0].unwrap() - 0.5).abs() < 1e-12 && (ngram[1].unwrap() - 0.475).abs() < 1e-12);
    assert_eq!(ngram[2..], [None; MAX_DRAFT_DEPTH - 2]);
    assert!((prior.accept_for("mtp").unwrap()[0].unwrap() - 0.25).abs() < 1e-12);
    // The mtp figures are the loaded head's only.
    assert!(back.prior(None).accept_for("mtp").is_none());
    assert!(back.prior(Some(&FileKey { name: "other".into(), bytes: 1 })).accept_for("mtp").is_none());
}

#[test]
fn another_model_thread_count_or_version_is_refused_as_foreign() {
    let p = profile();
    let path = Path::new("p.json");
    let other = FileKey { name: "m.gguf".into(), bytes: 1235 };
    let e = p.check(path, &other, 2).unwrap_err();
    assert!(e.is_foreign() && e.to_string().contains("m.gguf (1234 bytes), not on m.gguf (1235 bytes)"), "{e}");
    let e = p.check(path, &key(), 4).unwrap_err();
    assert!(e.is_foreign() && e.to_string().contains("at 2 threads, not at 4"), "{e}");
    let dir = temp_dir("tune-version");
    let text = serde_json::to_string(&p).unwrap().replace("\"version\":1", "\"version\":7");
    let e = Profile::load(&write(&dir, "v7.json", &text)).unwrap_err();
    assert!(e.is_foreign() && e.to_string().contains("format version 7, this build reads version 1"), "{e}");
}

#[test]
fn a_broken_profile_is_named_with_what_was_wrong() {
    let dir = temp_dir("tune-broken");
    let good = serde_json::to_string(&profile()).unwrap();
    let cases = [
        ("trunc.json", good[..good.len() / 2].to_string(), "not a tune profile of version 1"),
        ("extra.json", good.replacen('{', "{\"surprise\":1,", 1), "unknown field `surprise`"),
        ("neg.json", good.replace("\"pass_secs\":[0.01,", "\"pass_secs\":[-0.01,"), "pass_secs holds -0.01"),
        (
            "acc.json",
            good.replace("\"accepted_by_depth\":[8,6]", "\"accepted_by_depth\":[8,9]"),
            "position 2 has 9 accepted of 8",
        ),
    ];
    for (name, text, want) in cases {
        let path = write(&dir, name, &text);
        let e = Profile::load(&path).unwrap_err();
        let msg = e.to_string();
        assert!(!e.is_foreign() && msg.contains(name) && msg.contains(want), "{name}: {msg}");
    }
    let e = Profile::load(&dir.join("absent.json")).unwrap_err();
    assert!(e.to_string().contains("cannot read it"), "{e}");
}

#[test]
fn at_start_a_missing_profile_changes_nothing_a_foreign_one_is_logged_and_a_broken_one_stops_only_when_named() {
    let dir = temp_dir("tune-startup");
    let absent = dir.join("absent.json");
    let (prior, note) = prior_for(None, Some(&absent), &key(), 2, None).unwrap();
    assert!(prior.is_empty() && note.is_none());
    let good = dir.join("good.json");
    profile().save(&good).unwrap();
    let (prior, note) = prior_for(None, Some(&good), &key(), 2, None).unwrap();
    assert!(prior.accept_for("ngram").is_some() && prior.accept_for("mtp").is_none());
    let note = note.unwrap();
    assert!(note.contains("starts from the tune profile") && note.contains("mtp acceptance ignored"), "{note}");
    let (prior, note) = prior_for(Some(&good), None, &key(), 4, None).unwrap();
    assert!(prior.is_empty() && note.unwrap().contains("not at 4; ignored"));
    let broken = write(&dir, "broken.json", "{");
    let (prior, note) = prior_for(None, Some(&broken), &key(), 2, None).unwrap();
    assert!(prior.is_empty() && note.unwrap().starts_with("warning: tune profile"));
    assert!(prior_for(Some(&broken), None, &key(), 2, None).is_err());
    assert!(prior_for(Some(&absent), None, &key(), 2, None).is_err());
}
