//! The device, its queue and the compute pipelines, and the one way work reaches the device: a
//! list of recorded dispatches, encoded into one compute pass of one command buffer with their
//! parameters in one arena buffer, submitted at once ([`Gpu::submit`]).

use super::adapter::GpuError;
use crate::backend::DType;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Bytes of one dispatch's parameters (16 words; each kernel reads the first few).
pub const PARAM_BYTES: u64 = 64;

/// The most workgroups along one grid dimension (WebGPU's guaranteed limit); larger grids fold
/// into a second dimension.
const MAX_GROUPS: u32 = 65_535;

/// Environment variable for fault injection in tests: after this many submits the device is
/// destroyed, as a driver losing it would (a lost GPU cannot be provoked on demand otherwise).
pub const LOSE_AFTER_ENV: &str = "MTPLX_TEST_LOSE_GPU_AFTER_SUBMITS";

/// The kernels, each a WGSL file; the block-reading ones are built once per weight type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kernel {
    Matmul,
    MatmulRows,
    MatmulSub,
    Embed,
    Norm,
    NormFrom,
    Elementwise,
    Rope,
    Gather,
    KvStore,
    Attention,
    Argmax,
}

impl Kernel {
    fn source(self) -> &'static str {
        match self {
            Kernel::Matmul => include_str!("shaders/matmul.wgsl"),
            Kernel::MatmulRows => include_str!("shaders/matmul_rows.wgsl"),
            Kernel::MatmulSub => include_str!("shaders/matmul_sub.wgsl"),
            Kernel::Embed => include_str!("shaders/embed.wgsl"),
            Kernel::Norm | Kernel::NormFrom => include_str!("shaders/norm.wgsl"),
            Kernel::Elementwise => include_str!("shaders/elementwise.wgsl"),
            Kernel::Rope => include_str!("shaders/rope.wgsl"),
            Kernel::Gather => include_str!("shaders/gather.wgsl"),
            Kernel::KvStore => include_str!("shaders/kv_store.wgsl"),
            Kernel::Attention => include_str!("shaders/attention.wgsl"),
            Kernel::Argmax => include_str!("shaders/argmax.wgsl"),
        }
    }
}

/// `shaders/norm.wgsl`'s bindings in place, and reading another buffer.
const NORM_IN_PLACE: &str = "
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read> wt: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;
fn src_at(i: u32) -> f32 { return x[i]; }
";
const NORM_FROM: &str = "
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read> wt: array<f32>;
@group(0) @binding(2) var<storage, read> src: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;
fn src_at(i: u32) -> f32 { return src[i]; }
";

/// The section of `shaders/blocks.wgsl` that reads blocks of `dtype`, with the parts it shares;
/// `None` for a type the device kernels do not read.
pub fn block_reader(dtype: DType) -> Option<String> {
    let all = include_str!("shaders/blocks.wgsl");
    let section = |marker: &str| {
        let start = all.find(marker)? + marker.len();
        let end = all[start..].find("//@").map_or(all.len(), |e| start + e);
        Some(&all[start..end])
    };
    let mut src = section(&format!("//@type {}\n", dtype.name()))?.to_string();
    if matches!(dtype, DType::Q4K | DType::Q5K) {
        src.push_str(section("//@part K_SCALES\n")?);
    }
    Some(src)
}

/// A buffer bound to a dispatch: the whole buffer, or `size` bytes from `offset`.
#[derive(Clone)]
pub struct Bind {
    pub buffer: wgpu::Buffer,
    pub offset: u64,
    pub size: Option<u64>,
}

impl Bind {
    pub fn whole(buffer: &wgpu::Buffer) -> Bind {
        Bind { buffer: buffer.clone(), offset: 0, size: None }
    }
}

/// One recorded dispatch: its kernel (and weight type), its buffers in binding order (the
/// parameters come last), its parameters and its workgroups.
pub struct Dispatch {
    pub kernel: Kernel,
    pub dtype: Option<DType>,
    pub binds: Vec<Bind>,
    pub params: [u32; 16],
    pub groups: [u32; 3],
}

/// A grid of `n` workgroups folded into two dimensions, and the width the kernel unfolds with.
pub fn grid(n: u32) -> (u32, u32) {
    let x = n.clamp(1, MAX_GROUPS);
    (x, n.div_ceil(x).max(1))
}

pub struct Gpu {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub limits: wgpu::Limits,
    /// The matrix kernel: a thread a row on a software adapter; on a GPU a subgroup a row where
    /// it has subgroups, else a workgroup of 64 threads a row with a tree in workgroup memory.
    pub matmul: Kernel,
    /// The adapter's smallest subgroup width (rows a workgroup of the subgroup kernel takes
    /// are counted with it, so that no row is missed whatever width a dispatch gets).
    pub subgroup_min: u32,
    /// Bytes between two dispatches' parameters: the adapter's uniform offset alignment.
    param_stride: u64,
    pipelines: Mutex<HashMap<(Kernel, Option<DType>), wgpu::ComputePipeline>>,
    arena: Mutex<Option<wgpu::Buffer>>,
    /// Set by wgpu's error callback (a validation error, out of memory, a lost device): the
    /// pass that sees it fails instead of returning what the device did not compute.
    failed: Arc<Mutex<Option<String>>>,
    lost: Arc<AtomicBool>,
    dispatches: AtomicU64,
    submits: AtomicU64,
    read_bytes: AtomicU64,
    lose_after: Option<u64>,
}

