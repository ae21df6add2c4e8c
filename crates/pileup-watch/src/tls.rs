//! TLS in front of the HTTP listener: connections to the public address
//! are decrypted by rustls and passed to the HTTP server on a loopback
//! port of its own, which answers only connections made here (each is
//! known by its local address, mapped to the client's real address for
//! the per-client limits). Written by hand because the HTTP server pileup
//! uses (tiny_http) takes TLS only through an old rustls; rustls itself
//! does the cryptography, and this is only its documented read/write
//! loop over two sockets.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::web::WebConfig;

/// Local address of a connection to the HTTP server → the client's.
pub type Clients = Arc<Mutex<HashMap<SocketAddr, SocketAddr>>>;

/// Connections served at once, at most; more are closed at once.
const MAX_CONNECTIONS: usize = 64;
/// A handshake that takes longer is dropped; so is a connection idle
/// this long.
const HANDSHAKE: Duration = Duration::from_secs(10);
const IDLE: Duration = Duration::from_secs(300);

/// Accept on `public` for ever, each connection on its own thread.
pub fn terminate(public: TcpListener, inner: SocketAddr, web: Arc<WebConfig>, clients: Clients) {
    let live = Arc::new(AtomicUsize::new(0));
    for conn in public.incoming() {
        let Ok(tcp) = conn else { continue };
        if live.load(Ordering::SeqCst) >= MAX_CONNECTIONS {
            continue;
        }
        let Some(cfg) = web.tls() else { continue };
        live.fetch_add(1, Ordering::SeqCst);
        let (clients, live) = (clients.clone(), live.clone());
        let spawned = std::thread::Builder::new().name("pileup-tls".into()).spawn(move || {
            if let Err(e) = serve(tcp, inner, cfg, &clients) {
                tracing::debug!("TLS connection: {e}");
            }
            live.fetch_sub(1, Ordering::SeqCst);
        });
        if spawned.is_err() {
            tracing::warn!("no thread for a TLS connection");
        }
    }
}

/// Removes a connection's entry when it ends.
struct Entry(Clients, SocketAddr);

impl Drop for Entry {
    fn drop(&mut self) {
        self.0.lock().unwrap().remove(&self.1);
    }
}

fn serve(
    mut tcp: TcpStream,
    inner: SocketAddr,
    cfg: Arc<rustls::ServerConfig>,
    clients: &Clients,
) -> std::io::Result<()> {
    let peer = tcp.peer_addr()?;
    let mut tls = rustls::ServerConnection::new(cfg).map_err(std::io::Error::other)?;
    let mut http = TcpStream::connect(inner)?;
    let _entry = {
        let local = http.local_addr()?;
        clients.lock().unwrap().insert(local, peer);
        Entry(clients.clone(), local)
    };
    let _ = tcp.set_nodelay(true);
    let began = Instant::now();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        while tls.wants_write() {
            tls.write_tls(&mut tcp)?;
        }
        let limit = if tls.is_handshaking() {
            match HANDSHAKE.checked_sub(began.elapsed()) {
                Some(left) => left,
                None => return Err(std::io::Error::other("handshake timed out")),
            }
        } else {
            IDLE
        };
        let (from_client, from_http) = readable(&tcp, &http, limit)?;
        if !from_client && !from_http {
            return Ok(());
        }
        if from_client {
            if tls.read_tls(&mut tcp)? == 0 {
                return Ok(());
            }
            if let Err(e) = tls.process_new_packets() {
                // Tell the client why (an alert), then close.
                let _ = tls.write_tls(&mut tcp);
                return Err(std::io::Error::other(e));
            }
            loop {
                match tls.reader().read(&mut buf) {
                    Ok(0) => return Ok(()),
                    Ok(n) => http.write_all(&buf[..n])?,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) => return Err(e),
                }
            }
        }
        if from_http {
            let n = http.read(&mut buf)?;
            if n == 0 {
                tls.send_close_notify();
                while tls.wants_write() {
                    tls.write_tls(&mut tcp)?;
                }
                return Ok(());
            }
            tls.writer().write_all(&buf[..n])?;
        }
    }
}

/// Wait until either socket has something to read (or is closed), at most
/// `limit`: (client, http); neither after the limit.
fn readable(a: &TcpStream, b: &TcpStream, limit: Duration) -> std::io::Result<(bool, bool)> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let ms = u16::try_from(limit.as_millis().min(60_000)).unwrap_or(60_000);
    let deadline = Instant::now() + limit;
    loop {
        let mut fds = [PollFd::new(a.as_fd(), PollFlags::POLLIN), PollFd::new(b.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::from(ms)) {
            Ok(0) if Instant::now() >= deadline => return Ok((false, false)),
            Ok(0) => continue,
            Ok(_) => {
                let ready = |f: &PollFd| f.revents().is_some_and(|r| !r.is_empty());
                return Ok((ready(&fds[0]), ready(&fds[1])));
            }
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}
