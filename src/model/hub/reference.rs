//! What an `hf:` model reference names, and which GGUF files of a repository it picks.
//!
//! `hf:owner/repo` takes the repository's Q4_K_M file (or its only quantization);
//! `hf:owner/repo:Q8_0` a quantization by name, as llama.cpp's `-hf` does; `hf:owner/repo/x.gguf`
//! one file by its path. `@revision` after the repository names a branch, tag or commit.

use super::HubError;
use crate::model::gguf_split::split_part;

/// The prefix that marks a Hugging Face reference on `--model` and `pull`.
pub const PREFIX: &str = "hf:";

/// The quantization taken when a reference names none: the one most repositories publish and
/// llama.cpp's `-hf` picks.
pub const DEFAULT_QUANT: &str = "Q4_K_M";

/// Which file of the repository the reference wants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Select {
    /// The default quantization, else the repository's only one.
    Default,
    /// A quantization by name, upper case (`Q4_K_M`).
    Quant(String),
    /// A file by its path in the repository.
    File(String),
}

/// A parsed `hf:` reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HubRef {
    /// `owner/repo`.
    pub repo: String,
    /// A branch, tag or commit; `main` unless given.
    pub revision: String,
    pub select: Select,
}

impl HubRef {
    /// `s` without its `hf:` prefix, or `None` if it has none (a path or a catalogue name).
    pub fn parse(s: &str) -> Option<Result<HubRef, HubError>> {
        let rest = s.strip_prefix(PREFIX)?;
        Some(parse_rest(rest).map_err(|why| HubError::BadReference { given: s.to_string(), why }))
    }
}

fn parse_rest(rest: &str) -> Result<HubRef, &'static str> {
    let (head, select) = match rest.split_once(':') {
        Some((head, q)) if !q.is_empty() && q.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') => {
            (head, Select::Quant(q.to_ascii_uppercase()))
        }
        Some(_) => return Err("the part after ':' must be a quantization such as Q4_K_M"),
        None => (rest, Select::Default),
    };
    let mut parts = head.splitn(3, '/');
    let owner = parts.next().unwrap_or_default();
    let repo_rev = parts.next().ok_or("expected hf:owner/repo")?;
    let (repo, revision) = match repo_rev.split_once('@') {
        Some((r, rev)) if !rev.is_empty() => (r, rev),
        Some(_) => return Err("'@' must be followed by a branch, tag or commit"),
        None => (repo_rev, "main"),
    };
    let valid = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    if !valid(owner) || !valid(repo) || !valid(revision) || repo.starts_with('.') || owner.starts_with('.') {
        return Err("owner and repository names hold only letters, digits, '-', '_' and '.'");
    }
    let select = match (parts.next(), select) {
        (Some(file), Select::Default) => {
            if !file.ends_with(".gguf") || file.split('/').any(|c| c.is_empty() || c == "." || c == "..") {
                return Err("a file named after the repository must be a .gguf path inside it");
            }
            Select::File(file.to_string())
        }
        (Some(_), _) => return Err("name a file or a quantization, not both"),
        (None, s) => s,
    };
    Ok(HubRef { repo: format!("{owner}/{repo}"), revision: revision.to_string(), select })
}

/// The quantization a GGUF file's name carries (`Llama-3.2-1B-Instruct-Q4_K_M.gguf` ->
/// `Q4_K_M`), upper case; a split part's `-00001-of-00003` is looked past.
pub fn quant_of(path: &str) -> Option<String> {
    let name = path.rsplit('/').next()?;
    let stem = name.strip_suffix(".gguf").or_else(|| name.strip_suffix(".GGUF"))?;
    let stem = split_part(stem).map_or(stem, |(base, _, _)| base);
    stem.split(['-', '.']).rev().map(|p| p.to_ascii_uppercase()).find(|p| is_quant(p))
}

fn is_quant(p: &str) -> bool {
    let b = p.as_bytes();
    let digit_after = |i: usize| b.get(i).is_some_and(|c| c.is_ascii_digit());
    let shaped = p.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_');
    shaped
        && (matches!(p, "F16" | "BF16" | "F32")
            || (p.starts_with('Q') && digit_after(1))
            || (p.starts_with("IQ") && digit_after(2)))
}

/// The files of a repository's listing that `select` picks: one file, or every part of a split
/// GGUF in order. Projector files (`mmproj`) are never a model.
pub fn choose(repo: &str, files: &[String], select: &Select) -> Result<Vec<String>, HubError> {
    let models: Vec<&String> =
        files.iter().filter(|f| f.ends_with(".gguf") && !f.to_ascii_lowercase().contains("mmproj")).collect();
    if let Select::File(f) = select {
        return match files.iter().any(|x| x == f) {
            true => Ok(vec![f.clone()]),
            false => Err(HubError::NoSuchFile { repo: repo.to_string(), file: f.clone(), files: names(&models) }),
        };
    }
    if models.is_empty() {
        return Err(HubError::NoGguf { repo: repo.to_string() });
    }
    let mut quants: Vec<String> = models.iter().filter_map(|f| quant_of(f)).collect();
    quants.sort();
    quants.dedup();
    let wanted = match select {
        Select::Quant(q) => q.clone(),
        _ if quants.iter().any(|q| q == DEFAULT_QUANT) => DEFAULT_QUANT.to_string(),
        _ if models.len() == 1 => return Ok(vec![models[0].clone()]),
        _ if quants.len() == 1 => quants[0].clone(),
        _ => return Err(HubError::NoSuchQuant { repo: repo.to_string(), wanted: None, available: quants }),
    };
    let mut picked: Vec<&String> =
        models.iter().copied().filter(|f| quant_of(f).as_deref() == Some(&*wanted)).collect();
    picked.sort();
    let Some(first) = picked.first() else {
        return Err(HubError::NoSuchQuant { repo: repo.to_string(), wanted: Some(wanted), available: quants });
    };
    Ok(match split_of(first) {
        // Every part of the first file's split, in order; a split missing a part is the
        // loader's to refuse, naming the part.
        Some((base, _, _)) => {
            picked.iter().filter(|f| split_of(f).is_some_and(|(b, _, _)| b == base)).map(|f| f.to_string()).collect()
        }
        None => vec![first.to_string()],
    })
}

