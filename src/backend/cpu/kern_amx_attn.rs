//! AMX kernel of the tiled attention in `attention.rs`, for caches in `KvFormat::Bf16Tiles`:
//! both products as tile multiplies (`tdpbf16ps`: a tile of 16 rows of 32 bf16 times one of 16
//! rows of 16 bf16 pairs, into 16 x 16 f32 sums), the online softmax in AVX-512 between them.
//!
//! Lanes (a query row and head) run along the tiles' columns, as they run along the vector
//! kernels' registers, so the softmax is the same column-wise walk and the outputs come out
//! lane-minor like theirs. A tile of up to 16 lanes walks the keys 32 at a time:
//! - scores: 16 keys' rows (position-major in the cache, 32 of the head's dimensions each) times
//!   the lanes' queries as pairs of dimensions, one multiply per 16 keys and 32 dimensions;
//! - softmax: the 32 keys' scores become weights rounded to bf16 (each lane sums the rounded
//!   weights, so they sum exactly to its normaliser), stored as pairs of keys;
//! - weighted sum: 16 of the head's columns over the 32 keys (a row of the cache's group of 32
//!   positions) times the weights' pairs, one multiply per 16 columns, added to the outputs'
//!   tile (rescaled first only when a lane's reference for its weights moves: `LAZY_MAX`).
//!
//! Each output element of a tile multiply depends on its own row and column alone, and every
//! path (prefill, decode, verification) runs this kernel over the same steps of 32 keys, so a
//! lane's bits do not depend on the lanes beside it. They do differ from `vdpbf16ps`'s, whose
//! sums round otherwise: hence a format of its own.
//!
//! Every function here requires AVX-512 F/VL/BW and BF16 and AMX-BF16 with the tile registers
//! granted to the process (`Isa::tile_kernels`, which calls [`request_tiles`]).

use super::attention::{AttnBlock, TileScratch, MAX_GROUP, MAX_TILE_HD};
use super::kern_avx512_attn_f32::exp512;
use crate::backend::{KvBuf, KvFormat};
use std::arch::asm;
use std::arch::x86_64::*;

/// Lanes of a tile: the columns of the scores' and outputs' tiles (16 f32 in a 64-byte row).
const TILE_LANES: usize = 16;
/// Keys per step: a row of the values' tile holds 32 positions (one group of the cache).
const STEP_KEYS: usize = 32;
/// Bytes of a tile row.
const ROW_BYTES: usize = 64;
/// Dimensions of the head per tile of keys (32 bf16 in a row).
const DIMS_PER_TILE: usize = 32;
/// Columns of the output per tile of values (16 rows).
const COLS_PER_TILE: usize = 16;
/// How far a lane's largest score may rise above the reference its weights are taken against
/// before the reference moves (and its outputs so far are rescaled): weights up to `e^8` (about
/// 3,000) lose nothing in f32 sums or in bf16, and most steps then leave the outputs in place.
const LAZY_MAX: f32 = 8.0;

/// Asks Linux for this process's use of the tile registers (`arch_prctl(ARCH_REQ_XCOMP_PERM,
/// XFEATURE_XTILEDATA)`; their 8 KB of state are saved on a context switch only for processes
/// that asked). Whether it was granted; false off Linux.
pub(super) fn request_tiles() -> bool {
    #[cfg(target_os = "linux")]
    {
        /// `arch_prctl`'s number on x86-64, its request for an extended state feature, and the
        /// tile data's feature number (the kernel's `arch/x86/include/uapi/asm/prctl.h`).
        const SYS_ARCH_PRCTL: i64 = 158;
        const ARCH_REQ_XCOMP_PERM: i64 = 0x1023;
        const XFEATURE_XTILEDATA: i64 = 18;
        let ret: i64;
        // SAFETY: the syscall reads two integers and changes only this process's permissions;
        // `syscall` clobbers rcx and r11, declared.
        unsafe {
            asm!(
                "syscall",
                inlateout("rax") SYS_ARCH_PRCTL => ret,
                in("rdi") ARCH_REQ_XCOMP_PERM,
                in("rsi") XFEATURE_XTILEDATA,
                lateout("rcx") _,
                lateout("r11") _,
                options(nostack)
            );
        }
        ret == 0
    }
    #[cfg(not(target_os = "linux"))]
    false
}

