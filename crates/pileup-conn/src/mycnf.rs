//! Reading MySQL option files (`my.cnf`).
//!
//! Written by hand because no maintained crate reads the MySQL dialect of INI:
//! `!include` / `!includedir`, bare keys (`skip-ssl`), `-` and `_` being the same
//! in key names, quoted values with escapes, and "last one wins" across files.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// Options gathered from the groups we read, later files overriding earlier ones.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct OptionFile {
    /// key (normalised: lower case, `-` turned into `_`) → value (`None` for bare keys)
    pub values: BTreeMap<String, Option<String>>,
    /// Files that were read, in order (for `--print-defaults`-style diagnostics).
    pub files_read: Vec<PathBuf>,
    /// Default files that exist but could not be read, and why.
    pub files_skipped: Vec<(PathBuf, String)>,
}

impl OptionFile {
    pub fn get(&self, key: &str) -> Option<&str> {
        self.values.get(&normalise_key(key)).and_then(|v| v.as_deref())
    }

    /// Read `path` and merge the values of `groups` into `self`.
    /// A missing file is not an error (MySQL clients skip them silently);
    /// an unreadable one is.
    pub fn merge_file(&mut self, path: &Path, groups: &[&str]) -> std::io::Result<()> {
        self.merge_file_depth(path, groups, 0)
    }

    fn merge_file_depth(&mut self, path: &Path, groups: &[&str], depth: usize) -> std::io::Result<()> {
        if depth > 10 {
            return Ok(()); // include loop; MySQL stops at a similar depth
        }
        let text = match fs::read(path) {
            Ok(b) => String::from_utf8_lossy(&b).into_owned(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(std::io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
        };
        self.files_read.push(path.to_path_buf());
        let mut in_group = false;
        for raw in text.lines() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
                continue;
            }
            if let Some(rest) = line.strip_prefix("!includedir") {
                let dir = Path::new(rest.trim());
                if let Ok(rd) = fs::read_dir(dir) {
                    let mut names: Vec<PathBuf> = rd
                        .filter_map(|e| e.ok().map(|e| e.path()))
                        .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("cnf")))
                        .collect();
                    names.sort();
                    for p in names {
                        self.merge_file_depth(&p, groups, depth + 1)?;
                    }
                }
                continue;
            }
            if let Some(rest) = line.strip_prefix("!include") {
                self.merge_file_depth(Path::new(rest.trim()), groups, depth + 1)?;
                continue;
            }
            if line.starts_with('[') {
                let name = line.trim_start_matches('[').split(']').next().unwrap_or("").trim();
                in_group = groups.iter().any(|g| g.eq_ignore_ascii_case(name));
                continue;
            }
            if !in_group {
                continue;
            }
            let (key, value) = match line.split_once('=') {
                Some((k, v)) => (k.trim(), Some(parse_value(v.trim()))),
                None => (line, None),
            };
            self.values.insert(normalise_key(key), value);
        }
        Ok(())
    }
}

fn normalise_key(k: &str) -> String {
    k.trim().to_ascii_lowercase().replace('-', "_")
}

/// Values may be quoted ('…' or "…") with backslash escapes; unquoted values end
/// at an unescaped `#` comment.
fn parse_value(v: &str) -> String {
    let mut chars = v.chars().peekable();
    let quote = match chars.peek() {
        Some('\'') | Some('"') => chars.next(),
        _ => None,
    };
    let mut out = String::new();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some('r') => out.push('\r'),
                Some('b') => out.push('\u{8}'),
                Some('s') => out.push(' '),
                Some('\\') => out.push('\\'),
                Some(o) => {
                    out.push('\\');
                    out.push(o)
                }
                None => out.push('\\'),
            },
            c if Some(c) == quote => break,
            '#' if quote.is_none() => break,
            c => out.push(c),
        }
    }
    if quote.is_none() {
        out.truncate(out.trim_end().len());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn write(dir: &Path, name: &str, body: &str) -> PathBuf {
        let p = dir.join(name);
        fs::File::create(&p).unwrap().write_all(body.as_bytes()).unwrap();
        p
    }

    #[test]
    fn groups_quotes_comments_and_includes() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().to_path_buf();
        let inc = d.join("conf.d");
        fs::create_dir(&inc).unwrap();
        write(&inc, "50-client.cnf", "[client]\nport = 3310\n");
        write(&inc, "ignored.txt", "[client]\nport = 1\n");
        let main = write(
            &d,
            "my.cnf",
            &format!(
                "# comment\n[mysqld]\nport=9999\n[client]\nuser = app # trailing\npassword=\"s3 #cret\\\\x\"\nskip-ssl\nsocket='/tmp/my sock'\n!includedir {}\n[Pileup]\nhost=db1\n",
                inc.display()
            ),
        );
        let mut of = OptionFile::default();
        of.merge_file(&main, &["client", "pileup"]).unwrap();
        assert_eq!(of.get("user"), Some("app"));
        assert_eq!(of.get("password"), Some("s3 #cret\\x"));
        assert_eq!(of.get("socket"), Some("/tmp/my sock"));
        assert_eq!(of.get("port"), Some("3310"), "included file overrides, mysqld group ignored");
        assert_eq!(of.get("host"), Some("db1"));
        assert!(of.values.contains_key("skip_ssl"));
        assert_eq!(of.get("skip-ssl"), None, "bare key has no value");
        assert_eq!(of.files_read.len(), 2);
    }

    #[test]
    fn missing_file_is_skipped() {
        let mut of = OptionFile::default();
        of.merge_file(Path::new("/nonexistent/my.cnf"), &["client"]).unwrap();
        assert!(of.values.is_empty());
        assert!(of.files_read.is_empty());
    }
}
