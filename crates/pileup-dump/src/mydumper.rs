//! mydumper 0.10.1's directory layout, written (`dump --layout mydumper`,
//! which myloader 0.10.1 loads as it is) and read (`load` of a directory
//! mydumper wrote), so a user can switch either way.
//!
//! Layout: `metadata` (written last; myloader requires it),
//! `DB-schema-create.sql`, `DB.TABLE-schema.sql`, data in `DB.TABLE.sql`
//! or `DB.TABLE.NNNNN.sql` (chunks), views as a placeholder table
//! `DB.VIEW-schema.sql` and `DB.VIEW-schema-view.sql`, triggers in
//! `DB.TABLE-schema-triggers.sql`, routines and events in
//! `DB-schema-post.sql`; `.gz` after any of them when compressed. Data
//! files hold multi-row INSERTs of at most about 1 MB, each row on its own
//! line, every statement ending with `;` at a line end (how myloader splits
//! them).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::error::{bail, Ctx, Result};
use mysql::prelude::Queryable;

use crate::files::{self, Compress};
use crate::manifest::{quote, Kind, Manifest, Object, Table};

/// What mydumper writes at the top of every data and schema file.
pub const HEADER: &str =
    "/*!40101 SET NAMES binary*/;\n/*!40014 SET FOREIGN_KEY_CHECKS=0*/;\n/*!40103 SET TIME_ZONE='+00:00' */;\n";

/// Statements close once they pass this many bytes (mydumper's default
/// `--statement-size`).
pub const STATEMENT_SIZE: usize = 1_000_000;

/// The data file of a chunk: `DB.TABLE.sql` for a table in one chunk.
pub fn data_file(t: &Table, seq: Option<usize>, c: Compress) -> String {
    match seq {
        None => format!("{}.{}.sql{}", t.db, t.name, c.suffix()),
        Some(n) => format!("{}.{}.{n:05}.sql{}", t.db, t.name, c.suffix()),
    }
}

/// The INSERT framing of one data file: rows become tuples of statements
/// of at most [`STATEMENT_SIZE`] bytes.
pub struct Inserts {
    prefix: Vec<u8>,
    open: bool,
    len: usize,
}

impl Inserts {
    pub fn new(t: &Table) -> Inserts {
        let cols = t.columns.iter().map(|c| quote(c)).collect::<Vec<_>>().join(",");
        Inserts {
            prefix: format!("INSERT INTO {} ({cols}) VALUES\n", quote(&t.name)).into_bytes(),
            open: false,
            len: 0,
        }
    }

    pub fn row(&mut self, buf: &mut Vec<u8>, values: &[mysql::Value]) {
        let start = buf.len();
        if self.open {
            buf.extend_from_slice(b",\n");
        } else {
            buf.extend_from_slice(&self.prefix);
            self.open = true;
            self.len = 0;
        }
        crate::sql::tuple(buf, values);
        self.len += buf.len() - start;
        if self.len >= STATEMENT_SIZE {
            buf.extend_from_slice(b";\n");
            self.open = false;
        }
    }

    /// What ends the last statement, if one is open.
    pub fn end(&self) -> &'static [u8] {
        if self.open {
            b";\n"
        } else {
            b""
        }
    }
}

fn write(dir: &Path, name: &str, text: &str, c: Compress) -> Result<()> {
    pileup_files::write_private(&dir.join(format!("{name}{}", c.suffix())), |out| -> Result<()> {
        let mut e = files::Encoder::new(out, c)?;
        e.write_all(text.as_bytes())?;
        e.finish()?;
        Ok(())
    })
}

