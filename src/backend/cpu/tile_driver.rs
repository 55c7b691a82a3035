//! `tile_driver!`: the loop every SIMD level runs around its `tile::<B, NR>` kernel (for each
//! weight row, the activation rows in tiles), written once.
//!
//! A macro rather than a generic function: the loop must be compiled inside a function with the
//! level's `#[target_feature]`, so that the level's `tile` inlines into it.

/// Defines, with the given target features, the level's entry point `pub unsafe fn
/// matmul_q(kind, w, row_bytes, rows, x, acts, out)` and the loop behind it: for each weight
/// row, the activation rows in tiles of four, then the last 1-3 in one smaller tile. Needs
/// `tile::<B: IntBlock, NR>(w_row, nb, x, i0) -> [f32; NR]` in scope.
macro_rules! tile_driver {
    ($features:literal) => {
        /// Matmul rows `rows` of a Q4_0/Q4_1/Q8_0 weight (`row_bytes` bytes per row) against the
        /// activation rows `acts` of `x`, in tiles of up to four activation rows per pass over a
        /// weight row.
        ///
        /// # Safety
        #[doc = concat!("The CPU must support `", $features, "`;")]
        /// `w` holds every row in `rows`, each `x.cols()` values of `kind`; `out` has room for
        /// `acts.end` rows of at least `rows.end` values and no other thread writes these
        /// entries.
        #[target_feature(enable = $features)]
        pub unsafe fn matmul_q(
            kind: $crate::backend::cpu::kernel_io::QKind,
            w: &[u8],
            row_bytes: usize,
            rows: ::std::ops::Range<usize>,
            x: &$crate::backend::cpu::quantized_activations::QuantRows,
            acts: ::std::ops::Range<usize>,
            out: &$crate::backend::cpu::kernel_io::OutRows<'_>,
        ) {
            use $crate::backend::cpu::block_q::{BlockQ4_0, BlockQ4_1, BlockQ8_0};
            use $crate::backend::cpu::kernel_io::QKind;
            // SAFETY: the target features are ours, the rest is this function's own contract.
            unsafe {
                match kind {
                    QKind::Q4_0 => drive::<BlockQ4_0>(w, row_bytes, rows, x, acts, out),
                    QKind::Q4_1 => drive::<BlockQ4_1>(w, row_bytes, rows, x, acts, out),
                    QKind::Q8_0 => drive::<BlockQ8_0>(w, row_bytes, rows, x, acts, out),
                }
            }
        }

        /// [`matmul_q`] for the block type `B`; the same contract.
        #[target_feature(enable = $features)]
        #[inline]
        unsafe fn drive<B: $crate::backend::cpu::block::IntBlock>(
            w: &[u8],
            row_bytes: usize,
            rows: ::std::ops::Range<usize>,
            x: &$crate::backend::cpu::quantized_activations::QuantRows,
            acts: ::std::ops::Range<usize>,
            out: &$crate::backend::cpu::kernel_io::OutRows<'_>,
        ) {
            let nb = x.cols() / $crate::backend::cpu::block::QK;
            for r in rows {
                let wr = w[r * row_bytes..(r + 1) * row_bytes].as_ptr();
                let mut i = acts.start;
                // SAFETY (every block below): `wr` is a whole row of `nb` blocks of `B` (the
                // caller's contract, and `row_bytes` bounds it), `i..i + NR` are rows of `x`
                // (within `acts`), and entries (i.., r) of `out` are this caller's alone.
                while i + 4 <= acts.end {
                    // SAFETY: see above.
                    let v = unsafe { tile::<B, 4>(wr, nb, x, i) };
                    for (j, &y) in v.iter().enumerate() {
                        // SAFETY: see above.
                        unsafe { out.write(i + j, r, y) };
                    }
                    i += 4;
                }
                // The last 1-3 rows in one pass too (speculative verification batches are 2-4
                // rows).
                // SAFETY: see above.
                unsafe {
                    match acts.end - i {
                        3 => tile::<B, 3>(wr, nb, x, i).iter().enumerate().for_each(|(j, &y)| out.write(i + j, r, y)),
                        2 => tile::<B, 2>(wr, nb, x, i).iter().enumerate().for_each(|(j, &y)| out.write(i + j, r, y)),
                        1 => out.write(i, r, tile::<B, 1>(wr, nb, x, i)[0]),
                        _ => {}
                    }
                }
            }
        }
    };
}

