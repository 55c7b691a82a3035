//! SIGTERM starts a graceful shutdown through `shutdown_on_signals` (its own test binary, since
//! it sends a signal to the whole test process).

mod http_support;

use std::net::TcpListener;
use std::sync::Arc;

use http_support::{quick_cfg, TestHandler};
use mtplx_lite::http::{serve, shutdown_on_signals, Handler, Shutdown};

#[test]
fn sigterm_stops_the_server_and_serve_returns() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let shutdown = Shutdown::new();
    shutdown_on_signals(shutdown.clone()).unwrap();
    let handler: Arc<dyn Handler> = Arc::new(TestHandler::default());
    let s = shutdown.clone();
    let server = std::thread::spawn(move || serve(listener, handler, quick_cfg(), s));
    let status = std::process::Command::new("kill").args(["-TERM", &std::process::id().to_string()]).status().unwrap();
    assert!(status.success());
    server.join().unwrap().unwrap();
    assert!(shutdown.is_triggered());
}
