//! `MtpHead`: a forged (or checkpoint) MTP head, its forward pass and greedy chained drafting.

use super::sidecar::Sidecar;
use super::MtpTrunk;
use crate::backend::cpu::repack::unpack_row;
use crate::backend::cpu::{dequantize_row, quantize_row};
use crate::backend::{Backend, DType, Heads, KvFormat, Layout, Rope};
use crate::model::decoder::{forward_layer, Activation, AttentionKind, DecoderBlock, LayerSeq, LayerSpec};
use crate::model::tensor::Storage;
use crate::model::{ForwardError, KvCache, LayerWeights, LogitsWanted, ModelError, Tensor};
use std::path::Path;
use std::sync::Arc;

/// What one head forward returns.
pub struct MtpStep {
    /// Draft logits over the sub-vocabulary (`MtpHead::subvocab().len()` per row): one row for
    /// `LogitsWanted::Last`, one per fed row for `All`. Entry `j` scores token `subvocab()[j]`.
    pub logits: Vec<f32>,
    /// The head's output for every fed row (`hidden` values each, before its final norm). Fed
    /// back with the drafted token, it chains the next, deeper draft.
    pub hidden: Vec<f32>,
}

#[derive(Debug)]
pub enum MtpError {
    /// The head's cache is full, or a token is outside the vocabulary.
    Forward(ForwardError),
    /// `hidden` does not hold one row of the trunk's hidden size per token.
    HiddenShape { tokens: usize, hidden_values: usize, hidden_size: usize },
}

impl std::fmt::Display for MtpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MtpError::Forward(e) => write!(f, "MTP head: {e}"),
            MtpError::HiddenShape { tokens, hidden_values, hidden_size } => write!(
                f,
                "MTP head: {tokens} tokens need {tokens} hidden rows of {hidden_size} values, got {hidden_values} values"
            ),
        }
    }
}

impl std::error::Error for MtpError {}

/// A head's weights by role, whatever file (a sidecar, or the checkpoint itself) and naming
/// they were read from: every source maps its names onto this, and [`MtpHead::new`] builds the
/// head from it, so that there is one head however it was stored.
pub struct HeadWeights {
    /// `[hidden]` each: the norms of the token's embedding and of the trunk's hidden state, and
    /// the norm before the output head.
    pub enorm: Tensor,
    pub hnorm: Tensor,
    pub final_norm: Tensor,
    /// `[hidden, 2 * hidden]`: the embedding half of its input first, then the hidden half.
    pub fc: Tensor,
    /// The head's decoder block, of the trunk's block shapes.
    pub layer: LayerWeights,
}

/// The head's sizes and settings (the trunk's, for a head read from its own checkpoint).
#[derive(Clone, Copy, Debug)]
pub struct HeadShape {
    pub hidden: usize,
    pub heads: Heads,
    pub ffn: usize,
    pub vocab: usize,
    pub rms_eps: f32,
    /// The chained depth the head was trained for.
    pub depth_trained: usize,
}

pub struct MtpHead {
    depth_trained: usize,
    hidden: usize,
    vocab: usize,
    eps: f32,
    heads: Heads,
    ffn: usize,
    subvocab: Vec<u32>,
    enorm: Vec<f32>,
    hnorm: Vec<f32>,
    final_norm: Vec<f32>,
    fc: Tensor,
    block: DecoderBlock,
    /// The trunk's output-head rows of the sub-vocabulary, gathered once, in the trunk's type;
    /// or, over the full vocabulary, the trunk's output head itself.
    sub_out: Tensor,
    /// `sub_out` is the trunk's own output head, already in the backend's layout: not copied.
    shares_output: bool,
}

/// `t` as Q8_0 (when its rows are whole blocks) in `backend`'s preferred layout.
fn quantize_and_repack(backend: &dyn Backend, t: &Tensor) -> Tensor {
    let q8 = if t.dtype != DType::Q8_0 && t.layout == Layout::Rows && t.cols().is_multiple_of(32) {
        quantize_row(DType::Q8_0, &t.to_f32()).map(|bytes| {
            let len = bytes.len();
            Tensor::new(t.name.clone(), DType::Q8_0, t.shape.clone(), Arc::new(Storage::Owned(bytes)), 0, len)
        })
    } else {
        None
    };
    q8.as_ref().unwrap_or(t).uploaded(backend)
}

