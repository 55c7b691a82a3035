//! `mtplx-lite tune`'s library half: the fixed prompt set it drafts over, the arithmetic and
//! table of its verdict, and the profile it saves, which the server's `--depth auto` starts from
//! (docs/speculative.md, "Tune"). The command itself (measuring, driving the engine) is
//! `src/cli/tune.rs`.

#![forbid(unsafe_code)]

pub mod profile;
#[cfg(test)]
mod profile_tests;
pub mod prompts;
pub mod report;
pub mod startup;
pub mod verdict;

pub use profile::{ClassRun, DrafterRun, FileKey, Profile, ProfileError, PROFILE_VERSION};