/// An object's statement wrapped in the session settings it needs, with
/// inner line ends kept from ending it (myloader splits at `;` + newline).
fn wrapped(x: &Object) -> String {
    let body = x.create.replace(";\n", "; \n");
    let mut s = String::new();
    if let (Some(cs), Some(cc)) = (&x.character_set_client, &x.collation_connection) {
        s.push_str(&format!(
            "SET @PREV_CHARACTER_SET_CLIENT=@@CHARACTER_SET_CLIENT;\nSET @PREV_COLLATION_CONNECTION=@@COLLATION_CONNECTION;\n\
             SET character_set_client = {cs};\nSET collation_connection = {cc};\n"
        ));
    }
    if let Some(m) = &x.sql_mode {
        s.push_str(&format!("SET @PREV_SQL_MODE=@@SQL_MODE;\nSET SESSION sql_mode = '{}';\n", m.replace('\'', "''")));
    }
    if let Some(tz) = &x.time_zone {
        s.push_str(&format!(
            "SET @PREV_TIME_ZONE=@@TIME_ZONE;\nSET SESSION time_zone = '{}';\n",
            tz.replace('\'', "''")
        ));
    }
    s.push_str(&body);
    s.push_str(";\n");
    if x.time_zone.is_some() {
        s.push_str("SET SESSION time_zone = @PREV_TIME_ZONE;\n");
    }
    if x.sql_mode.is_some() {
        s.push_str("SET SESSION sql_mode = @PREV_SQL_MODE;\n");
    }
    if x.character_set_client.is_some() {
        s.push_str("SET character_set_client = @PREV_CHARACTER_SET_CLIENT;\nSET collation_connection = @PREV_COLLATION_CONNECTION;\n");
    }
    s
}

/// Every schema file, then `metadata` last. `view_columns` names each
/// view's columns for its placeholder table.
pub fn write_schema(
    dir: &Path,
    m: &Manifest,
    view_columns: &BTreeMap<(String, String), Vec<String>>,
    c: Compress,
) -> Result<()> {
    for d in &m.databases {
        write(
            dir,
            &format!("{}-schema-create.sql", d.name),
            &format!(
                "CREATE DATABASE {} /*!40100 DEFAULT CHARACTER SET {} COLLATE {} */;\n",
                quote(&d.name),
                d.charset,
                d.collation
            ),
            c,
        )?;
    }
    for t in &m.tables {
        write(dir, &format!("{}.{}-schema.sql", t.db, t.name), &format!("{HEADER}\n{};\n", t.create), c)?;
    }
    let mut triggers: BTreeMap<(String, String), String> = BTreeMap::new();
    let mut post: BTreeMap<String, String> = BTreeMap::new();
    for x in &m.objects {
        match x.kind {
            Kind::View => {
                let cols = view_columns.get(&(x.db.clone(), x.name.clone())).cloned().unwrap_or_default();
                let cols = cols.iter().map(|c| format!("{} int", quote(c))).collect::<Vec<_>>().join(",\n");
                write(
                    dir,
                    &format!("{}.{}-schema.sql", x.db, x.name),
                    &format!(
                        "/*!40101 SET NAMES binary*/;\nCREATE TABLE {}(\n{cols}\n)ENGINE=MyISAM;\n",
                        quote(&x.name)
                    ),
                    c,
                )?;
                write(
                    dir,
                    &format!("{}.{}-schema-view.sql", x.db, x.name),
                    &format!(
                        "/*!40101 SET NAMES binary*/;\nDROP TABLE IF EXISTS {n};\nDROP VIEW IF EXISTS {n};\n{}",
                        wrapped(x),
                        n = quote(&x.name)
                    ),
                    c,
                )?;
            }
            Kind::Trigger => {
                let table = trigger_table(x);
                triggers.entry((x.db.clone(), table)).or_default().push_str(&wrapped(x));
            }
            Kind::Procedure | Kind::Function | Kind::Event => {
                let word = match x.kind {
                    Kind::Procedure => "PROCEDURE",
                    Kind::Function => "FUNCTION",
                    _ => "EVENT",
                };
                let s = post.entry(x.db.clone()).or_default();
                s.push_str(&format!("DROP {word} IF EXISTS {};\n", quote(&x.name)));
                s.push_str(&wrapped(x));
            }
        }
    }
    for ((db, t), text) in triggers {
        write(dir, &format!("{db}.{t}-schema-triggers.sql"), &format!("/*!40101 SET NAMES binary*/;\n{text}"), c)?;
    }
    for (db, text) in post {
        write(dir, &format!("{db}-schema-post.sql"), &format!("/*!40101 SET NAMES binary*/;\n{text}"), c)?;
    }
    Ok(())
}

