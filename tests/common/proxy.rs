//! A TCP proxy the test controls, to cut one client off a server the way a network
//! partition does: connections stay open, nothing passes either way (bytes read meanwhile
//! are held, and delivered once the cut heals, as TCP retransmits them), and new
//! connections are accepted by the kernel but get no answer. It can also slow the link
//! down: every byte is held for half the added round trip in each direction.

use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::Instant;

/// A proxy from a free loopback port to `127.0.0.1:target`.
pub struct Proxy {
    pub port: u16,
    cut: Arc<watch::Sender<bool>>,
    /// Added to each direction of the link.
    delay: Arc<watch::Sender<Duration>>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Starts forwarding to `target`.
    pub async fn start(target: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(watch::channel(false).0);
        let delay = Arc::new(watch::channel(Duration::ZERO).0);
        let (c, d) = (cut.clone(), delay.clone());
        let task = tokio::spawn(async move {
            loop {
                healed(&c).await;
                let Ok((down, _)) = listener.accept().await else {
                    return;
                };
                let (c, d) = (c.clone(), d.clone());
                tokio::spawn(async move {
                    healed(&c).await;
                    let Ok(up) = TcpStream::connect(("127.0.0.1", target)).await else {
                        return;
                    };
                    let (dr, dw) = down.into_split();
                    let (ur, uw) = up.into_split();
                    tokio::spawn(pipe(dr, uw, c.clone(), d.clone()));
                    tokio::spawn(pipe(ur, dw, c, d));
                });
            }
        });
        Proxy {
            port,
            cut,
            delay,
            task,
        }
    }

    /// `redis://` URL of the proxy.
    pub fn redis_url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Stops everything passing (until [`Proxy::heal`]).
    pub fn cut(&self) {
        self.cut.send_replace(true);
    }

    /// Lets everything pass again, what was held first.
    pub fn heal(&self) {
        self.cut.send_replace(false);
    }

    /// Adds `round_trip` to every round trip through the proxy (half each way).
    pub fn slow_down(&self, round_trip: Duration) {
        self.delay.send_replace(round_trip / 2);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Waits while the link is cut.
async fn healed(cut: &watch::Sender<bool>) {
    let mut rx = cut.subscribe();
    let _ = rx.wait_for(|c| !*c).await;
}

/// Copies `from` to `to`, holding what it read while the link is cut, and each chunk for
/// the link's delay (chunks stay in order and in flight together, as on a long wire).
async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    cut: Arc<watch::Sender<bool>>,
    delay: Arc<watch::Sender<Duration>>,
) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let cut_w = cut.clone();
    tokio::spawn(async move {
        while let Some((at, chunk)) = rx.recv().await {
            tokio::time::sleep_until(at).await;
            healed(&cut_w).await;
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
    });
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        healed(&cut).await;
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let at = Instant::now() + *delay.borrow();
        if tx.send((at, buf[..n].to_vec())).is_err() {
            return;
        }
    }
}
