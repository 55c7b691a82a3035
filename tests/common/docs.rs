//! The examples of `docs/`, read from the Markdown as printed: the tests run what a reader
//! copies, not a copy kept beside it.

use std::path::Path;

/// The text of `docs/<doc>`.
fn read(doc: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs").join(doc);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The fenced blocks of `docs/<doc>` whose info string is `lang`, each with the name of the
/// `<!-- example: NAME -->` line right before it, if any.
pub fn blocks(doc: &str, lang: &str) -> Vec<(Option<String>, String)> {
    let text = read(doc);
    let mut out = Vec::new();
    let (mut cur, mut name, mut prev): (Option<String>, Option<String>, &str) = (None, None, "");
    for line in text.lines() {
        match (&mut cur, line.trim_start().strip_prefix("```")) {
            (None, Some(info)) if info.trim() == lang => {
                name = prev
                    .trim()
                    .strip_prefix("<!-- example:")
                    .and_then(|r| r.strip_suffix("-->"))
                    .map(|n| n.trim().to_string());
                cur = Some(String::new());
            }
            (Some(b), Some("")) => {
                out.push((name.take(), std::mem::take(b)));
                cur = None;
            }
            (Some(b), _) => {
                b.push_str(line);
                b.push('\n');
            }
            _ => {}
        }
        if !line.trim().is_empty() {
            prev = line;
        }
    }
    out
}

/// The block of `docs/<doc>` marked `<!-- example: NAME -->`, as printed.
pub fn example(doc: &str, name: &str) -> String {
    let found: Vec<String> = ["python", "bash", "sh", "json"]
        .iter()
        .flat_map(|lang| blocks(doc, lang))
        .filter(|(n, _)| n.as_deref() == Some(name))
        .map(|(_, b)| b)
        .collect();
    assert_eq!(found.len(), 1, "docs/{doc} marks one block as example '{name}'");
    found.into_iter().next().unwrap()
}

/// The flags of the `mtplx-lite ...` command an example prints (up to a `#` comment).
pub fn server_flags(block: &str) -> Vec<String> {
    let line = block.lines().find_map(|l| l.trim().strip_prefix("mtplx-lite ")).expect("an mtplx-lite command");
    line.split('#').next().unwrap().split_whitespace().map(str::to_string).collect()
}
