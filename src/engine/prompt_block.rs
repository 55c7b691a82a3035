//! One block of a prompt's keys and values on disk: the disk tier's file format.
//!
//! A block holds [`BLOCK_TOKENS`] positions and is named by its key, a hash chain (as vLLM keys
//! its prefix-cache blocks): the previous block's key, the model's identity and this block's
//! token ids. Equal keys mean the same tokens after the same prefix on the same model, so the
//! keys and values are the same. The file repeats the key, the identity and the tokens, and ends
//! with a SHA-256 of everything before it, so that a torn, corrupt or foreign file is detected
//! before a byte of it is used.

use crate::model::sha256::Sha256;

/// Positions in a block: a multiple of every cache layout's group (`model::kv::STORED_GROUP`),
/// and small enough that a chat turn's new text soon fills one (the demo model's block is
/// 5.9 MB).
pub const BLOCK_TOKENS: usize = 256;

/// The start of every block file; the last byte is the format's version.
const MAGIC: [u8; 8] = *b"MTPLXKV\x01";

/// A block's key, and the model identity it chains in.
pub type Key = [u8; 32];

/// The keys of the whole blocks of `tokens`, in order.
pub fn chain(identity: &Key, tokens: &[u32]) -> Vec<Key> {
    let mut keys: Vec<Key> = Vec::with_capacity(tokens.len() / BLOCK_TOKENS);
    for block in tokens.chunks_exact(BLOCK_TOKENS) {
        let mut h = Sha256::default();
        h.update(keys.last().unwrap_or(&[0; 32]));
        h.update(identity);
        block.iter().for_each(|t| h.update(&t.to_le_bytes()));
        keys.push(h.finish());
    }
    keys
}

/// Why a block file was not used.
#[derive(Debug, PartialEq, Eq)]
pub enum BlockError {
    /// Shorter than its header says, or than a header.
    Truncated { len: usize, expected: usize },
    /// The checksum does not match: a torn or corrupted write.
    Corrupt,
    /// Another format version, model, key or cache shape.
    Foreign { what: &'static str },
}

impl std::fmt::Display for BlockError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BlockError::Truncated { len, expected } => write!(f, "truncated: {len} bytes, {expected} expected"),
            BlockError::Corrupt => write!(f, "corrupt: its checksum does not match its bytes"),
            BlockError::Foreign { what } => write!(f, "written for another {what}"),
        }
    }
}

/// The shape of a block's payload: per layer, this many key and value elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub layers: usize,
    pub keys: usize,
    pub values: usize,
}

/// Header: magic, identity, key, then layers, keys and values per layer as u32.
const HEADER: usize = 8 + 32 + 32 + 12;

impl Shape {
    /// Bytes of a block file of this shape.
    pub fn file_len(&self) -> usize {
        HEADER + BLOCK_TOKENS * 4 + self.layers * (self.keys + self.values) * 2 + 32
    }
}

