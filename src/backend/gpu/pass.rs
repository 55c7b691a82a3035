//! The GPU's [`Pass`]: every op is recorded as a [`Dispatch`] on the pass's device buffers; the
//! first read ([`Pass::head`], [`Pass::read_x`]) submits them all in one command buffer and
//! reads back only what it asked for.

use super::context::{grid, Bind, Dispatch, Gpu, Kernel};
use super::kv;
use super::weights::DeviceWeight;
use crate::backend::math::{rope_angles, rope_inv_freq};
use crate::backend::pass::{Act, AttendSeq, Glu, LayerPass, Pass, PassShape};
use crate::backend::{DeviceHandle, Heads, Rope, RopeLayout, VectorRef, WeightRef};
use std::sync::MutexGuard;

/// Buffers a pass's activations live in, kept and grown across passes.
#[derive(Default)]
pub struct DeviceActs {
    bufs: [Option<wgpu::Buffer>; 9],
    /// Token ids, the head's row indices, the head's rows, logits and argmax ids.
    tokens: Option<wgpu::Buffer>,
    index: Option<wgpu::Buffer>,
    rows: Option<wgpu::Buffer>,
    logits: Option<wgpu::Buffer>,
    ids: Option<wgpu::Buffer>,
}

/// `slot` holding at least `bytes`, made anew (contents not kept) when it is smaller.
fn fit(gpu: &Gpu, slot: &mut Option<wgpu::Buffer>, bytes: u64, label: &str) -> wgpu::Buffer {
    if slot.as_ref().is_none_or(|b| b.size() < bytes) {
        *slot = Some(gpu.storage(bytes.next_power_of_two(), label));
    }
    slot.clone().expect("made above")
}

fn as_bytes_u32(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn weight(h: Option<&DeviceHandle>) -> &DeviceWeight {
    h.and_then(|h| h.downcast_ref::<DeviceWeight>()).expect("every weight a GPU pass reads was uploaded to the device")
}

pub struct GpuPass<'a> {
    gpu: &'a Gpu,
    acts: MutexGuard<'a, DeviceActs>,
    shape: PassShape,
    positions: Vec<usize>,
    ds: Vec<Dispatch>,
    /// RoPE's (cos, sin) tables for this pass's positions, by (theta, dims).
    ropes: Vec<((u32, usize), wgpu::Buffer)>,
}

impl<'a> GpuPass<'a> {
    pub fn new(gpu: &'a Gpu, mut acts: MutexGuard<'a, DeviceActs>, shape: PassShape, positions: &[usize]) -> Self {
        for a in [Act::X, Act::H, Act::Q, Act::K, Act::V, Act::Att, Act::O, Act::Gate, Act::Up] {
            let bytes = (shape.rows * shape.width(a) * 4) as u64;
            fit(gpu, &mut acts.bufs[a as usize], bytes, &format!("{a:?}"));
        }
        GpuPass { gpu, acts, shape, positions: positions.to_vec(), ds: Vec::new(), ropes: Vec::new() }
    }

    fn buf(&self, a: Act) -> wgpu::Buffer {
        self.acts.bufs[a as usize].clone().expect("made at the pass's start")
    }

    fn values(&self, a: Act) -> u32 {
        (self.shape.rows * self.shape.width(a)) as u32
    }

    /// An element-wise op over `n` values: see `shaders/elementwise.wgsl` for `op`.
    fn elementwise(&mut self, op: u32, x: wgpu::Buffer, y: wgpu::Buffer, n: u32, d: u32) {
        let (gx, gy) = grid(n.div_ceil(256));
        let mut params = [0u32; 16];
        params[..4].copy_from_slice(&[n, op, d, gx]);
        self.ds.push(Dispatch {
            kernel: Kernel::Elementwise,
            dtype: None,
            binds: vec![Bind::whole(&x), Bind::whole(&y)],
            params,
            groups: [gx, gy, 1],
        });
    }

