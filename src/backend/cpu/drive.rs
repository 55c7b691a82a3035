//! The loop every SIMD level runs around its `tile::<K, NR>` kernel, written once.
//!
//! A macro rather than a generic function: the loop must be compiled inside a function with the
//! level's `#[target_feature]`, so that the level's `tile` inlines into it.

/// Defines, with the given target features, the level's entry point `pub unsafe fn
/// matmul_q(kind, w, row_bytes, rows, x, acts, out)` and the loop behind it: for each weight
/// row, the activation rows in tiles of four, then the last 1-3 in one smaller tile. Needs
/// `tile::<K, NR>(w_row, nb, x, i0) -> [f32; NR]` in scope (K: 0 Q4_0, 1 Q4_1, 2 Q8_0).
macro_rules! tile_driver {
    ($features:literal) => {
        /// Matmul rows `rows` of a Q4_0/Q4_1/Q8_0 weight (`row_bytes` bytes per row) against the
        /// activation rows `acts` of `x`, in tiles of up to four activation rows per pass over a
        /// weight row.
        ///
        /// # Safety
        #[doc = concat!("The CPU must support `", $features, "`;")]
        /// `w` holds every row in `rows`; `out` has room for `acts.end` rows of at least
        /// `rows.end` values and no other thread writes these entries.
        #[target_feature(enable = $features)]
        pub unsafe fn matmul_q(
            kind: QKind,
            w: &[u8],
            row_bytes: usize,
            rows: Range<usize>,
            x: &QuantRows,
            acts: Range<usize>,
            out: &OutRows,
        ) {
            match kind {
                QKind::Q4_0 => drive::<0>(w, row_bytes, rows, x, acts, out),
                QKind::Q4_1 => drive::<1>(w, row_bytes, rows, x, acts, out),
                QKind::Q8_0 => drive::<2>(w, row_bytes, rows, x, acts, out),
            }
        }

        #[target_feature(enable = $features)]
        #[inline]
        unsafe fn drive<const K: u8>(
            w: &[u8],
            row_bytes: usize,
            rows: Range<usize>,
            x: &QuantRows,
            acts: Range<usize>,
            out: &OutRows,
        ) {
            let nb = x.cols() / 32;
            for r in rows {
                let wr = w[r * row_bytes..(r + 1) * row_bytes].as_ptr();
                let mut i = acts.start;
                while i + 4 <= acts.end {
                    let v = tile::<K, 4>(wr, nb, x, i);
                    for (j, &y) in v.iter().enumerate() {
                        out.write(i + j, r, y);
                    }
                    i += 4;
                }
                // The last 1-3 rows in one pass too (speculative verification batches are 2-4
                // rows).
                match acts.end - i {
                    3 => tile::<K, 3>(wr, nb, x, i)
                        .iter()
                        .enumerate()
                        .for_each(|(j, &y)| out.write(i + j, r, y)),
                    2 => tile::<K, 2>(wr, nb, x, i)
                        .iter()
                        .enumerate()
                        .for_each(|(j, &y)| out.write(i + j, r, y)),
                    1 => out.write(i, r, tile::<K, 1>(wr, nb, x, i)[0]),
                    _ => {}
                }
            }
        }
    };
}
