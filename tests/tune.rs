//! `mtplx-lite tune` end to end on the demo model (with its shipped MTP head), kept to seconds
//! by a few tokens a prompt and a few passes a row count: it prints the pass costs, the table
//! and a verdict per drafter, saves a profile that parses, and `generate` then starts from that
//! profile, or ignores it with a log line at another thread count.

mod common;

use common::{demo_model, output_within, CHILD_DEADLINE};
use mtplx_lite::tune::Profile;
use std::process::Command;

fn mtplx(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_mtplx-lite"));
    // With MTPLX_DEMO_MODEL the model is named, and no head comes with it.
    if let Some(p) = std::env::var_os("MTPLX_DEMO_MODEL") {
        c.arg("--model").arg(p);
    }
    c.args(args);
    c
}

#[test]
fn tune_prints_the_table_and_verdicts_and_saves_a_profile_the_server_starts_from() {
    demo_model();
    let with_head = std::env::var_os("MTPLX_DEMO_MODEL").is_none();
    let dir = std::env::temp_dir().join(format!("mtplx-tune-e2e-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = dir.join("profile.json");
    let run = output_within(
        &mut mtplx(&["--threads", "1", "tune", "--max-tokens", "12", "--reps", "2", "--out", out.to_str().unwrap()]),
        CHILD_DEADLINE,
        "mtplx-lite tune",
    );
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&run.stderr));
    assert!(stdout.contains("| 9 |"), "pass costs up to 9 rows: {stdout}");
    assert!(stdout.contains("| ngram | editing | 1 |") && stdout.contains("| ngram | all (mean) | 8 |"), "{stdout}");
    let verdict = |name: &str| {
        stdout.lines().any(|l| {
            l.starts_with(&format!("verdict {name}: "))
                && (l.contains("best depth") || l.contains("no depth beats plain decoding here"))
        })
    };
    assert!(verdict("ngram"), "{stdout}");
    assert_eq!(verdict("mtp"), with_head, "{stdout}");
    let profile = Profile::load(&out).expect("the saved profile parses");
    assert_eq!((profile.threads, profile.max_tokens, profile.pass_secs.len()), (1, 12, 9));
    assert_eq!(profile.drafters.len(), 1 + with_head as usize);
    let classes: Vec<&str> = profile.drafters[0].classes.iter().map(|c| c.class.as_str()).collect();
    assert_eq!(classes, ["chat", "code", "editing"]);

    let generate = |threads: &str| {
        let args = ["--threads", threads, "--tune-profile", out.to_str().unwrap(), "generate"];
        let o = output_within(
            &mut mtplx(&[&args[..], &["--prompt", "Hello", "--max-tokens", "2"]].concat()),
            CHILD_DEADLINE,
            "mtplx-lite generate",
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let used = generate("1");
    assert!(used.contains("--depth auto starts from the tune profile"), "{used}");
    let other = generate("2");
    assert!(other.contains("was measured at 1 threads, not at 2; ignored"), "{other}");
    let _ = std::fs::remove_dir_all(&dir);
}
