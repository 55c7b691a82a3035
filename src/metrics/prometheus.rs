//! The text expositions, written by hand: Prometheus text 0.0.4 and OpenMetrics 1.0.
//!
//! Primitives only (headers, label escaping, numbers); `series.rs` decides what to write.
//! Rules kept here: HELP/TYPE once per family; label values escape `\`, `"` and newline; HELP
//! escapes `\` and newline (and `"` in OpenMetrics, whose grammar forbids a bare quote there);
//! floats as Go's `strconv.FormatFloat(f, 'g', -1, 64)` with `NaN`, `+Inf`, `-Inf`; OpenMetrics
//! names a counter family without its `_total` suffix, an info family without `_info`, and ends
//! with `# EOF`.

use std::fmt::Write as _;

use super::negotiate::Format;

/// Metric type, as written in `# TYPE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
    /// A constant-1 series carrying labels: `info` in OpenMetrics, `gauge` in Prometheus text.
    Info,
}

/// The family name as written in HELP/TYPE/UNIT for `fmt`.
pub fn family_name(fmt: Format, name: &str, kind: Kind) -> &str {
    match (fmt, kind) {
        (Format::OpenMetrics, Kind::Counter) => name.strip_suffix("_total").unwrap_or(name),
        (Format::OpenMetrics, Kind::Info) => name.strip_suffix("_info").unwrap_or(name),
        _ => name,
    }
}

/// `# HELP`, `# TYPE` (and in OpenMetrics `# UNIT` when given) for one family.
pub fn write_header(out: &mut Vec<u8>, fmt: Format, name: &str, kind: Kind, unit: Option<&str>, help: &str) {
    let fam = family_name(fmt, name, kind);
    out.extend_from_slice(b"# HELP ");
    out.extend_from_slice(fam.as_bytes());
    out.push(b' ');
    escape_help(help, fmt, out);
    out.extend_from_slice(b"\n# TYPE ");
    out.extend_from_slice(fam.as_bytes());
    out.extend_from_slice(match (fmt, kind) {
        (_, Kind::Counter) => b" counter\n",
        (_, Kind::Gauge) => b" gauge\n",
        (_, Kind::Histogram) => b" histogram\n",
        (Format::OpenMetrics, Kind::Info) => b" info\n",
        (_, Kind::Info) => b" gauge\n",
    });
    if let (Format::OpenMetrics, Some(unit)) = (fmt, unit) {
        out.extend_from_slice(b"# UNIT ");
        out.extend_from_slice(fam.as_bytes());
        out.push(b' ');
        out.extend_from_slice(unit.as_bytes());
        out.push(b'\n');
    }
}

/// Escape HELP text: `\` and newline always, `"` too in OpenMetrics.
pub fn escape_help(help: &str, fmt: Format, out: &mut Vec<u8>) {
    if !help.bytes().any(|b| matches!(b, b'\\' | b'\n' | b'"')) {
        return out.extend_from_slice(help.as_bytes());
    }
    for b in help.bytes() {
        match b {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'"' if fmt == Format::OpenMetrics => out.extend_from_slice(b"\\\""),
            _ => out.push(b),
        }
    }
}

/// Escape a label value (`\` -> `\\`, `"` -> `\"`, newline -> `\n`), the same in both formats.
pub fn escape_label_value(value: &str, out: &mut String) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Read back one quoted label value starting right after its opening `"`: the value and the
/// rest after the closing quote. `None` on a bad escape or a missing closing quote.
pub fn parse_label_value(s: &str) -> Option<(String, &str)> {
    let mut out = String::new();
    let mut it = s.char_indices();
    while let Some((i, c)) = it.next() {
        match c {
            '"' => return Some((out, &s[i + 1..])),
            '\\' => match it.next()?.1 {
                '\\' => out.push('\\'),
                '"' => out.push('"'),
                'n' => out.push('\n'),
                _ => return None,
            },
            '\n' => return None,
            c => out.push(c),
        }
    }
    None
}

/// Append an unsigned integer sample value.
pub fn write_u64(out: &mut Vec<u8>, mut v: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[i..]);
}

pub fn write_i64(out: &mut Vec<u8>, v: i64) {
    if v < 0 {
        out.push(b'-');
    }
    write_u64(out, v.unsigned_abs());
}

/// A fixed stack buffer for `core::fmt` output (a shortest f64 needs at most ~25 bytes).
struct Stack {
    buf: [u8; 40],
    len: usize,
}

