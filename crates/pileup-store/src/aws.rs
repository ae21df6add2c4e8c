//! Credentials, region and endpoint the way the AWS CLI finds them:
//! `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` / `AWS_SESSION_TOKEN`
//! first; then the profile (`AWS_PROFILE`, else `default`) in the shared
//! credentials file (`AWS_SHARED_CREDENTIALS_FILE`, else
//! `~/.aws/credentials`) and the config file (`AWS_CONFIG_FILE`, else
//! `~/.aws/config`, where it is `[profile NAME]`). The region is
//! `AWS_REGION`, `AWS_DEFAULT_REGION`, the profile's `region`, else
//! us-east-1; the endpoint `AWS_ENDPOINT_URL_S3`, `AWS_ENDPOINT_URL`, else
//! the profile's `endpoint_url` (none: AWS itself).
//!
//! object_store reads only the environment, so the two files are read
//! here. They are INI files of `key = value` lines under `[section]`
//! headers, `#` and `;` comments; a key with an indented block below it
//! (`s3 =` and its settings) is skipped as a whole. No INI crate keeps
//! that rule, and it is a few lines.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::error::{Result, StoreError};

/// What the store is reached with. `Debug` hides the secrets.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct AwsSettings {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: Option<String>,
    pub region: String,
    pub endpoint: Option<String>,
    /// Where the credentials came from, for messages: "environment" or
    /// "profile NAME".
    pub source: String,
}

impl std::fmt::Debug for AwsSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsSettings")
            .field("access_key_id", &self.access_key_id)
            .field("region", &self.region)
            .field("endpoint", &self.endpoint)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

type Sections = BTreeMap<String, BTreeMap<String, String>>;

/// The sections of an AWS INI file.
pub fn parse_ini(text: &str) -> Sections {
    let mut out = Sections::new();
    let mut section: Option<String> = None;
    let mut in_block = false;
    for line in text.lines() {
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') || t.starts_with(';') {
            continue;
        }
        let indented = line.starts_with(' ') || line.starts_with('\t');
        if in_block && indented {
            continue;
        }
        in_block = false;
        if let Some(name) = t.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
            section = Some(name.trim().to_string());
            out.entry(name.trim().to_string()).or_default();
            continue;
        }
        let (Some(s), Some((k, v))) = (&section, t.split_once('=')) else { continue };
        let (k, v) = (k.trim(), v.trim());
        if v.is_empty() {
            // `s3 =` followed by its indented settings.
            in_block = true;
            continue;
        }
        out.entry(s.clone()).or_default().insert(k.to_ascii_lowercase(), v.to_string());
    }
    out
}

/// Resolve the settings from an environment lookup and the files it names
/// (or under `home`).
pub fn resolve(env: &dyn Fn(&str) -> Option<String>, home: Option<&Path>) -> Result<AwsSettings> {
    let nonempty = |k: &str| env(k).filter(|v| !v.is_empty());
    let explicit_profile = nonempty("AWS_PROFILE");
    let profile = explicit_profile.clone().unwrap_or_else(|| "default".into());
    let file = |var: &str, name: &str| -> Option<PathBuf> {
        nonempty(var).map(PathBuf::from).or_else(|| home.map(|h| h.join(".aws").join(name)))
    };
    let read = |p: Option<PathBuf>| -> Result<Sections> {
        let Some(p) = p else { return Ok(Sections::new()) };
        match std::fs::read_to_string(&p) {
            Ok(t) => Ok(parse_ini(&t)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Sections::new()),
            Err(e) => Err(StoreError::Config { file: p.display().to_string(), why: e.to_string() }),
        }
    };
    let creds = read(file("AWS_SHARED_CREDENTIALS_FILE", "credentials"))?;
    let config = read(file("AWS_CONFIG_FILE", "config"))?;
    let in_creds = creds.get(&profile);
    let config_name = if profile == "default" { "default".to_string() } else { format!("profile {profile}") };
    let in_config = config.get(&config_name);
    if explicit_profile.is_some() && in_creds.is_none() && in_config.is_none() {
        return Err(StoreError::NoProfile(profile));
    }
    let setting = |k: &str| in_creds.and_then(|s| s.get(k)).or_else(|| in_config.and_then(|s| s.get(k))).cloned();
    let (access_key_id, secret_access_key, session_token, source) =
        match (nonempty("AWS_ACCESS_KEY_ID"), nonempty("AWS_SECRET_ACCESS_KEY")) {
            (Some(id), Some(secret)) => (id, secret, nonempty("AWS_SESSION_TOKEN"), "environment".to_string()),
            _ => match (setting("aws_access_key_id"), setting("aws_secret_access_key")) {
                (Some(id), Some(secret)) => (id, secret, setting("aws_session_token"), format!("profile {profile}")),
                _ => return Err(StoreError::NoCredentials),
            },
        };
    let region = nonempty("AWS_REGION")
        .or_else(|| nonempty("AWS_DEFAULT_REGION"))
        .or_else(|| in_config.and_then(|s| s.get("region")).cloned())
        .unwrap_or_else(|| "us-east-1".into());
    let endpoint = nonempty("AWS_ENDPOINT_URL_S3")
        .or_else(|| nonempty("AWS_ENDPOINT_URL"))
        .or_else(|| in_config.and_then(|s| s.get("endpoint_url")).cloned());
    Ok(AwsSettings { access_key_id, secret_access_key, session_token, region, endpoint, source })
}

