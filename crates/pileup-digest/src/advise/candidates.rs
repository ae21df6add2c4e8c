//! Index candidates from a statement's structure, parsed with a SQL parser:
//! for each table it reads, the columns its predicates pin by equality
//! (`=`, `IN`, `IS NULL`, a join's `ON`) first, then the first column they
//! bound by a range (`<`, `>`, `BETWEEN`, `LIKE 'prefix%'`), or else the
//! columns it orders or groups by; and the same index covering the
//! columns the statement selects from the table, when that adds few. A
//! candidate that exists, or is a prefix of an index that does, is left
//! out.

use sqlparser::ast::{
    BinaryOperator, Expr, GroupByExpr, JoinConstraint, JoinOperator, OrderByKind, Query, Select, SelectItem, SetExpr,
    Statement, TableFactor, Value,
};
use sqlparser::dialect::MySqlDialect;
use sqlparser::parser::Parser;

/// An index to try.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Candidate {
    /// The table (as named in the statement, without its database), and
    /// the database when the statement names one.
    pub table: String,
    pub db: Option<String>,
    /// Its columns, in order.
    pub columns: Vec<String>,
    /// Why these columns: `equality on a, b; range on c`.
    pub why: String,
}

/// Most columns in a covering candidate.
const COVERING_MAX: usize = 5;

/// What the predicates and clauses say about one table.
#[derive(Default, Debug)]
struct Uses {
    eq: Vec<String>,
    /// Columns a join's `a.x = b.y` looks the table up by.
    join: Vec<String>,
    range: Vec<String>,
    sort: Vec<String>,
    selected: Vec<String>,
    /// The statement selects every column (`*`, `t.*`): no covering index.
    star: bool,
}

fn push(v: &mut Vec<String>, c: &str) {
    if !v.iter().any(|x| x == c) {
        v.push(c.to_string());
    }
}

/// A table a statement reads: what it is known by there (alias or name,
/// lowercase, as column qualifiers are matched), its name and its database
/// when named, as written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Read {
    pub known: String,
    pub table: String,
    pub db: Option<String>,
}

/// The tables a SELECT reads.
fn tables_of(s: &Select) -> Vec<Read> {
    let mut out = vec![];
    let mut add = |f: &TableFactor| {
        if let TableFactor::Table { name, alias, .. } = f {
            // Names as written: a server may tell `Shop` from `shop`.
            let part = |p: &sqlparser::ast::ObjectNamePart| p.to_string().trim_matches('`').to_string();
            let table = name.0.last().map(part).unwrap_or_default();
            let db = (name.0.len() >= 2).then(|| part(&name.0[name.0.len() - 2]));
            let known = alias.as_ref().map(|a| a.name.value.clone()).unwrap_or_else(|| table.clone()).to_lowercase();
            out.push(Read { known, table, db });
        }
    };
    for t in &s.from {
        add(&t.relation);
        for j in &t.joins {
            add(&j.relation);
        }
    }
    out
}

/// The join conditions (`ON …`) of a SELECT.
fn join_conditions(s: &Select) -> Vec<&Expr> {
    s.from
        .iter()
        .flat_map(|t| &t.joins)
        .filter_map(|j| match &j.join_operator {
            JoinOperator::Join(JoinConstraint::On(e))
            | JoinOperator::Inner(JoinConstraint::On(e))
            | JoinOperator::Left(JoinConstraint::On(e))
            | JoinOperator::LeftOuter(JoinConstraint::On(e))
            | JoinOperator::Right(JoinConstraint::On(e))
            | JoinOperator::RightOuter(JoinConstraint::On(e))
            | JoinOperator::StraightJoin(JoinConstraint::On(e)) => Some(e),
            _ => None,
        })
        .collect()
}

/// A column reference: (qualifier, column), lowercase.
fn column(e: &Expr) -> Option<(Option<String>, String)> {
    match e {
        Expr::Identifier(i) => Some((None, i.value.to_lowercase())),
        Expr::CompoundIdentifier(p) if p.len() >= 2 => {
            Some((Some(p[p.len() - 2].value.to_lowercase()), p[p.len() - 1].value.to_lowercase()))
        }
        Expr::Nested(x) => column(x),
        _ => None,
    }
}

