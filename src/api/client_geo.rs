//! Where a client is: its IP (the rate limiter's own rule, `admission::client_ip`) and its
//! country, from a MaxMind-format database (`--geoip-db`, memory-mapped) or from a header a
//! trusted proxy sets (`--country-header`). Loopback, private and other non-public addresses
//! have no country.

use super::admission::client_ip;
use super::state::Cidr;
use crate::http::Request;
use std::net::IpAddr;
use std::path::Path;

/// A country header's value is an ISO 3166 alpha-2 code; anything else is not believed.
const COUNTRY_CODE_LEN: usize = 2;

pub struct GeoIp {
    reader: maxminddb::Reader<maxminddb::Mmap>,
}

impl GeoIp {
    /// Maps the database file; fails with the file's name and what was wrong.
    pub fn open(path: &Path) -> Result<GeoIp, String> {
        let reader = maxminddb::Reader::open_mmap(path).map_err(|e| format!("--geoip-db {}: {e}", path.display()))?;
        Ok(GeoIp { reader })
    }

    /// The ISO code of the country the database places `ip` in.
    pub fn country(&self, ip: IpAddr) -> Option<String> {
        let c: maxminddb::geoip2::Country = self.reader.lookup(ip).ok().flatten()?;
        c.country.and_then(|c| c.iso_code).map(str::to_string)
    }
}

/// Where to look for a client's country.
#[derive(Default)]
pub struct CountrySource {
    pub geoip: Option<GeoIp>,
    /// Lower-case header name (`cf-ipcountry`), believed only from a trusted proxy.
    pub header: Option<String>,
}

/// Addresses that name no place: loopback, private, link-local, unique-local, unspecified,
/// documentation and shared ranges.
pub fn is_public(ip: IpAddr) -> bool {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    };
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || (a == 100 && (64..128).contains(&b)))
        }
        IpAddr::V6(v6) => {
            let s0 = v6.segments()[0];
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (s0 & 0xfe00) == 0xfc00
                || (s0 & 0xffc0) == 0xfe80)
        }
    }
}

/// The client's IP and country for a request.
pub fn locate(req: &Request, trusted: &[Cidr], src: &CountrySource) -> (IpAddr, Option<String>) {
    let ip = client_ip(req.peer, req.header("x-forwarded-for"), trusted);
    if !is_public(ip) {
        return (ip, None);
    }
    let from_proxy = trusted.iter().any(|c| c.contains(req.peer.ip()));
    let header = src
        .header
        .as_deref()
        .filter(|_| from_proxy)
        .and_then(|h| req.header(h))
        .map(str::trim)
        .filter(|v| v.len() == COUNTRY_CODE_LEN && v.bytes().all(|b| b.is_ascii_alphabetic()))
        .map(str::to_ascii_uppercase);
    let country = header.or_else(|| src.geoip.as_ref().and_then(|g| g.country(ip)));
    (ip, country)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(peer: &str, headers: &[(&str, &str)]) -> Request {
        Request {
            method: "POST".into(),
            path: "/v1/chats".into(),
            query: None,
            version: 1,
            headers: headers.iter().map(|(n, v)| (n.to_string(), v.as_bytes().to_vec())).collect(),
            body: Vec::new(),
            peer: peer.parse().unwrap(),
        }
    }

    #[test]
    fn private_and_loopback_addresses_have_no_country() {
        for ip in ["127.0.0.1", "10.1.2.3", "192.168.0.1", "172.16.5.5", "100.64.0.1", "::1", "fd00::1", "fe80::1"] {
            assert!(!is_public(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["8.8.8.8", "203.0.113.9", "2001:4860::8888", "::ffff:8.8.4.4"] {
            assert!(is_public(ip.parse().unwrap()), "{ip}");
        }
    }

    #[test]
    fn the_country_header_is_believed_only_from_a_trusted_proxy() {
        let src = CountrySource { geoip: None, header: Some("cf-ipcountry".into()) };
        let trusted = [Cidr::parse("10.0.0.0/8").unwrap()];
        let via_proxy = req("10.0.0.2:5000", &[("X-Forwarded-For", "8.8.8.8"), ("CF-IPCountry", "us")]);
        assert_eq!(locate(&via_proxy, &trusted, &src), ("8.8.8.8".parse().unwrap(), Some("US".into())));
        let direct = req("8.8.4.4:5000", &[("X-Forwarded-For", "1.1.1.1"), ("CF-IPCountry", "US")]);
        assert_eq!(locate(&direct, &trusted, &src), ("8.8.4.4".parse().unwrap(), None));
        let private = req("10.0.0.2:5000", &[("X-Forwarded-For", "192.168.1.1"), ("CF-IPCountry", "US")]);
        assert_eq!(locate(&private, &trusted, &src).1, None);
        let junk = req("10.0.0.2:5000", &[("X-Forwarded-For", "8.8.8.8"), ("CF-IPCountry", "<script>")]);
        assert_eq!(locate(&junk, &trusted, &src).1, None);
    }
}