impl std::fmt::Write for Stack {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        if end > self.buf.len() {
            return Err(std::fmt::Error);
        }
        self.buf[self.len..end].copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// Append `v` as Go's `strconv.FormatFloat(v, 'g', -1, 64)` does (what client_golang writes):
/// the shortest digits that round-trip, in exponent form (`1e+06`, `2.5e-07`) when the decimal
/// exponent is below -4 or at least 6, plain otherwise; `NaN`, `+Inf`, `-Inf`.
pub fn write_f64(out: &mut Vec<u8>, v: f64) {
    if v.is_nan() {
        return out.extend_from_slice(b"NaN");
    }
    if v.is_infinite() {
        return out.extend_from_slice(if v > 0.0 { b"+Inf" } else { b"-Inf" });
    }
    if v == 0.0 {
        return out.extend_from_slice(if v.is_sign_negative() { b"-0" } else { b"0" });
    }
    let mut s = Stack { buf: [0; 40], len: 0 };
    // Rust's `{:e}` without precision gives the shortest round-trip digits, e.g. `-1.25e-7`.
    let _ = write!(s, "{:e}", v.abs());
    let text = &s.buf[..s.len];
    let epos = text.iter().position(|&b| b == b'e').unwrap_or(text.len());
    let (mant, exp_txt) = (&text[..epos], &text[(epos + 1).min(text.len())..]);
    let exp: i32 = std::str::from_utf8(exp_txt).ok().and_then(|e| e.parse().ok()).unwrap_or(0);
    let mut digits = [0u8; 20];
    let mut nd = 0;
    for &b in mant.iter().filter(|b| b.is_ascii_digit()) {
        if nd < digits.len() {
            digits[nd] = b;
            nd += 1;
        }
    }
    let digits = &digits[..nd];
    if v < 0.0 {
        out.push(b'-');
    }
    if go_float_rule(exp) {
        out.push(digits[0]);
        if nd > 1 {
            out.push(b'.');
            out.extend_from_slice(&digits[1..]);
        }
        out.push(b'e');
        out.push(if exp < 0 { b'-' } else { b'+' });
        let e = exp.unsigned_abs();
        if e < 10 {
            out.push(b'0');
        }
        write_u64(out, e as u64);
    } else if exp >= 0 {
        let int_len = exp as usize + 1;
        if nd <= int_len {
            out.extend_from_slice(digits);
            out.extend(std::iter::repeat_n(b'0', int_len - nd));
        } else {
            out.extend_from_slice(&digits[..int_len]);
            out.push(b'.');
            out.extend_from_slice(&digits[int_len..]);
        }
    } else {
        out.extend_from_slice(b"0.");
        out.extend(std::iter::repeat_n(b'0', (-exp - 1) as usize));
        out.extend_from_slice(digits);
    }
}

/// Go's shortest `%g` uses exponent form when the decimal exponent is below -4 or at least 6
/// (`strconv/ftoa.go`: `eprec = 6` when the precision is the shortest).
fn go_float_rule(exp: i32) -> bool {
    !(-4..6).contains(&exp)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(v: f64) -> String {
        let mut o = Vec::new();
        write_f64(&mut o, v);
        String::from_utf8(o).unwrap()
    }

    #[test]
    fn floats_are_formatted_like_go() {
        // Expected strings are Go's strconv.FormatFloat(v, 'g', -1, 64).
        let cases: &[(f64, &str)] = &[
            (0.0, "0"),
            (1.0, "1"),
            (-1.0, "-1"),
            (0.005, "0.005"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (2.5e-7, "2.5e-07"),
            (123456.0, "123456"),
            (1e6, "1e+06"),
            (1234567.0, "1.234567e+06"),
            (1.5e300, "1.5e+300"),
            (0.1, "0.1"),
            (1.0 / 3.0, "0.3333333333333333"),
            (12.75, "12.75"),
            (-0.025, "-0.025"),
            (f64::NAN, "NaN"),
            (f64::INFINITY, "+Inf"),
            (f64::NEG_INFINITY, "-Inf"),
            (f64::MAX, "1.7976931348623157e+308"),
            (5e-324, "5e-324"),
        ];
        for (v, want) in cases {
            assert_eq!(f(*v), *want, "formatting {v:e}");
        }
        for v in [0.3, 1e-9, 98765.4321, 7e22, 3.0e-5] {
            assert_eq!(f(v).parse::<f64>().unwrap(), v, "round trip of {v}");
        }
    }

    #[test]
    fn integers_render_plainly() {
        let mut o = Vec::new();
        write_u64(&mut o, 0);
        o.push(b' ');
        write_u64(&mut o, u64::MAX);
        o.push(b' ');
        write_i64(&mut o, -42);
        assert_eq!(o, b"0 18446744073709551615 -42");
    }

    #[test]
    fn label_values_escape_backslash_quote_newline_and_parse_back() {
        let raw = "a\\b\"c\nd é";
        let mut s = String::new();
        escape_label_value(raw, &mut s);
        assert_eq!(s, "a\\\\b\\\"c\\nd é");
        let quoted = format!("{s}\"}} 1");
        let (back, rest) = parse_label_value(&quoted).unwrap();
        assert_eq!(back, raw);
        assert_eq!(rest, "} 1");
        assert!(parse_label_value("bad\\x\"").is_none());
        assert!(parse_label_value("unterminated").is_none());
    }

    #[test]
    fn help_escaping_differs_only_in_quotes() {
        let mut p = Vec::new();
        escape_help("a\\b\nc\"d", Format::Prometheus, &mut p);
        assert_eq!(p, b"a\\\\b\\nc\"d");
        let mut o = Vec::new();
        escape_help("a\\b\nc\"d", Format::OpenMetrics, &mut o);
        assert_eq!(o, b"a\\\\b\\nc\\\"d");
    }

    #[test]
    fn headers_name_families_per_format() {
        let mut p = Vec::new();
        write_header(&mut p, Format::Prometheus, "x_total", Kind::Counter, Some("x"), "h");
        assert_eq!(String::from_utf8(p).unwrap(), "# HELP x_total h\n# TYPE x_total counter\n");
        let mut o = Vec::new();
        write_header(&mut o, Format::OpenMetrics, "t_seconds_total", Kind::Counter, Some("seconds"), "h");
        assert_eq!(
            String::from_utf8(o).unwrap(),
            "# HELP t_seconds h\n# TYPE t_seconds counter\n# UNIT t_seconds seconds\n"
        );
        let mut i = Vec::new();
        write_header(&mut i, Format::OpenMetrics, "b_info", Kind::Info, None, "h");
        assert_eq!(String::from_utf8(i).unwrap(), "# HELP b h\n# TYPE b info\n");
        let mut g = Vec::new();
        write_header(&mut g, Format::Prometheus, "b_info", Kind::Info, None, "h");
        assert_eq!(String::from_utf8(g).unwrap(), "# HELP b_info h\n# TYPE b_info gauge\n");
    }
}
