//! `GET /v1/mtplx/cache`: the prompt cache's tiers, what they hold and the disk tier's latest
//! misses with their reasons; `DELETE` on it deletes every block the disk tier holds, for users
//! who need cached prompts gone now (idle caches in memory go with the process).

use super::state::Llm;
use crate::engine::prompt_disk::DiskStatus;
use crate::http::Response;
use serde::Serialize;

#[derive(Serialize)]
struct CacheStatus {
    memory: MemoryTier,
    /// `null` without `--prompt-cache-dir`.
    disk: Option<DiskStatus>,
}

/// The caches in memory: active sequences' and the idle ones kept for prefix reuse.
#[derive(Serialize)]
struct MemoryTier {
    active_sequences: usize,
    idle_sequences: usize,
    bytes: usize,
    budget_bytes: usize,
}

#[derive(Serialize)]
struct Cleared {
    deleted_blocks: usize,
    deleted_bytes: u64,
}

pub fn status(llm: &Llm) -> Response {
    let kv = llm.engine.kv_snapshot();
    let memory = MemoryTier {
        active_sequences: kv.active,
        idle_sequences: kv.idle,
        bytes: kv.bytes,
        budget_bytes: kv.budget_bytes,
    };
    Response::json(200, &CacheStatus { memory, disk: llm.engine.disk_tier().map(|d| d.status()) })
}

pub fn clear(llm: &Llm) -> Response {
    let (deleted_blocks, deleted_bytes) = llm.engine.disk_tier().map_or((0, 0), |d| d.clear());
    Response::json(200, &Cleared { deleted_blocks, deleted_bytes })
}
