//! Admission before a request reaches its handler: who the client is, whether it holds the
//! key a route needs, and whether the rate limiter lets it in.

use super::error::ApiError;
use super::state::Cidr;
use crate::http::Request;
use ahash::AHashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Shards of the per-IP bucket map, so that concurrent requests rarely share a lock.
const SHARDS: usize = 16;
/// A bucket untouched this long is full again, so it can be forgotten without changing behaviour.
const IDLE_EVICT_AFTER: Duration = Duration::from_secs(120);
/// Sweep a shard for idle buckets once every this many admissions to it.
const SWEEP_EVERY: u32 = 1024;
/// Most `X-Forwarded-For` hops we look at; a longer header is a forgery or a loop.
const MAX_FORWARDED_HOPS: usize = 32;

/// The client's address: the socket peer, or, when the peer is a trusted proxy, the right-most
/// `X-Forwarded-For` hop that is not itself a trusted proxy (hops left of it can be forged).
pub fn client_ip(peer: SocketAddr, forwarded_for: Option<&str>, trusted: &[Cidr]) -> IpAddr {
    let is_trusted = |ip: IpAddr| trusted.iter().any(|c| c.contains(ip));
    let peer_ip = peer.ip();
    let (Some(xff), true) = (forwarded_for, is_trusted(peer_ip)) else {
        return peer_ip;
    };
    let mut leftmost = peer_ip;
    for hop in xff.rsplit(',').take(MAX_FORWARDED_HOPS) {
        let Ok(ip) = hop.trim().parse::<IpAddr>() else {
            return leftmost;
        };
        if !is_trusted(ip) {
            return ip;
        }
        leftmost = ip;
    }
    leftmost
}

/// Compares in time independent of where the strings differ (length still leaks, as it must).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Which secret a route needs, for the 401's wording.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Guard {
    /// The API key (`--api-key-file`, `MTPLX_API_KEY`) on the `/v1` generation routes.
    ApiKey,
    /// The metrics token (`--metrics-token-file`, `MTPLX_METRICS_TOKEN`) on the metrics routes.
    MetricsToken,
}

/// `None` when the request carries `Authorization: Bearer <expected>` (or, for the API key,
/// `x-api-key: <expected>`, as Anthropic's clients send it), or nothing is expected; otherwise
/// the 401 to send.
pub fn check_bearer(req: &Request, expected: Option<&str>, guard: Guard) -> Option<ApiError> {
    let expected = expected?;
    let bearer = req.header("authorization").and_then(|h| {
        let (scheme, rest) = h.trim().split_once(' ')?;
        scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
    });
    let x_api_key = match guard {
        Guard::ApiKey => req.header("x-api-key").map(str::trim),
        Guard::MetricsToken => None,
    };
    let (realm, what, how) = match guard {
        Guard::ApiKey => ("mtplx", "the API key", "'Authorization: Bearer <key>' or 'x-api-key: <key>'"),
        Guard::MetricsToken => ("mtplx-metrics", "the metrics token", "'Authorization: Bearer <token>'"),
    };
    let matches = |g: &str| constant_time_eq(g.as_bytes(), expected.as_bytes());
    if bearer.is_some_and(matches) || x_api_key.is_some_and(matches) {
        return None;
    }
    let msg = match (bearer, x_api_key) {
        (Some(_), _) => format!("the bearer token is not {what}"),
        (None, Some(_)) => format!("the x-api-key is not {what}"),
        (None, None) => format!("this route needs {what}: send {how}"),
    };
    Some(
        ApiError::new(401, "authentication_error", msg)
            .code("invalid_api_key")
            .header("WWW-Authenticate", format!("Bearer realm=\"{realm}\"")),
    )
}

struct Bucket {
    tokens: f64,
    last: Instant,
}

struct Shard {
    buckets: AHashMap<IpAddr, Bucket>,
    since_sweep: u32,
}

/// A token bucket per client IP: `per_minute` requests of burst, refilled at `per_minute / 60`
/// per second.
pub struct RateLimiter {
    per_minute: f64,
    shards: Vec<Mutex<Shard>>,
}

/// The limiter's answer when it refuses a request.
#[derive(Debug, PartialEq)]
pub struct Limited {
    /// Whole seconds until one token is back (for `Retry-After`, RFC 9110 §10.2.3).
    pub retry_after_secs: u64,
}

impl RateLimiter {
    pub fn new(per_minute: u32) -> RateLimiter {
        let shards = (0..SHARDS).map(|_| Mutex::new(Shard { buckets: AHashMap::new(), since_sweep: 0 })).collect();
        RateLimiter { per_minute: per_minute.max(1) as f64, shards }
    }

