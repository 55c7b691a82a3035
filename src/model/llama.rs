//! The forward pass of every decoder-only architecture we read: llama (the demo), qwen2 (biases
//! on q/k/v), qwen3 (RMSNorm on each q and k head) and gemma3 (sliding windows, four norms per
//! block, GeGLU, scaled embeddings), each a description (`arch.rs`) whose layers run through the
//! one decoder layer of `decoder.rs`. One forward pass runs every sequence of a batch together,
//! so each weight matrix is streamed from memory once per step for all rows.

use super::arch::{describe, ModelSpec};
use super::config::HParams;
use super::decoder::{forward_layer, DecoderBlock, LayerScratch, LayerSeq};
use super::model_files::ModelFiles;
use super::mtp::{ForwardOutput, MtpTrunk, TrunkShared};
use super::weights::ModelWeights;
use super::{ForwardError, LogitsWanted, Model, ModelError, ModelInfo, SeqBatch, Tensor};
use crate::backend::cpu::dequantize_row;
use crate::backend::{Backend, CpuBackend, KvFormat};
use std::sync::Mutex;

/// Rows of logits whose buffer a pass keeps for the next (a verify pass has up to 9).
const KEEP_LOGITS_ROWS: usize = 16;

/// Activation buffers reused across forward passes (grown to the largest batch seen).
#[derive(Default)]
struct Scratch {
    /// The residual stream of every row of the pass.
    x: Vec<f32>,
    layer: LayerScratch,
    positions: Vec<usize>,
    /// The output head's rows and logits: kept, since freeing a buffer of a megabyte after
    /// every pass made the allocator hand its pages back and fault them in again.
    rows: Vec<f32>,
    logits: Vec<f32>,
}

pub struct Llama {
    info: ModelInfo,
    hp: HParams,
    backend: Box<dyn Backend + Sync>,
    embed: Tensor,
    output: Tensor,
    output_norm: Vec<f32>,
    layers: Vec<DecoderBlock>,
    /// What the architecture does, layer by layer.
    spec: ModelSpec,
    scratch: Mutex<Scratch>,
}

impl Llama {
    /// Builds the model on the CPU backend with `threads` kernel threads (0: every core).
    pub fn load(files: &ModelFiles, threads: usize) -> Result<Llama, ModelError> {
        Ok(Llama::with_backend(files, Box::new(CpuBackend::new(threads))))
    }

    pub fn with_backend(files: &ModelFiles, backend: Box<dyn Backend + Sync>) -> Llama {
        let hp = files.hparams.clone();
        let w: &ModelWeights = &files.weights;
        let be: &dyn Backend = &*backend;
        let layers = w.layers.iter().map(|l| DecoderBlock::new(l, |t| t.uploaded(be))).collect();
        let output = w.output.uploaded(be);
        let spec = describe(&hp, w.rope_layout);
        Llama {
            info: files.info(),
            spec,
            hp,
            backend,
            embed: w.embed.clone(),
            output,
            output_norm: w.output_norm.to_f32(),
            layers,
            scratch: Mutex::new(Scratch::default()),
        }
    }

    fn check(&self, batch: &[SeqBatch<'_>]) -> Result<(), ForwardError> {
        for b in batch {
            let needed = b.cache.len() + b.tokens.len();
            if needed > b.cache.capacity() {
                return Err(ForwardError::ContextFull { needed, capacity: b.cache.capacity() });
            }
            if let Some(&token) = b.tokens.iter().find(|&&t| t as usize >= self.hp.vocab) {
                return Err(ForwardError::BadToken { token, vocab_size: self.hp.vocab });
            }
        }
        Ok(())
    }
}

impl Model for Llama {
    fn info(&self) -> &ModelInfo {
        &self.info
    }

