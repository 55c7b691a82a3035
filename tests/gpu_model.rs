//! The demo model on the GPU backend (lavapipe in CI) against the CPU backend: the same
//! tokens teacher-forced through both, compared logit by logit. The two differ by rounding:
//! the CPU multiplies Q4_1 weights with activations rounded to 8 bits (Q8_1), the GPU with f32
//! activations, and the caches are f16 on the GPU and bf16 or f16 on the CPU.

mod common;

use mtplx_lite::backend::cpu::host_pass::{HostActs, HostPass};
use mtplx_lite::backend::{open, AttnSeq, Backend, BackendChoice, CpuBackend, Heads, Pass, PassShape, Rope, WeightRef};
use std::sync::Mutex;

/// The CPU computing as the GPU does: weights dequantized to f32 and multiplied by f32
/// activations, caches in f16. The GPU must match it to float rounding.
struct F32Cpu {
    cpu: CpuBackend,
    acts: Mutex<HostActs>,
}

impl Backend for F32Cpu {
    fn matmul(&self, w: WeightRef<'_>, x: &[f32], n: usize, out: &mut [f32]) {
        self.cpu.matmul_dequantized(w, x, n, out)
    }
    fn begin(&self, shape: PassShape, positions: &[usize]) -> Box<dyn Pass + '_> {
        Box::new(HostPass::new(self, self.acts.lock().unwrap(), shape, positions))
    }
    fn rms_norm(&self, x: &mut [f32], weight: &[f32], eps: f32) {
        self.cpu.rms_norm(x, weight, eps)
    }
    fn rope(&self, x: &mut [f32], n_heads: usize, head_dim: usize, positions: &[usize], rope: Rope) {
        self.cpu.rope(x, n_heads, head_dim, positions, rope)
    }
    fn swiglu(&self, gate: &mut [f32], up: &[f32]) {
        self.cpu.swiglu(gate, up)
    }
    fn geglu(&self, gate: &mut [f32], up: &[f32]) {
        self.cpu.geglu(gate, up)
    }
    fn attention(&self, seq: AttnSeq<'_>, heads: Heads, scale: f32) {
        self.cpu.attention(seq, heads, scale)
    }
}
use mtplx_lite::model::llama::Llama;
use mtplx_lite::model::{LogitsWanted, Model, ModelFiles, SeqBatch, Tokenizer};

fn logits_of(model: &Llama, tokens: &[u32], chunk: usize) -> Vec<f32> {
    let mut cache = model.new_cache(512);
    let mut out = Vec::new();
    for piece in tokens.chunks(chunk) {
        let mut batch = [SeqBatch { tokens: piece, cache: &mut cache, logits: LogitsWanted::All }];
        out.extend(model.forward(&mut batch).expect("forward").remove(0));
    }
    out
}

fn argmax(v: &[f32]) -> usize {
    v.iter().enumerate().fold((0, f32::MIN), |b, (i, &x)| if x > b.1 { (i, x) } else { b }).0
}

#[test]
fn the_demo_model_on_the_gpu_agrees_with_the_cpu_position_by_position() {
    let path = common::demo_model();
    let files = ModelFiles::open(&path).unwrap();
    let tok = Tokenizer::from_model_files(&files).unwrap();
    let text = "The capital of France is Paris. The capital of Germany is Berlin. def add(a, b):\n    return a + b\n";
    let ids = tok.encode(text, false).unwrap();
    let (cpu_be, _) = open(BackendChoice::Cpu, 2).unwrap();
    let (gpu_be, info) = open(BackendChoice::Gpu, 2).expect("a Vulkan adapter (lavapipe: mesa-vulkan-drivers)");
    assert_eq!(info.backend, "gpu", "{info:?}");
    let cpu = Llama::on(&files, cpu_be).unwrap();
    let exact = Llama::on(&files, Box::new(F32Cpu { cpu: CpuBackend::new(2), acts: Mutex::default() })).unwrap();
    let vocab = cpu.info().vocab_size;
    let f32_ref = logits_of(&exact, &ids, ids.len());
    let q8_ref = logits_of(&cpu, &ids, ids.len());
    let gpu = Llama::on(&files, gpu_be).unwrap();
    let want = &f32_ref;
    // Whole, then in uneven chunks: the device cache must carry the prefix across passes.
    for chunk in [ids.len(), 5] {
        let got = logits_of(&gpu, &ids, chunk);
        let d = q8_ref.iter().zip(&got).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        eprintln!("chunk {chunk}: worst logit difference against the default CPU path {d}");
        assert_eq!(got.len(), want.len());
        let mut worst = 0f32;
        let mut agree = 0;
        for (w, g) in want.chunks(vocab).zip(got.chunks(vocab)) {
            let d = w.iter().zip(g).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
            worst = worst.max(d);
            agree += usize::from(argmax(w) == argmax(g));
        }
        eprintln!("chunk {chunk}: {} positions, top-1 agrees at {agree}, worst logit difference {worst}", ids.len());
        assert!(worst < 1.0, "chunk {chunk}: a logit differs by {worst}");
        assert!(agree + 1 >= ids.len(), "chunk {chunk}: top-1 agrees at only {agree} of {}", ids.len());
    }
}

/// Gemma 3 270M (Q4_K_M) on the device: Q4_K, Q5_0, Q6_K and Q8_0 matrices, an embedding of
/// 188,743,680 bytes split across lavapipe's 128 MiB bindings and tied to the head, the
/// embedding's scale, four norms a block, q/k norms, GeGLU and two RoPE bases, against the f32
/// CPU teacher-forced on the same tokens. Both multiply dequantized weights by f32 activations,
/// so they differ by summation order: measured 0.0023 on logits of tens; the bound is 20 times
/// that.
#[test]
fn gemma3_on_the_gpu_agrees_with_the_f32_cpu_with_its_embedding_split_across_bindings() {
    let files = ModelFiles::open(common::gemma_model()).unwrap();
    let tok = Tokenizer::from_model_files(&files).unwrap();
    let ids = tok.encode("The capital of France is Paris, and", true).unwrap();
    let exact = Llama::on(&files, Box::new(F32Cpu { cpu: CpuBackend::new(2), acts: Mutex::default() })).unwrap();
    let vocab = exact.info().vocab_size;
    let want = logits_of(&exact, &ids, ids.len());
    drop(exact);
    let (gpu_be, _) = open(BackendChoice::Gpu, 2).expect("a Vulkan adapter (lavapipe: mesa-vulkan-drivers)");
    let gpu = Llama::on(&files, gpu_be).unwrap();
    // In two uneven pieces: the second reads the first's cache on the device.
    let got = logits_of(&gpu, &ids, 5);
    let mut worst = 0f32;
    let mut agree = 0;
    for (w, g) in want.chunks(vocab).zip(got.chunks(vocab)) {
        worst = worst.max(w.iter().zip(g).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max));
        agree += usize::from(argmax(w) == argmax(g));
    }
    eprintln!("gemma3: {} positions, top-1 agrees at {agree}, worst logit difference {worst}", ids.len());
    assert!(worst < 0.05, "a logit differs by {worst}");
    assert_eq!(agree, ids.len(), "top-1 agrees at only {agree} of {}", ids.len());
}