fn split_of(path: &str) -> Option<(&str, u32, u32)> {
    split_part(path.strip_suffix(".gguf")?)
}

fn names(files: &[&String]) -> Vec<String> {
    files.iter().map(|f| f.to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(s: &str) -> Result<HubRef, HubError> {
        HubRef::parse(s).expect("an hf: reference")
    }

    #[test]
    fn references_parse_into_repo_revision_and_selection() {
        assert!(HubRef::parse("smollm2-135m").is_none());
        assert!(HubRef::parse("/models/x.gguf").is_none());
        let d = r("hf:ggml-org/gemma-3-270m-GGUF").unwrap();
        assert_eq!(
            (d.repo.as_str(), d.revision.as_str(), d.select),
            ("ggml-org/gemma-3-270m-GGUF", "main", Select::Default)
        );
        assert_eq!(r("hf:a/b:q8_0").unwrap().select, Select::Quant("Q8_0".into()));
        let f = r("hf:a/b@v1.0/sub/m-Q4_0.gguf").unwrap();
        assert_eq!((f.revision.as_str(), f.select), ("v1.0", Select::File("sub/m-Q4_0.gguf".into())));
        for bad in [
            "hf:",
            "hf:a",
            "hf:a/",
            "hf:a/b:",
            "hf:a/b:Q4 K",
            "hf:a/b/x.bin",
            "hf:a/b/../x.gguf",
            "hf:a/b@",
            "hf:a/b/x.gguf:Q8_0",
            "hf:a b/c",
        ] {
            let e = r(bad).unwrap_err().to_string();
            assert!(e.contains(bad), "{bad}: {e}");
        }
    }

    #[test]
    fn quantizations_are_read_from_file_names() {
        assert_eq!(quant_of("Llama-3.2-1B-Instruct-Q4_K_M.gguf").as_deref(), Some("Q4_K_M"));
        assert_eq!(quant_of("gemma-3-270m-q4_k_m.gguf").as_deref(), Some("Q4_K_M"));
        assert_eq!(quant_of("sub/model.IQ4_XS.gguf").as_deref(), Some("IQ4_XS"));
        assert_eq!(quant_of("m-BF16-00002-of-00003.gguf").as_deref(), Some("BF16"));
        assert_eq!(quant_of("Qwen2.5-0.5B.gguf"), None);
        assert_eq!(quant_of("README.md"), None);
        assert_eq!(split_part("m-Q8_0-00002-of-00003"), Some(("m-Q8_0", 2, 3)));
        assert_eq!(split_part("m-Q8_0-2-of-3"), None);
    }

    #[test]
    fn choosing_takes_the_default_a_named_quant_or_every_split_part() {
        let files: Vec<String> = [
            "README.md",
            "m-Q8_0.gguf",
            "m-Q4_K_M.gguf",
            "mmproj-m-F16.gguf",
            "big/m-F16-00002-of-00002.gguf",
            "big/m-F16-00001-of-00002.gguf",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(choose("a/b", &files, &Select::Default).unwrap(), ["m-Q4_K_M.gguf"]);
        assert_eq!(choose("a/b", &files, &Select::Quant("Q8_0".into())).unwrap(), ["m-Q8_0.gguf"]);
        assert_eq!(
            choose("a/b", &files, &Select::Quant("F16".into())).unwrap(),
            ["big/m-F16-00001-of-00002.gguf", "big/m-F16-00002-of-00002.gguf"]
        );
        let e = choose("a/b", &files, &Select::Quant("Q3_K_S".into())).unwrap_err().to_string();
        assert!(e.contains("Q3_K_S") && e.contains("F16, Q4_K_M, Q8_0"), "{e}");
        let two: Vec<String> = ["m-Q8_0.gguf", "m-Q5_0.gguf"].map(String::from).to_vec();
        let e = choose("a/b", &two, &Select::Default).unwrap_err().to_string();
        assert!(e.contains("Q5_0, Q8_0") && e.contains("hf:a/b:Q5_0"), "{e}");
        assert_eq!(choose("a/b", &two[..1], &Select::Default).unwrap(), ["m-Q8_0.gguf"]);
        let e = choose("a/b", &files, &Select::File("nope.gguf".into())).unwrap_err().to_string();
        assert!(e.contains("nope.gguf") && e.contains("m-Q8_0.gguf"), "{e}");
        assert!(matches!(choose("a/b", &files[..1], &Select::Default), Err(HubError::NoGguf { .. })));
    }
}
