//! Statement classes: a statement reduced to the shape every execution of it
//! shares, the key pileup groups statements by.
//!
//! [`fingerprint`] folds what varies between executions of one statement:
//! literals (strings, numbers, hex and bit values, `NULL`, `TRUE`/`FALSE`,
//! `?` placeholders) become `?`; `IN (...)` lists of literals and the rows
//! of `VALUES (...), (...)` become `(?+)` (rows holding more than literals:
//! those of the first row's shape after it are dropped); any other run of
//! literals separated by commas (a select list, a function's arguments)
//! becomes `?+`, as performance_schema's digest folds it (`?, ...`), so
//! that both name one class; `LIMIT n, m` and `LIMIT n OFFSET
//! m` become `limit ?`; comments, `ASC` and case are dropped; tokens are
//! spaced one way whatever the source's whitespace. Identifiers keep their
//! digits (`sbtest1` and `sbtest2` are different tables, so different
//! classes).
//!
//! Written here rather than taken from a SQL parser: it runs on every
//! statement of a slow log (millions a second), it must take whatever a
//! server logged — statements no parser knows, truncated ones, binary
//! bytes — and never fail, and it must not allocate per token. A parser's
//! tokenizer does all three of those things the other way.

#![forbid(unsafe_code)]

/// The version of [`fingerprint`]'s rules. Fingerprints made under one
/// version are compared only with those of the same version: a change of
/// rules that gives some statement another fingerprint comes with a new
/// version, so that stored classes (a fleet's per-minute digests) are never
/// silently split between an old fingerprint and a new one.
pub const FINGERPRINT_VERSION: u16 = 1;

