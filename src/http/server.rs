//! The accept loop: a smol executor on `io_threads` threads, one task per connection, the
//! connection cap, and graceful shutdown.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use smol::future::FutureExt as _;
use smol::io::AsyncReadExt as _;
use smol::{Async, Executor, Timer};

use super::config::HttpConfig;
use super::conn::{serve_connection, ConnCtx, ConnEnd};
use super::error::HttpError;
use super::exec::run_tasks;
use super::response;
use super::shutdown::Shutdown;
use super::{render_rejection, Handler, Rejected};

/// After an error response: how long to drain what the client still sends before closing.
const LINGER_TIMEOUT: Duration = Duration::from_secs(1);
/// After an error response: how much of what the client still sends is drained at most.
const LINGER_MAX_BYTES: usize = 256 * 1024;
/// Pause after a failed accept (e.g. out of file descriptors), so the loop does not spin.
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(50);
/// How often shutdown checks whether the last connection has closed.
const SHUTDOWN_POLL: Duration = Duration::from_millis(10);
/// After the grace period, how long streams get to write their terminating chunk.
const FORCED_CLOSE_WAIT: Duration = Duration::from_secs(1);
/// Connections beyond `--max-connections` that may still answer one probe each (`/health`, a
/// metrics scrape), so that a full table does not fail the liveness probe and get a healthy
/// server restarted; anything else on them gets the same 503 as past the cap.
pub const PROBE_RESERVE_CONNECTIONS: usize = 16;

/// Counts a connection among the open ones (and, for one of the probe reserve, among those) for
/// as long as its task lives, however it ends.
struct OpenGuard {
    open: Arc<AtomicUsize>,
    reserve: Option<Arc<AtomicUsize>>,
}

impl OpenGuard {
    fn new(open: &Arc<AtomicUsize>, reserve: Option<&Arc<AtomicUsize>>) -> OpenGuard {
        open.fetch_add(1, Ordering::SeqCst);
        if let Some(r) = reserve {
            r.fetch_add(1, Ordering::SeqCst);
        }
        OpenGuard { open: open.clone(), reserve: reserve.cloned() }
    }
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::SeqCst);
        if let Some(r) = &self.reserve {
            r.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Serves HTTP on `listener` until `shutdown` is triggered and in-flight responses are done (or
/// the grace period is over). Blocks the calling thread, which becomes one of the I/O threads.
pub fn serve(
    listener: TcpListener,
    handler: Arc<dyn Handler>,
    cfg: HttpConfig,
    shutdown: Shutdown,
) -> std::io::Result<()> {
    let listener = Async::new(listener)?;
    let ex = Arc::new(Executor::new());
    let cfg = Arc::new(cfg);
    let (done_tx, done_rx) = async_channel::bounded::<()>(1);
    let mut threads = Vec::new();
    for i in 1..cfg.io_threads.max(1) {
        let (ex, done_rx) = (ex.clone(), done_rx.clone());
        let t = std::thread::Builder::new()
            .name(format!("mtplx-io-{i}"))
            .spawn(move || smol::block_on(async { done_rx.recv().await.ok() }.or(run_tasks(&ex))))?;
        threads.push(t);
    }
    let result = smol::block_on(accept_loop(&ex, listener, handler, cfg, shutdown).or(run_tasks(&ex)));
    drop(done_tx);
    for t in threads {
        let _ = t.join();
    }
    result
}

async fn accept_loop(
    ex: &Arc<Executor<'static>>,
    listener: Async<TcpListener>,
    handler: Arc<dyn Handler>,
    cfg: Arc<HttpConfig>,
    shutdown: Shutdown,
) -> std::io::Result<()> {
    let open = Arc::new(AtomicUsize::new(0));
    let reserve_open = Arc::new(AtomicUsize::new(0));
    loop {
        let accepted = async { Some(listener.accept().await) }
            .or(async {
                shutdown.triggered().await;
                None
            })
            .await;
        let (stream, peer) = match accepted {
            None => break,
            Some(Ok(pair)) => pair,
            Some(Err(e)) => {
                eprintln!("mtplx-lite: accept failed: {e}");
                Timer::after(ACCEPT_ERROR_BACKOFF).await;
                continue;
            }
        };
        // Responses go out in one write each; Nagle would only delay them.
        let _ = stream.get_ref().set_nodelay(true);
        let (handler, cfg, shutdown) = (handler.clone(), cfg.clone(), shutdown.clone());
        let reserve = open.load(Ordering::SeqCst) >= cfg.max_connections;
        if reserve && reserve_open.load(Ordering::SeqCst) >= PROBE_RESERVE_CONNECTIONS {
            ex.spawn(async move { refuse(stream, peer, &*handler, &cfg).await }).detach();
            continue;
        }
        // A reserve connection counts among the open ones too, so shutdown waits for it.
        let guard = OpenGuard::new(&open, reserve.then_some(&reserve_open));
        ex.spawn(async move {
            let _guard = guard;
            run_connection(stream, peer, &*handler, &cfg, &shutdown, reserve).await;
        })
        .detach();
    }
    drop(listener);

    // Stop accepting, then give in-flight responses the grace period, then end streams.
    let grace_end = Instant::now() + cfg.shutdown_grace;
    while open.load(Ordering::SeqCst) > 0 && Instant::now() < grace_end {
        Timer::after(SHUTDOWN_POLL).await;
    }
    shutdown.force();
    let hard_end = Instant::now() + FORCED_CLOSE_WAIT;
    while open.load(Ordering::SeqCst) > 0 && Instant::now() < hard_end {
        Timer::after(SHUTDOWN_POLL).await;
    }
    Ok(())
}

async fn run_connection(
    mut stream: Async<TcpStream>,
    peer: SocketAddr,
    handler: &dyn Handler,
    cfg: &HttpConfig,
    shutdown: &Shutdown,
    reserve: bool,
) {
    let ctx = ConnCtx { handler, cfg, shutdown, peer, reserve };
    let end = serve_connection(&mut stream, &ctx).await;
    close(stream, end).await;
}

/// Half-closes so the client sees the end of the response, and after an error drains briefly
/// what it still sends: closing with unread input would reset the connection and could destroy
/// the response before the client reads it.
async fn close(mut stream: Async<TcpStream>, end: ConnEnd) {
    let _ = stream.get_ref().shutdown(std::net::Shutdown::Write);
    if end == ConnEnd::Linger {
        let drain = async {
            let mut scratch = [0u8; 4096];
            let mut drained = 0;
            while drained < LINGER_MAX_BYTES {
                match stream.read(&mut scratch).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => drained += n,
                }
            }
        };
        drain.or(sleep(LINGER_TIMEOUT)).await;
    }
}

/// Answers 503 to a connection over the cap, without reading its request.
async fn refuse(mut stream: Async<TcpStream>, peer: SocketAddr, handler: &dyn Handler, cfg: &HttpConfig) {
    use smol::io::AsyncWriteExt as _;
    let err = HttpError::TooManyConnections { limit: cfg.max_connections };
    let rejected = Rejected { method: "", path: "", status: err.status(), error: &err, peer };
    let resp = render_rejection(handler, &rejected);
    let mut out = Vec::with_capacity(512);
    response::write_rejection(&mut out, rejected.status, resp, false);
    handler.on_rejected(&rejected);
    let write = async {
        let _ = stream.write_all(&out).await;
    };
    write.or(sleep(LINGER_TIMEOUT)).await;
    close(stream, ConnEnd::Linger).await;
}

async fn sleep(d: Duration) {
    Timer::after(d).await;
}
