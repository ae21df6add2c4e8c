//! The store itself, through object_store's S3 client, used from plain
//! threads: each call runs on a small Tokio runtime of its own.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::multipart::MultipartStore;
use object_store::path::Path as Key;
use object_store::{
    Attribute, AttributeValue, Attributes, ClientOptions, GetOptions, ObjectStore, ObjectStoreExt, PutMultipartOptions,
    PutOptions, PutPayload, RetryConfig,
};

use crate::aws::AwsSettings;
use crate::error::{io, Result, StoreError};
use crate::spool::{Multipart, Queued, Spool};
use crate::url::StoreUrl;

/// Archives up to this size go in one request; larger ones in parts of
/// this size (S3's smallest part is 5 MiB), each recorded as it lands.
pub const PART_SIZE: u64 = 8 << 20;

/// A capture in the store.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RemoteCapture {
    pub url: String,
    pub key: String,
    pub size: u64,
    /// When the capture began (Unix time), from its metadata.
    pub unix: Option<f64>,
    pub host: Option<String>,
    pub class: Option<String>,
    pub verdict: Option<String>,
    pub sha256: Option<String>,
}

pub struct Remote {
    url: StoreUrl,
    s3: Arc<AmazonS3>,
    rt: tokio::runtime::Runtime,
}

