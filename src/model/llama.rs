//! The forward pass of every decoder-only architecture we read: llama (the demo), qwen2 (biases
//! on q/k/v), qwen3 (RMSNorm on each q and k head) and gemma3 (sliding windows, four norms per
//! block, GeGLU, scaled embeddings), each a description (`arch.rs`) whose layers run through the
//! one decoder layer of `decoder.rs`. One forward pass runs every sequence of a batch together,
//! so each weight matrix is streamed from memory once per step for all rows.

use super::arch::{describe, ModelSpec};
use super::config::HParams;
use super::decoder::{forward_layer, DecoderBlock, LayerSeq};
use super::model_files::ModelFiles;
use super::mtp::{ForwardOutput, MtpTrunk, TrunkShared};
use super::weights::ModelWeights;
use super::{ForwardError, LogitsWanted, Model, ModelError, ModelInfo, SeqBatch, Tensor};
use crate::backend::{Backend, CpuBackend, KvFormat, PassShape, Vector};

pub struct Llama {
    info: ModelInfo,
    hp: HParams,
    backend: Box<dyn Backend + Sync>,
    embed: Tensor,
    output: Tensor,
    output_norm: Vector,
    layers: Vec<DecoderBlock>,
    /// What the architecture does, layer by layer.
    spec: ModelSpec,
    /// The buffers of a pass of one row (every layer has the same widths).
    row_shape: PassShape,
}

impl Llama {
    /// Builds the model on the CPU backend with `threads` kernel threads (0: every core).
    pub fn load(files: &ModelFiles, threads: usize) -> Result<Llama, ModelError> {
        Llama::on(files, Box::new(CpuBackend::new(threads)))
    }

    /// Builds the model on `backend`, which must be able to hold every tensor.
    pub fn on(files: &ModelFiles, backend: Box<dyn Backend + Sync>) -> Result<Llama, ModelError> {
        let w: &ModelWeights = &files.weights;
        let mut matrices = vec![&w.embed, &w.output];
        for l in &w.layers {
            matrices.extend([&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down]);
        }
        for t in matrices {
            backend.can_hold(t.weight()).map_err(|message| ModelError::Backend { tensor: t.name.clone(), message })?;
        }
        Ok(Llama::with_backend(files, backend))
    }

