//! A sequence's KV cache on the device: per layer, a buffer of keys and one of values, f16 pairs
//! position after position. It grows by doubling (copying what it holds on the device) and
//! never past the cache's capacity; a rollback only moves the cache's length, since attention
//! never reads past it.

use super::context::Gpu;
use crate::backend::DeviceKv;
use std::any::Any;

/// Positions a cache's first storage holds.
const FIRST_ROOM: usize = 256;

pub struct GpuKv {
    pub keys: Vec<wgpu::Buffer>,
    pub values: Vec<wgpu::Buffer>,
    /// Positions each buffer holds.
    pub room: usize,
    kv_dim: usize,
}

impl DeviceKv for GpuKv {
    fn bytes(&self) -> usize {
        2 * self.keys.len() * self.room * self.kv_dim * 2
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

impl GpuKv {
    pub fn new(gpu: &Gpu, layers: usize, kv_dim: usize, positions: usize) -> GpuKv {
        let bytes = (positions * kv_dim * 2) as u64;
        let make = |what: &str| (0..layers).map(|l| gpu.storage(bytes, &format!("{what} {l}"))).collect();
        GpuKv { keys: make("keys"), values: make("values"), room: positions, kv_dim }
    }

    /// Storage for at least `positions` (at most `capacity`), keeping the first `kept`.
    pub fn ensure(&mut self, gpu: &Gpu, positions: usize, capacity: usize, kept: usize) {
        if positions <= self.room {
            return;
        }
        let room = positions.max(self.room * 2).max(FIRST_ROOM).min(capacity.max(positions));
        let grown = GpuKv::new(gpu, self.keys.len(), self.kv_dim, room);
        let mut enc = gpu.device.create_command_encoder(&Default::default());
        let bytes = (kept * self.kv_dim * 2) as u64;
        if bytes > 0 {
            for (old, new) in self.keys.iter().zip(&grown.keys).chain(self.values.iter().zip(&grown.values)) {
                enc.copy_buffer_to_buffer(old, 0, new, 0, bytes);
            }
        }
        gpu.submit_buffers(vec![enc.finish()]);
        *self = grown;
    }
}

/// The device storage of a cache, made on first use: `slot` is the cache's.
pub fn of<'a>(slot: &'a mut Option<Box<dyn DeviceKv>>, gpu: &Gpu, layers: usize, kv_dim: usize) -> &'a mut GpuKv {
    let kv = slot.get_or_insert_with(|| Box::new(GpuKv::new(gpu, layers, kv_dim, 0)));
    kv.as_any_mut().downcast_mut::<GpuKv>().expect("a cache's device storage is the GPU backend's")
}