impl Gpu {
    /// A device on `adapter` with the adapter's own limits (not wgpu's defaults: a binding of
    /// 128 MiB rather than 128 MB decides which tensors fit).
    pub fn new(adapter: &wgpu::Adapter) -> Result<Gpu, GpuError> {
        let limits = adapter.limits();
        // Subgroups where the adapter has them: the matrix kernel's lanes then sum in registers.
        let features = adapter.features() & wgpu::Features::SUBGROUP;
        let desc = wgpu::DeviceDescriptor {
            label: Some("mtplx-lite"),
            required_features: features,
            required_limits: limits.clone(),
            ..Default::default()
        };
        let (device, queue) = smol::block_on(adapter.request_device(&desc))
            .map_err(|e| GpuError::Device { adapter: adapter.get_info().name, message: e.to_string() })?;
        let failed: Arc<Mutex<Option<String>>> = Arc::default();
        let f = failed.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            eprintln!("gpu: {e}");
            f.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert_with(|| e.to_string());
        }));
        let lost = Arc::new(AtomicBool::new(false));
        let l = lost.clone();
        device.set_device_lost_callback(move |reason, message| {
            eprintln!("gpu: device lost ({reason:?}): {message}");
            l.store(true, Ordering::SeqCst);
        });
        let param_stride = (limits.min_uniform_buffer_offset_alignment as u64).max(PARAM_BYTES);
        let software = adapter.get_info().device_type == wgpu::DeviceType::Cpu;
        let matmul = match (software, features.contains(wgpu::Features::SUBGROUP)) {
            (true, _) => Kernel::MatmulRows,
            (false, true) => Kernel::MatmulSub,
            (false, false) => Kernel::Matmul,
        };
        let subgroup_min = adapter.get_info().subgroup_min_size.clamp(1, 64);
        Ok(Gpu {
            subgroup_min,
            device,
            queue,
            limits,
            matmul,
            param_stride,
            pipelines: Mutex::default(),
            arena: Mutex::default(),
            failed,
            lost,
            dispatches: AtomicU64::new(0),
            submits: AtomicU64::new(0),
            read_bytes: AtomicU64::new(0),
            lose_after: std::env::var(LOSE_AFTER_ENV).ok().and_then(|v| v.parse().ok()),
        })
    }

    /// The first device error seen, if any (it stays: a device that failed once is not trusted).
    pub fn fault(&self) -> Option<String> {
        if self.lost.load(Ordering::SeqCst) {
            return Some("the GPU device was lost".into());
        }
        self.failed.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The counters and the fault, for [`crate::backend::Backend::device_stats`].
    pub fn stats(&self) -> crate::backend::DeviceStats {
        crate::backend::DeviceStats {
            dispatches: self.dispatches.load(Ordering::Relaxed),
            submits: self.submits.load(Ordering::Relaxed),
            read_bytes: self.read_bytes.load(Ordering::Relaxed),
            fault: self.fault(),
        }
    }

    /// Submits `buffers`, counting them (and losing the device where a test asked for it).
    pub fn submit_buffers(&self, buffers: Vec<wgpu::CommandBuffer>) {
        let n = self.submits.fetch_add(buffers.len() as u64, Ordering::Relaxed) + buffers.len() as u64;
        self.queue.submit(buffers);
        if self.lose_after.is_some_and(|k| n >= k) && !self.lost.load(Ordering::SeqCst) {
            self.device.destroy();
        }
    }

    /// A storage buffer of `bytes` (at least 4), for reading and writing by kernels and copies.
    pub fn storage(&self, bytes: u64, label: &str) -> wgpu::Buffer {
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: bytes.max(4).next_multiple_of(4),
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        })
    }

    /// A storage buffer holding `bytes`.
    pub fn storage_init(&self, bytes: &[u8], label: &str) -> wgpu::Buffer {
        let b = self.storage(bytes.len() as u64, label);
        self.queue.write_buffer(&b, 0, bytes);
        b
    }

    fn pipeline(&self, kernel: Kernel, dtype: Option<DType>) -> wgpu::ComputePipeline {
        let mut map = self.pipelines.lock().unwrap_or_else(|p| p.into_inner());
        map.entry((kernel, dtype))
            .or_insert_with(|| {
                let mut src = kernel
                    .source()
                    .replace("{GELU_SQRT_2_OVER_PI}", &format!("{:?}", crate::backend::math::GELU_SQRT_2_OVER_PI))
                    .replace("{GELU_CUBIC}", &format!("{:?}", crate::backend::math::GELU_CUBIC));
                src.push_str(match kernel {
                    Kernel::Norm => NORM_IN_PLACE,
                    Kernel::NormFrom => NORM_FROM,
                    Kernel::Matmul | Kernel::MatmulRows | Kernel::MatmulSub => include_str!("shaders/matmul_io.wgsl"),
                    _ => "",
                });
                if let Some(d) = dtype {
                    src.push_str(&block_reader(d).expect("the weight's type was checked at upload"));
                }
                let desc = wgpu::ShaderModuleDescriptor {
                    label: Some(&format!("{kernel:?}")),
                    source: wgpu::ShaderSource::Wgsl(src.into()),
                };
                let module = self.device.create_shader_module(desc);
                self.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                    label: Some(&format!("{kernel:?}")),
                    layout: None,
                    module: &module,
                    entry_point: Some("main"),
                    compilation_options: Default::default(),
                    cache: None,
                })
            })
            .clone()
    }

    /// Encodes `ds` into one compute pass, then `after` (copies for reading back), and submits
    /// the one command buffer.
    pub fn submit(&self, ds: &[Dispatch], after: impl FnOnce(&mut wgpu::CommandEncoder)) {
        let stride = self.param_stride;
        let mut arena = self.arena.lock().unwrap_or_else(|p| p.into_inner());
        let need = (ds.len() as u64 * stride).max(stride);
        if arena.as_ref().is_none_or(|a| a.size() < need) {
            *arena = Some(self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("parameters"),
                size: need.next_power_of_two(),
                usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }));
        }
        let arena = arena.as_ref().expect("made above");
        let mut bytes = vec![0u8; (ds.len() as u64 * stride) as usize];
        for (i, d) in ds.iter().enumerate() {
            let at = i * stride as usize;
            for (k, w) in d.params.iter().enumerate() {
                bytes[at + 4 * k..at + 4 * k + 4].copy_from_slice(&w.to_le_bytes());
            }
        }
        if !bytes.is_empty() {
            self.queue.write_buffer(arena, 0, &bytes);
        }
        let mut enc = self.device.create_command_encoder(&Default::default());
        {
            let mut pass = enc.begin_compute_pass(&Default::default());
            for (i, d) in ds.iter().enumerate() {
                let pipeline = self.pipeline(d.kernel, d.dtype);
                let mut entries: Vec<wgpu::BindGroupEntry<'_>> = d
                    .binds
                    .iter()
                    .enumerate()
                    .map(|(k, b)| wgpu::BindGroupEntry {
                        binding: k as u32,
                        resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                            buffer: &b.buffer,
                            offset: b.offset,
                            size: b.size.and_then(wgpu::BufferSize::new),
                        }),
                    })
                    .collect();
                entries.push(wgpu::BindGroupEntry {
                    binding: d.binds.len() as u32,
                    resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                        buffer: arena,
                        offset: i as u64 * stride,
                        size: wgpu::BufferSize::new(PARAM_BYTES),
                    }),
                });
                let bg = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: None,
                    layout: &pipeline.get_bind_group_layout(0),
                    entries: &entries,
                });
                pass.set_pipeline(&pipeline);
                pass.set_bind_group(0, &bg, &[]);
                pass.dispatch_workgroups(d.groups[0], d.groups[1], d.groups[2]);
            }
        }
        after(&mut enc);
        self.dispatches.fetch_add(ds.len() as u64, Ordering::Relaxed);
        self.submit_buffers(vec![enc.finish()]);
    }

    /// [`Gpu::read_bytes`] as f32 values.
    pub fn read(&self, ds: &[Dispatch], src: &wgpu::Buffer, offset: u64, bytes: u64) -> Result<Vec<f32>, String> {
        let raw = self.read_bytes(ds, src, offset, bytes)?;
        Ok(raw.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
    }

    /// Submits `ds`, then reads `bytes` bytes of `src` from `offset` back to the host, waiting
    /// for the device.
    pub fn read_bytes(&self, ds: &[Dispatch], src: &wgpu::Buffer, offset: u64, bytes: u64) -> Result<Vec<u8>, String> {
        if let Some(fault) = self.fault() {
            return Err(fault);
        }
        let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("read back"),
            size: bytes.max(4),
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        self.submit(ds, |enc| enc.copy_buffer_to_buffer(src, offset, &staging, 0, bytes));
        self.read_bytes.fetch_add(bytes, Ordering::Relaxed);
        let slice = staging.slice(..);
        let (tx, rx) = std::sync::mpsc::channel();
        slice.map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        // A fault the device reported names the cause better than the failed map does.
        let failed = |e: String| self.fault().unwrap_or(e);
        self.device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| failed(e.to_string()))?;
        rx.recv().map_err(|e| failed(e.to_string()))?.map_err(|e| failed(e.to_string()))?;
        if let Some(fault) = self.fault() {
            return Err(fault);
        }
        let view = slice.get_mapped_range().map_err(|e| e.to_string())?;
        let out = view[..bytes as usize].to_vec();
        drop(view);
        staging.unmap();
        Ok(out)
    }
}