/// A value the statement gives (a literal, a placeholder, a parameter).
fn constant(e: &Expr) -> bool {
    match e {
        Expr::Value(_) => true,
        Expr::UnaryOp { expr, .. } | Expr::Nested(expr) => constant(expr),
        _ => false,
    }
}

/// `LIKE 'abc%'`: a prefix an index can seek to.
fn prefix_pattern(e: &Expr) -> bool {
    match e {
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => {
                !s.is_empty() && !s.starts_with('%') && !s.starts_with('_')
            }
            _ => false,
        },
        _ => false,
    }
}

/// The conjuncts of a condition (its `AND`s, unnested).
fn conjuncts<'a>(e: &'a Expr, out: &mut Vec<&'a Expr>) {
    match e {
        Expr::BinaryOp { left, op: BinaryOperator::And, right } => {
            conjuncts(left, out);
            conjuncts(right, out);
        }
        Expr::Nested(x) => conjuncts(x, out),
        _ => out.push(e),
    }
}

/// The table a column belongs to: its qualifier's, or the only table.
fn owner(q: &Option<String>, tables: &[Read]) -> Option<usize> {
    match q {
        Some(q) => tables.iter().position(|r| &r.known == q),
        None if tables.len() == 1 => Some(0),
        None => None,
    }
}

/// What each conjunct pins: an equality, a range, or (a join's `a.x = b.y`)
/// an equality on either side.
fn read_predicate(e: &Expr, tables: &[Read], uses: &mut [Uses]) {
    // Which list a column goes to: 0 equality, 1 range, 2 join.
    let mut put = |c: &(Option<String>, String), list: u8| {
        if let Some(t) = owner(&c.0, tables) {
            let u = &mut uses[t];
            push(
                match list {
                    0 => &mut u.eq,
                    1 => &mut u.range,
                    _ => &mut u.join,
                },
                &c.1,
            );
        }
    };
    match e {
        Expr::BinaryOp { left, op, right } => {
            let (l, r) = (column(left), column(right));
            let eq = *op == BinaryOperator::Eq;
            let range =
                matches!(op, BinaryOperator::Lt | BinaryOperator::LtEq | BinaryOperator::Gt | BinaryOperator::GtEq);
            match (&l, &r) {
                (Some(a), Some(b)) if eq => {
                    put(a, 2);
                    put(b, 2);
                }
                (Some(a), None) if (eq || range) && constant(right) => put(a, u8::from(!eq)),
                (None, Some(b)) if (eq || range) && constant(left) => put(b, u8::from(!eq)),
                _ => {}
            }
        }
        Expr::InList { expr, list, negated: false } if list.iter().all(constant) => {
            if let Some(c) = column(expr) {
                put(&c, 0);
            }
        }
        Expr::IsNull(x) => {
            if let Some(c) = column(x) {
                put(&c, 0);
            }
        }
        Expr::Between { expr, negated: false, low, high } if constant(low) && constant(high) => {
            if let Some(c) = column(expr) {
                put(&c, 1);
            }
        }
        Expr::Like { negated: false, expr, pattern, .. } if prefix_pattern(pattern) => {
            if let Some(c) = column(expr) {
                put(&c, 1);
            }
        }
        _ => {}
    }
}

/// The columns the query orders or groups by, when all are one table's.
fn sort_columns(q: &Query, s: &Select, tables: &[Read], uses: &mut [Uses]) {
    let mut exprs: Vec<&Expr> = vec![];
    if let GroupByExpr::Expressions(g, _) = &s.group_by {
        exprs.extend(g.iter());
    }
    if exprs.is_empty() {
        if let Some(OrderByKind::Expressions(o)) = q.order_by.as_ref().map(|o| &o.kind) {
            exprs.extend(o.iter().map(|x| &x.expr));
        }
    }
    let cols: Option<Vec<(usize, String)>> =
        exprs.iter().map(|e| column(e).and_then(|(q, c)| Some((owner(&q, tables)?, c)))).collect();
    if let Some(cols) = cols.filter(|c| !c.is_empty()) {
        if cols.iter().all(|c| c.0 == cols[0].0) {
            for (t, c) in cols {
                push(&mut uses[t].sort, &c);
            }
        }
    }
}

