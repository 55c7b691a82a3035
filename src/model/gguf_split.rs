//! Split GGUFs (`model-00001-of-00003.gguf`, as llama.cpp's `gguf-split` writes them and the
//! Hub holds large models) open as one model: the first part carries the metadata, every part
//! carries `split.no`, `split.count` and its share of the tensors, and the parts sit side by side
//! under names that differ only in the part number.

use super::error::ModelError;
use super::gguf::GgufFile;
use super::gguf_write::GgufWriter;
use super::metadata::MetaValue;
use std::path::{Path, PathBuf};

/// A split's part count and a part's index (from 0), in every part.
const SPLIT_COUNT: &str = "split.count";
const SPLIT_NO: &str = "split.no";
/// The tensors of all parts together, in the first.
const SPLIT_TENSORS: &str = "split.tensors.count";
/// The most parts a split may have: gguf-split numbers them in five digits.
const MAX_PARTS: u64 = 99_999;

/// `(base, index, count)` of a split part's file stem, `m-00002-of-00003` -> `("m", 2, 3)`.
pub fn split_part(stem: &str) -> Option<(&str, u32, u32)> {
    let (base, tail) = stem.rsplit_once("-of-")?;
    let (base, index) = base.rsplit_once('-')?;
    let digits = |s: &str| s.len() == 5 && s.bytes().all(|c| c.is_ascii_digit());
    if !(digits(index) && digits(tail)) {
        return None;
    }
    Some((base, index.parse().ok()?, tail.parse().ok()?))
}

/// Opens `path` as a model: a whole GGUF as it is, the first part of a split with every other
/// part's tensors joined to it.
pub fn open(path: &Path) -> Result<GgufFile, ModelError> {
    let mut first = GgufFile::open(path)?;
    let count = first.metadata.get_u64(SPLIT_COUNT).unwrap_or(1);
    if count <= 1 {
        return Ok(first);
    }
    let bad = |file: &Path, key: &str, problem: String| ModelError::BadValue {
        file: file.to_path_buf(),
        key: key.into(),
        problem,
    };
    if count > MAX_PARTS {
        return Err(bad(path, SPLIT_COUNT, format!("{count} parts, over the {MAX_PARTS} a split can number")));
    }
    let no = first.metadata.get_u64(SPLIT_NO).unwrap_or(0);
    let stem = path.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_suffix(".gguf")).unwrap_or_default();
    let Some((base, _, _)) = split_part(stem) else {
        return Err(bad(path, SPLIT_COUNT, format!("the file is part of a {count}-part split, but its name does not end in -NNNNN-of-NNNNN.gguf, so the other parts cannot be found")));
    };
    if no != 0 {
        return Err(bad(
            path,
            SPLIT_NO,
            format!("this is part {} of {count}; pass the first part, {base}-00001-of-{count:05}.gguf", no + 1),
        ));
    }
    for i in 2..=count {
        let part_path = part_path(path, base, i, count);
        if !part_path.exists() {
            return Err(ModelError::MissingSplitPart { file: path.to_path_buf(), part: part_path, index: i, count });
        }
        let part = GgufFile::open(&part_path)?;
        let (pno, pcount) = (part.metadata.get_u64(SPLIT_NO), part.metadata.get_u64(SPLIT_COUNT));
        if pno != Some(i - 1) || pcount != Some(count) {
            let problem = format!("expected part {i} of {count}, found {pno:?} of {pcount:?} (split.no counts from 0)");
            return Err(bad(&part_path, SPLIT_NO, problem));
        }
        for t in part.tensors.iter() {
            first.tensors.insert(t.clone(), &part_path)?;
        }
    }
    if let Some(total) = first.metadata.get_u64(SPLIT_TENSORS).filter(|&t| t != first.tensors.len() as u64) {
        let problem = format!("the first part says {total} tensors, the {count} parts hold {}", first.tensors.len());
        return Err(bad(path, SPLIT_TENSORS, problem));
    }
    Ok(first)
}

fn part_path(first: &Path, base: &str, index: u64, count: u64) -> PathBuf {
    first.with_file_name(format!("{base}-{index:05}-of-{count:05}.gguf"))
}

/// `file` cut into `parts` GGUF images as `gguf-split` cuts it: the metadata in the first, the
/// tensors shared out in order, the split keys in each. For tests and benches.
pub fn split_images(file: &GgufFile, parts: usize) -> Vec<Vec<u8>> {
    let tensors: Vec<_> = file.tensors.iter().collect();
    let per = tensors.len().div_ceil(parts.max(1));
    (0..parts)
        .map(|i| {
            let mut w = GgufWriter::new();
            if i == 0 {
                for (k, v) in &file.metadata.entries {
                    w.meta(k, v.clone());
                }
                w.meta(SPLIT_TENSORS, MetaValue::I32(tensors.len() as i32));
            }
            w.meta(SPLIT_NO, MetaValue::U16(i as u16)).meta(SPLIT_COUNT, MetaValue::U16(parts as u16));
            for t in tensors.iter().skip(i * per).take(per) {
                w.tensor(&t.name, t.dtype, &t.shape, t.bytes().to_vec());
            }
            w.to_bytes()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image() -> Vec<u8> {
        let mut w = GgufWriter::new();
        w.meta("general.architecture", MetaValue::String("llama".into()));
        for (i, n) in ["a", "b", "c", "d", "e"].iter().enumerate() {
            let values: Vec<f32> = (0..(i + 1) * 8).map(|v| (v * 31 + i) as f32).collect();
            w.tensor_f32(n, &[i + 1, 8], &values);
        }
        w.to_bytes()
    }

    #[test]
    fn a_split_opens_as_the_whole_file_and_a_missing_or_wrong_part_is_named() {
        let dir = std::env::temp_dir().join(format!("mtplx-split-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let whole_path = dir.join("whole.gguf");
        std::fs::write(&whole_path, image()).unwrap();
        let whole = GgufFile::open(&whole_path).unwrap();
        let images = split_images(&whole, 3);
        let names: Vec<PathBuf> = (1..=3).map(|i| dir.join(format!("m-{i:05}-of-00003.gguf"))).collect();
        for (n, img) in names.iter().zip(&images) {
            std::fs::write(n, img).unwrap();
        }
        let joined = open(&names[0]).unwrap();
        assert_eq!(joined.tensors.len(), whole.tensors.len());
        for t in whole.tensors.iter() {
            let j = joined.tensors.get(&t.name).unwrap();
            assert_eq!((j.dtype, &j.shape, j.bytes()), (t.dtype, &t.shape, t.bytes()), "{}", t.name);
        }
        assert_eq!(joined.architecture(), whole.architecture());
        assert_eq!(open(&whole_path).unwrap().tensors.len(), whole.tensors.len(), "a whole file opens as it is");

        let e = open(&names[1]).err().unwrap().to_string();
        assert!(e.contains("part 2 of 3") && e.contains("m-00001-of-00003.gguf"), "{e}");
        std::fs::write(&names[2], &images[1]).unwrap();
        let e = open(&names[0]).err().unwrap().to_string();
        assert!(e.contains("expected part 3 of 3"), "{e}");
        std::fs::remove_file(&names[2]).unwrap();
        let e = open(&names[0]).err().unwrap().to_string();
        assert!(e.contains("m-00003-of-00003.gguf") && e.contains("part 3 of 3"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