/// The tile configuration: palette 1, all 8 tiles of 16 rows of 64 bytes.
#[repr(C, align(64))]
struct TileConfig([u8; 64]);

impl TileConfig {
    fn full() -> TileConfig {
        let mut c = [0u8; 64];
        c[0] = 1;
        for t in 0..8 {
            c[16 + 2 * t..18 + 2 * t].copy_from_slice(&(ROW_BYTES as u16).to_le_bytes());
            c[48 + t] = TILE_LANES as u8;
        }
        TileConfig(c)
    }
}

/// `tileloadd tmm{T}, [base + stride]`: 16 rows of 64 bytes, `stride` bytes apart.
macro_rules! load {
    ($t:literal, $base:expr, $stride:expr) => {
        asm!(concat!("tileloadd tmm", $t, ", [{b} + {s} * 1]"), b = in(reg) $base, s = in(reg) $stride,
            options(nostack, readonly))
    };
}

/// `tilestored [base + stride], tmm{T}`.
macro_rules! store {
    ($t:literal, $base:expr, $stride:expr) => {
        asm!(concat!("tilestored [{b} + {s} * 1], tmm", $t), b = in(reg) $base, s = in(reg) $stride,
            options(nostack))
    };
}

/// `tmm{C} += tmm{A} . tmm{B}` over bf16 pairs; `tilezero tmm{C}` with `zero`.
macro_rules! mul {
    ($c:literal, $a:literal, $b:literal) => {
        asm!(concat!("tdpbf16ps tmm", $c, ", tmm", $a, ", tmm", $b), options(nostack, nomem))
    };
    (zero $c:literal) => {
        asm!(concat!("tilezero tmm", $c), options(nostack, nomem))
    };
}

/// One tile of outputs: the 16 rows (columns of the head) of 16 lanes at `out` plus the values'
/// tile at `v` (in `tmm{A}`) times the weights' in tmm6, in `tmm{C}` and back.
macro_rules! weighted {
    ($a:literal, $c:literal, $v:expr, $out:expr) => {{
        load!($c, $out, ROW_BYTES);
        load!($a, $v, ROW_BYTES);
        mul!($c, $a, 6);
        store!($c, $out, ROW_BYTES);
    }};
}

/// The kernel's buffers, carved out of the worker's aligned scratch (regions of whole lines).
struct Bufs {
    /// The lanes' queries as the scores' right-hand tiles: `hd / 32` tiles of 16 pair rows, each
    /// 16 lanes' pairs of dimensions `(2i, 2i + 1)`.
    q: *mut u32,
    /// A step's scores: 32 rows (keys) of 16 lanes.
    s: *mut f32,
    /// A step's weights as the weighted sum's right-hand tile: 16 rows of 16 lanes' pairs of keys.
    p: *mut u32,
    /// The lanes' outputs so far: `hd` rows of 16 lanes.
    o: *mut f32,
}

impl Bufs {
    fn carve(buf: &mut KvBuf, hd: usize) -> Bufs {
        let sizes = [hd / 2, STEP_KEYS, STEP_KEYS / 2, hd].map(|rows| rows * ROW_BYTES);
        // In u16s, as the buffer counts them.
        let need = sizes.iter().sum::<usize>() / 2;
        if buf.len() < need {
            buf.resize(need);
        }
        let base = buf.as_mut_ptr() as *mut u8;
        let mut at = [0; 4];
        for i in 1..4 {
            at[i] = at[i - 1] + sizes[i - 1];
        }
        // SAFETY: the regions lie end to end inside the buffer just sized for them.
        let region = |i: usize| unsafe { base.add(at[i]) };
        Bufs { q: region(0) as *mut u32, s: region(1) as *mut f32, p: region(2) as *mut u32, o: region(3) as *mut f32 }
    }
}

