//! Who may reach `--listen`, decided as Prometheus exporters decide it:
//! the exporter-toolkit web configuration file (`--web.config.file`), with
//! TLS (`tls_server_config`) and basic auth (`basic_auth_users`, bcrypt
//! hashes), re-read when it or a file it names changes, without a restart.
//!
//! ```yaml
//! tls_server_config:
//!   cert_file: server.crt        # relative to this file's directory
//!   key_file: server.key
//!   client_auth_type: RequireAndVerifyClientCert   # optional
//!   client_ca_file: clients.crt
//!   min_version: TLS12           # TLS12 (default) or TLS13
//! basic_auth_users:
//!   prometheus: $2y$10$...       # htpasswd -nBC 10 "" | tr -d ':\n'
//! ```
//!
//! TLS is by rustls (TLS 1.2 and 1.3, its safe suites; `cipher_suites`,
//! `curve_preferences` and `prefer_server_cipher_suites` are refused rather
//! than ignored). Whether TLS is on is settled at start; certificates,
//! keys, client CAs and users are re-read.

use std::collections::{BTreeMap, HashSet};
use std::hash::{BuildHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use base64::Engine as _;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde::Deserialize;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct File {
    tls_server_config: Option<TlsFile>,
    basic_auth_users: Option<BTreeMap<String, String>>,
    /// HTTP/2 and response headers: the listener speaks HTTP/1.1 and
    /// sends its own headers; accepted so a shared file loads.
    #[allow(dead_code)]
    http_server_config: Option<serde_norway::Value>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct TlsFile {
    cert_file: Option<String>,
    key_file: Option<String>,
    cert: Option<String>,
    key: Option<String>,
    client_auth_type: Option<String>,
    client_ca_file: Option<String>,
    min_version: Option<String>,
    max_version: Option<String>,
    cipher_suites: Option<serde_norway::Value>,
    curve_preferences: Option<serde_norway::Value>,
    prefer_server_cipher_suites: Option<serde_norway::Value>,
}

/// What a configuration file says, loaded.
struct Loaded {
    tls: Option<Arc<rustls::ServerConfig>>,
    users: BTreeMap<String, String>,
    /// The files it was read from, with their modification times.
    stamps: Vec<(PathBuf, Option<SystemTime>)>,
}

/// A web configuration, re-read when its files change.
pub struct WebConfig {
    path: PathBuf,
    tls_on: bool,
    state: Mutex<State>,
}

struct State {
    loaded: Loaded,
    /// Credentials found good since the last load, as keyed hashes: bcrypt
    /// is slow on purpose, and a scraper sends the same ones every time.
    good: HashSet<u64>,
    /// The last reload's error, said once.
    failed: Option<String>,
}

fn stamp(p: &Path) -> Option<SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

/// A path in the file, relative to the file's directory.
fn beside(config: &Path, p: &str) -> PathBuf {
    let p = Path::new(p);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        config.parent().unwrap_or(Path::new(".")).join(p)
    }
}

fn load(path: &Path) -> Result<Loaded, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let f: File = if text.trim().is_empty() {
        File::default()
    } else {
        serde_norway::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?
    };
    let mut stamps = vec![(path.to_path_buf(), stamp(path))];
    let tls = match f.tls_server_config {
        Some(t) => Some(Arc::new(tls_config(path, t, &mut stamps)?)),
        None => None,
    };
    let users = f.basic_auth_users.unwrap_or_default();
    for (user, hash) in &users {
        if !hash.starts_with("$2") {
            return Err(format!(
                "{}: basic_auth_users.{user} is not a bcrypt hash (make one with htpasswd -nBC 10 \"\" | tr -d ':\\n')",
                path.display()
            ));
        }
    }
    Ok(Loaded { tls, users, stamps })
}