/// A statement class's identifier: a stable 64-bit hash of its fingerprint
/// (the same on every machine and in every version of pileup), printed as
/// 16 hex digits.
pub fn class_id(fingerprint: &[u8]) -> u64 {
    // FNV-1a: stable by definition, and class ids are computed once per
    // class, not per statement, so its speed does not matter.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in fingerprint {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

mod fold;
mod hints;
mod lex;
mod redact;
mod skel;
mod table;

pub use fold::{fingerprint, statement_class};
pub use hints::{hints, without_hints, Hint};
pub use redact::{clip, redact};
pub use skel::skeleton;
pub use table::{single_table, table_refs, SingleTable, TableRef};

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(s: &str) -> String {
        let mut out = vec![];
        fingerprint(s.as_bytes(), &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn runs_of_literals_fold_as_performance_schema_folds_them() {
        for (ps, log) in [
            (
                "SELECT ?, ... , TRUE FROM `t` WHERE NAME IS NOT NULL LIMIT ?",
                "SELECT NULL, -1, 0x1F, TRUE FROM t WHERE name IS NOT NULL LIMIT 3",
            ),
            ("SELECT ?, ... FROM `t` LIMIT ?, ...", "SELECT 1, 2 FROM t LIMIT 10, 20"),
            ("SELECT COALESCE ( NAME , ?, ... ) FROM `t`", "SELECT COALESCE(name, 'a', 'b', 'c') FROM t"),
            ("SELECT ID FROM `t` ORDER BY ?, ...", "SELECT id FROM t ORDER BY 1, 2"),
            ("INSERT INTO `t` VALUES (...) /* , ... */", "INSERT INTO t VALUES (1, 'a'), (2, 'b')"),
        ] {
            assert_eq!(fp(ps), fp(log), "{ps}");
        }
        assert_eq!(fp("select 1, 2, 3 from t"), "select ?+ from t");
        // A run ends at anything but a literal.
        assert_eq!(fp("update t set a = 1, b = 2 where c = 3"), "update t set a = ?, b = ? where c = ?");
        assert_eq!(fp("select 1, a, 2, 3"), "select ?, a, ?+");
    }

    #[test]
    fn performance_schema_s_spelling_is_the_slow_log_s_class() {
        // DIGEST_TEXT prints DISTINCT by its last alias, with backticks.
        assert_eq!(
            fp("SELECT DISTINCTROW `c` FROM `sbtest1` WHERE `id` BETWEEN ? AND ? ORDER BY `c`"),
            fp("SELECT DISTINCT c FROM sbtest1 WHERE id BETWEEN 5 AND 104 ORDER BY c")
        );
    }

    #[test]
    fn literals_case_and_spacing_fold() {
        assert_eq!(fp("SELECT c FROM sbtest1 WHERE id=5001"), "select c from sbtest1 where id = ?");
        assert_eq!(fp("select  c\nfrom sbtest1 where id = 17;"), "select c from sbtest1 where id = ?");
        assert_eq!(
            fp("SELECT * FROM t WHERE name='O''Brien' AND x=\"a\\\"b\" AND y=-1.5e3"),
            fp("select * from t where name = 'x' and x = 'y' and y = 2")
        );
        assert_eq!(
            fp("SELECT * FROM t WHERE a = 0x1F OR b = X'1f' OR c = _utf8mb4'x' OR d = TRUE"),
            "select * from t where a = ? or b = ? or c = ? or d = ?"
        );
        assert_eq!(
            fp("select count(*), max(`k`) from `Db`.`T1` where x is not null and y is null and z = null"),
            "select count(*), max(k) from db.t1 where x is not null and y is null and z = ?"
        );
    }

    #[test]
    fn lists_collapse() {
        assert_eq!(fp("select * from t where a in (1,2,3) and b > 5"), "select * from t where a in (?+) and b > ?");
        assert_eq!(fp("select * from t where a IN ('x')"), fp("select * from t where a in (1, 2, 3, 4)"));
        assert_eq!(fp("select * from t where (a,b) in ((1,2),(3,4))"), "select * from t where (a, b) in (?+)");
        assert_eq!(
            fp("select * from t where a in (select b from u where c in (1,2))"),
            "select * from t where a in (select b from u where c in (?+))"
        );
        assert_eq!(fp("INSERT INTO t (a,b) VALUES (1,'x'),(2,'y'),(3, NULL)"), "insert into t(a, b) values (?+)");
        assert_eq!(
            fp("insert into t values (1) on duplicate key update a=values(a)+1"),
            "insert into t values (?+) on duplicate key update a = values (a) + ?"
        );
        // Rows of one shape, whatever their number, are one class; rows of
        // different shapes are kept.
        assert_eq!(fp("insert into t values (1, now()), (2, now()),(3,NOW())"), "insert into t values (?, now())");
        assert_eq!(fp("insert into t values (1, now())"), "insert into t values (?, now())");
        assert_eq!(fp("insert into t values (1, now()), (2, 3)"), "insert into t values (?, now()), (?+)");
        assert_eq!(
            fp("insert into t values (1, now()), (2, now()) on duplicate key update a = values(a)"),
            "insert into t values (?, now()) on duplicate key update a = values (a)"
        );
    }

    #[test]
    fn the_fast_list_scan_agrees_with_the_token_path() {
        // Each of these is collapsed by the scan; spelt with a comment in
        // the list, the scan refuses it and the token path collapses it
        // the same way.
        for (list, with_comment) in [
            ("in (1, -2, 'a''b', x'1f', NULL, TRUE, .5, ?)", "in (1, -2, /*c*/ 'a''b', x'1f', NULL, TRUE, .5, ?)"),
            ("values (1,'a'), (2, 'b'),(3,NULL)", "values (1,'a'), /*c*/ (2, 'b'),(3,NULL)"),
            ("in ((1,2),(3,4))", "in ((1,2),/*c*/(3,4))"),
        ] {
            let a = fp(&format!("select * from t where a {list} and b = 1"));
            let b = fp(&format!("select * from t where a {with_comment} and b = 1"));
            assert_eq!(a, b);
            assert!(a.contains("(?+)"), "{a}");
        }
        assert_eq!(fp("select a in (b, 1) from t"), "select a in (b, ?) from t");
        assert_eq!(fp("select * from t where a in ()"), "select * from t where a in (?+)");
        assert_eq!(fp("select * from t where a in (1, 2"), "select * from t where a in (?+");
        assert_eq!(fp("insert into t values (1), (now())"), "insert into t values (?), (now())");
        assert_eq!(fp("insert into t values (now()), (now()), (1)"), "insert into t values (now()), (?)");
    }

    #[test]
    fn limits_comments_and_order() {
        assert_eq!(
            fp("select a from t order by a ASC, b desc limit 10, 20"),
            "select a from t order by a, b desc limit ?"
        );
        assert_eq!(fp("select a from t limit 10 offset 5"), "select a from t limit ?");
        assert_eq!(fp("select /* app:42 */ a -- tail\nfrom t # x\n where b = 1"), "select a from t where b = ?");
        assert_eq!(fp("SELECT /*!40001 SQL_NO_CACHE */ * FROM t"), "select * from t");
        assert_eq!(fp("select a-1, b - 2, f(-3) from t where c = -4"), "select a - ?, b - ?, f(?) from t where c = ?");
        assert_eq!(fp("select 1abc, t1.c2 from t1"), "select 1abc, t1.c2 from t1");
    }

    #[test]
    fn strings_end_where_mysql_ends_them() {
        assert_eq!(fp(r#"select 'a\'b', 'c''d', "e\\\"f", `g``h` from t"#), "select ?+, `g``h` from t");
        assert_eq!(fp(r"select 'a\\' , 1"), "select ?+");
        assert_eq!(fp("select 'trailing backslash\\"), "select ?");
    }

    #[test]
    fn special_forms() {
        assert_eq!(fp("administrator command: Quit;"), "administrator command: Quit");
        assert_eq!(fp("use `sbtest`"), "use ?");
        assert_eq!(fp("set @x := 5, @@session.sql_mode = 'a'"), "set @x := ?, @@session.sql_mode = ?");
        assert_eq!(fp("call p(1, 'a')"), "call p(?+)");
        assert_eq!(fp(""), "");
        // Unterminated strings and comments end the text; binary bytes pass.
        assert_eq!(fp("select 'abc"), "select ?");
        assert_eq!(fp("select a /* x"), "select a");
        assert_eq!(
            String::from_utf8_lossy(&{
                let mut o = vec![];
                fingerprint(b"select \xff\xfe from t where a = '\x00\x01'", &mut o);
                o
            }),
            "select \u{fffd}\u{fffd} from t where a = ?"
        );
    }

    #[test]
    fn the_single_table_of_a_select_and_where_its_hint_goes() {
        let hint = |sql: &str| {
            single_table(sql.as_bytes()).map(|t| {
                format!("{} | {}FORCE INDEX (k){}", &sql[t.name.clone()], &sql[..t.hint_at], &sql[t.hint_at..])
            })
        };
        assert_eq!(
            hint("SELECT id FROM dive WHERE a IN (1,2) AND b > 3").unwrap(),
            "dive | SELECT id FROM diveFORCE INDEX (k) WHERE a IN (1,2) AND b > 3"
        );
        assert_eq!(
            hint("select * from `db`.`t` as x order by 1").unwrap(),
            "`db`.`t` | select * from `db`.`t` as xFORCE INDEX (k) order by 1"
        );
        assert_eq!(
            hint("select * from d.t z where (select 1 from u, v) > 0").unwrap(),
            "d.t | select * from d.t zFORCE INDEX (k) where (select 1 from u, v) > 0"
        );
        assert_eq!(hint("select 'from x' , a from t").unwrap(), "t | select 'from x' , a from tFORCE INDEX (k)");
        assert_eq!(hint("select * from t join u on t.a = u.a"), None);
        assert_eq!(hint("select * from t, u"), None);
        assert_eq!(hint("select * from t force index (a)"), None);
        assert_eq!(hint("select * from (select 1) x"), None);
        assert_eq!(hint("update t set a = 1"), None);
        assert_eq!(hint("select 1"), None);
    }

    /// Statements that share a skeleton share a fingerprint: thousands of
    /// statements made from templates with literals of every kind, spacing,
    /// comments and names that hold digits, compared pairwise by skeleton.
    #[test]
    fn statements_with_one_skeleton_have_one_fingerprint() {
        let templates = [
            "SELECT c FROM sbtest{N} WHERE id={N}",
            "select * from t where a in ({L}) and b > {N} order by c limit {N}, {N}",
            "INSERT INTO t{N} (id, k, c) VALUES ({N}, {N}, {S}), ({N}, {N}, {S})",
            "update t set c={S} where id = -{N} /* {N} it's */ and d=@v{N}",
            "select `{N}`, x{N}, {N}.{N}, {N}e{N}, 0x{N}, t.{N} from `t {N}` # {S}\n where a={S} -- {N}\n",
            "select {N}-{N}, {N}--{N}, {S}{S}, _utf8{S}, X{S}, N{S} from dual where a like {S} escape {S}",
            "administrator command: Quit {N}",
            "use db{N}",
            "select {N} ; ",
            "SELECT /*+ MAX_EXECUTION_TIME({N}) */ a FROM t WHERE b BETWEEN {N} AND {N} LIMIT {N} OFFSET {N}",
            "select a from t where id IN({L})and b=-{N}or c={S}{N} or d={N}{S} or e=({N})*{N}%{N}/{N}",
            "/*!{N} select */ {N}abc, x{S}, b{S}, {N}x{N}, -{N}.{N}, .{N}, - {N}, a<{N}>{N}<={N}<>{N}",
            "insert into t values ({L}), ({L}), (now(), {N}), (now(), {N}) on duplicate key update c={N}",
            "select {N}\t{N}\n{N}\r{N}#{S}",
            "select @{N}, @@{N}, :{N}, t.{N}, `t {N}`, `{N}`, $${N} from t",
        ];
        let nums = ["1", "22", "0", "007", "12345678901234567890", "1", "5"];
        let strs = ["'a'", "'it''s'", "'x\\'y'", "\"q\"", "''", "'1'", "'--'", "'/*'", "'#'"];
        let mut seed = 17u64;
        let mut rnd = |k: usize| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) as usize % k
        };
        // Each statement against itself with one literal changed: when
        // the two share a skeleton, they must share a fingerprint.
        let build = |t: &str, picks: &[usize]| {
            let (mut sql, mut rest, mut k) = (String::new(), t, 0);
            while let Some(p) = rest.find('{') {
                sql.push_str(&rest[..p]);
                let v = picks[k];
                k += 1;
                match &rest[p..p + 3] {
                    "{N}" => sql.push_str(nums[v % nums.len()]),
                    "{S}" => sql.push_str(strs[v % strs.len()]),
                    _ => {
                        let items: Vec<&str> = (0..1 + v % 4).map(|i| nums[(v / 4 + i) % nums.len()]).collect();
                        sql.push_str(&items.join(","));
                    }
                }
                rest = &rest[p + 3..];
            }
            sql.push_str(rest);
            sql
        };
        let (mut fa, mut fb, mut sa, mut sb) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut shared = 0;
        for _ in 0..60000 {
            let t = templates[rnd(templates.len())];
            let slots = t.matches('{').count();
            let mut picks: Vec<usize> = (0..slots).map(|_| rnd(1000)).collect();
            let a = build(t, &picks);
            if slots > 0 {
                let k = rnd(slots);
                picks[k] = rnd(1000);
            }
            let b = build(t, &picks);
            if !(skeleton(a.as_bytes(), &mut sa) && skeleton(b.as_bytes(), &mut sb)) || sa != sb {
                continue;
            }
            shared += 1;
            fingerprint(a.as_bytes(), &mut fa);
            fingerprint(b.as_bytes(), &mut fb);
            assert_eq!(String::from_utf8_lossy(&fa), String::from_utf8_lossy(&fb), "{a:?} and {b:?} share a skeleton");
        }
        assert!(shared > 30000, "{shared}");
        // Where literals touch names, digits stay.
        let sk = |s: &str| {
            let mut o = Vec::new();
            skeleton(s.as_bytes(), &mut o).then_some(o)
        };
        for (a, b) in [
            ("select @v1", "select @v2"),
            ("select `1`", "select `2`"),
            ("select * from t1", "select * from t2"),
            ("select 1e5", "select 1e6"),
            ("select 1.5", "select 2.5"),
        ] {
            assert_ne!(sk(a), sk(b), "{a} / {b}");
        }
        assert_eq!(sk("select 1 from t where a='x'"), sk("select 22 from t where a='yy'"));
        assert_eq!(sk("administrator command: Quit"), None);
        assert_eq!(sk("use db1"), None);
        assert_eq!(sk("select '\x01'"), None);
    }

    #[test]
    fn class_ids_are_stable() {
        assert_eq!(format!("{:016x}", class_id(b"select ?")), "02fb7a5a1a5a9a58");
        assert_ne!(class_id(b"select ?"), class_id(b"select ?, ?"));
    }
}