/// The table a trigger is on, from its statement (`... ON `t` FOR EACH ROW`).
fn trigger_table(x: &Object) -> String {
    let s = &x.create;
    s.find(" ON `")
        .and_then(|i| {
            let rest = &s[i + 5..];
            rest.find("` FOR EACH ROW").map(|j| rest[..j].replace("``", "`"))
        })
        .unwrap_or_else(|| x.name.clone())
}

/// `metadata`, in mydumper's words: written last.
pub fn write_metadata(dir: &Path, m: &Manifest) -> Result<()> {
    let mut s = format!("Started dump at: {}\n", m.started_at);
    let p = &m.position;
    if let (Some(f), Some(pos)) = (&p.binlog_file, p.binlog_pos) {
        s.push_str(&format!(
            "SHOW MASTER STATUS:\n\tLog: {f}\n\tPos: {pos}\n\tGTID:{}\n\n",
            p.gtid_binlog_pos.as_deref().unwrap_or("")
        ));
    }
    s.push_str(&format!("Finished dump at: {}\n", m.finished_at));
    Ok(pileup_files::write_private_bytes(&dir.join("metadata"), s.as_bytes())?)
}

/// The files of a mydumper directory, by what they hold.
#[derive(Debug, Default)]
pub struct Scanned {
    pub databases: Vec<String>,
    /// (db, table, file)
    pub tables: Vec<(String, String, PathBuf)>,
    /// (db, table, file, bytes on disk)
    pub data: Vec<(String, String, PathBuf, u64)>,
    pub views: Vec<(String, String, PathBuf)>,
    pub triggers: Vec<(String, PathBuf)>,
    pub post: Vec<(String, PathBuf)>,
}

