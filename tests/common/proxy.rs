//! A TCP proxy the test controls, to cut one client off a server the way a network
//! partition does: connections stay open, nothing passes either way (bytes read meanwhile
//! are held, and delivered once the cut heals, as TCP retransmits them), and new
//! connections are accepted by the kernel but get no answer.

use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A proxy from a free loopback port to `127.0.0.1:target`.
pub struct Proxy {
    pub port: u16,
    cut: Arc<watch::Sender<bool>>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Starts forwarding to `target`.
    pub async fn start(target: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(watch::channel(false).0);
        let c = cut.clone();
        let task = tokio::spawn(async move {
            loop {
                healed(&c).await;
                let Ok((down, _)) = listener.accept().await else {
                    return;
                };
                let c = c.clone();
                tokio::spawn(async move {
                    healed(&c).await;
                    let Ok(up) = TcpStream::connect(("127.0.0.1", target)).await else {
                        return;
                    };
                    let (dr, dw) = down.into_split();
                    let (ur, uw) = up.into_split();
                    tokio::spawn(pipe(dr, uw, c.clone()));
                    tokio::spawn(pipe(ur, dw, c));
                });
            }
        });
        Proxy { port, cut, task }
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

/// Copies `from` to `to`, holding what it read while the link is cut.
async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    cut: Arc<watch::Sender<bool>>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        healed(&cut).await;
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        healed(&cut).await;
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