/// Row `id` of `t` in its type's row encoding, whatever layout the backend uploaded it in.
fn file_row(t: &Tensor, id: usize, out: &mut Vec<u8>) {
    let row_bytes = t.bytes().len() / t.rows().max(1);
    match t.layout {
        Layout::Rows => out.extend_from_slice(&t.bytes()[id * row_bytes..(id + 1) * row_bytes]),
        Layout::Rows8 => {
            let at = out.len();
            out.resize(at + row_bytes, 0);
            unpack_row(t.dtype, t.bytes(), t.cols(), id, &mut out[at..]);
        }
    }
}

impl MtpHead {
    /// Loads a sidecar for `trunk`, whose weight file has sha256 `trunk_sha256` (hex). A sidecar
    /// made for another trunk is refused with [`ModelError::WrongTrunk`], naming both hashes.
    pub fn load(path: &Path, trunk_sha256: &str, trunk: &dyn MtpTrunk) -> Result<MtpHead, ModelError> {
        let sc = Sidecar::open(path)?;
        sc.meta.check_trunk(path, trunk_sha256, trunk.info())?;
        let m = &sc.meta;
        let (h, qd, kvd, ffn) = (m.hidden, m.n_heads * m.head_dim, m.n_kv_heads * m.head_dim, m.ffn);
        let l = |k: &str, shape: &[usize]| sc.tensor(&format!("mtp.layer.{k}.weight"), shape);
        let layer = LayerWeights {
            attn_norm: l("attn_norm", &[h])?,
            wq: l("attn_q", &[qd, h])?,
            wk: l("attn_k", &[kvd, h])?,
            wv: l("attn_v", &[kvd, h])?,
            wo: l("attn_output", &[h, qd])?,
            bq: None,
            bk: None,
            bv: None,
            bo: None,
            q_norm: None,
            k_norm: None,
            ffn_norm: l("ffn_norm", &[h])?,
            w_gate: l("ffn_gate", &[ffn, h])?,
            w_up: l("ffn_up", &[ffn, h])?,
            w_down: l("ffn_down", &[h, ffn])?,
            post_attn_norm: None,
            post_ffn_norm: None,
        };
        let weights = HeadWeights {
            enorm: sc.tensor("mtp.enorm.weight", &[h])?,
            hnorm: sc.tensor("mtp.hnorm.weight", &[h])?,
            final_norm: sc.tensor("mtp.final_norm.weight", &[h])?,
            fc: sc.tensor("mtp.eh_proj.weight", &[h, 2 * h])?,
            layer,
        };
        let shape = HeadShape {
            hidden: h,
            heads: Heads { n_heads: m.n_heads, n_kv_heads: m.n_kv_heads, head_dim: m.head_dim },
            ffn,
            vocab: m.vocab,
            rms_eps: m.rms_eps,
            depth_trained: m.depth_trained,
        };
        Ok(MtpHead::new(weights, shape, Some(sc.subvocab), trunk))
    }

    /// The head of `weights` riding on `trunk`, drafting over `subvocab` (trunk token ids,
    /// ascending, each below `shape.vocab`), or over the whole vocabulary when `None`. The
    /// caller has checked every shape against `shape` (a sidecar's reader, or the checkpoint's).
    pub fn new(weights: HeadWeights, shape: HeadShape, subvocab: Option<Vec<u32>>, trunk: &dyn MtpTrunk) -> MtpHead {
        let out = trunk.shared().output;
        let (subvocab, sub_out, shares_output) = match subvocab {
            Some(ids) => {
                let mut rows = Vec::with_capacity(ids.len() * (out.bytes().len() / out.rows().max(1)));
                for &id in &ids {
                    file_row(out, id as usize, &mut rows);
                }
                let len = rows.len();
                let dims = vec![ids.len(), shape.hidden];
                let t = Tensor::new("mtp.sub_out".into(), out.dtype, dims, Arc::new(Storage::Owned(rows)), 0, len);
                (ids, t, false)
            }
            // The whole vocabulary: the trunk's output head as it is (a shared handle, no copy).
            None => ((0..shape.vocab as u32).collect(), out.clone(), true),
        };
        let block = DecoderBlock::new(&weights.layer, trunk.shared().backend, Tensor::clone);
        MtpHead {
            depth_trained: shape.depth_trained,
            hidden: shape.hidden,
            vocab: shape.vocab,
            eps: shape.rms_eps,
            heads: shape.heads,
            ffn: shape.ffn,
            subvocab,
            enorm: weights.enorm.to_f32(),
            hnorm: weights.hnorm.to_f32(),
            final_norm: weights.final_norm.to_f32(),
            fc: weights.fc,
            block,
            sub_out,
            shares_output,
        }
    }