/// The columns the statement selects, per table.
fn selected(s: &Select, tables: &[Read], uses: &mut [Uses]) {
    for item in &s.projection {
        match item {
            SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => {
                let mut refs = vec![];
                walk_columns(e, &mut refs);
                for (q, c) in refs {
                    if let Some(t) = owner(&q, tables) {
                        push(&mut uses[t].selected, &c);
                    }
                }
            }
            SelectItem::Wildcard(_) => uses.iter_mut().for_each(|u| u.star = true),
            SelectItem::QualifiedWildcard(..) => uses.iter_mut().for_each(|u| u.star = true),
            // A select item with several aliases: its columns are not read.
            _ => uses.iter_mut().for_each(|u| u.star = true),
        }
    }
}

/// Every column an expression names (through functions and operators).
fn walk_columns(e: &Expr, out: &mut Vec<(Option<String>, String)>) {
    if let Some(c) = column(e) {
        out.push(c);
        return;
    }
    match e {
        Expr::BinaryOp { left, right, .. } => {
            walk_columns(left, out);
            walk_columns(right, out);
        }
        Expr::UnaryOp { expr, .. } | Expr::Nested(expr) | Expr::Cast { expr, .. } => walk_columns(expr, out),
        Expr::Function(f) => {
            if let sqlparser::ast::FunctionArguments::List(l) = &f.args {
                for a in &l.args {
                    if let sqlparser::ast::FunctionArg::Unnamed(sqlparser::ast::FunctionArgExpr::Expr(x)) = a {
                        walk_columns(x, out);
                    }
                }
            }
        }
        _ => {}
    }
}

/// The tables a single SELECT reads (a join's included).
pub fn tables_read(sql: &str) -> Result<Vec<Read>, String> {
    let stmts = Parser::parse_sql(&MySqlDialect {}, sql).map_err(|e| format!("the parser does not read it: {e}"))?;
    let [Statement::Query(q)] = stmts.as_slice() else { return Err("not a single SELECT".into()) };
    let SetExpr::Select(s) = q.body.as_ref() else { return Err("not a plain SELECT (a UNION or a VALUES)".into()) };
    Ok(tables_of(s))
}