    pub fn check(&self, ip: IpAddr) -> Result<(), Limited> {
        self.check_at(ip, Instant::now())
    }

    fn check_at(&self, ip: IpAddr, now: Instant) -> Result<(), Limited> {
        let rate = self.per_minute / 60.0;
        let idx = shard_of(ip);
        // A poisoned shard only means another request panicked mid-update of plain numbers.
        let mut shard = self.shards[idx].lock().unwrap_or_else(|e| e.into_inner());
        shard.since_sweep += 1;
        if shard.since_sweep >= SWEEP_EVERY {
            shard.since_sweep = 0;
            shard.buckets.retain(|_, b| now.saturating_duration_since(b.last) < IDLE_EVICT_AFTER);
        }
        let cap = self.per_minute;
        let b = shard.buckets.entry(ip).or_insert(Bucket { tokens: cap, last: now });
        let elapsed = now.saturating_duration_since(b.last).as_secs_f64();
        b.tokens = (b.tokens + elapsed * rate).min(cap);
        b.last = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            Ok(())
        } else {
            Err(Limited { retry_after_secs: ((1.0 - b.tokens) / rate).ceil().max(1.0) as u64 })
        }
    }

    /// Buckets currently remembered (for tests of eviction).
    pub fn tracked(&self) -> usize {
        self.shards.iter().map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).buckets.len()).sum()
    }
}

fn shard_of(ip: IpAddr) -> usize {
    static SEED: std::sync::OnceLock<ahash::RandomState> = std::sync::OnceLock::new();
    SEED.get_or_init(ahash::RandomState::new).hash_one(ip) as usize % SHARDS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(s: &str) -> SocketAddr {
        SocketAddr::new(s.parse().unwrap(), 5555)
    }

    #[test]
    fn constant_time_eq_is_equality() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
        assert!(constant_time_eq(b"", b""));
    }

    #[test]
    fn untrusted_peer_is_the_client_whatever_it_claims() {
        let trusted = [Cidr::parse("10.0.0.0/8").unwrap()];
        assert_eq!(client_ip(peer("203.0.113.9"), Some("1.2.3.4"), &trusted), "203.0.113.9".parse::<IpAddr>().unwrap());
        assert_eq!(client_ip(peer("10.0.0.1"), Some("1.2.3.4"), &[]), "10.0.0.1".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn rightmost_untrusted_hop_behind_a_trusted_proxy() {
        let trusted = [Cidr::parse("10.0.0.0/8").unwrap()];
        let ip = client_ip(peer("10.0.0.1"), Some("6.6.6.6, 198.51.100.7, 10.0.0.5"), &trusted);
        assert_eq!(ip, "198.51.100.7".parse::<IpAddr>().unwrap());
        // Every hop trusted: the left-most one is the best we know.
        assert_eq!(
            client_ip(peer("10.0.0.1"), Some("10.1.1.1, 10.2.2.2"), &trusted),
            "10.1.1.1".parse::<IpAddr>().unwrap()
        );
        // Garbage stops the walk at the last good hop.
        assert_eq!(
            client_ip(peer("10.0.0.1"), Some("junk, 10.2.2.2"), &trusted),
            "10.2.2.2".parse::<IpAddr>().unwrap()
        );
    }

    #[test]
    fn bucket_allows_burst_then_refuses_then_refills() {
        let rl = RateLimiter::new(3);
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        let t0 = Instant::now();
        for _ in 0..3 {
            assert_eq!(rl.check_at(ip, t0), Ok(()));
        }
        let refused = rl.check_at(ip, t0).unwrap_err();
        assert_eq!(refused.retry_after_secs, 20);
        // Another client is not affected.
        assert_eq!(rl.check_at("192.0.2.2".parse().unwrap(), t0), Ok(()));
        // 20 s later one token is back, and only one.
        let t1 = t0 + Duration::from_secs(20);
        assert_eq!(rl.check_at(ip, t1), Ok(()));
        assert!(rl.check_at(ip, t1).is_err());
    }

    #[test]
    fn idle_buckets_are_evicted() {
        let rl = RateLimiter::new(60);
        let t0 = Instant::now();
        for i in 0..200u32 {
            let ip = IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + i));
            rl.check_at(ip, t0).unwrap();
        }
        assert_eq!(rl.tracked(), 200);
        let later = t0 + IDLE_EVICT_AFTER + Duration::from_secs(1);
        for i in 0..(SWEEP_EVERY * SHARDS as u32) {
            let _ = rl.check_at("192.0.2.77".parse().unwrap(), later + Duration::from_millis(i as u64));
        }
        assert!(rl.tracked() < 200, "idle buckets kept: {}", rl.tracked());
    }
}
