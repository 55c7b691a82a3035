//! Which device runs the model: `--backend cpu|gpu|auto`, the wgpu adapters found, and why one
//! was chosen. `auto` takes a real GPU (integrated or discrete) and falls back to the CPU;
//! `gpu` takes a real GPU or, where there is none, any adapter (Mesa's lavapipe, Vulkan on the
//! CPU, which is how the GPU path is tested without a GPU), and is an error where there is none.

use std::fmt;

/// The `--backend` flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum BackendChoice {
    Cpu,
    Gpu,
    #[default]
    Auto,
}

impl std::str::FromStr for BackendChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "cpu" => Ok(BackendChoice::Cpu),
            "gpu" => Ok(BackendChoice::Gpu),
            "auto" => Ok(BackendChoice::Auto),
            _ => Err(format!("--backend takes cpu, gpu or auto, not {s:?}")),
        }
    }
}

/// The wgpu back ends looked through: Vulkan (Linux, Windows), Metal (macOS), DirectX 12.
const BACKENDS: wgpu::Backends = wgpu::Backends::VULKAN.union(wgpu::Backends::METAL).union(wgpu::Backends::DX12);

/// What was chosen, for the log, `/health`, the dashboard and the metrics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendInfo {
    /// `cpu` or `gpu`.
    pub backend: &'static str,
    /// The adapter's name (`NVIDIA H100`, `llvmpipe ...`), or the CPU's SIMD level.
    pub adapter: String,
    /// The driver and API (`Vulkan, Mesa 22.3.6`), empty on the CPU.
    pub driver: String,
    /// Why this one.
    pub reason: String,
}

/// Why no device could be used.
#[derive(Debug)]
pub enum GpuError {
    /// `--backend gpu` and no adapter at all.
    NoAdapter { looked_for: String },
    /// The adapter would not give a device.
    Device { adapter: String, message: String },
}

impl fmt::Display for GpuError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GpuError::NoAdapter { looked_for } => write!(
                f,
                "--backend gpu: no GPU adapter found (looked for {looked_for} adapters through wgpu; \
                 on Linux without a GPU, Mesa's lavapipe from the mesa-vulkan-drivers package provides one)"
            ),
            GpuError::Device { adapter, message } => {
                write!(f, "--backend gpu: adapter {adapter} gave no device: {message}")
            }
        }
    }
}

impl std::error::Error for GpuError {}

/// An adapter that is a real GPU, not a software rasteriser.
fn is_real_gpu(info: &wgpu::AdapterInfo) -> bool {
    matches!(info.device_type, wgpu::DeviceType::DiscreteGpu | wgpu::DeviceType::IntegratedGpu)
}

fn kind(t: wgpu::DeviceType) -> &'static str {
    match t {
        wgpu::DeviceType::DiscreteGpu => "discrete GPU",
        wgpu::DeviceType::IntegratedGpu => "integrated GPU",
        wgpu::DeviceType::VirtualGpu => "virtual GPU",
        wgpu::DeviceType::Cpu => "software (CPU)",
        wgpu::DeviceType::Other => "other",
    }
}

/// The adapter `choice` asks for with the reason, `Ok(None)` where the CPU is to run the model.
pub fn pick(choice: BackendChoice) -> Result<Option<(wgpu::Adapter, String)>, GpuError> {
    if choice == BackendChoice::Cpu {
        return Ok(None);
    }
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
    desc.backends = BACKENDS;
    let instance = wgpu::Instance::new(desc);
    let adapters = smol::block_on(instance.enumerate_adapters(BACKENDS));
    let infos: Vec<String> = adapters.iter().map(|a| describe(&a.get_info())).collect();
    let real = adapters.iter().position(|a| is_real_gpu(&a.get_info()));
    match (choice, real) {
        (_, Some(i)) => {
            let reason = format!("the first real GPU among {} adapter(s): {}", adapters.len(), infos.join("; "));
            Ok(Some((adapters.into_iter().nth(i).expect("index found above"), reason)))
        }
        (BackendChoice::Gpu, None) if !adapters.is_empty() => {
            let reason = format!("--backend gpu and no real GPU, so the first adapter: {}", infos.join("; "));
            Ok(Some((adapters.into_iter().next().expect("not empty"), reason)))
        }
        (BackendChoice::Gpu, None) => Err(GpuError::NoAdapter { looked_for: "Vulkan, Metal and DirectX 12".into() }),
        _ => Ok(None),
    }
}

/// `name (kind, API driver)`.
pub fn describe(i: &wgpu::AdapterInfo) -> String {
    format!("{} ({}, {:?} {})", i.name, kind(i.device_type), i.backend, i.driver_info)
}

/// The CPU's reason, where `auto` found no real GPU.
pub fn cpu_reason(choice: BackendChoice) -> String {
    match choice {
        BackendChoice::Cpu => "--backend cpu".into(),
        _ => "--backend auto and no real GPU adapter (integrated or discrete) found".into(),
    }
}