/// Defines, with the given target features, the level's entry point `pub unsafe fn
/// matmul_r8(kind, w, rows, x, acts, out)` over the row-interleaved layout (`repack.rs`) and the
/// loop behind it (AVX2's; AVX-512 writes its own, which takes two groups at a time): for each group of eight weight rows, the activation rows in tiles of up to
/// `$tile` (as many as the level's registers hold accumulators for), the last tile of any size
/// in `[$n ...]` (every size from `$tile` down to 2; 1 is the fallback). Needs
/// `tile::<B: IntBlock, NR>(group, nb, x, i0, &mut [[f32; ROWS]; TILE])` and `TILE == $tile`
/// in scope.
macro_rules! r8_driver {
    ($features:literal, $tile:literal, [$($n:literal)+]) => {
        /// Matmul rows `rows` (whole groups) of an interleaved weight against activation rows
        /// `acts`.
        ///
        /// # Safety
        #[doc = concat!("The CPU must support `", $features, "`;")]
        /// `w` is the interleaved copy of a matrix of `kind` with `x.cols()` columns and at
        /// least `rows.end` rows; `rows` starts and ends on a group boundary; `out` has room for
        /// `acts.end` rows of at least `rows.end` values, and no other thread writes these
        /// entries.
        #[target_feature(enable = $features)]
        pub unsafe fn matmul_r8(
            kind: $crate::backend::cpu::kernel_io::QKind,
            w: &[u8],
            rows: ::std::ops::Range<usize>,
            x: &$crate::backend::cpu::quantized_activations::QuantRows,
            acts: ::std::ops::Range<usize>,
            out: &$crate::backend::cpu::kernel_io::OutRows<'_>,
        ) {
            use $crate::backend::cpu::block_q::{BlockQ4_0, BlockQ4_1, BlockQ8_0};
            use $crate::backend::cpu::kernel_io::QKind;
            // SAFETY: the target features are ours, the rest is this function's own contract.
            unsafe {
                match kind {
                    QKind::Q4_0 => drive_r8::<BlockQ4_0>(w, rows, x, acts, out),
                    QKind::Q4_1 => drive_r8::<BlockQ4_1>(w, rows, x, acts, out),
                    QKind::Q8_0 => drive_r8::<BlockQ8_0>(w, rows, x, acts, out),
                }
            }
        }

        /// [`matmul_r8`] for the block type `B`; the same contract.
        #[target_feature(enable = $features)]
        unsafe fn drive_r8<B: $crate::backend::cpu::block::IntBlock>(
            w: &[u8],
            rows: ::std::ops::Range<usize>,
            x: &$crate::backend::cpu::quantized_activations::QuantRows,
            acts: ::std::ops::Range<usize>,
            out: &$crate::backend::cpu::kernel_io::OutRows<'_>,
        ) {
            use $crate::backend::cpu::repack::{group_block_bytes, ROWS};
            const _: () = assert!(TILE == $tile);
            let nb = x.cols() / B::LEN;
            let group_bytes = nb * group_block_bytes::<B>();
            debug_assert!(rows.start.is_multiple_of(ROWS) && rows.end.is_multiple_of(ROWS));
            for g in rows.start / ROWS..rows.end / ROWS {
                let grp = &w[g * group_bytes..(g + 1) * group_bytes];
                let mut i = acts.start;
                while i < acts.end {
                    let n = (acts.end - i).min(TILE);
                    let mut res = [[0f32; ROWS]; TILE];
                    // SAFETY: `grp` is a whole group of `nb` super-blocks of `B` (sliced above),
                    // and rows `i..i + n` are rows of `x` (within `acts`).
                    unsafe {
                        match n {
                            $($n => tile::<B, $n>(grp.as_ptr(), nb, x, i, &mut res),)+
                            _ => tile::<B, 1>(grp.as_ptr(), nb, x, i, &mut res),
                        }
                    }
                    for (j, vals) in res.iter().enumerate().take(n) {
                        for (r, &v) in vals.iter().enumerate() {
                            // SAFETY: entries (i + j, g * ROWS + r) lie in this caller's rows
                            // and acts.
                            unsafe { out.write(i + j, g * ROWS + r, v) };
                        }
                    }
                    i += n;
                }
            }
        }
    };
}