/// Sort a mydumper directory's files (see the module docs). A database
/// name is what comes before the first dot, as myloader reads it.
pub fn scan(dir: &Path) -> Result<Scanned> {
    let mut s = Scanned::default();
    let mut view_names = vec![];
    let mut schema_files = vec![];
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .with_ctx(|| format!("cannot read {}", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .collect();
    entries.sort();
    for p in entries {
        let Some(name) = p.file_name().and_then(|n| n.to_str()).map(String::from) else { continue };
        let base = name.strip_suffix(".gz").unwrap_or(&name);
        let Some(base) = base.strip_suffix(".sql") else { continue };
        let split = |x: &str| x.split_once('.').map(|(a, b)| (a.to_string(), b.to_string()));
        if let Some(db) = base.strip_suffix("-schema-create") {
            s.databases.push(db.into());
        } else if let Some(db) = base.strip_suffix("-schema-post") {
            s.post.push((db.into(), p.clone()));
        } else if let Some((db, v)) = base.strip_suffix("-schema-view").and_then(split) {
            view_names.push((db.clone(), v.clone()));
            s.views.push((db, v, p.clone()));
        } else if let Some((db, _)) = base.strip_suffix("-schema-triggers").and_then(split) {
            s.triggers.push((db, p.clone()));
        } else if let Some((db, t)) = base.strip_suffix("-schema").and_then(split) {
            schema_files.push((db, t, p.clone()));
        } else if let Some((db, rest)) = split(base) {
            let table = match rest.rsplit_once('.') {
                Some((t, n)) if n.bytes().all(|b| b.is_ascii_digit()) && !n.is_empty() => t.to_string(),
                _ => rest,
            };
            let size = std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0);
            s.data.push((db, table, p.clone(), size));
        }
    }
    // A view's placeholder table is not a table.
    s.tables =
        schema_files.into_iter().filter(|(d, t, _)| !view_names.iter().any(|(vd, vn)| vd == d && vn == t)).collect();
    for (db, _, _) in &s.tables {
        if !s.databases.contains(db) {
            s.databases.push(db.clone());
        }
    }
    s.data.sort_by_key(|d| std::cmp::Reverse(d.3));
    Ok(s)
}

/// Run every statement of a mydumper file in database `db`: INSERTs go in
/// through `LOAD DATA` (their values read back, binary bytes and all, and
/// every row counted), other statements as they are (their text must be
/// UTF-8, which the schema mydumper writes is).
pub fn run_file(c: &mut mysql::Conn, db: &str, path: &Path) -> Result<u64> {
    run_file_from(c, None, db, path)
}

/// A trigger's statement as first written may name its database (`CREATE
/// TRIGGER src.tr ... ON src.t`): loaded into another database, those
/// names are dropped so it is created where its table now is.
fn unqualify_trigger(q: &str, from: &str) -> Option<String> {
    let src = regex::escape(from);
    let re = regex::Regex::new(&format!(
        r"(?is)^(\s*CREATE\b.*?\bTRIGGER\s+)(?:`{src}`|{src})\.(.*?\bON\s+)(?:(?:`{src}`|{src})\.)?"
    ))
    .ok()?;
    re.is_match(q).then(|| re.replace(q, "${1}${2}").into_owned())
}

/// [`run_file`] of a file dumped from database `from` (renamed to `db`).
pub fn run_file_from(c: &mut mysql::Conn, from: Option<&str>, db: &str, path: &Path) -> Result<u64> {
    let mut text = vec![];
    files::open(path)
        .and_then(|mut r| r.read_to_end(&mut text))
        .with_ctx(|| format!("cannot read {}", path.display()))?;
    c.query_drop(format!("USE {}", quote(db)))?;
    let mut rows = 0;
    for (i, st) in crate::sql::statements(&text).into_iter().enumerate() {
        let at = || format!("{}: statement {}", path.display(), i + 1);
        let head: String = String::from_utf8_lossy(&st[..st.len().min(64)]).trim_start().to_ascii_uppercase();
        if head.starts_with("INSERT") {
            let ins = crate::sql::parse_insert(st).map_err(|e| crate::error::failed!("{}: {e}", at()))?;
            let n = crate::infile::load_data(
                c,
                db,
                &ins.table,
                ins.columns.as_deref(),
                Box::new(std::io::Cursor::new(ins.tsv)),
                at(),
                None,
            )?;
            if n != ins.rows {
                bail!("{}: {} rows in the statement, {n} loaded", at(), ins.rows);
            }
            rows += n;
        } else {
            let q = std::str::from_utf8(st).map_err(|_| {
                crate::error::failed!("{}: a statement that is not UTF-8 text; load this file with myloader", at())
            })?;
            let renamed = from.filter(|f| *f != db).and_then(|f| unqualify_trigger(q, f));
            c.query_drop(renamed.as_deref().unwrap_or(q)).with_ctx(at)?;
        }
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trigger_named_with_its_database_loads_under_another() {
        let q = "CREATE DEFINER=`root`@`localhost` TRIGGER d1.tr1 BEFORE INSERT ON d1.nokey FOR EACH ROW SET NEW.b = d1.f(1)";
        assert_eq!(
            unqualify_trigger(q, "d1").unwrap(),
            "CREATE DEFINER=`root`@`localhost` TRIGGER tr1 BEFORE INSERT ON nokey FOR EACH ROW SET NEW.b = d1.f(1)"
        );
        let q = "CREATE TRIGGER `d1`.`tr1` AFTER UPDATE ON `t` FOR EACH ROW DO 1";
        assert_eq!(unqualify_trigger(q, "d1").unwrap(), "CREATE TRIGGER `tr1` AFTER UPDATE ON `t` FOR EACH ROW DO 1");
        assert_eq!(unqualify_trigger("CREATE TRIGGER tr1 BEFORE INSERT ON t FOR EACH ROW DO 1", "d1"), None);
    }
}
