//! What the kernel tests share: the SIMD levels they run (and must run, per
//! `MTPLX_REQUIRE_ISA`), and deterministic inputs (noise vectors and weight matrices).

use super::float16::f32_to_f16;
use super::isa::Isa;
use super::type_traits::quantize_row;
use crate::backend::DType;
use std::io::Write;
use std::sync::Once;

/// Names the levels (comma-separated, as [`Isa::from_name`] reads them: `avx2`, `avx512vnni`,
/// ...) that the kernel tests must run, so that a CI machine with them cannot skip them quietly;
/// [`TILES_NAME`] among them requires the AMX attention kernel.
pub const REQUIRE_ISA_ENV: &str = "MTPLX_REQUIRE_ISA";
/// The name [`REQUIRE_ISA_ENV`] gives the AMX tiles (`Isa::tile_kernels`), as `/proc/cpuinfo`
/// spells AMX-BF16 without its underscore.
pub const TILES_NAME: &str = "amxbf16";

/// The levels the kernel tests run: every level this CPU has.
///
/// Prints them once per test process (to stderr directly, past the test harness's capture, so
/// that a CI log shows them).
///
/// # Panics
/// When [`REQUIRE_ISA_ENV`] names a level this CPU lacks, or a name that is no level.
pub fn isas_under_test() -> Vec<Isa> {
    let available = Isa::available();
    let tiles = available.iter().any(|i| i.tile_kernels());
    let required = std::env::var(REQUIRE_ISA_ENV).unwrap_or_default();
    static PRINT: Once = Once::new();
    PRINT.call_once(|| {
        let mut names: Vec<&str> = available.iter().map(|i| i.name()).collect();
        names.extend(tiles.then_some(TILES_NAME));
        let line = format!("kernel tests: SIMD levels run: {} ({REQUIRE_ISA_ENV}={required:?})\n", names.join(", "));
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    });
    if let Err(e) = check_required(&required, &available, tiles) {
        panic!("{e}");
    }
    available
}

/// `Ok` when every level named in `required` (comma-separated; empty: none) is in `available`,
/// and the tiles run (`tiles`) if it names them.
fn check_required(required: &str, available: &[Isa], tiles: bool) -> Result<(), String> {
    let ran: Vec<&str> = available.iter().map(|i| i.name()).collect();
    for name in required.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        if name == TILES_NAME {
            if !tiles {
                return Err(format!(
                    "{REQUIRE_ISA_ENV} requires {name}, but this CPU lacks AMX-BF16 or the OS did not grant its tiles"
                ));
            }
            continue;
        }
        let known: Vec<&str> = Isa::ALL.iter().map(|i| i.name()).collect();
        let isa = Isa::from_name(name).ok_or_else(|| {
            format!(
                "{REQUIRE_ISA_ENV} names {name:?}, which is no SIMD level (known: {}, avx512vnni)",
                known.join(", ")
            )
        })?;
        if !available.contains(&isa) {
            return Err(format!(
                "{REQUIRE_ISA_ENV} requires {name}, but this CPU lacks it: the kernel tests ran only {}",
                ran.join(", ")
            ));
        }
    }
    Ok(())
}

/// Deterministic pseudo-random values in [-1, 1) (an LCG: tests must not depend on a crate).
pub fn noise(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// A `rows x cols` weight of `dtype`: quantized from noise, or random K-quant blocks (every
/// byte pattern is a valid block) whose f16 scales are set to finite values in [0.001, 0.005),
/// different per block so that a kernel applying one block's scale to another shows.
pub fn weight(dtype: DType, rows: usize, cols: usize, seed: u64) -> Vec<u8> {
    let vals = noise(rows * cols, seed);
    if let Some(b) = quantize_row(dtype, &vals) {
        return b;
    }
    let mut bytes: Vec<u8> =
        noise(dtype.bytes_for(rows * cols).unwrap(), seed ^ 0xabc).iter().map(|v| ((v + 1.0) * 127.9) as u8).collect();
    let scale_offsets: &[usize] = match dtype {
        DType::Q6K => &[208],
        _ => &[0, 2],
    };
    let blocks = bytes.len() / dtype.block_bytes();
    let mut scales = noise(blocks * scale_offsets.len(), seed ^ 0x5ca1e).into_iter();
    for blk in bytes.chunks_exact_mut(dtype.block_bytes()) {
        for &o in scale_offsets {
            let s = 0.003 + 0.002 * scales.next().unwrap_or(0.0);
            blk[o..o + 2].copy_from_slice(&f32_to_f16(s).to_le_bytes());
        }
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_required_level_the_cpu_lacks_fails_and_one_it_has_passes() {
        let no_avx512 = [Isa::Scalar, Isa::Avx2];
        let err = check_required("avx512vnni", &no_avx512, false).unwrap_err();
        assert!(err.contains("requires avx512vnni") && err.contains("ran only scalar, avx2"), "{err}");
        assert!(check_required("avx2, avx512", &no_avx512, false).is_err());
        assert_eq!(check_required("avx2,scalar", &no_avx512, false), Ok(()));
        assert_eq!(check_required("", &no_avx512, false), Ok(()));
        assert_eq!(check_required("avx512vnni", &Isa::ALL, false), Ok(()));
        let err = check_required("avx512vnni,amxbf16", &Isa::ALL, false).unwrap_err();
        assert!(err.contains("requires amxbf16"), "{err}");
        assert_eq!(check_required("avx512vnni,amxbf16", &Isa::ALL, true), Ok(()));
    }

    #[test]
    fn a_misspelt_level_fails_instead_of_passing() {
        let err = check_required("avx512_vnni", &Isa::ALL, false).unwrap_err();
        assert!(err.contains("no SIMD level"), "{err}");
    }

    #[test]
    fn the_levels_required_of_this_machine_run() {
        assert!(isas_under_test().contains(&Isa::Scalar));
    }
}