    /// RMSNorm of `values` values (pieces of `w.cols`) into `x`: in place, or read from `from`.
    fn norm(&mut self, x: wgpu::Buffer, from: Option<wgpu::Buffer>, values: u32, w: &DeviceWeight, eps: f32) {
        let d = w.cols as u32;
        let pieces = values / d;
        let (gx, gy) = grid(pieces);
        let mut params = [0u32; 16];
        params[..4].copy_from_slice(&[d, eps.to_bits(), gx, pieces]);
        let kernel = if from.is_some() { Kernel::NormFrom } else { Kernel::Norm };
        let binds = [Some(x), Some(w.whole().clone()), from].into_iter().flatten().map(|b| Bind::whole(&b)).collect();
        self.ds.push(Dispatch { kernel, dtype: None, binds, params, groups: [gx, gy, 1] });
    }

    /// `y[n][r] = w[r] · x[n]` for the pass's `n` rows: a dispatch per part of `w`, each
    /// writing its rows' columns of `y`.
    fn matmul_one(&mut self, w: &DeviceWeight, x: wgpu::Buffer, y: wgpu::Buffer, n: usize) {
        let kernel = self.gpu.matmul;
        let rows_per_group = match kernel {
            Kernel::MatmulRows => 64,
            Kernel::MatmulSub => 64 / self.gpu.subgroup_min,
            _ => 4,
        };
        for part in &w.parts {
            let (gx, gy) = grid((part.rows as u32).div_ceil(rows_per_group));
            let mut params = [0u32; 16];
            params[..6].copy_from_slice(&[
                part.rows as u32,
                w.cols as u32,
                n as u32,
                gx,
                part.row0 as u32,
                w.rows as u32,
            ]);
            self.ds.push(Dispatch {
                kernel,
                dtype: Some(w.dtype),
                binds: vec![Bind::whole(&part.buffer), Bind::whole(&x), Bind::whole(&y)],
                params,
                groups: [gx, gy, (n as u32).div_ceil(8)],
            });
        }
    }

    /// The (cos, sin) table of this pass's positions for `rope`, made once per pass.
    fn rope_table(&mut self, rope: Rope) -> wgpu::Buffer {
        let key = (rope.theta.to_bits(), rope.dims);
        if let Some((_, b)) = self.ropes.iter().find(|(k, _)| *k == key) {
            return b.clone();
        }
        let inv = rope_inv_freq(rope);
        let half = rope.dims / 2;
        let mut row = vec![(0f32, 0f32); half];
        let mut bytes = Vec::with_capacity(self.positions.len() * half * 8);
        for &p in &self.positions {
            rope_angles(&inv, p, &mut row);
            for &(c, s) in &row {
                bytes.extend_from_slice(&c.to_le_bytes());
                bytes.extend_from_slice(&s.to_le_bytes());
            }
        }
        let b = self.gpu.storage_init(&bytes, "rope");
        self.ropes.push((key, b.clone()));
        b
    }

    /// Submits what was recorded and reads `floats` values of `src` from value `from`.
    fn read(&mut self, src: &wgpu::Buffer, from: usize, floats: usize) -> Result<Vec<f32>, String> {
        let ds = std::mem::take(&mut self.ds);
        self.gpu.read(&ds, src, (from * 4) as u64, (floats * 4) as u64)
    }
}