fn tls_config(
    path: &Path,
    t: TlsFile,
    stamps: &mut Vec<(PathBuf, Option<SystemTime>)>,
) -> Result<rustls::ServerConfig, String> {
    let bad = |what: &str| format!("{}: tls_server_config: {what}", path.display());
    for (set, name) in [
        (t.cipher_suites.is_some(), "cipher_suites"),
        (t.curve_preferences.is_some(), "curve_preferences"),
        (t.prefer_server_cipher_suites.is_some(), "prefer_server_cipher_suites"),
    ] {
        if set {
            return Err(bad(&format!(
                "{name} is not taken (pileup offers rustls's TLS 1.2 and 1.3 suites); remove it"
            )));
        }
    }
    let certs: Vec<CertificateDer<'static>> = match (&t.cert_file, &t.cert) {
        (Some(f), None) => {
            let p = beside(path, f);
            stamps.push((p.clone(), stamp(&p)));
            CertificateDer::pem_file_iter(&p)
                .and_then(|i| i.collect())
                .map_err(|e| bad(&format!("cert_file {}: {e}", p.display())))?
        }
        (None, Some(pem)) => CertificateDer::pem_slice_iter(pem.as_bytes())
            .collect::<Result<_, _>>()
            .map_err(|e| bad(&format!("cert: {e}")))?,
        _ => return Err(bad("give cert_file (or cert), one of them")),
    };
    if certs.is_empty() {
        return Err(bad("no certificate in cert_file"));
    }
    let key: PrivateKeyDer<'static> = match (&t.key_file, &t.key) {
        (Some(f), None) => {
            let p = beside(path, f);
            stamps.push((p.clone(), stamp(&p)));
            PrivateKeyDer::from_pem_file(&p).map_err(|e| bad(&format!("key_file {}: {e}", p.display())))?
        }
        (None, Some(pem)) => PrivateKeyDer::from_pem_slice(pem.as_bytes()).map_err(|e| bad(&format!("key: {e}")))?,
        _ => return Err(bad("give key_file (or key), one of them")),
    };
    let version = |v: &Option<String>, default: u8| match v.as_deref() {
        None => Ok(default),
        Some("TLS12") => Ok(12),
        Some("TLS13") => Ok(13),
        Some(o) => Err(bad(&format!("{o} is not a version pileup serves (TLS12 or TLS13)"))),
    };
    let (min, max) = (version(&t.min_version, 12)?, version(&t.max_version, 13)?);
    let mut versions: Vec<&'static rustls::SupportedProtocolVersion> = vec![];
    if min <= 12 && max >= 12 {
        versions.push(&rustls::version::TLS12);
    }
    if max >= 13 {
        versions.push(&rustls::version::TLS13);
    }
    if versions.is_empty() {
        return Err(bad("min_version is above max_version"));
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| bad(&e.to_string()))?;
    let auth = t.client_auth_type.as_deref().unwrap_or("NoClientCert");
    let builder = match auth {
        "NoClientCert" => builder.with_no_client_auth(),
        "RequireAndVerifyClientCert" | "VerifyClientCertIfGiven" | "RequireAnyClientCert" => {
            let Some(ca) = &t.client_ca_file else {
                return Err(bad(&format!("client_auth_type {auth} needs client_ca_file")));
            };
            let p = beside(path, ca);
            stamps.push((p.clone(), stamp(&p)));
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_file_iter(&p).map_err(|e| bad(&format!("client_ca_file {}: {e}", p.display())))? {
                let c = c.map_err(|e| bad(&format!("client_ca_file {}: {e}", p.display())))?;
                roots.add(c).map_err(|e| bad(&format!("client_ca_file {}: {e}", p.display())))?;
            }
            let v = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let v = if auth == "VerifyClientCertIfGiven" { v.allow_unauthenticated() } else { v };
            builder.with_client_cert_verifier(v.build().map_err(|e| bad(&e.to_string()))?)
        }
        o => return Err(bad(&format!("client_auth_type {o} is not one pileup takes (NoClientCert, RequireAndVerifyClientCert, VerifyClientCertIfGiven)"))),
    };
    builder.with_single_cert(certs, key).map_err(|e| bad(&format!("the certificate and key: {e}")))
}

/// A bcrypt hash checked for a user who does not exist, so that the
/// answer takes as long as for one who does.
fn nobody() -> &'static str {
    static H: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    H.get_or_init(|| bcrypt::hash("no such user", 10).unwrap_or_default())
}

impl WebConfig {
    /// Load `path`; an error names the file and what is wrong in it.
    pub fn load(path: &Path) -> Result<Arc<WebConfig>, String> {
        let loaded = load(path)?;
        Ok(Arc::new(WebConfig {
            path: path.to_path_buf(),
            tls_on: loaded.tls.is_some(),
            state: Mutex::new(State { loaded, good: HashSet::new(), failed: None }),
        }))
    }

    /// Whether the listener speaks TLS (settled at start).
    pub fn tls_on(&self) -> bool {
        self.tls_on
    }

    /// Whether basic auth is asked for (as the file says now).
    pub fn has_users(&self) -> bool {
        self.refresh();
        !self.state.lock().unwrap().loaded.users.is_empty()
    }

    /// Re-read the file when it or a file it names changed; a file that no
    /// longer loads keeps the last good configuration, said once.
    fn refresh(&self) {
        let mut s = self.state.lock().unwrap();
        if s.loaded.stamps.iter().all(|(p, t)| stamp(p) == *t) {
            return;
        }
        match load(&self.path) {
            Ok(l) if l.tls.is_some() != self.tls_on => {
                let why = "TLS turned on or off takes a restart; the last configuration stays".to_string();
                if s.failed.as_deref() != Some(&why) {
                    tracing::warn!("{}: {why}", self.path.display());
                    s.failed = Some(why);
                }
            }
            Ok(l) => {
                s.loaded = l;
                s.good.clear();
                s.failed = None;
            }
            Err(e) => {
                if s.failed.as_deref() != Some(&e) {
                    tracing::warn!("{e}; the last configuration stays");
                    s.failed = Some(e);
                }
            }
        }
    }