/// [`resolve`] from this process's environment and `$HOME`.
pub fn from_env() -> Result<AwsSettings> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    resolve(&|k| std::env::var(k).ok(), home.as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
    }

    fn home(credentials: &str, config: &str) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join(".aws")).unwrap();
        std::fs::write(d.path().join(".aws/credentials"), credentials).unwrap();
        std::fs::write(d.path().join(".aws/config"), config).unwrap();
        d
    }

    const CREDS: &str = "[default]\naws_access_key_id = AKDEFAULT\naws_secret_access_key = s1\n\n# ops\n[ops]\naws_access_key_id=AKOPS\naws_secret_access_key=s2\naws_session_token = tok\n";
    const CONFIG: &str = "[default]\nregion = eu-west-1\n[profile ops]\nregion = eu-north-1\ns3 =\n  addressing_style = path\n  max_concurrent_requests = 4\nendpoint_url = http://127.0.0.1:7070\n";

    #[test]
    fn the_environment_comes_first_then_the_profile() {
        let h = home(CREDS, CONFIG);
        let s =
            resolve(&env(&[("AWS_ACCESS_KEY_ID", "AKENV"), ("AWS_SECRET_ACCESS_KEY", "x")]), Some(h.path())).unwrap();
        assert_eq!(
            (s.access_key_id.as_str(), s.region.as_str(), s.source.as_str()),
            ("AKENV", "eu-west-1", "environment")
        );
        assert_eq!(s.endpoint, None);
        let s = resolve(&env(&[]), Some(h.path())).unwrap();
        assert_eq!((s.access_key_id.as_str(), s.secret_access_key.as_str()), ("AKDEFAULT", "s1"));
        let s = resolve(&env(&[("AWS_PROFILE", "ops")]), Some(h.path())).unwrap();
        assert_eq!(s.access_key_id, "AKOPS");
        assert_eq!(s.session_token.as_deref(), Some("tok"));
        assert_eq!(s.region, "eu-north-1");
        assert_eq!(s.endpoint.as_deref(), Some("http://127.0.0.1:7070"), "the setting after the s3 block");
        assert_eq!(s.source, "profile ops");
        let s = resolve(
            &env(&[("AWS_PROFILE", "ops"), ("AWS_REGION", "ap-south-1"), ("AWS_ENDPOINT_URL", "http://e")]),
            Some(h.path()),
        )
        .unwrap();
        assert_eq!((s.region.as_str(), s.endpoint.as_deref()), ("ap-south-1", Some("http://e")));
        assert!(!format!("{s:?}").contains("s2"), "Debug hides the secret");
    }

    #[test]
    fn missing_credentials_and_profiles_are_named() {
        let h = home("", "");
        let e = resolve(&env(&[]), Some(h.path())).unwrap_err().to_string();
        assert!(e.starts_with("no AWS credentials: set AWS_ACCESS_KEY_ID"), "{e}");
        let e = resolve(&env(&[("AWS_PROFILE", "nope")]), Some(h.path())).unwrap_err().to_string();
        assert_eq!(e, "the AWS profile nope is in neither ~/.aws/credentials nor ~/.aws/config");
        let e = resolve(&env(&[]), None).unwrap_err().to_string();
        assert!(e.starts_with("no AWS credentials"), "{e}");
    }
}
