//! The index hints and `STRAIGHT_JOIN`s a statement carries, found in its
//! text (outside strings and comments), with what removing each leaves.

use crate::lex::{comment_end, is_word_byte, quoted_end};

/// One hint as written: where it is, and what stands in its place when it
/// is removed (`STRAIGHT_JOIN` between two tables is a plain `JOIN`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hint {
    pub span: std::ops::Range<usize>,
    pub text: String,
    pub replacement: &'static str,
}

impl Hint {
    /// The statement without this hint.
    pub fn removed_from(&self, sql: &str) -> String {
        let (a, b) = (&sql[..self.span.start], &sql[self.span.end..]);
        let mut out = String::with_capacity(sql.len());
        out.push_str(a.trim_end());
        out.push(' ');
        if !self.replacement.is_empty() {
            out.push_str(self.replacement);
            out.push(' ');
        }
        out.push_str(b.trim_start());
        out.trim_end().to_string()
    }
}

/// The statement without any of `hints`.
pub fn without_hints(sql: &str, hints: &[Hint]) -> String {
    let mut out = sql.to_string();
    // From the last, so the earlier spans stay where they are.
    for h in hints.iter().rev() {
        out = h.removed_from(&out);
    }
    out
}

/// Every `FORCE|USE|IGNORE INDEX|KEY [FOR JOIN|ORDER BY|GROUP BY] (…)` and
/// `STRAIGHT_JOIN` of `sql`, in order.
pub fn hints(sql: &str) -> Vec<Hint> {
    let b = sql.as_bytes();
    let mut out = vec![];
    // Words read so far, lowercased, with where each began: the previous
    // word tells `SELECT STRAIGHT_JOIN` from `a STRAIGHT_JOIN b`.
    let mut prev_word: Option<String> = None;
    let mut i = 0;
    while i < b.len() {
        if let Some(end) = comment_end(b, i) {
            i = end;
            continue;
        }
        match b[i] {
            b'\'' | b'"' | b'`' => {
                i = quoted_end(b, i);
                prev_word = Some(String::new());
            }
            c if is_word_byte(c) => {
                let start = i;
                while i < b.len() && is_word_byte(b[i]) {
                    i += 1;
                }
                let word = sql[start..i].to_ascii_lowercase();
                match word.as_str() {
                    "force" | "use" | "ignore" => {
                        if let Some(end) = index_hint_end(b, i) {
                            out.push(Hint { span: start..end, text: sql[start..end].to_string(), replacement: "" });
                            i = end;
                            prev_word = Some(")".into());
                            continue;
                        }
                    }
                    "straight_join" => {
                        let option = prev_word.as_deref().is_some_and(|w| {
                            matches!(
                                w,
                                "select" | "all" | "distinct" | "distinctrow" | "high_priority" | "sql_no_cache"
                            )
                        });
                        out.push(Hint {
                            span: start..i,
                            text: sql[start..i].to_string(),
                            replacement: if option { "" } else { "JOIN" },
                        });
                    }
                    _ => {}
                }
                prev_word = Some(word);
            }
            c if c.is_ascii_whitespace() => i += 1,
            _ => {
                prev_word = Some(String::new());
                i += 1;
            }
        }
    }
    out
}

/// After `FORCE`/`USE`/`IGNORE` at `i`: the end of an index hint (past
/// its `)`), if that is what follows.
fn index_hint_end(b: &[u8], mut i: usize) -> Option<usize> {
    let mut words = vec![];
    loop {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        if i < b.len() && is_word_byte(b[i]) {
            let s = i;
            while i < b.len() && is_word_byte(b[i]) {
                i += 1;
            }
            words.push(String::from_utf8_lossy(&b[s..i]).to_ascii_lowercase());
            continue;
        }
        break;
    }
    let ok = matches!(
        words.iter().map(String::as_str).collect::<Vec<_>>().as_slice(),
        ["index" | "key"] | ["index" | "key", "for", "join"] | ["index" | "key", "for", "order" | "group", "by"]
    );
    if !ok || b.get(i) != Some(&b'(') {
        return None;
    }
    let mut depth = 0;
    while i < b.len() {
        match b[i] {
            b'\'' | b'"' | b'`' => {
                i = quoted_end(b, i);
                continue;
            }
            b'(' => depth += 1,
            b')' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_hints_and_straight_joins_are_found_and_removed() {
        let sql = "SELECT COUNT(pad) FROM t FORCE INDEX (b) WHERE b > 101";
        let h = hints(sql);
        assert_eq!(h.len(), 1);
        assert_eq!(h[0].text, "FORCE INDEX (b)");
        assert_eq!(h[0].removed_from(sql), "SELECT COUNT(pad) FROM t WHERE b > 101");
        let sql = "SELECT STRAIGHT_JOIN a.x FROM a USE KEY FOR JOIN (`k 1`, k2) STRAIGHT_JOIN b IGNORE INDEX FOR ORDER BY (c) ON a.id = b.id";
        let h = hints(sql);
        let texts: Vec<&str> = h.iter().map(|h| h.text.as_str()).collect();
        assert_eq!(
            texts,
            ["STRAIGHT_JOIN", "USE KEY FOR JOIN (`k 1`, k2)", "STRAIGHT_JOIN", "IGNORE INDEX FOR ORDER BY (c)"]
        );
        assert_eq!(h[0].removed_from(sql), sql.replacen("SELECT STRAIGHT_JOIN a.x", "SELECT a.x", 1));
        assert!(h[2].removed_from(sql).contains(") JOIN b IGNORE"), "{}", h[2].removed_from(sql));
        assert_eq!(without_hints(sql, &h), "SELECT a.x FROM a JOIN b ON a.id = b.id");
        // Not hints: a USE statement, words in strings and comments, a
        // column named force.
        assert!(hints("USE sbtest").is_empty());
        assert!(hints("SELECT 'FORCE INDEX (b)' /* STRAIGHT_JOIN */, `straight_join` FROM t").is_empty());
        assert!(hints("SELECT force, ignore FROM t").is_empty());
        assert!(hints("INSERT IGNORE INTO t VALUES (1)").is_empty());
    }
}
