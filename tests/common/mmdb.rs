//! A tiny writer of the MaxMind DB format (IPv4 tree, 24-bit records), enough for a country
//! database the server reads with the `maxminddb` crate: the tests make their own instead of
//! shipping a real GeoIP file.

use std::net::Ipv4Addr;

enum Rec {
    Empty,
    Node(usize),
    Data(usize),
}

fn ctrl(out: &mut Vec<u8>, kind: u8, size: usize) {
    assert!(size < 29, "this writer spells only short values");
    if kind <= 7 {
        out.push(kind << 5 | size as u8);
    } else {
        out.push(size as u8);
        out.push(kind - 7);
    }
}

fn string(out: &mut Vec<u8>, s: &str) {
    ctrl(out, 2, s.len());
    out.extend_from_slice(s.as_bytes());
}

fn uint(out: &mut Vec<u8>, kind: u8, v: u64) {
    let bytes = v.to_be_bytes();
    let skip = bytes.iter().take_while(|b| **b == 0).count();
    ctrl(out, kind, 8 - skip);
    out.extend_from_slice(&bytes[skip..]);
}

/// A database placing each `(network, prefix length)` in the given ISO country.
pub fn country_db(entries: &[(Ipv4Addr, u8, &str)]) -> Vec<u8> {
    let mut nodes: Vec<[Rec; 2]> = vec![[Rec::Empty, Rec::Empty]];
    let mut data = Vec::new();
    for &(net, len, iso) in entries {
        let offset = data.len();
        ctrl(&mut data, 7, 1);
        string(&mut data, "country");
        ctrl(&mut data, 7, 1);
        string(&mut data, "iso_code");
        string(&mut data, iso);
        let bits = u32::from(net);
        let mut node = 0;
        for i in 0..len as u32 {
            let bit = (bits >> (31 - i) & 1) as usize;
            if i + 1 == len as u32 {
                nodes[node][bit] = Rec::Data(offset);
            } else {
                node = match nodes[node][bit] {
                    Rec::Node(n) => n,
                    _ => {
                        nodes.push([Rec::Empty, Rec::Empty]);
                        let n = nodes.len() - 1;
                        nodes[node][bit] = Rec::Node(n);
                        n
                    }
                };
            }
        }
    }
    let count = nodes.len();
    let mut out = Vec::new();
    for pair in &nodes {
        for r in pair {
            let v = match *r {
                Rec::Empty => count,
                Rec::Node(n) => n,
                Rec::Data(off) => count + 16 + off,
            };
            out.extend_from_slice(&(v as u32).to_be_bytes()[1..]);
        }
    }
    out.extend_from_slice(&[0; 16]);
    out.extend_from_slice(&data);
    out.extend_from_slice(b"\xAB\xCD\xEFMaxMind.com");
    ctrl(&mut out, 7, 9);
    string(&mut out, "binary_format_major_version");
    uint(&mut out, 5, 2);
    string(&mut out, "binary_format_minor_version");
    uint(&mut out, 5, 0);
    string(&mut out, "build_epoch");
    uint(&mut out, 9, 1_700_000_000);
    string(&mut out, "database_type");
    string(&mut out, "mtplx-test-Country");
    string(&mut out, "description");
    ctrl(&mut out, 7, 0);
    string(&mut out, "ip_version");
    uint(&mut out, 5, 4);
    string(&mut out, "languages");
    ctrl(&mut out, 11, 1);
    string(&mut out, "en");
    string(&mut out, "node_count");
    uint(&mut out, 6, count as u64);
    string(&mut out, "record_size");
    uint(&mut out, 5, 24);
    out
}