/// A block file's bytes but its checksum ([`seal`] adds it, off the decode thread): `layer(l)`
/// gives layer `l`'s stored keys and values.
pub fn encode<'a>(
    identity: &Key,
    key: &Key,
    tokens: &[u32],
    shape: Shape,
    layer: &dyn Fn(usize) -> (&'a [u16], &'a [u16]),
) -> Vec<u8> {
    debug_assert_eq!(tokens.len(), BLOCK_TOKENS);
    let mut out = Vec::with_capacity(shape.file_len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(identity);
    out.extend_from_slice(key);
    for n in [shape.layers, shape.keys, shape.values] {
        out.extend_from_slice(&(n as u32).to_le_bytes());
    }
    tokens.iter().for_each(|t| out.extend_from_slice(&t.to_le_bytes()));
    for l in 0..shape.layers {
        let (k, v) = layer(l);
        k.iter().chain(v).for_each(|x| out.extend_from_slice(&x.to_le_bytes()));
    }
    out
}

/// Appends the checksum that ends a block file.
pub fn seal(bytes: &mut Vec<u8>) {
    let mut h = Sha256::default();
    h.update(bytes);
    let sum = h.finish();
    bytes.extend_from_slice(&sum);
}

/// A block read back and checked: its tokens, and per layer its keys and values.
pub struct Block {
    pub tokens: Vec<u32>,
    pub layers: Vec<(Vec<u16>, Vec<u16>)>,
}

/// Checks `bytes` against everything that must hold, and decodes them.
pub fn decode(bytes: &[u8], identity: &Key, key: &Key, shape: Shape) -> Result<Block, BlockError> {
    let expected = shape.file_len();
    if bytes.len() < HEADER || bytes[..8] != MAGIC {
        return match bytes.len() < HEADER {
            true => Err(BlockError::Truncated { len: bytes.len(), expected }),
            false => Err(BlockError::Foreign { what: "format version" }),
        };
    }
    if bytes.len() != expected {
        return Err(BlockError::Truncated { len: bytes.len(), expected });
    }
    let (body, sum) = bytes.split_at(expected - 32);
    let mut h = Sha256::default();
    h.update(body);
    if h.finish() != sum {
        return Err(BlockError::Corrupt);
    }
    if body[8..40] != identity[..] {
        return Err(BlockError::Foreign { what: "model or cache format" });
    }
    if body[40..72] != key[..] {
        return Err(BlockError::Foreign { what: "prefix (its key differs from its name)" });
    }
    let u32_at = |i: usize| u32::from_le_bytes(body[i..i + 4].try_into().expect("4 bytes")) as usize;
    if (u32_at(72), u32_at(76), u32_at(80)) != (shape.layers, shape.keys, shape.values) {
        return Err(BlockError::Foreign { what: "cache shape" });
    }
    let tokens = body[HEADER..HEADER + BLOCK_TOKENS * 4]
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
        .collect();
    let mut at = HEADER + BLOCK_TOKENS * 4;
    let mut take = |n: usize| {
        let v: Vec<u16> = body[at..at + 2 * n].chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect();
        at += 2 * n;
        v
    };
    let layers = (0..shape.layers).map(|_| (take(shape.keys), take(shape.values))).collect();
    Ok(Block { tokens, layers })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_round_trips_and_any_damage_or_foreign_header_is_refused() {
        let id = [7u8; 32];
        let tokens: Vec<u32> = (0..BLOCK_TOKENS as u32 * 2 + 5).collect();
        let keys = chain(&id, &tokens);
        assert_eq!(keys.len(), 2);
        assert_eq!(chain(&id, &tokens[..BLOCK_TOKENS])[0], keys[0], "a key depends only on what precedes it");
        assert_ne!(chain(&[8; 32], &tokens)[0], keys[0], "another model, another key");
        let mut other = tokens.clone();
        other[3] = 99;
        assert_ne!(chain(&id, &other)[1], keys[1], "a change in block 0 changes every later key");

        let shape = Shape { layers: 2, keys: 10, values: 12 };
        let data: Vec<(Vec<u16>, Vec<u16>)> =
            (0..2).map(|l| ((0..10).map(|i| i * 3 + l).collect(), (0..12).map(|i| i * 5 + l).collect())).collect();
        let block = &tokens[BLOCK_TOKENS..2 * BLOCK_TOKENS];
        let mut bytes = encode(&id, &keys[1], block, shape, &|l| (&data[l].0, &data[l].1));
        seal(&mut bytes);
        assert_eq!(bytes.len(), shape.file_len());
        let back = decode(&bytes, &id, &keys[1], shape).unwrap();
        assert_eq!((back.tokens.as_slice(), &back.layers), (block, &data));

        let mut torn = bytes.clone();
        torn[HEADER + 100] ^= 1;
        assert_eq!(decode(&torn, &id, &keys[1], shape).err(), Some(BlockError::Corrupt));
        let short = &bytes[..bytes.len() - 1];
        assert!(matches!(decode(short, &id, &keys[1], shape), Err(BlockError::Truncated { .. })));
        assert!(matches!(decode(&bytes, &[8; 32], &keys[1], shape), Err(BlockError::Foreign { .. })));
        assert!(matches!(decode(&bytes, &id, &keys[0], shape), Err(BlockError::Foreign { .. })));
        let wider = Shape { keys: 11, values: 11, ..shape };
        assert!(matches!(decode(&bytes, &id, &keys[1], wider), Err(BlockError::Foreign { .. })));
        let mut old = bytes.clone();
        old[7] = 0;
        assert!(matches!(decode(&old, &id, &keys[1], shape), Err(BlockError::Foreign { .. })));
    }
}
