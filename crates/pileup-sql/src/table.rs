//! The one table of a single-table `SELECT`, and where an index hint goes.

use crate::lex::{find, is_word_byte, memchr_nl, quoted_end};

/// The one table of a single-table `SELECT … FROM t [AS a] …`: where its
/// name is and where an index hint goes (after the table and its alias).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SingleTable {
    /// The table as written (`t`, `` `t` ``, `db.t`).
    pub name: std::ops::Range<usize>,
    /// Where ` FORCE INDEX (k)` is inserted.
    pub hint_at: usize,
}

/// Words that end a table reference (after which no alias follows).
const AFTER_TABLE: &[&[u8]] = &[
    b"where",
    b"group",
    b"order",
    b"limit",
    b"having",
    b"join",
    b"left",
    b"right",
    b"inner",
    b"cross",
    b"straight_join",
    b"natural",
    b"use",
    b"force",
    b"ignore",
    b"union",
    b"for",
    b"lock",
    b"procedure",
    b"into",
    b"window",
    b"partition",
    b"outer",
    b"on",
    b"except",
    b"intersect",
    b"offset",
];

/// The table of a `SELECT` that reads exactly one table at its top level
/// (no join, no comma list, no index hint already, no subquery in FROM);
/// None otherwise.
/// A statement's top-level words with their positions (names in
/// backquotes, `,` and `.` among them), and the index of the first `FROM`:
/// strings, comments and parenthesized parts skipped.
fn top_level_words(sql: &[u8]) -> (Vec<(usize, usize)>, Option<usize>) {
    let n = sql.len();
    let mut i = 0;
    let mut depth = 0u32;
    let mut words: Vec<(usize, usize)> = Vec::new();
    let mut from_at = None;
    while i < n {
        let c = sql[i];
        match c {
            b'\'' | b'"' => i = quoted_end(sql, i),
            b'/' if sql.get(i + 1) == Some(&b'*') => i = find(sql, i + 2, b"*/").map_or(n, |e| e + 2),
            b'#' => i = memchr_nl(sql, i),
            b'-' if sql.get(i + 1) == Some(&b'-') => i = memchr_nl(sql, i),
            b'(' => {
                depth += 1;
                i += 1;
            }
            b')' => {
                depth = depth.saturating_sub(1);
                i += 1;
            }
            b'`' if depth == 0 => {
                let e = quoted_end(sql, i);
                words.push((i, e));
                i = e;
            }
            c if depth == 0 && (is_word_byte(c) || c == b'.' || c == b',') => {
                let s = i;
                if c == b',' || c == b'.' {
                    i += 1;
                } else {
                    while i < n && is_word_byte(sql[i]) {
                        i += 1;
                    }
                }
                if from_at.is_none() && sql[s..i].eq_ignore_ascii_case(b"from") {
                    from_at = Some(words.len());
                }
                words.push((s, i));
            }
            _ => i += 1,
        }
    }
    (words, from_at)
}

pub fn single_table(sql: &[u8]) -> Option<SingleTable> {
    let (words, from_at) = top_level_words(sql);
    let first = words.first()?;
    if !sql[first.0..first.1].eq_ignore_ascii_case(b"select") {
        return None;
    }
    let f = from_at?;
    let w = |k: usize| words.get(k).map(|&(a, b)| &sql[a..b]);
    let is = |k: usize, word: &[u8]| w(k).is_some_and(|x| x.eq_ignore_ascii_case(word));
    // A subquery in FROM leaves no word right after it at this level.
    let mut k = f + 1;
    let name_start = words.get(k)?.0;
    if words[k].0 < words[f].1 || sql[words[f].1..name_start].contains(&b'(') {
        return None;
    }
    let mut name_end = words[k].1;
    k += 1;
    while is(k, b".") && w(k + 1).is_some() {
        name_end = words[k + 1].1;
        k += 2;
    }
    let mut hint_at = name_end;
    // Only whitespace between the name's parts.
    if sql[name_start..name_end].iter().any(|c| c.is_ascii_whitespace()) {
        return None;
    }
    let reserved = |x: &[u8]| AFTER_TABLE.iter().any(|r| x.eq_ignore_ascii_case(r));
    if is(k, b"as") {
        hint_at = words.get(k + 1)?.1;
        k += 2;
    } else if w(k).is_some_and(|x| x != b"," && !reserved(x)) {
        hint_at = words[k].1;
        k += 1;
    }
    match w(k) {
        None => {}
        Some(x) if x == b"," => return None,
        Some(x) => {
            let x = x.to_ascii_lowercase();
            if matches!(
                x.as_slice(),
                b"join"
                    | b"left"
                    | b"right"
                    | b"inner"
                    | b"cross"
                    | b"straight_join"
                    | b"natural"
                    | b"use"
                    | b"force"
                    | b"ignore"
            ) {
                return None;
            }
        }
    }
    Some(SingleTable { name: name_start..name_end, hint_at })
}