    pub fn with_backend(files: &ModelFiles, backend: Box<dyn Backend + Sync>) -> Llama {
        let hp = files.hparams.clone();
        let w: &ModelWeights = &files.weights;
        let be: &dyn Backend = &*backend;
        let layers = w.layers.iter().map(|l| DecoderBlock::new(l, be, |t| t.uploaded(be))).collect();
        let output = w.output.uploaded(be);
        // The embedding's rows are read where the pass runs: as the file has them on the CPU
        // (whose upload keeps them so), on the device for a device backend, which holds a tied
        // embedding once for both of its uses.
        let embed = if hp.tied_embeddings { w.embed.with_device_of(&output) } else { w.embed.on_device(be) };
        let spec = describe(&hp, w.rope_layout);
        let row_shape = spec.layers[0].pass_shape(1, hp.hidden);
        assert!(spec.layers.iter().all(|l| l.pass_shape(1, hp.hidden) == row_shape), "layers of different widths");
        Llama {
            info: files.info(),
            spec,
            hp,
            output_norm: Vector::new(w.output_norm.to_f32(), be),
            backend,
            embed,
            output,
            layers,
            row_shape,
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
        self.run(batch, false, false).map(|o| o.logits)
    }

    fn step(&self, batch: &mut [SeqBatch<'_>], hidden: bool, argmax: bool) -> Result<ForwardOutput, ForwardError> {
        self.run(batch, hidden, argmax)
    }

    fn mtp_trunk(&self) -> Option<&dyn MtpTrunk> {
        Some(self)
    }

    fn kv_format(&self) -> KvFormat {
        self.backend.kv_format(self.hp.head_dim)
    }

    fn device_stats(&self) -> Option<crate::backend::DeviceStats> {
        self.backend.device_stats()
    }
}

impl MtpTrunk for Llama {
    fn forward_hidden(&self, batch: &mut [SeqBatch<'_>]) -> Result<ForwardOutput, ForwardError> {
        self.run(batch, true, false)
    }

    fn shared(&self) -> TrunkShared<'_> {
        // A head drafts after the last layer, and rotates as it does.
        let rope = self.spec.layers.last().expect("a model has layers").rope;
        TrunkShared { backend: &*self.backend, embed: &self.embed, output: &self.output, rope }
    }
}

impl Llama {
    /// The forward pass; with `keep_hidden`, also every fed row's last-layer output (the
    /// residual stream before the final norm), which is what an MTP head reads; with `argmax`,
    /// each wanted row's most likely token instead of its logits ([`Model::step`]).
    fn run(&self, batch: &mut [SeqBatch<'_>], keep_hidden: bool, argmax: bool) -> Result<ForwardOutput, ForwardError> {
        self.check(batch)?;
        let t: usize = batch.iter().map(|b| b.tokens.len()).sum();
        if t == 0 {
            let empty = || batch.iter().map(|_| Vec::new()).collect();
            let tokens = if argmax { batch.iter().map(|_| Vec::new()).collect() } else { Vec::new() };
            return Ok(ForwardOutput { logits: empty(), hidden: empty(), tokens });
        }
        let positions: Vec<usize> = batch.iter().flat_map(|b| b.cache.len()..b.cache.len() + b.tokens.len()).collect();
        let tokens: Vec<u32> = batch.iter().flat_map(|b| b.tokens.iter().copied()).collect();
        let mut p = self.backend.begin(PassShape { rows: t, ..self.row_shape }, &positions);
        p.embed(self.embed.weight(), &tokens, self.spec.embed_scale);
        for (l, (layer, spec)) in self.layers.iter().zip(&self.spec.layers).enumerate() {
            let mut seqs: Vec<LayerSeq<'_>> =
                batch.iter_mut().map(|b| LayerSeq { rows: b.tokens.len(), cache: &mut *b.cache, layer: l }).collect();
            forward_layer(&mut *p, layer, spec, &mut seqs);
        }
        // Only the rows whose logits are wanted go through the (large) output head.
        let mut rows = Vec::with_capacity(t);
        let mut hidden_out = Vec::with_capacity(batch.len());
        let mut r = 0;
        for b in batch.iter_mut() {
            let n = b.tokens.len();
            if keep_hidden {
                hidden_out.push(p.read_x(r, n).map_err(ForwardError::Device)?);
            }
            match b.logits {
                _ if n == 0 => {}
                LogitsWanted::Last => rows.push(r + n - 1),
                LogitsWanted::All => rows.extend(r..r + n),
            }
            b.cache.advance(n);
            r += n;
        }
        let (norm, eps, head) = (self.output_norm.as_ref(), self.hp.rms_eps, self.output.weight());
        if argmax {
            let ids = p.head_argmax(&rows, norm, eps, head).map_err(ForwardError::Device)?;
            let empty = batch.iter().map(|_| Vec::new()).collect();
            return Ok(ForwardOutput { logits: empty, hidden: hidden_out, tokens: split_rows(ids, batch, 1) });
        }
        let logits = p.head(&rows, norm, eps, head).map_err(ForwardError::Device)?;
        drop(p);
        Ok(ForwardOutput { logits: split_rows(logits, batch, self.hp.vocab), hidden: hidden_out, tokens: Vec::new() })
    }
}

/// The output head's rows (of `width` values: logits, or one token id), back to back, split
/// into each sequence's (one row for `Last`, every row fed for `All`, none for a sequence that
/// fed nothing).
fn split_rows<T: Clone>(values: Vec<T>, batch: &[SeqBatch<'_>], width: usize) -> Vec<Vec<T>> {
    if batch.len() == 1 {
        return vec![values];
    }
    let mut out = Vec::with_capacity(batch.len());
    let mut r = 0;
    for b in batch {
        let k = if b.logits == LogitsWanted::Last { b.tokens.len().min(1) } else { b.tokens.len() };
        out.push(values[r * width..(r + k) * width].to_vec());
        r += k;
    }
    out
}
