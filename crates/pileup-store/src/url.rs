//! `s3://BUCKET[/PREFIX]`.

use crate::error::{Result, StoreError};

/// Where captures go: a bucket and a key prefix (no leading or trailing `/`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreUrl {
    pub bucket: String,
    pub prefix: String,
}

impl StoreUrl {
    pub fn parse(s: &str) -> Result<StoreUrl> {
        let rest = s.strip_prefix("s3://").ok_or_else(|| StoreError::BadUrl(s.into()))?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        // S3's bucket names: 3-63 of lower-case letters, digits, `.` and `-`.
        let ok = (3..=63).contains(&bucket.len())
            && bucket.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-');
        if !ok {
            return Err(StoreError::BadUrl(s.into()));
        }
        Ok(StoreUrl { bucket: bucket.into(), prefix: prefix.trim_matches('/').into() })
    }

    /// The key of `name` under the prefix.
    pub fn key(&self, name: &str) -> String {
        if self.prefix.is_empty() {
            name.into()
        } else {
            format!("{}/{name}", self.prefix)
        }
    }

    /// The URL of an object's key.
    pub fn url_of(&self, key: &str) -> String {
        format!("s3://{}/{key}", self.bucket)
    }
}

impl std::fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.prefix.is_empty() {
            write!(f, "s3://{}", self.bucket)
        } else {
            write!(f, "s3://{}/{}", self.bucket, self.prefix)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let u = StoreUrl::parse("s3://captures/fleet/db/").unwrap();
        assert_eq!((u.bucket.as_str(), u.prefix.as_str()), ("captures", "fleet/db"));
        assert_eq!(u.key("h/x.tar.zst"), "fleet/db/h/x.tar.zst");
        assert_eq!(u.url_of("fleet/db/h/x.tar.zst"), "s3://captures/fleet/db/h/x.tar.zst");
        assert_eq!(u.to_string(), "s3://captures/fleet/db");
        let u = StoreUrl::parse("s3://captures").unwrap();
        assert_eq!(u.key("x"), "x");
        for bad in ["captures", "s3://", "s3://Caps/x", "http://x/y", "s3://ab"] {
            let e = StoreUrl::parse(bad).unwrap_err().to_string();
            assert!(e.contains("give s3://BUCKET[/PREFIX]"), "{e}");
        }
    }
}