    /// The head made fast for `backend`: its layer's matrices rounded to Q8_0 and every matrix,
    /// the gathered output rows too, in the backend's preferred layout, so that a draft runs on
    /// the same integer kernels as the trunk. Drafts may differ from the exact head's where two
    /// tokens nearly tie; verification keeps the output exact either way.
    pub fn quantized(mut self, backend: &dyn Backend) -> MtpHead {
        let b = &mut self.block;
        for t in [&mut self.fc, &mut b.wq, &mut b.wk, &mut b.wv, &mut b.wo, &mut b.w_gate, &mut b.w_up, &mut b.w_down] {
            *t = quantize_and_repack(backend, t);
        }
        // The trunk's own output head is already in the backend's layout, and rounding it would
        // only make draft logits differ from the trunk's for nothing.
        if !self.shares_output {
            self.sub_out = quantize_and_repack(backend, &self.sub_out);
        }
        self
    }

    /// The head's block as a layer of its trunk's kind (qwen3's q/k norms included, which its
    /// block then holds), rotated as the trunk rotates (`rope`).
    fn layer_spec(&self, rope: Rope) -> LayerSpec {
        LayerSpec {
            heads: self.heads,
            ffn: self.ffn,
            rms_eps: self.eps,
            rope,
            attention: AttentionKind::Causal,
            activation: Activation::SwiGlu,
            score_scale: LayerSpec::default_score_scale(self.heads.head_dim),
        }
    }

    /// Trunk token ids the draft logits score, ascending.
    pub fn subvocab(&self) -> &[u32] {
        &self.subvocab
    }

    /// Values per hidden row: the trunk's hidden size.
    pub fn hidden_size(&self) -> usize {
        self.hidden
    }

    /// The chained depth the head was trained for.
    pub fn depth_trained(&self) -> usize {
        self.depth_trained
    }

    /// An empty cache for the head's one layer, for a sequence of at most `capacity` positions,
    /// in the trunk's `format` (`Model::kv_format`): the head runs on the trunk's backend.
    pub fn new_cache(&self, capacity: usize, format: KvFormat) -> KvCache {
        KvCache::new(1, self.heads.kv_dim(), capacity, format)
    }

    /// Runs the head over `tokens.len()` rows at positions `cache.len()..`: row `r` pairs
    /// `hidden[r]` (the trunk's hidden state at that position, or the head's own output for a
    /// chained draft) with `tokens[r]` (the token after that position).
    pub fn forward(
        &self,
        trunk: &dyn MtpTrunk,
        cache: &mut KvCache,
        hidden: &[f32],
        tokens: &[u32],
        logits: LogitsWanted,
    ) -> Result<MtpStep, MtpError> {
        let (n, hd) = (tokens.len(), self.hidden);
        if hidden.len() != n * hd {
            return Err(MtpError::HiddenShape { tokens: n, hidden_values: hidden.len(), hidden_size: hd });
        }
        let needed = cache.len() + n;
        if needed > cache.capacity() {
            return Err(MtpError::Forward(ForwardError::ContextFull { needed, capacity: cache.capacity() }));
        }
        if let Some(&token) = tokens.iter().find(|&&t| t as usize >= self.vocab) {
            return Err(MtpError::Forward(ForwardError::BadToken { token, vocab_size: self.vocab }));
        }
        if n == 0 {
            return Ok(MtpStep { logits: Vec::new(), hidden: Vec::new() });
        }
        let shared = trunk.shared();
        let be = shared.backend;
        let embed = shared.embed.weight();
        let mut e = vec![0.0; n * hd];
        for (r, &tok) in tokens.iter().enumerate() {
            dequantize_row(embed.dtype, embed.row(tok as usize), &mut e[r * hd..(r + 1) * hd]);
        }
        let mut hn = hidden.to_vec();
        be.rms_norm(&mut e, &self.enorm, self.eps);
        be.rms_norm(&mut hn, &self.hnorm, self.eps);
        let mut cat = Vec::with_capacity(n * 2 * hd);
        for r in 0..n {
            cat.extend_from_slice(&e[r * hd..(r + 1) * hd]);
            cat.extend_from_slice(&hn[r * hd..(r + 1) * hd]);
        }
        let mut x = vec![0.0; n * hd];
        be.matmul(self.fc.weight(), &cat, n, &mut x);

        let start = cache.len();
        let positions: Vec<usize> = (start..start + n).collect();
        let spec = self.layer_spec(shared.rope);
        let mut p = be.begin(spec.pass_shape(n, hd), &positions);
        p.load_x(&x);
        let mut seqs = [LayerSeq { rows: n, cache: &mut *cache, layer: 0 }];
        forward_layer(&mut *p, &self.block, &spec, &mut seqs);
        let x = p.read_x(0, n).map_err(|e| MtpError::Forward(ForwardError::Device(e)))?;
        drop(p);
        cache.advance(n);

        let mut rows = match logits {
            LogitsWanted::Last => x[(n - 1) * hd..].to_vec(),
            LogitsWanted::All => x.clone(),
        };
        let m = rows.len() / hd;
        be.rms_norm(&mut rows, &self.final_norm, self.eps);
        let s = self.subvocab.len();
        let mut lg = vec![0.0; m * s];
        be.matmul(self.sub_out.weight(), &rows, m, &mut lg);
        Ok(MtpStep { logits: lg, hidden: x })
    }

