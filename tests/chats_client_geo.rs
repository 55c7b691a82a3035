//! Each chat records its client's IP and country: the socket peer, or the right-most untrusted
//! `X-Forwarded-For` hop behind a `--trusted-proxy`; the country from a MaxMind database the
//! test writes itself, or from a header only a trusted proxy may set.

mod common;

use common::chats::{start, TempDir};
use common::mmdb::country_db;
use common::request;
use serde_json::Value;
use std::net::SocketAddr;

fn create(addr: SocketAddr, headers: &[(&str, &str)]) -> Value {
    let r = request(addr, "POST", "/v1/chats", headers, b"{}");
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

fn place(v: &Value) -> (String, Option<String>) {
    (v["client_ip"].as_str().unwrap().to_string(), v["country"].as_str().map(str::to_string))
}

fn at(ip: &str, country: Option<&str>) -> (String, Option<String>) {
    (ip.to_string(), country.map(str::to_string))
}

#[test]
fn ip_and_country_with_and_without_a_trusted_proxy() {
    let dir = TempDir::new("chats-geo");
    let mmdb = dir.join("country.mmdb");
    std::fs::write(
        &mmdb,
        country_db(&[("81.2.69.0".parse().unwrap(), 24, "GB"), ("8.8.8.0".parse().unwrap(), 24, "US")]),
    )
    .unwrap();
    let db = dir.join("chats.db");
    let flags = ["--trusted-proxy", "127.0.0.1", "--geoip-db", &mmdb, "--country-header", "CF-IPCountry"];
    let s = start(&db, &flags);
    let xff = |v: &'static str| [("X-Forwarded-For", v)];
    assert_eq!(place(&create(s.addr, &xff("81.2.69.160"))), at("81.2.69.160", Some("GB")));
    assert_eq!(place(&create(s.addr, &xff("1.2.3.4, 8.8.8.8"))), at("8.8.8.8", Some("US")), "right-most hop");
    assert_eq!(place(&create(s.addr, &xff("9.9.9.9"))), at("9.9.9.9", None), "not in the database");
    assert_eq!(place(&create(s.addr, &xff("10.1.2.3"))), at("10.1.2.3", None), "private: no country");
    assert_eq!(place(&create(s.addr, &[])), at("127.0.0.1", None), "loopback: no country");
    let via_header = create(s.addr, &[("X-Forwarded-For", "81.2.69.160"), ("CF-IPCountry", "fr")]);
    assert_eq!(place(&via_header), at("81.2.69.160", Some("FR")), "the proxy's header wins");
    drop(s);

    // Without a trusted proxy, neither the forwarded address nor the header is believed.
    let s = start(&db, &["--geoip-db", &mmdb, "--country-header", "CF-IPCountry"]);
    let forged = create(s.addr, &[("X-Forwarded-For", "81.2.69.160"), ("CF-IPCountry", "FR")]);
    assert_eq!(place(&forged), at("127.0.0.1", None));
    drop(s);

    // A GeoIP file that is not one stops the server at start, naming the file.
    std::fs::write(&mmdb, b"not a database").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mtplx-lite"))
        .args(["--listen", "127.0.0.1:0", "--model", common::demo_model().to_str().unwrap(), "--database", &db])
        .args(["--geoip-db", &mmdb])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--geoip-db") && err.contains("country.mmdb"), "{err}");
}