    fn forward(&self, batch: &mut [SeqBatch<'_>]) -> Result<Vec<Vec<f32>>, ForwardError> {
        self.run(batch, false).map(|o| o.logits)
    }

    fn mtp_trunk(&self) -> Option<&dyn MtpTrunk> {
        Some(self)
    }

    fn kv_format(&self) -> KvFormat {
        self.backend.kv_format(self.hp.head_dim)
    }
}

impl MtpTrunk for Llama {
    fn forward_hidden(&self, batch: &mut [SeqBatch<'_>]) -> Result<ForwardOutput, ForwardError> {
        self.run(batch, true)
    }

    fn shared(&self) -> TrunkShared<'_> {
        // A head drafts after the last layer, and rotates as it does.
        let rope = self.spec.layers.last().expect("a model has layers").rope;
        TrunkShared { backend: &*self.backend, embed: &self.embed, output: &self.output, rope }
    }
}

impl Llama {
    /// The forward pass; with `keep_hidden`, also every fed row's last-layer output (the
    /// residual stream before the final norm), which is what an MTP head reads.
    fn run(&self, batch: &mut [SeqBatch<'_>], keep_hidden: bool) -> Result<ForwardOutput, ForwardError> {
        self.check(batch)?;
        let hp = &self.hp;
        let hidden = hp.hidden;
        let be = &*self.backend;
        let t: usize = batch.iter().map(|b| b.tokens.len()).sum();
        if t == 0 {
            let empty = || batch.iter().map(|_| Vec::new()).collect();
            return Ok(ForwardOutput { logits: empty(), hidden: empty() });
        }
        let mut guard = self.scratch.lock().unwrap_or_else(|e| e.into_inner());
        let s = &mut *guard;
        s.x.resize(t * hidden, 0.0);
        s.positions.clear();
        let embed = self.embed.weight();
        let mut r = 0;
        for b in batch.iter() {
            let start = b.cache.len();
            for (i, &tok) in b.tokens.iter().enumerate() {
                s.positions.push(start + i);
                let row = &mut s.x[r * hidden..(r + 1) * hidden];
                dequantize_row(embed.dtype, embed.row(tok as usize), row);
                if let Some(scale) = self.spec.embed_scale {
                    row.iter_mut().for_each(|v| *v *= scale);
                }
                r += 1;
            }
        }
        for (l, (layer, spec)) in self.layers.iter().zip(&self.spec.layers).enumerate() {
            let mut seqs: Vec<LayerSeq<'_>> =
                batch.iter_mut().map(|b| LayerSeq { rows: b.tokens.len(), cache: &mut *b.cache, layer: l }).collect();
            s.layer.fit(t, hidden, spec);
            forward_layer(be, layer, spec, &mut s.x, &mut s.layer, &s.positions, &mut seqs);
        }
        // Only the rows whose logits are wanted go through the (large) output head.
        let mut rows = std::mem::take(&mut s.rows);
        rows.clear();
        let mut hidden_out = Vec::with_capacity(batch.len());
        let mut r = 0;
        for b in batch.iter_mut() {
            let n = b.tokens.len();
            if keep_hidden {
                hidden_out.push(s.x[r * hidden..(r + n) * hidden].to_vec());
            }
            match b.logits {
                _ if n == 0 => {}
                LogitsWanted::Last => rows.extend_from_slice(&s.x[(r + n - 1) * hidden..(r + n) * hidden]),
                LogitsWanted::All => rows.extend_from_slice(&s.x[r * hidden..(r + n) * hidden]),
            }
            b.cache.advance(n);
            r += n;
        }
        let m = rows.len() / hidden;
        be.rms_norm(&mut rows, &self.output_norm, hp.rms_eps);
        let vocab = hp.vocab;
        let logits = &mut s.logits;
        logits.resize(m * vocab, 0.0);
        be.matmul(self.output.weight(), &rows, m, logits);
        let mut out = Vec::with_capacity(batch.len());
        let mut r = 0;
        for b in batch.iter() {
            let k = if b.logits == LogitsWanted::Last { b.tokens.len().min(1) } else { b.tokens.len() };
            out.push(logits[r * vocab..(r + k) * vocab].to_vec());
            r += k;
        }
        s.rows = rows;
        if m > KEEP_LOGITS_ROWS {
            // A pass with logits for a whole prompt: not worth keeping its megabytes.
            s.logits = Vec::new();
        }
        Ok(ForwardOutput { logits: out, hidden: hidden_out })
    }
}