/// Blocks of `w` lanes through tiles (see [`AttnBlock`] and `kern_avx2_attn::attend_blocks`).
///
/// # Safety
/// The CPU has AVX-512 F/VL/BW and BF16 and AMX-BF16, and this process was granted the tile
/// registers (`Isa::tile_kernels`).
///
/// # Panics
/// As `kern_avx2_attn::attend_blocks`, and when `hd` is not a multiple of 32 up to
/// `MAX_TILE_HD` or a block's cache is not in bf16 tiles.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512bf16")]
pub unsafe fn attend_blocks(bs: &mut [AttnBlock<'_>], w: usize, scratch: &mut TileScratch) {
    assert!(bs.len() <= MAX_GROUP, "attention: {} blocks in a group", bs.len());
    let hd = bs.first().map_or(DIMS_PER_TILE, |b| b.hd);
    assert!(
        hd.is_multiple_of(DIMS_PER_TILE) && hd <= MAX_TILE_HD,
        "attention: tiles take heads of a multiple of 32 dimensions up to {MAX_TILE_HD}, not {hd}"
    );
    let bufs = Bufs::carve(&mut scratch.amx, hd);
    let config = TileConfig::full();
    // SAFETY: the tiles are this process's (contract); a valid palette-1 configuration.
    unsafe { asm!("ldtilecfg [{}]", in(reg) config.0.as_ptr(), options(nostack, readonly)) };
    for b in bs.iter_mut() {
        b.check(w);
        assert_eq!(b.format, KvFormat::Bf16Tiles, "attention: the AMX kernel reads bf16 tiles");
        assert_eq!(b.hd, hd, "attention: blocks of a group with different head dimensions");
        for c0 in (0..w).step_by(TILE_LANES) {
            // SAFETY: `b` was checked for `w` lanes; the tile takes lanes `c0..w` of them at most.
            unsafe { lane_tile(b, w, c0, &bufs) };
        }
    }
    // SAFETY: releases this thread's tile state (a context switch saves less).
    unsafe { asm!("tilerelease", options(nostack, nomem)) };
}

/// `x`'s bits rounded to nearest even at bit 16: the bf16 in each lane's top half (its low half
/// is left over), as `kern_avx512_attn::rne` does in 256 bits.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512bf16")]
#[inline]
fn rne(x: __m512) -> __m512i {
    let b = _mm512_castps_si512(x);
    let odd = _mm512_and_si512(_mm512_srli_epi32::<16>(b), _mm512_set1_epi32(1));
    _mm512_add_epi32(_mm512_add_epi32(b, _mm512_set1_epi32(0x7fff)), odd)
}

/// `lo` and `hi` rounded to bf16, side by side in each 32-bit lane: a tile row of pairs.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512bf16")]
#[inline]
fn pair(lo: __m512i, hi: __m512i) -> __m512i {
    _mm512_mask_blend_epi16(0xaaaa_aaaa, _mm512_srli_epi32::<16>(lo), hi)
}

/// The bf16 in the top half of each lane of `r` (from [`rne`]) as an f32.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512bf16")]
#[inline]
fn widen(r: __m512i) -> __m512 {
    _mm512_castsi512_ps(_mm512_and_si512(r, _mm512_set1_epi32(-65536)))
}

/// Lanes `c0..c0 + 16` (those below `w`) of block `b` over its keys, into its `ot`, `m` and `l`.
///
/// # Safety
/// The kernel's features with the tiles configured; `b` checked for `w` lanes, `c0 < w`; `bufs`
/// carved for `b.hd`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512bf16")]
unsafe fn lane_tile(b: &mut AttnBlock<'_>, w: usize, c0: usize, bufs: &Bufs) {
    let (hd, stride, f) = (b.hd, b.stride, b.format);
    let lanes: __mmask16 = if w - c0 >= TILE_LANES { !0 } else { (1 << (w - c0)) - 1 };
    let qtiles = hd / DIMS_PER_TILE;
    // SAFETY: buffer accesses stay inside their regions (`Bufs::carve`), the block's inside `w`
    // lanes and `hd` rows (checked), the cache's inside the whole groups that `check` verified
    // through key `n_keys - 1`.
    unsafe {
        let lane = |row: *const f32| _mm512_maskz_loadu_ps(lanes, row.add(c0));
        // The queries' tiles: pair row `i` of tile `t` is dimensions `32t + 2i` and `+ 1`.
        for i in 0..hd / 2 {
            let (lo, hi) = (lane(b.qt.as_ptr().add(2 * i * w)), lane(b.qt.as_ptr().add((2 * i + 1) * w)));
            _mm512_storeu_si512(bufs.q.add(i * TILE_LANES) as *mut _, pair(rne(lo), rne(hi)));
        }
        let pos = _mm512_mask_loadu_epi32(_mm512_set1_epi32(i32::MAX), lanes, b.lane_pos.as_ptr().add(c0));
        // `m` is each lane's reference for its weights (`f32::MIN` until it sees a key).
        let (mut m, mut l) = (_mm512_set1_ps(f32::MIN), _mm512_setzero_ps());
        std::ptr::write_bytes(bufs.o, 0, hd * TILE_LANES);
        let qtile = |t: usize| bufs.q.add(t * TILE_LANES * TILE_LANES);
        if qtiles <= 2 {
            load!(0, qtile(0), ROW_BYTES);
            if qtiles == 2 {
                load!(1, qtile(1), ROW_BYTES);
            }
        }
        let (keys, values) = (b.keys.as_ptr(), b.values.as_ptr());
        let kstride = 2 * stride;
        for k0 in (b.k_begin..b.n_keys).step_by(STEP_KEYS) {
            let kt = STEP_KEYS.min(b.n_keys - k0);
            // Scores: tmm4 of keys k0..k0 + 16, tmm5 of the next 16, rows of keys.
            mul!(zero 4);
            mul!(zero 5);
            for t in 0..qtiles {
                if qtiles > 2 {
                    match t % 2 {
                        0 => load!(0, qtile(t), ROW_BYTES),
                        _ => load!(1, qtile(t), ROW_BYTES),
                    }
                }
                load!(2, keys.add(f.key_at(k0, t * DIMS_PER_TILE, stride)), kstride);
                load!(3, keys.add(f.key_at(k0 + 16, t * DIMS_PER_TILE, stride)), kstride);
                if t % 2 == 0 {
                    mul!(4, 2, 0);
                    mul!(5, 3, 0);
                } else {
                    mul!(4, 2, 1);
                    mul!(5, 3, 1);
                }
            }
            store!(4, bufs.s, ROW_BYTES);
            store!(5, bufs.s.add(16 * TILE_LANES), ROW_BYTES);
            // The next step's keys and values, hinted through the softmax's loops: a tile load's
            // 16 rows missing the cache stalled the walk (a decode step at 4,000 positions).
            let next = (k0 + STEP_KEYS < b.n_keys).then(|| Next {
                keys: keys.wrapping_add(f.key_at(k0 + STEP_KEYS, 0, stride)),
                stride,
                values: values.wrapping_add(f.value_at(k0 + STEP_KEYS, 0, stride)),
                hd,
            });
            if let Some(alpha) = softmax(bufs.s, bufs.p, k0, kt, b.min_pos, pos, &mut m, &mut l, next) {
                for c in 0..hd {
                    let o = bufs.o.add(c * TILE_LANES);
                    _mm512_storeu_ps(o, _mm512_mul_ps(_mm512_loadu_ps(o), alpha));
                }
            }
            // The weighted sum: the values' tile of 16 columns times the weights' tile, added to
            // the outputs' tile.
            load!(6, bufs.p, ROW_BYTES);
            for i in 0..hd / COLS_PER_TILE {
                let (v, out) =
                    (values.add(f.value_at(k0, i * COLS_PER_TILE, stride)), bufs.o.add(i * COLS_PER_TILE * TILE_LANES));
                // Two tiles of values and three of outputs in turn, so that a load need not wait
                // for the product before it.
                match i % 6 {
                    0 => weighted!(2, 4, v, out),
                    1 => weighted!(3, 5, v, out),
                    2 => weighted!(2, 7, v, out),
                    3 => weighted!(3, 4, v, out),
                    4 => weighted!(2, 5, v, out),
                    _ => weighted!(3, 7, v, out),
                }
            }
        }
        _mm512_mask_storeu_ps(b.m.as_mut_ptr().add(c0), lanes, m);
        _mm512_mask_storeu_ps(b.l.as_mut_ptr().add(c0), lanes, l);
        for c in 0..hd {
            _mm512_mask_storeu_ps(
                b.ot.as_mut_ptr().add(c * w + c0),
                lanes,
                _mm512_loadu_ps(bufs.o.add(c * TILE_LANES)),
            );
        }
    }
}

/// Where the next step's keys and values start (the head's first element), for hints.
struct Next {
    keys: *const u16,
    stride: usize,
    values: *const u16,
    hd: usize,
}

impl Next {
    /// Hints key `j`'s lines.
    #[inline(always)]
    fn key(&self, j: usize) {
        for line in 0..self.hd / 32 {
            let at = self.keys.wrapping_add(j * self.stride + 32 * line);
            // SAFETY: a hint never faults, wherever it points.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(at as *const i8) };
        }
    }

    /// Hints the value rows of the `i`th of 16 slices of the head's columns (a line each).
    #[inline(always)]
    fn columns(&self, i: usize) {
        let per = self.hd / 16;
        for c in i * per..(i + 1) * per {
            // SAFETY: as in `key`.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(self.values.wrapping_add(32 * c) as *const i8) };
        }
    }
}

/// One step of the online softmax for 16 lanes at positions `pos`: the scores at `s` (32 rows,
/// keys `k0..`, of which the first `kt` are read and those up to each lane's position visible;
/// those up to `min_pos` visible to all) become weights rounded to bf16, in pairs of keys at
/// `p` (`e^(score - m)`, against each lane's reference `m`); the references and the sums `l`
/// move on. Returns the factors for the outputs so far if a reference moved (`LAZY_MAX`); `next`
/// gives the lines to hint.
///
/// # Safety
/// The kernel's features; `s` holds 32 rows of 16 f32s, `p` 16 rows of 16 u32s.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512bf16")]
#[inline]
unsafe fn softmax(
    s: *mut f32,
    p: *mut u32,
    k0: usize,
    kt: usize,
    min_pos: usize,
    pos: __m512i,
    m: &mut __m512,
    l: &mut __m512,
    next: Option<Next>,
) -> Option<__m512> {
    let inf = _mm512_set1_ps(f32::NEG_INFINITY);
    let mut mt = inf;
    let mut x = [inf; STEP_KEYS];
    for (j, x) in x.iter_mut().enumerate().take(kt) {
        if let Some(n) = &next {
            n.key(j);
        }
        // SAFETY: row `j < 32` (contract).
        let row = unsafe { _mm512_loadu_ps(s.add(j * TILE_LANES)) };
        // The causal mask: lanes at positions before key `k0 + j` do not see it.
        let hidden =
            if k0 + j > min_pos { _mm512_cmpgt_epi32_mask(_mm512_set1_epi32((k0 + j) as i32), pos) } else { 0 };
        *x = _mm512_mask_mov_ps(row, hidden, inf);
        mt = _mm512_max_ps(mt, *x);
    }
    // A lane's reference moves up to its largest score only when that is more than `LAZY_MAX`
    // above it (its first key, or a jump): otherwise its outputs so far keep their scale.
    let up = _mm512_cmplt_ps_mask(_mm512_add_ps(*m, _mm512_set1_ps(LAZY_MAX)), mt);
    let alpha = (up != 0).then(|| {
        let new = _mm512_mask_mov_ps(*m, up, mt);
        let alpha = exp512(_mm512_sub_ps(*m, new));
        *m = new;
        alpha
    });
    let mt = *m;
    let mut sum = _mm512_setzero_ps();
    for i in 0..STEP_KEYS / 2 {
        if let Some(n) = &next {
            n.columns(i);
        }
        let lo = rne(exp512(_mm512_sub_ps(x[2 * i], mt)));
        let hi = rne(exp512(_mm512_sub_ps(x[2 * i + 1], mt)));
        // The rounded weights: what the tile multiplies, so what the lanes sum.
        sum = _mm512_add_ps(_mm512_add_ps(sum, widen(lo)), widen(hi));
        // SAFETY: row `i < 16` (contract).
        unsafe { _mm512_storeu_si512(p.add(i * TILE_LANES) as *mut _, pair(lo, hi)) };
    }
    *l = match alpha {
        Some(a) => _mm512_fmadd_ps(*l, a, sum),
        None => _mm512_add_ps(*l, sum),
    };
    alpha
}