    /// The TLS configuration for a new connection.
    pub fn tls(&self) -> Option<Arc<rustls::ServerConfig>> {
        self.refresh();
        self.state.lock().unwrap().loaded.tls.clone()
    }

    /// Does this `Authorization` header pass (always, without users)?
    pub fn authorized(&self, header: Option<&str>) -> bool {
        self.refresh();
        let found = {
            let s = self.state.lock().unwrap();
            if s.loaded.users.is_empty() {
                return true;
            }
            let Some((user, pass)) = header.and_then(basic) else { return false };
            let key = cache_key(&user, &pass);
            if s.good.contains(&key) {
                return true;
            }
            (pass, s.loaded.users.get(&user).cloned(), key)
        };
        let (pass, stored, key) = found;
        // bcrypt outside the lock: it takes tens of milliseconds.
        let ok = match &stored {
            Some(h) => bcrypt::verify(&pass, h).unwrap_or(false),
            None => {
                let _ = bcrypt::verify(&pass, nobody());
                false
            }
        };
        if ok {
            self.state.lock().unwrap().good.insert(key);
        }
        ok
    }
}

/// A keyed hash of credentials (SipHash, keyed per process).
fn cache_key(user: &str, pass: &str) -> u64 {
    static KEYS: std::sync::OnceLock<std::collections::hash_map::RandomState> = std::sync::OnceLock::new();
    let mut h = KEYS.get_or_init(Default::default).build_hasher();
    user.hash(&mut h);
    pass.hash(&mut h);
    h.finish()
}

/// `Basic base64(user:password)`.
fn basic(header: &str) -> Option<(String, String)> {
    let (scheme, value) = header.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let raw = base64::engine::general_purpose::STANDARD.decode(value.trim()).ok()?;
    let text = String::from_utf8(raw).ok()?;
    let (u, p) = text.split_once(':')?;
    Some((u.to_string(), p.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    fn header(user: &str, pass: &str) -> String {
        format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}")))
    }

    #[test]
    fn users_are_checked_by_bcrypt_and_a_changed_file_is_read_again() {
        let dir = tempfile::tempdir().unwrap();
        let hash = bcrypt::hash("s3cret", 4).unwrap();
        let p = write(dir.path(), "web.yml", &format!("basic_auth_users:\n  prom: '{hash}'\n"));
        let w = WebConfig::load(&p).unwrap();
        assert!(!w.tls_on() && w.has_users());
        assert!(w.authorized(Some(&header("prom", "s3cret"))));
        assert!(w.authorized(Some(&header("prom", "s3cret"))), "from the cache");
        assert!(!w.authorized(Some(&header("prom", "wrong"))));
        assert!(!w.authorized(Some(&header("nobody", "s3cret"))));
        assert!(!w.authorized(None));
        assert!(!w.authorized(Some("Bearer x")));
        // A new password, without a restart (a later modification time).
        std::thread::sleep(std::time::Duration::from_millis(20));
        let hash2 = bcrypt::hash("n3w", 4).unwrap();
        write(dir.path(), "web.yml", &format!("basic_auth_users:\n  prom: '{hash2}'\n"));
        let f = std::fs::File::options().append(true).open(&p).unwrap();
        f.set_modified(SystemTime::now() + std::time::Duration::from_secs(1)).unwrap();
        assert!(!w.authorized(Some(&header("prom", "s3cret"))), "the old password, cached, is forgotten");
        assert!(w.authorized(Some(&header("prom", "n3w"))));
        // A file that breaks keeps the last good configuration.
        write(dir.path(), "web.yml", "basic_auth_users: [\n");
        f.set_modified(SystemTime::now() + std::time::Duration::from_secs(2)).unwrap();
        assert!(w.authorized(Some(&header("prom", "n3w"))));
    }

    #[test]
    fn what_cannot_be_honoured_is_refused_with_the_file_named() {
        let dir = tempfile::tempdir().unwrap();
        let e = |text: &str| WebConfig::load(&write(dir.path(), "w.yml", text)).err().unwrap();
        assert!(e("basic_auth_users:\n  a: plain\n").contains("not a bcrypt hash"));
        assert!(e(
            "tls_server_config:\n  cert_file: x.crt\n  key_file: x.key\n  cipher_suites: [TLS_AES_128_GCM_SHA256]\n"
        )
        .contains("cipher_suites is not taken"));
        assert!(e("tls_server_config:\n  cert_file: missing.crt\n  key_file: missing.key\n").contains("missing.crt"));
        assert!(e("tls_server_confg: {}\n").contains("w.yml"), "a misspelt key");
        assert!(WebConfig::load(&write(dir.path(), "empty.yml", "")).is_ok_and(|w| !w.tls_on() && !w.has_users()));
    }
}