/// Metadata values travel as HTTP headers: printable ASCII, the rest
/// (and `%`) percent-encoded.
fn encode(v: &str) -> String {
    let mut out = String::new();
    for b in v.bytes() {
        if (0x20..0x7f).contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The key an object was stored under, as it was given: object_store
/// percent-encodes a key's `%` (and bytes no key should hold) when it
/// makes a location, and lists locations; pileup's keys are the given
/// ones (a host's `%3A` stays `%3A`, not `%253A`).
fn stored_key(location: &Key) -> String {
    decode(location.as_ref())
}

fn decode(v: &str) -> String {
    let b = v.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok().and_then(|h| u8::from_str_radix(h, 16).ok());
            if let Some(x) = hex {
                out.push(x);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl Remote {
    /// A client for `url`. Each request is bounded (10 s to connect, 60 s
    /// in all, two retries), so a store that is down fails fast and the
    /// shipper tries again later.
    pub fn open(url: &StoreUrl, aws: &AwsSettings) -> Result<Remote> {
        let mut b = AmazonS3Builder::new()
            .with_bucket_name(&url.bucket)
            .with_region(&aws.region)
            .with_access_key_id(&aws.access_key_id)
            .with_secret_access_key(&aws.secret_access_key)
            .with_client_options(
                ClientOptions::new()
                    .with_connect_timeout(Duration::from_secs(10))
                    .with_timeout(Duration::from_secs(60)),
            )
            .with_retry(RetryConfig { max_retries: 2, retry_timeout: Duration::from_secs(20), ..Default::default() });
        if let Some(t) = &aws.session_token {
            b = b.with_token(t);
        }
        if let Some(e) = &aws.endpoint {
            // A self-hosted store (MinIO, VersityGW, Ceph) at its own
            // address: path-style requests, plain HTTP if it says so.
            b = b.with_endpoint(e).with_allow_http(e.starts_with("http://")).with_virtual_hosted_style_request(false);
        }
        let s3 = b.build().map_err(|e| StoreError::Store { url: url.to_string(), why: one_line(&e) })?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| StoreError::Store { url: url.to_string(), why: e.to_string() })?;
        Ok(Remote { url: url.clone(), s3: Arc::new(s3), rt })
    }

    fn err(&self, e: object_store::Error) -> StoreError {
        let why = summarize(&one_line(&e));
        let denied =
            matches!(e, object_store::Error::PermissionDenied { .. } | object_store::Error::Unauthenticated { .. })
                || ["InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "403 Forbidden"]
                    .iter()
                    .any(|s| why.contains(s));
        if denied {
            StoreError::Denied { url: self.url.to_string(), why }
        } else if why.contains("Connection refused") || why.contains("(Connect)") {
            let why = format!("{why}; is the store up, and its endpoint (AWS_ENDPOINT_URL) right?");
            StoreError::Store { url: self.url.to_string(), why }
        } else {
            StoreError::Store { url: self.url.to_string(), why }
        }
    }

    fn attributes(q: &Queued) -> Attributes {
        let mut a = Attributes::new();
        let kind = if q.ext == "parquet" { "application/vnd.apache.parquet" } else { "application/zstd" };
        a.insert(Attribute::ContentType, AttributeValue::from(kind));
        for (k, v) in &q.metadata {
            // S3 keeps at most 2 KB of user metadata: long verdicts are cut.
            let v: String = v.chars().take(1000).collect();
            a.insert(Attribute::Metadata(k.clone().into()), AttributeValue::from(encode(&v)));
        }
        a
    }

    /// One request of a queued capture's upload: the whole object when it
    /// is small; else starting a multipart upload, one part, or completing
    /// it, each step recorded in the queue before the next, so an upload
    /// stopped between steps (a restart, the store going down) goes on
    /// from there. The object's URL once it is in the store.
    pub fn upload_step(&self, spool: &Spool, q: &mut Queued) -> Result<Option<String>> {
        let archive = spool.archive(q);
        let key = Key::from(q.key.as_str());
        if q.size <= PART_SIZE && q.upload.is_none() {
            let bytes = std::fs::read(&archive).map_err(io(&archive))?;
            let opts = PutOptions { attributes: Self::attributes(q), ..Default::default() };
            self.rt.block_on(self.s3.put_opts(&key, PutPayload::from(bytes), opts)).map_err(|e| self.err(e))?;
            return Ok(Some(self.url.url_of(&q.key)));
        }
        let Some(u) = q.upload.clone() else {
            let opts = PutMultipartOptions { attributes: Self::attributes(q), ..Default::default() };
            let id = self.rt.block_on(self.s3.create_multipart_opts(&key, opts)).map_err(|e| self.err(e))?;
            q.upload = Some(Multipart { id, part_size: PART_SIZE, parts: vec![] });
            spool.save(q)?;
            return Ok(None);
        };
        let done = u.parts.len() as u64;
        if done < q.size.div_ceil(u.part_size) {
            use std::io::{Read, Seek};
            let len = u.part_size.min(q.size - done * u.part_size) as usize;
            let mut buf = vec![0u8; len];
            let mut file = std::fs::File::open(&archive).map_err(io(&archive))?;
            file.seek(std::io::SeekFrom::Start(done * u.part_size))
                .and_then(|_| file.read_exact(&mut buf))
                .map_err(io(&archive))?;
            let part = self
                .rt
                .block_on(self.s3.put_part(&key, &u.id, done as usize, PutPayload::from(buf)))
                .map_err(|e| self.err(e))?;
            q.upload.as_mut().unwrap().parts.push(part.content_id);
            spool.save(q)?;
            return Ok(None);
        }
        let ids = u.parts.iter().map(|c| object_store::multipart::PartId { content_id: c.clone() }).collect();
        match self.rt.block_on(self.s3.complete_multipart(&key, &u.id, ids)) {
            Ok(_) => Ok(Some(self.url.url_of(&q.key))),
            Err(e @ object_store::Error::NotFound { .. }) => {
                // The store forgot the upload (expired, aborted): start over.
                q.upload = None;
                spool.save(q)?;
                Err(self.err(e))
            }
            Err(e) => Err(self.err(e)),
        }
    }

    /// The captures under the prefix, newest first, with their metadata.
    pub fn list(&self) -> Result<Vec<RemoteCapture>> {
        let prefix = (!self.url.prefix.is_empty()).then(|| Key::from(self.url.prefix.as_str()));
        let metas: Vec<_> = self
            .rt
            .block_on(self.s3.list(prefix.as_ref()).collect::<Vec<_>>())
            .into_iter()
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| self.err(e))?;
        let mut out = vec![];
        for m in metas {
            let key = stored_key(&m.location);
            if !key.ends_with(".tar.zst") {
                continue;
            }
            let meta = self.metadata(&key)?;
            out.push(RemoteCapture {
                url: self.url.url_of(&key),
                size: m.size,
                unix: meta.get("unix").and_then(|u| u.parse().ok()),
                host: meta.get("host").cloned(),
                class: meta.get("class").cloned(),
                verdict: meta.get("verdict").cloned(),
                sha256: meta.get("sha256").cloned(),
                key,
            });
        }
        out.sort_by(|a, b| b.unix.unwrap_or(0.0).total_cmp(&a.unix.unwrap_or(0.0)).then_with(|| a.key.cmp(&b.key)));
        Ok(out)
    }

    /// The keys under `prefix` (a key prefix under the bucket, ending in
    /// `/` for a directory) with their sizes, in key order.
    pub fn list_keys(&self, prefix: &str) -> Result<Vec<(String, u64)>> {
        let p = (!prefix.is_empty()).then(|| Key::from(prefix));
        let metas: Vec<_> = self
            .rt
            .block_on(self.s3.list(p.as_ref()).collect::<Vec<_>>())
            .into_iter()
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| self.err(e))?;
        let mut out: Vec<(String, u64)> = metas.into_iter().map(|m| (stored_key(&m.location), m.size)).collect();
        out.sort();
        Ok(out)
    }

    /// The objects at `keys`, fetched `parallel` at a time, each handed to
    /// `take` (on this thread) as it arrives, until `take` says false; the
    /// first error stops.
    pub fn get_each(
        &self,
        keys: &[String],
        parallel: usize,
        mut take: impl FnMut(&str, bytes::Bytes) -> bool,
    ) -> Result<()> {
        self.rt.block_on(async {
            let mut s = futures::stream::iter(keys.iter().map(|k| async move {
                let r = async { self.s3.get(&Key::from(k.as_str())).await?.bytes().await }.await;
                (k, r)
            }))
            .buffer_unordered(parallel.max(1));
            while let Some((k, r)) = s.next().await {
                if !take(k, r.map_err(|e| self.err(e))?) {
                    break;
                }
            }
            Ok(())
        })
    }

    /// Store `bytes` at `key` (replacing what is there).
    pub fn put(&self, key: &str, bytes: Vec<u8>) -> Result<()> {
        self.rt.block_on(self.s3.put(&Key::from(key), PutPayload::from(bytes))).map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Delete the objects whose keys start with `prefix`, but `keep`, and
    /// none when an object in the directory of `unless` starts with it and
    /// `holds` says so of its key: how many. Listed by directory (a store
    /// lists by directory, not by any prefix), the keys as they were given
    /// ([`stored_key`]).
    pub fn delete_prefix(
        &self,
        prefix: &str,
        unless: Option<&str>,
        keep: &str,
        holds: &dyn Fn(&str) -> Result<bool>,
    ) -> Result<usize> {
        let dir = |k: &str| k[..k.rfind('/').map_or(0, |i| i + 1)].to_string();
        if let Some(u) = unless {
            let d = dir(u);
            let p = (!d.is_empty()).then(|| Key::from(d.as_str()));
            let listed = self.rt.block_on(self.s3.list_with_delimiter(p.as_ref())).map_err(|e| self.err(e))?;
            for m in &listed.objects {
                let key = stored_key(&m.location);
                if key.starts_with(u) && holds(&key)? {
                    return Ok(0);
                }
            }
        }
        let mut n = 0;
        for (key, _) in self.list_keys(&dir(prefix))? {
            if key.starts_with(prefix) && key != keep {
                self.delete(&key)?;
                n += 1;
            }
        }
        Ok(n)
    }

    /// Delete the object at `key`.
    pub fn delete(&self, key: &str) -> Result<()> {
        self.rt.block_on(self.s3.delete(&Key::from(key))).map_err(|e| self.err(e))
    }

    /// The URL of `key` in this store.
    pub fn url_of(&self, key: &str) -> String {
        self.url.url_of(key)
    }

    fn metadata(&self, key: &str) -> Result<BTreeMap<String, String>> {
        let opts = GetOptions { head: true, ..Default::default() };
        let r = self.rt.block_on(self.s3.get_opts(&Key::from(key), opts)).map_err(|e| self.err(e))?;
        Ok(r.attributes
            .iter()
            .filter_map(|(k, v)| match k {
                Attribute::Metadata(k) => Some((k.to_string(), decode(v.as_ref()))),
                _ => None,
            })
            .collect())
    }

    /// Download the capture at `key` (a key under the bucket, or an
    /// `s3://` URL of this bucket), check its SHA-256 against its metadata
    /// and unpack it under `dest`: the capture directory.
    pub fn fetch(&self, key: &str, dest: &Path) -> Result<PathBuf> {
        let key = key.strip_prefix(&format!("s3://{}/", self.url.bucket)).unwrap_or(key).to_string();
        let meta = self.metadata(&key)?;
        let bytes = self
            .rt
            .block_on(async { self.s3.get(&Key::from(key.as_str())).await?.bytes().await })
            .map_err(|e| self.err(e))?;
        pileup_files::create_private_dir(dest)?;
        let name = key.rsplit('/').next().unwrap_or("capture.tar.zst");
        let archive = dest.join(name);
        pileup_files::write_private_bytes(&archive, &bytes)?;
        let dir = crate::pack::unpack(&archive, meta.get("sha256").map(String::as_str), dest);
        let _ = std::fs::remove_file(&archive);
        dir
    }
}

/// What a store's answer says, short: S3's error code and message when it
/// sent them (not the request it echoes back), else the client's message
/// cut to a line.
fn summarize(why: &str) -> String {
    let tag = |t: &str| {
        let open = format!("<{t}>");
        let start = why.find(&open)? + open.len();
        let end = why[start..].find(&format!("</{t}>"))? + start;
        Some(why[start..end].to_string())
    };
    let status =
        ["403 Forbidden", "404 Not Found", "400 Bad Request", "500 Internal Server Error", "503 Service Unavailable"]
            .into_iter()
            .find(|s| why.contains(s));
    if let Some(code) = tag("Code") {
        let msg = tag("Message").map(|m| format!(": {m}")).unwrap_or_default();
        return match status {
            Some(s) => format!("{s}, {code}{msg}"),
            None => format!("{code}{msg}"),
        };
    }
    let why = why.strip_prefix("Generic S3 error: ").unwrap_or(why);
    if why.chars().count() > 300 {
        format!("{}…", why.chars().take(300).collect::<String>())
    } else {
        why.to_string()
    }
}

/// An object_store error and its causes on one line (the store's answer
/// can hold line breaks).
fn one_line(e: &object_store::Error) -> String {
    pileup_conn::error_text(e).split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_s_refusal_is_told_by_its_code_and_message() {
        let why = "Generic S3 error: Error performing list request: Error performing GET http://h/c?list-type=2 in 1ms - Server returned non-2xx status code: 403 Forbidden: <?xml version=\"1.0\"?> <Error><Code>SignatureDoesNotMatch</Code><Message>The request signature we calculated does not match.</Message><StringToSign>AWS4</StringToSign></Error>";
        assert_eq!(
            summarize(why),
            "403 Forbidden, SignatureDoesNotMatch: The request signature we calculated does not match."
        );
        assert_eq!(summarize("Generic S3 error: connection refused"), "connection refused");
        assert!(summarize(&"x".repeat(1000)).chars().count() <= 301);
    }

    #[test]
    fn metadata_values_round_trip_through_headers() {
        for v in ["flushing storm: checkpoint age at 100%", "row lock — `UPDATE t`\nnext", "", "100%"] {
            let e = encode(v);
            assert!(e.bytes().all(|b| (0x20..0x7f).contains(&b)), "{e}");
            assert_eq!(decode(&e), v);
        }
    }
}