/// The candidates for `sql`; `existing(table)` gives the table's indexes'
/// columns (lowercase), so that those already there are left out.
pub fn candidates(sql: &str, existing: &dyn Fn(&str) -> Vec<Vec<String>>) -> Result<Vec<Candidate>, String> {
    let stmts = Parser::parse_sql(&MySqlDialect {}, sql).map_err(|e| format!("the parser does not read it: {e}"))?;
    let [Statement::Query(q)] = stmts.as_slice() else { return Err("not a single SELECT".into()) };
    let SetExpr::Select(s) = q.body.as_ref() else { return Err("not a plain SELECT (a UNION or a VALUES)".into()) };
    let tables = tables_of(s);
    let mut uses: Vec<Uses> = tables.iter().map(|_| Uses::default()).collect();
    let mut preds = vec![];
    if let Some(w) = &s.selection {
        conjuncts(w, &mut preds);
    }
    for on in join_conditions(s) {
        conjuncts(on, &mut preds);
    }
    for p in preds {
        read_predicate(p, &tables, &mut uses);
    }
    sort_columns(q, s, &tables, &mut uses);
    selected(s, &tables, &mut uses);
    let mut out: Vec<Candidate> = vec![];
    for (Read { table, db, .. }, u) in tables.iter().zip(&uses) {
        let have = existing(table);
        let mut add = |columns: Vec<String>, why: String| {
            let exists = have.iter().any(|ix| ix.len() >= columns.len() && ix[..columns.len()] == columns[..]);
            let dup = out.iter().any(|c| c.table == *table && c.columns == columns);
            if !columns.is_empty() && !exists && !dup {
                out.push(Candidate { table: table.clone(), db: db.clone(), columns, why });
            }
        };
        let why = |what: &str, cols: &[String]| format!("{what} on {}", cols.join(", "));
        // The columns the statement selects beyond `seek`, when few.
        let covering = |seek: &[String]| -> Option<Vec<String>> {
            let extra: Vec<String> = u.selected.iter().filter(|c| !seek.contains(c)).cloned().collect();
            (!u.star && !seek.is_empty() && !extra.is_empty() && seek.len() + extra.len() <= COVERING_MAX)
                .then_some(extra)
        };
        let eq = u.eq.clone();
        let range: Vec<String> = u.range.iter().filter(|c| !eq.contains(c)).take(1).cloned().collect();
        let mut reasons = vec![];
        if !eq.is_empty() {
            reasons.push(why("equality", &eq));
        }
        if !range.is_empty() {
            reasons.push(why("range", &range));
        }
        let mut seek = eq.clone();
        seek.extend(range.iter().cloned());
        add(seek.clone(), reasons.join("; "));
        if let Some(extra) = covering(&seek) {
            add(
                [seek.clone(), extra.clone()].concat(),
                format!("{}; covering {}", reasons.join("; "), extra.join(", ")),
            );
        }
        // Ordered or grouped after the equalities: no sort.
        let sort: Vec<String> = u.sort.iter().filter(|c| !eq.contains(c)).cloned().collect();
        if !sort.is_empty() {
            let mut r: Vec<String> = reasons.iter().take(usize::from(!eq.is_empty())).cloned().collect();
            r.push(why("order", &sort));
            add([eq.clone(), sort].concat(), r.join("; "));
        }
        // Looked up by a join: its join columns, unless an index leads with
        // them already.
        let join: Vec<String> = u.join.iter().filter(|c| !eq.contains(c)).cloned().collect();
        let led = have.iter().any(|ix| ix.len() >= join.len() && ix[..join.len()] == join[..]);
        if !join.is_empty() && !led {
            let cols = [eq.clone(), join.clone()].concat();
            let mut r: Vec<String> = reasons.iter().take(usize::from(!eq.is_empty())).cloned().collect();
            r.push(why("join", &join));
            add(cols.clone(), r.join("; "));
            if let Some(extra) = covering(&cols) {
                add([cols, extra.clone()].concat(), format!("{}; covering {}", r.join("; "), extra.join(", ")));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cands(sql: &str, have: &[(&str, &[&str])]) -> Vec<(String, String)> {
        let existing = |t: &str| {
            have.iter()
                .filter(|(tt, _)| *tt == t)
                .map(|(_, cols)| cols.iter().map(|c| c.to_string()).collect())
                .collect::<Vec<Vec<String>>>()
        };
        candidates(sql, &existing).unwrap().into_iter().map(|c| (c.table, c.columns.join(","))).collect()
    }

    #[test]
    fn equality_columns_come_first_then_a_range_then_covering() {
        let got = cands("SELECT pad FROM t WHERE b > 10 AND a = 5 AND c IN (1, 2)", &[("t", &["id"])]);
        assert_eq!(got, [("t".into(), "a,c,b".into()), ("t".into(), "a,c,b,pad".into())]);
        // What exists, or is a prefix of what exists, is left out.
        let got = cands("SELECT pad FROM t WHERE a = 5", &[("t", &["a", "b"])]);
        assert_eq!(got, [("t".into(), "a,pad".into())]);
        assert!(cands("SELECT * FROM t WHERE a = 5", &[("t", &["a"])]).is_empty());
        // A sort the index can give.
        let got = cands("SELECT * FROM t WHERE a = 5 ORDER BY created LIMIT 10", &[]);
        assert_eq!(got, [("t".into(), "a".into()), ("t".into(), "a,created".into())]);
        // LIKE with a prefix is a range; with a leading wildcard it is not.
        assert_eq!(cands("SELECT * FROM t WHERE name LIKE 'ab%'", &[]), [("t".into(), "name".into())]);
        assert!(cands("SELECT * FROM t WHERE name LIKE '%ab'", &[]).is_empty());
    }

    #[test]
    fn a_join_gives_each_table_its_own_candidates() {
        let sql = "SELECT o.total, i.sku FROM orders AS o JOIN items i ON i.order_id = o.id WHERE o.customer = 7 AND o.placed > '2026-01-01'";
        let got = cands(sql, &[("orders", &["id"]), ("items", &["id"])]);
        assert_eq!(
            got,
            [
                ("orders".into(), "customer,placed".into()),
                ("orders".into(), "customer,placed,total".into()),
                ("items".into(), "order_id".into()),
                ("items".into(), "order_id,sku".into()),
            ]
        );
        assert!(candidates("UPDATE t SET a = 1", &|_| vec![]).is_err());
    }
}