/// A table named at the top level of a `SELECT`'s FROM clause, joined or
/// listed: where its name and alias are, and where an index hint goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableRef {
    /// The table as written (`t`, `` `t` ``, `db.t`).
    pub name: std::ops::Range<usize>,
    /// Its alias, when it has one.
    pub alias: Option<std::ops::Range<usize>>,
    /// Where ` FORCE INDEX (k)` is inserted.
    pub hint_at: usize,
}

impl TableRef {
    /// The name a plan gives it: its alias, else its table's name without
    /// the database or quotes.
    pub fn plan_name(&self, sql: &str) -> String {
        let raw = match &self.alias {
            Some(a) => &sql[a.clone()],
            None => sql[self.name.clone()].rsplit('.').next().unwrap_or(""),
        };
        raw.trim_matches('`').replace("``", "`")
    }
}

/// Words that end a FROM clause at its level.
const END_FROM: &[&[u8]] =
    &[b"where", b"group", b"order", b"limit", b"having", b"union", b"window", b"for", b"lock", b"into", b"procedure"];

/// Every table named at the top level of a `SELECT`'s FROM clause, in
/// order (tables in subqueries and derived tables are not).
pub fn table_refs(sql: &str) -> Vec<TableRef> {
    #[derive(PartialEq)]
    enum At {
        Outside,
        Table,
        Alias,
        Joined,
    }
    let b = sql.as_bytes();
    let (words, _) = top_level_words(b);
    let mut at = At::Outside;
    let mut out: Vec<TableRef> = vec![];
    let reserved = |x: &[u8]| AFTER_TABLE.iter().chain(END_FROM).any(|r| x.eq_ignore_ascii_case(r));
    let mut k = 0;
    let mut prev_end = 0;
    while k < words.len() {
        let (s, mut e) = words[k];
        // A derived table or a subquery where a table was expected.
        if at == At::Table && b[prev_end..s].contains(&b'(') {
            at = At::Joined;
        }
        k += 1;
        let w = &b[s..e];
        if w == b"," {
            if at != At::Outside {
                at = At::Table;
            }
        } else if w != b"." {
            // A qualified name: db.t, `db`.`t`.
            while at == At::Table && words.get(k).is_some_and(|&(a, _)| a == e && b[a] == b'.') {
                match words.get(k + 1) {
                    Some(&(a, z)) if a == e + 1 => (e, k) = (z, k + 2),
                    _ => break,
                }
            }
            let w = &b[s..e];
            let lower = w.to_ascii_lowercase();
            if lower == b"from" {
                at = At::Table;
            } else if END_FROM.contains(&lower.as_slice()) {
                at = At::Outside;
            } else if lower.ends_with(b"join") {
                at = At::Table;
            } else {
                match at {
                    At::Table if !reserved(w) => {
                        out.push(TableRef { name: s..e, alias: None, hint_at: e });
                        at = At::Alias;
                    }
                    At::Alias if lower == b"as" => {}
                    At::Alias if !reserved(w) => {
                        if let Some(t) = out.last_mut() {
                            t.alias = Some(s..e);
                            t.hint_at = e;
                        }
                        at = At::Joined;
                    }
                    At::Alias => at = At::Joined,
                    _ => {}
                }
            }
        }
        prev_end = e;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tables_of_a_join_are_found_with_their_aliases() {
        let sql = "SELECT a.x FROM db1.orders AS o JOIN `items` i ON i.o = o.id LEFT JOIN users ON users.id = o.u, extra WHERE o.x IN (SELECT y FROM hidden) ORDER BY 1";
        let refs = table_refs(sql);
        let names: Vec<String> = refs.iter().map(|r| r.plan_name(sql)).collect();
        assert_eq!(names, ["o", "i", "users", "extra"]);
        assert_eq!(&sql[refs[0].name.clone()], "db1.orders");
        assert_eq!(&sql[..refs[1].hint_at], "SELECT a.x FROM db1.orders AS o JOIN `items` i");
        assert_eq!(
            &sql[..refs[2].hint_at],
            "SELECT a.x FROM db1.orders AS o JOIN `items` i ON i.o = o.id LEFT JOIN users"
        );
        // A derived table has no hint; the table after it does.
        let sql = "SELECT * FROM (SELECT 1 AS k) AS d STRAIGHT_JOIN t ON t.k = d.k";
        let names: Vec<String> = table_refs(sql).iter().map(|r| r.plan_name(sql)).collect();
        assert_eq!(names, ["t"]);
        assert!(table_refs("SELECT 1").is_empty());
    }
}