impl LayerPass for GpuPass<'_> {
    fn copy(&mut self, from: Act, to: Act) {
        let n = self.values(from);
        self.elementwise(0, self.buf(from), self.buf(to), n, 1);
    }

    fn rms_norm(&mut self, x: Act, w: VectorRef<'_>, eps: f32) {
        let n = self.values(x);
        self.norm(self.buf(x), None, n, weight(w.device), eps);
    }

    fn rms_norm_into(&mut self, from: Act, to: Act, w: VectorRef<'_>, eps: f32) {
        let n = self.values(from);
        self.norm(self.buf(to), Some(self.buf(from)), n, weight(w.device), eps);
    }

    fn add_bias(&mut self, x: Act, bias: VectorRef<'_>) {
        let b = weight(bias.device);
        let n = self.values(x);
        self.elementwise(2, b.whole().clone(), self.buf(x), n, b.cols as u32);
    }

    fn matmul(&mut self, ws: &[WeightRef<'_>], x: Act, outs: &[Act]) {
        for (w, &o) in ws.iter().zip(outs) {
            self.matmul_one(weight(w.device), self.buf(x), self.buf(o), self.shape.rows);
        }
    }

    fn rope(&mut self, x: Act, n_heads: usize, head_dim: usize, rope: Rope) {
        let table = self.rope_table(rope);
        let half = rope.dims / 2;
        let total = (self.shape.rows * n_heads * half) as u32;
        let (gx, gy) = grid(total.div_ceil(256));
        let neox = u32::from(rope.layout == RopeLayout::NeoX);
        let mut params = [0u32; 16];
        params[..6].copy_from_slice(&[self.shape.rows as u32, n_heads as u32, head_dim as u32, half as u32, neox, gx]);
        self.ds.push(Dispatch {
            kernel: Kernel::Rope,
            dtype: None,
            binds: vec![Bind::whole(&self.buf(x)), Bind::whole(&table)],
            params,
            groups: [gx, gy, 1],
        });
    }

    fn attend(&mut self, seqs: &mut [AttendSeq<'_>], heads: Heads, scale: f32, window: Option<usize>) {
        let kvd = heads.kv_dim();
        let (kb, vb, qb, ob) = (self.buf(Act::K), self.buf(Act::V), self.buf(Act::Q), self.buf(Act::Att));
        let mut row0 = 0;
        for s in seqs.iter_mut() {
            let cache = kv::of(s.device, self.gpu, s.layers, kvd);
            // Grown before any of this pass's dispatches reads the cache: at its first layer.
            cache.ensure(self.gpu, s.start + s.rows, s.capacity, s.start);
            let (keys, values) = (cache.keys[s.layer].clone(), cache.values[s.layer].clone());
            let total = (s.rows * kvd / 2) as u32;
            let (gx, gy) = grid(total.div_ceil(256));
            let mut params = [0u32; 16];
            params[..5].copy_from_slice(&[kvd as u32, s.rows as u32, s.start as u32, row0 as u32, gx]);
            self.ds.push(Dispatch {
                kernel: Kernel::KvStore,
                dtype: None,
                binds: [&kb, &vb, &keys, &values].into_iter().map(Bind::whole).collect(),
                params,
                groups: [gx, gy, 2],
            });
            let (gx, gy) = grid((s.rows * heads.n_heads) as u32);
            let mut params = [0u32; 16];
            params[..9].copy_from_slice(&[
                s.rows as u32,
                row0 as u32,
                s.start as u32,
                heads.n_heads as u32,
                heads.n_kv_heads as u32,
                heads.head_dim as u32,
                window.unwrap_or(0) as u32,
                scale.to_bits(),
                gx,
            ]);
            self.ds.push(Dispatch {
                kernel: Kernel::Attention,
                dtype: None,
                binds: vec![Bind::whole(&qb), Bind::whole(&keys), Bind::whole(&values), Bind::whole(&ob)],
                params,
                groups: [gx, gy, 1],
            });
            row0 += s.rows;
        }
    }

    fn glu(&mut self, glu: Glu) {
        let n = self.values(Act::Gate);
        let op = match glu {
            Glu::Silu => 3,
            Glu::GeluTanh => 4,
        };
        self.elementwise(op, self.buf(Act::Up), self.buf(Act::Gate), n, 1);
    }

    fn add(&mut self, x: Act, y: Act) {
        let n = self.values(x);
        self.elementwise(1, self.buf(y), self.buf(x), n, 1);
    }
}

impl Pass for GpuPass<'_> {
    fn embed(&mut self, table: WeightRef<'_>, tokens: &[u32], scale: Option<f32>) {
        let w = weight(table.device);
        let tb = fit(self.gpu, &mut self.acts.tokens, (tokens.len() * 4) as u64, "tokens");
        self.gpu.queue.write_buffer(&tb, 0, &as_bytes_u32(tokens));
        let (gx, gy) = grid(tokens.len() as u32);
        let x = self.buf(Act::X);
        // Each part copies the tokens whose rows it holds.
        for part in &w.parts {
            let mut params = [0u32; 16];
            params[..6].copy_from_slice(&[
                w.cols as u32,
                scale.unwrap_or(1.0).to_bits(),
                gx,
                tokens.len() as u32,
                part.row0 as u32,
                part.rows as u32,
            ]);
            self.ds.push(Dispatch {
                kernel: Kernel::Embed,
                dtype: Some(w.dtype),
                binds: vec![Bind::whole(&part.buffer), Bind::whole(&tb), Bind::whole(&x)],
                params,
                groups: [gx, gy, 1],
            });
        }
    }

    fn load_x(&mut self, rows: &[f32]) {
        // A queue write lands before every command of the next submission: what was recorded
        // before it goes first.
        if !self.ds.is_empty() {
            self.gpu.submit(&std::mem::take(&mut self.ds), |_| {});
        }
        let bytes: Vec<u8> = rows.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.gpu.queue.write_buffer(&self.buf(Act::X), 0, &bytes);
    }

    fn read_x(&mut self, from: usize, n: usize) -> Result<Vec<f32>, String> {
        let hidden = self.shape.hidden;
        self.read(&self.buf(Act::X), from * hidden, n * hidden)
    }

    fn head(&mut self, rows: &[usize], norm: VectorRef<'_>, eps: f32, w: WeightRef<'_>) -> Result<Vec<f32>, String> {
        let (logits, n) = self.record_head(rows, norm, eps, w);
        self.read(&logits, 0, n)
    }

    fn head_argmax(
        &mut self,
        rows: &[usize],
        norm: VectorRef<'_>,
        eps: f32,
        w: WeightRef<'_>,
    ) -> Result<Vec<u32>, String> {
        let (logits, _) = self.record_head(rows, norm, eps, w);
        let m = rows.len();
        let ids = fit(self.gpu, &mut self.acts.ids, (m * 4) as u64, "argmax");
        let (gx, gy) = grid(m as u32);
        let mut params = [0u32; 16];
        params[..3].copy_from_slice(&[w.rows as u32, m as u32, gx]);
        self.ds.push(Dispatch {
            kernel: Kernel::Argmax,
            dtype: None,
            binds: vec![Bind::whole(&logits), Bind::whole(&ids)],
            params,
            groups: [gx, gy, 1],
        });
        let ds = std::mem::take(&mut self.ds);
        let raw = self.gpu.read_bytes(&ds, &ids, 0, (m * 4) as u64)?;
        Ok(raw.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
    }
}

impl GpuPass<'_> {
    /// Records the head over `rows` of `X` (gather, norm, matrix): the logits buffer and how
    /// many values it holds.
    fn record_head(
        &mut self,
        rows: &[usize],
        norm: VectorRef<'_>,
        eps: f32,
        w: WeightRef<'_>,
    ) -> (wgpu::Buffer, usize) {
        let (hidden, m) = (self.shape.hidden, rows.len());
        let out = weight(w.device);
        let idx: Vec<u32> = rows.iter().map(|&r| r as u32).collect();
        let ib = fit(self.gpu, &mut self.acts.index, (m * 4) as u64, "head rows");
        self.gpu.queue.write_buffer(&ib, 0, &as_bytes_u32(&idx));
        let rb = fit(self.gpu, &mut self.acts.rows, (m * hidden * 4) as u64, "head input");
        let lb = fit(self.gpu, &mut self.acts.logits, (m * out.rows * 4) as u64, "logits");
        let total = (m * hidden) as u32;
        let (gx, gy) = grid(total.div_ceil(256));
        let mut params = [0u32; 16];
        params[..3].copy_from_slice(&[hidden as u32, m as u32, gx]);
        self.ds.push(Dispatch {
            kernel: Kernel::Gather,
            dtype: None,
            binds: vec![Bind::whole(&self.buf(Act::X)), Bind::whole(&ib), Bind::whole(&rb)],
            params,
            groups: [gx, gy, 1],
        });
        self.norm(rb.clone(), None, total, weight(norm.device), eps);
        self.matmul_one(out, rb, lb.clone(), m);
        (lb, m * out.rows)
    }
}
