//! Every setting of the server in one struct, filled by `main.rs` from command-line flags.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::http::{DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_CONNECTIONS, DEFAULT_SHUTDOWN_GRACE};

/// Default number of per-request metrics records kept (`--metrics-history`).
pub const DEFAULT_METRICS_HISTORY: usize = 256;
/// Default depth of the job queue in front of the decode thread (`--queue-depth`).
pub const DEFAULT_QUEUE_DEPTH: usize = 64;

/// One CIDR block (`10.0.0.0/8`, `::1/128`), used for `--trusted-proxy`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cidr {
    pub addr: std::net::IpAddr,
    pub prefix: u8,
}

impl Cidr {
    pub fn parse(s: &str) -> Result<Cidr, String> {
        let (a, p) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: std::net::IpAddr =
            a.parse().map_err(|_| format!("'{s}' is not an IP address or CIDR block"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match p {
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|&p| p <= max)
                .ok_or_else(|| format!("'{s}': prefix length must be 0..={max}"))?,
            None => max,
        };
        Ok(Cidr { addr, prefix })
    }

    pub fn contains(&self, ip: std::net::IpAddr) -> bool {
        use std::net::IpAddr;
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
            v4 => v4,
        };
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = if self.prefix == 0 { 0 } else { u32::MAX << (32 - self.prefix as u32) };
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = if self.prefix == 0 { 0 } else { u128::MAX << (128 - self.prefix as u32) };
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

#[derive(Clone, Debug)]
pub struct ServeConfig {
    pub listen: SocketAddr,
    /// GGUF file or Hugging Face directory; `None` means the demo model from the cache directory.
    pub model: Option<PathBuf>,
    pub io_threads: usize,
    /// Decode worker threads; 0 means one per core.
    pub threads: usize,
    pub max_body_bytes: usize,
    pub max_connections: usize,
    pub shutdown_grace: Duration,
    pub metrics_enabled: bool,
    /// Bearer token that guards the metrics routes (from a file or `MTPLX_METRICS_TOKEN`).
    pub metrics_token: Option<String>,
    pub metrics_history: usize,
    /// Requests per minute per client IP; `None` is off.
    pub rate_limit_per_minute: Option<u32>,
    pub trusted_proxies: Vec<Cidr>,
    pub queue_depth: usize,
    /// Context length; `None` means the model's own.
    pub ctx: Option<usize>,
    /// Memory budget for all KV caches together; `None` means derived from the context.
    pub kv_cache_bytes: Option<usize>,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            listen: "127.0.0.1:8100".parse().unwrap(),
            model: None,
            io_threads: 1,
            threads: 0,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            metrics_enabled: true,
            metrics_token: None,
            metrics_history: DEFAULT_METRICS_HISTORY,
            rate_limit_per_minute: None,
            trusted_proxies: Vec::new(),
            queue_depth: DEFAULT_QUEUE_DEPTH,
            ctx: None,
            kv_cache_bytes: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidr_matches_inside_and_rejects_outside() {
        let c = Cidr::parse("10.1.0.0/16").unwrap();
        assert!(c.contains("10.1.200.3".parse().unwrap()));
        assert!(!c.contains("10.2.0.1".parse().unwrap()));
        assert!(c.contains("::ffff:10.1.0.9".parse().unwrap()));
        let one = Cidr::parse("::1").unwrap();
        assert!(one.contains("::1".parse().unwrap()));
        assert!(!one.contains("::2".parse().unwrap()));
        assert!(Cidr::parse("10.0.0.0/33").is_err());
        assert!(Cidr::parse("nope").is_err());
    }
}