    /// Greedy chained drafting. Feeds the catch-up rows (`hidden`, `tokens`: the trunk's hidden
    /// states and the tokens after them since the head last ran), then chains `depth` drafts,
    /// each from the previous step's output hidden state and top-1 token. The cache ends
    /// `depth - 1` entries past the trunk's: truncate it to the trunk's accepted length after
    /// verification. Returns each draft token with its probability under the draft distribution.
    pub fn draft_greedy(
        &self,
        trunk: &dyn MtpTrunk,
        cache: &mut KvCache,
        hidden: &[f32],
        tokens: &[u32],
        depth: usize,
    ) -> Result<Vec<(u32, f32)>, MtpError> {
        let step = self.forward(trunk, cache, hidden, tokens, LogitsWanted::Last)?;
        self.chain(trunk, cache, &step, depth)
    }

    /// Greedy chained drafts from `last`, the head's output at its cache's last row: each draft is
    /// the top-1 of the previous step, fed back with that step's hidden state. The cache ends
    /// `depth - 1` entries longer.
    pub fn chain(
        &self,
        trunk: &dyn MtpTrunk,
        cache: &mut KvCache,
        last: &MtpStep,
        depth: usize,
    ) -> Result<Vec<(u32, f32)>, MtpError> {
        let s = self.subvocab.len();
        let mut logits = last.logits[last.logits.len() - s..].to_vec();
        let mut hidden = last.hidden[last.hidden.len() - self.hidden..].to_vec();
        let mut out = Vec::with_capacity(depth);
        for d in 0..depth {
            let (j, p) = top1(&logits);
            let token = self.subvocab[j];
            out.push((token, p));
            if d + 1 < depth {
                let step = self.forward(trunk, cache, &hidden, &[token], LogitsWanted::Last)?;
                (logits, hidden) = (step.logits, step.hidden);
            }
        }
        Ok(out)
    }

    /// Spreads one row of sub-vocabulary logits over the full vocabulary, pruned tokens at
    /// -inf (draft probability q = 0), so that the sampler's transforms apply unchanged.
    pub fn scatter(&self, sub_logits: &[f32], full: &mut [f32]) {
        full.fill(f32::NEG_INFINITY);
        for (&id, &l) in self.subvocab.iter().zip(sub_logits) {
            full[id as usize] = l;
        }
    }
}

/// The index of the largest logit and its softmax probability.
fn top1(logits: &[f32]) -> (usize, f32) {
    let (mut j, mut best) = (0, f32::NEG_INFINITY);
    for (i, &l) in logits.iter().enumerate() {
        if l > best {
            (j, best) = (i, l);
        }
    }
    let z: f32 = logits.iter().map(|&l| (l - best).exp()).sum();
    (j, 1.0 / z)
}
