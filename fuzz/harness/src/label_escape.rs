//! Label escaping: arbitrary text as a label value goes through the real renderer and must
//! parse back to the same text; HELP escaping must likewise round-trip in both formats.

use std::sync::OnceLock;

use mtplx_lite::metrics::process::ProcessStats;
use mtplx_lite::metrics::prometheus::{escape_help, escape_label_value, parse_label_value};
use mtplx_lite::metrics::{BuildInfo, Format, Metrics};

fn metrics() -> &'static Metrics {
    static M: OnceLock<Metrics> = OnceLock::new();
    M.get_or_init(|| Metrics::new(1, BuildInfo::current("cpu", "")))
}

fn unescape_help(s: &str) -> Option<String> {
    let mut out = String::new();
    let mut it = s.chars();
    while let Some(c) = it.next() {
        match c {
            '\\' => match it.next()? {
                '\\' => out.push('\\'),
                'n' => out.push('\n'),
                '"' => out.push('"'),
                _ => return None,
            },
            '\n' => return None,
            c => out.push(c),
        }
    }
    Some(out)
}

/// One input through the target: panics when an invariant breaks.
pub fn run(data: &[u8]) {
    let Ok(value) = std::str::from_utf8(data) else {
        return;
    };

    // Escape alone, then parse back.
    let mut esc = String::new();
    escape_label_value(value, &mut esc);
    assert!(!esc.contains('\n'));
    let line = format!("{esc}\"}} 1\n");
    let (back, rest) = parse_label_value(&line).expect("escaped value parses");
    assert_eq!(back, value);
    assert_eq!(rest, "} 1\n");

    // Through the whole renderer: the value as the model label of mtplx_build_info.
    let m = metrics();
    m.set_model(value);
    let stats = ProcessStats::default();
    for fmt in [Format::Prometheus, Format::OpenMetrics] {
        let mut out = Vec::new();
        m.render_with(fmt, &mut out, &stats);
        let text = std::str::from_utf8(&out).expect("exposition is UTF-8");
        let line = text.lines().find(|l| l.starts_with("mtplx_build_info{")).expect("build info line");
        let after = line.split_once(",model=\"").expect("model label").1;
        let (model, rest) = parse_label_value(after).expect("model label parses");
        assert_eq!(model, value);
        assert_eq!(rest, "} 1");
        // Every other line still has its structure: nothing leaked a newline.
        assert!(text.lines().all(|l| l.starts_with('#') || l.contains(' ')));
    }

    // HELP text in both formats.
    for fmt in [Format::Prometheus, Format::OpenMetrics] {
        let mut h = Vec::new();
        escape_help(value, fmt, &mut h);
        let h = String::from_utf8(h).unwrap();
        assert!(!h.contains('\n'));
        if fmt == Format::OpenMetrics {
            assert!(h.replace("\\\\", "").replace("\\\"", "").find('"').is_none(), "bare quote in HELP");
        }
        assert_eq!(unescape_help(&h).as_deref(), Some(value));
    }
}
