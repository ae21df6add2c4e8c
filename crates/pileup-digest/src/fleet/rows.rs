//! Rows to Arrow record batches and back, in one fixed schema: every file
//! of every host has the same columns, so engines read a fleet's files as
//! one table.

use std::sync::Arc;

use arrow_array::builder::{
    Float64Builder, ListBuilder, MapBuilder, StringBuilder, TimestampMillisecondBuilder, UInt16Builder, UInt32Builder,
    UInt64Builder,
};
use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, TimestampMillisecondType, UInt16Type, UInt32Type, UInt64Type};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};

use super::{Row, Samples, SAMPLE_MAX};
use crate::attr::{self, A, ATTRS, FLAGS, N_ATTRS};
use crate::class::{Class, Few, Hist, Name, Sample, Stat};
use crate::Error;

/// The columns, in order:
///
/// | column | type | |
/// |---|---|---|
/// | `minute` | timestamp (ms, UTC) | the minute's start |
/// | `host`, `labels` | string, map of strings | where the statements ran |
/// | `class_id` | string | `0x` and 16 hex digits, as the report names a class |
/// | `fingerprint_version`, `fingerprint` | uint16, string | the class |
/// | `db` | string | its most frequent database in the minute |
/// | `count` | uint64 | statements |
/// | `first_seen`, `last_seen` | timestamp (ms, UTC) | within the minute |
/// | `ATTR_n`, `_sum`, `_min`, `_max` | uint32, float64 ×3 | per attribute; null when not logged, min and max null when only sums are known; `_n` null when every statement logged it (`count`) |
/// | `query_time_bucket_low`, `query_time_bucket_count` | list of float64, list of uint32 | the statement time's histogram: each bucket's lower bound and count |
/// | `FLAG_seen`, `FLAG_yes` | uint32 | per flag: statements that logged it (null: all of them), and that said yes |
/// | `sample`, `sample_query_time` | string, float64 | the slowest statement, redacted by default |
pub fn schema() -> SchemaRef {
    let ts = || DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into()));
    let entries = Field::new(
        "entries",
        DataType::Struct(
            vec![Field::new("key", DataType::Utf8, false), Field::new("value", DataType::Utf8, true)].into(),
        ),
        false,
    );
    let mut f = vec![
        Field::new("minute", ts(), false),
        Field::new("host", DataType::Utf8, false),
        Field::new("labels", DataType::Map(Arc::new(entries), false), false),
        Field::new("class_id", DataType::Utf8, false),
        Field::new("fingerprint_version", DataType::UInt16, false),
        Field::new("fingerprint", DataType::Utf8, false),
        Field::new("db", DataType::Utf8, false),
        Field::new("count", DataType::UInt64, false),
        Field::new("first_seen", ts(), true),
        Field::new("last_seen", ts(), true),
    ];
    for a in ATTRS {
        f.push(Field::new(format!("{}_n", a.name), DataType::UInt32, true));
        for part in ["sum", "min", "max"] {
            f.push(Field::new(format!("{}_{part}", a.name), DataType::Float64, true));
        }
    }
    f.push(Field::new(
        "query_time_bucket_low",
        DataType::List(Arc::new(Field::new_list_field(DataType::Float64, false))),
        false,
    ));
    f.push(Field::new(
        "query_time_bucket_count",
        DataType::List(Arc::new(Field::new_list_field(DataType::UInt32, false))),
        false,
    ));
    for (flag, _) in FLAGS {
        f.push(Field::new(format!("{flag}_seen"), DataType::UInt32, true));
        f.push(Field::new(format!("{flag}_yes"), DataType::UInt32, false));
    }
    f.push(Field::new("sample", DataType::Utf8, true));
    f.push(Field::new("sample_query_time", DataType::Float64, true));
    Arc::new(Schema::new(f))
}

/// One attribute's four columns.
struct AttrCols {
    n: UInt32Builder,
    sum: Float64Builder,
    min: Float64Builder,
    max: Float64Builder,
}

impl AttrCols {
    /// `s` of a class of `count` statements: its `n` null when every
    /// statement logged it (most rows: a null costs a bit, a count bytes).
    fn add(&mut self, s: Option<&Stat>, count: u64) {
        match s.filter(|s| s.n > 0) {
            Some(s) => {
                self.n.append_option((u64::from(s.n) != count).then_some(s.n));
                self.sum.append_value(s.sum);
                self.min.append_option((!s.min.is_nan()).then_some(s.min));
                self.max.append_option((!s.max.is_nan()).then_some(s.max));
            }
            None => {
                self.n.append_null();
                self.sum.append_null();
                self.min.append_null();
                self.max.append_null();
            }
        }
    }
}

/// The text a row keeps of its class's sample.
fn sample_text(c: &Class, samples: Samples) -> Option<String> {
    let q = &c.sample.query;
    if q.is_empty() {
        return None;
    }
    match samples {
        Samples::None => None,
        Samples::Redacted => Some(pileup_sql::redact(q, SAMPLE_MAX)),
        Samples::Full => Some(pileup_sql::clip(q, SAMPLE_MAX, false)),
    }
}

/// `rows` as one record batch of [`schema`].
pub fn to_batch(rows: &[Row], samples: Samples) -> Result<RecordBatch, Error> {
    let ts = || TimestampMillisecondBuilder::with_capacity(rows.len()).with_timezone("UTC");
    let (mut minute, mut first, mut last) = (ts(), ts(), ts());
    let (mut host, mut class_id, mut fp, mut db) =
        (StringBuilder::new(), StringBuilder::new(), StringBuilder::new(), StringBuilder::new());
    let mut labels = MapBuilder::new(None, StringBuilder::new(), StringBuilder::new());
    let (mut version, mut count) = (UInt16Builder::new(), UInt64Builder::new());
    let mut attrs: Vec<AttrCols> = (0..N_ATTRS)
        .map(|_| AttrCols {
            n: UInt32Builder::new(),
            sum: Float64Builder::new(),
            min: Float64Builder::new(),
            max: Float64Builder::new(),
        })
        .collect();
    let mut lows = ListBuilder::new(Float64Builder::new()).with_field(Field::new_list_field(DataType::Float64, false));
    let mut counts = ListBuilder::new(UInt32Builder::new()).with_field(Field::new_list_field(DataType::UInt32, false));
    let mut flags: Vec<(UInt32Builder, UInt32Builder)> =
        FLAGS.iter().map(|_| (UInt32Builder::new(), UInt32Builder::new())).collect();
    let (mut sample, mut sample_qt) = (StringBuilder::new(), Float64Builder::new());
    for r in rows {
        let c = &r.class;
        minute.append_value(r.minute * 1000);
        host.append_value(&r.host);
        for (k, v) in &r.labels {
            labels.keys().append_value(k);
            labels.values().append_value(v);
        }
        labels.append(true).map_err(stored)?;
        class_id.append_value(crate::report::id(&c.fingerprint));
        version.append_value(pileup_sql::FINGERPRINT_VERSION);
        fp.append_value(String::from_utf8_lossy(&c.fingerprint));
        db.append_value(c.dbs.sorted().first().map_or("", |d| d.0.as_str()));
        count.append_value(c.count);
        first.append_option(c.first.map(|t| t * 1000));
        last.append_option(c.last.map(|t| t * 1000));
        for (i, cols) in attrs.iter_mut().enumerate() {
            cols.add(c.stat(attr::from_index(i)).as_deref(), c.count);
        }
        if let Some(s) = c.stat(A::QueryTime) {
            for (low, n) in s.hist.buckets() {
                lows.values().append_value(low);
                counts.values().append_value(n);
            }
        }
        lows.append(true);
        counts.append(true);
        for ((seen, yes), f) in flags.iter_mut().zip(&c.flags) {
            seen.append_option((u64::from(f.0) != c.count).then_some(f.0));
            yes.append_value(f.1);
        }
        let text = sample_text(c, samples);
        sample_qt.append_option(text.is_some().then_some(c.sample.query_time));
        sample.append_option(text);
    }
    let mut cols: Vec<ArrayRef> = vec![
        Arc::new(minute.finish()),
        Arc::new(host.finish()),
        Arc::new(labels.finish()),
        Arc::new(class_id.finish()),
        Arc::new(version.finish()),
        Arc::new(fp.finish()),
        Arc::new(db.finish()),
        Arc::new(count.finish()),
        Arc::new(first.finish()),
        Arc::new(last.finish()),
    ];
    for mut a in attrs {
        cols.push(Arc::new(a.n.finish()));
        cols.push(Arc::new(a.sum.finish()));
        cols.push(Arc::new(a.min.finish()));
        cols.push(Arc::new(a.max.finish()));
    }
    cols.push(Arc::new(lows.finish()));
    cols.push(Arc::new(counts.finish()));
    for (mut seen, mut yes) in flags {
        cols.push(Arc::new(seen.finish()));
        cols.push(Arc::new(yes.finish()));
    }
    cols.push(Arc::new(sample.finish()));
    cols.push(Arc::new(sample_qt.finish()));
    RecordBatch::try_new(schema(), cols).map_err(stored)
}

fn stored(e: impl std::fmt::Display) -> Error {
    Error::Stored(format!("a stored digest's rows: {e}"))
}

/// A batch's columns, looked up by name; a column the batch lacks (left
/// out by a projection, or from an older file) reads as absent.
struct Cols<'a>(&'a RecordBatch);

impl<'a> Cols<'a> {
    fn get(&self, name: &str) -> Option<&'a ArrayRef> {
        self.0.column_by_name(name)
    }

    fn need(&self, name: &str) -> Result<&'a ArrayRef, Error> {
        self.get(name).ok_or_else(|| stored(format!("no column {name}")))
    }

    fn text(&self, name: &str) -> Result<Text<'a>, Error> {
        Text::of(self.need(name)?).ok_or_else(|| stored(format!("{name} is not text")))
    }

    fn text_opt(&self, name: &str) -> Option<Text<'a>> {
        self.get(name).and_then(Text::of)
    }

    fn ts(&self, name: &str) -> Result<Option<&'a arrow_array::TimestampMillisecondArray>, Error> {
        self.get(name)
            .map(|c| {
                c.as_primitive_opt::<TimestampMillisecondType>().ok_or_else(|| stored(format!("{name} is not a time")))
            })
            .transpose()
    }

    fn u32(&self, name: &str) -> Result<Option<&'a arrow_array::UInt32Array>, Error> {
        self.get(name)
            .map(|c| c.as_primitive_opt::<UInt32Type>().ok_or_else(|| stored(format!("{name} is not a uint32"))))
            .transpose()
    }

    fn f64(&self, name: &str) -> Result<Option<&'a arrow_array::Float64Array>, Error> {
        self.get(name)
            .map(|c| c.as_primitive_opt::<Float64Type>().ok_or_else(|| stored(format!("{name} is not a float64"))))
            .transpose()
    }
}

fn opt<T: arrow_array::ArrowPrimitiveType>(a: Option<&arrow_array::PrimitiveArray<T>>, i: usize) -> Option<T::Native> {
    a.filter(|a| a.is_valid(i)).map(|a| a.value(i))
}

/// A text column: as made (`Utf8`), or as a file is read (`Utf8View`,
/// [`super::file::Opened`]), where the rows of a dictionary-encoded
/// column chunk share its dictionary's strings: two rows of the same
/// view hold the same text, found without comparing it.
#[derive(Clone, Copy)]
enum Text<'a> {
    Plain(&'a arrow_array::StringArray),
    Viewed(&'a arrow_array::StringViewArray),
}

impl<'a> Text<'a> {
    fn of(a: &'a ArrayRef) -> Option<Text<'a>> {
        a.as_string_opt::<i32>().map(Text::Plain).or_else(|| a.as_string_view_opt().map(Text::Viewed))
    }

    fn value(self, i: usize) -> &'a str {
        match self {
            Text::Plain(a) => a.value(i),
            Text::Viewed(a) => a.value(i),
        }
    }

    fn is_valid(self, i: usize) -> bool {
        match self {
            Text::Plain(a) => a.is_valid(i),
            Text::Viewed(a) => a.is_valid(i),
        }
    }

    /// Whether rows `i` and `j` hold the same text. A view holds a short
    /// text itself, and a long one's length, buffer and offset: equal
    /// views are equal texts.
    fn same(self, i: usize, j: usize) -> bool {
        match self {
            Text::Plain(a) => a.value(i) == a.value(j),
            Text::Viewed(a) => a.views()[i] == a.views()[j] || a.value(i) == a.value(j),
        }
    }
}

/// What a merge keeps beyond the attributes a batch has: the plan flags
/// (a flag whose columns a batch lacks reads as logged by every statement
/// and never set, so one not read is not kept), the time series of the
/// HTML report, and whether the hosts' labels were read (a batch without
/// the column reads as hosts without labels).
#[derive(Clone, Copy, Debug)]
pub struct Keep {
    pub flags: [bool; crate::attr::N_FLAGS],
    pub series: bool,
    pub labels: bool,
}

impl Default for Keep {
    fn default() -> Keep {
        Keep { flags: [true; crate::attr::N_FLAGS], series: true, labels: true }
    }
}

/// An attribute's columns in a batch.
type AttrRead<'a> = (
    Option<&'a arrow_array::UInt32Array>,
    Option<&'a arrow_array::Float64Array>,
    Option<&'a arrow_array::Float64Array>,
    Option<&'a arrow_array::Float64Array>,
);

/// The columns of a batch of [`schema`] (or of some of them: `minute`,
/// `host`, `fingerprint`, `fingerprint_version` and `count` are needed),
/// typed once, read a row at a time ([`View::row`]) or merged into a
/// class in place ([`View::merge_rows`]).
pub struct View<'a> {
    len: usize,
    minute: &'a arrow_array::TimestampMillisecondArray,
    host: Text<'a>,
    fp: Text<'a>,
    count: &'a arrow_array::UInt64Array,
    db: Option<Text<'a>>,
    labels: Option<&'a arrow_array::MapArray>,
    first: Option<&'a arrow_array::TimestampMillisecondArray>,
    last: Option<&'a arrow_array::TimestampMillisecondArray>,
    attrs: Vec<AttrRead<'a>>,
    lows: Option<&'a arrow_array::ListArray>,
    counts: Option<&'a arrow_array::ListArray>,
    flags: Vec<(Option<&'a arrow_array::UInt32Array>, Option<&'a arrow_array::UInt32Array>)>,
    sample: Option<Text<'a>>,
    sample_qt: Option<&'a arrow_array::Float64Array>,
}

impl<'a> View<'a> {
    /// The batch's columns, checked for their types and for the
    /// fingerprint version this pileup reads.
    pub fn new(b: &'a RecordBatch) -> Result<View<'a>, Error> {
        let c = Cols(b);
        let minute = c.ts("minute")?.ok_or_else(|| stored("no column minute"))?;
        let count = c.need("count")?.as_primitive_opt::<UInt64Type>().ok_or_else(|| stored("count is not a uint64"))?;
        let version = c
            .need("fingerprint_version")?
            .as_primitive_opt::<UInt16Type>()
            .ok_or_else(|| stored("fingerprint_version is not a uint16"))?;
        if let Some(v) = version.iter().flatten().find(|v| *v != pileup_sql::FINGERPRINT_VERSION) {
            return Err(stored(format!(
                "fingerprint version {v}, and this pileup reads version {} (use the pileup that wrote them)",
                pileup_sql::FINGERPRINT_VERSION
            )));
        }
        let attrs: Vec<AttrRead> = ATTRS
            .iter()
            .map(|a| {
                Ok((
                    c.u32(&format!("{}_n", a.name))?,
                    c.f64(&format!("{}_sum", a.name))?,
                    c.f64(&format!("{}_min", a.name))?,
                    c.f64(&format!("{}_max", a.name))?,
                ))
            })
            .collect::<Result<_, Error>>()?;
        let lows = c.get("query_time_bucket_low").and_then(|l| l.as_list_opt::<i32>());
        let counts = c.get("query_time_bucket_count").and_then(|l| l.as_list_opt::<i32>());
        let labels = c.get("labels").and_then(|l| l.as_map_opt());
        let buckets_typed = lows.is_none_or(|l| l.values().as_primitive_opt::<Float64Type>().is_some())
            && counts.is_none_or(|l| l.values().as_primitive_opt::<UInt32Type>().is_some());
        let labels_typed = labels
            .is_none_or(|m| m.keys().as_string_opt::<i32>().is_some() && m.values().as_string_opt::<i32>().is_some());
        if !buckets_typed || !labels_typed {
            return Err(stored("the histogram or label columns are not of the stored schema's types"));
        }
        let flags: Vec<_> = FLAGS
            .iter()
            .map(|(f, _)| Ok((c.u32(&format!("{f}_seen"))?, c.u32(&format!("{f}_yes"))?)))
            .collect::<Result<_, Error>>()?;
        Ok(View {
            len: b.num_rows(),
            minute,
            host: c.text("host")?,
            fp: c.text("fingerprint")?,
            count,
            db: c.text_opt("db"),
            labels,
            first: c.ts("first_seen")?,
            last: c.ts("last_seen")?,
            attrs,
            lows,
            counts,
            flags,
            sample: c.text_opt("sample"),
            sample_qt: c.f64("sample_query_time")?,
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Row `i`'s minute, Unix seconds.
    pub fn minute(&self, i: usize) -> i64 {
        self.minute.value(i).div_euclid(1000)
    }

    pub fn host(&self, i: usize) -> &'a str {
        self.host.value(i)
    }

    pub fn fingerprint(&self, i: usize) -> &'a str {
        self.fp.value(i)
    }

    /// Whether rows `i` and `j` are of one host.
    pub fn same_host(&self, i: usize, j: usize) -> bool {
        self.host.same(i, j)
    }

    /// Whether rows `i` and `j` are of one class.
    pub fn same_class(&self, i: usize, j: usize) -> bool {
        self.fp.same(i, j)
    }

    pub fn count(&self, i: usize) -> u64 {
        self.count.value(i)
    }

    /// Row `i`'s statements as an attribute's count is kept (the count of
    /// a row whose `_n` is null).
    fn statements(&self, i: usize) -> u32 {
        u32::try_from(self.count(i)).unwrap_or(u32::MAX)
    }

    /// Row `i`'s statement time (0 when not logged).
    pub fn query_time(&self, i: usize) -> f64 {
        let (n, sum, _, _) = self.attrs[A::QueryTime as usize];
        match opt(sum, i) {
            Some(s) if opt(n, i).unwrap_or(self.statements(i)) > 0 => s,
            _ => 0.0,
        }
    }

    /// Row `i`'s statement-time histogram: each bucket's lower bound and
    /// count, read in place (a list's `value(i)` is an array made per row).
    fn buckets(&self, i: usize) -> Option<(&'a [f64], &'a [u32])> {
        let (l, c) = (self.lows?, self.counts?);
        if !l.is_valid(i) || !c.is_valid(i) {
            return None;
        }
        let span = |a: &arrow_array::ListArray| {
            let o = a.value_offsets();
            o[i] as usize..o[i + 1] as usize
        };
        let lows = &l.values().as_primitive::<Float64Type>().values()[span(l)];
        let counts = &c.values().as_primitive::<UInt32Type>().values()[span(c)];
        Some((lows, counts))
    }

    /// The statement time of row `i`'s sample (0 without one).
    fn sample_time(&self, i: usize) -> f64 {
        self.sample.filter(|s| s.is_valid(i)).map_or(0.0, |_| opt(self.sample_qt, i).unwrap_or(0.0))
    }

    /// Whether row `i` has labels (read without making them).
    pub fn has_labels(&self, i: usize) -> bool {
        self.labels.is_some_and(|m| m.is_valid(i) && m.value_offsets()[i + 1] > m.value_offsets()[i])
    }

    /// Row `i`'s labels.
    pub fn labels(&self, i: usize) -> Vec<(String, String)> {
        labels_at(self.labels, i)
    }

    /// Attribute `k` of row `i`: none when not logged.
    fn stat(&self, k: usize, i: usize) -> Option<Stat> {
        let (n, sum, min, max) = self.attrs[k];
        // Logged when its sum is there; by every statement when its `n` is
        // null.
        let sum = opt(sum, i)?;
        let n = opt(n, i).unwrap_or(self.statements(i));
        if n == 0 {
            return None;
        }
        let hist = match self.buckets(i).filter(|_| k == A::QueryTime as usize) {
            Some((lows, counts)) => Hist::from_buckets(lows.iter().copied().zip(counts.iter().copied())),
            None => Hist::Empty,
        };
        Some(Stat { n, sum, min: opt(min, i).unwrap_or(f64::NAN), max: opt(max, i).unwrap_or(f64::NAN), hist })
    }

    /// Row `i`'s sample statement, with its database `db`.
    fn sample(&self, i: usize, db: &Name) -> Sample {
        match self.sample.filter(|s| s.is_valid(i)) {
            Some(s) => Sample {
                query: s.value(i).as_bytes().into(),
                db: Some(db.clone()),
                query_time: self.sample_time(i),
                ..Sample::default()
            },
            None => Sample::default(),
        }
    }

    fn db(&self, i: usize) -> &'a str {
        self.db.map_or("", |d| d.value(i))
    }

    /// Row `i` as a row of its own.
    pub fn row(&self, i: usize) -> Row {
        let mut class = Class::new(self.fp.value(i).as_bytes().into());
        class.count = self.count(i);
        class.first = opt(self.first, i).map(|t| t.div_euclid(1000));
        class.last = opt(self.last, i).map(|t| t.div_euclid(1000));
        let all = self.statements(i);
        for k in 0..N_ATTRS {
            if let Some(st) = self.stat(k, i) {
                class.add_stat(k, &st);
            }
        }
        for (slot, (seen, yes)) in class.flags.iter_mut().zip(&self.flags) {
            *slot = (opt(*seen, i).unwrap_or(all), opt(*yes, i).unwrap_or(0));
        }
        let db_name: Name = Name::from(self.db(i).as_bytes());
        if !db_name.is_empty() {
            class.dbs = Few { values: smallvec::smallvec![(db_name.clone(), class.count)], others: 0 };
        }
        class.sample = self.sample(i, &db_name);
        let minute = self.minute(i);
        class.series.add(minute, all, class.sum(A::QueryTime) as f32);
        Row { minute, host: self.host(i).to_string(), labels: self.labels(i), class }
    }

    /// Rows `rows` (of one class on one host) merged into `class`: what
    /// merging each [`View::row`]'s class gives, without making them, an
    /// attribute at a time over the rows. `names` gives a database name's
    /// shared copy.
    pub fn merge_rows(&self, rows: &[usize], class: &mut Class, keep: &Keep, names: &mut impl FnMut(&str) -> Name) {
        let Some(&first) = rows.first() else { return };
        let was_empty = class.count == 0;
        class.count += rows.iter().map(|&i| self.count(i)).sum::<u64>();
        for k in 0..N_ATTRS {
            if self.attrs[k].1.is_none() {
                continue;
            }
            match self.sum_rows(k, rows) {
                Some(st) => class.add_stat(k, &st),
                // Extremes unknown (sums only), or zeros: merged a row at a
                // time, as such rows merge.
                None => {
                    for &i in rows {
                        if let Some(st) = self.stat(k, i) {
                            class.add_stat(k, &st);
                        }
                    }
                }
            }
        }
        for ((slot, (seen, yes)), _) in class.flags.iter_mut().zip(&self.flags).zip(keep.flags).filter(|f| f.1) {
            for &i in rows {
                slot.0 = slot.0.saturating_add(opt(*seen, i).unwrap_or(self.statements(i)));
                slot.1 = slot.1.saturating_add(opt(*yes, i).unwrap_or(0));
            }
        }
        let (first_col, last_col) = (self.first, self.last);
        if let Some(t) = rows.iter().filter_map(|&i| opt(first_col, i)).min() {
            let t = t.div_euclid(1000);
            class.first = Some(class.first.map_or(t, |f| f.min(t)));
        }
        if let Some(t) = rows.iter().filter_map(|&i| opt(last_col, i)).max() {
            let t = t.div_euclid(1000);
            class.last = Some(class.last.map_or(t, |l| l.max(t)));
        }
        // Databases: a count per run of rows naming the same one.
        if let Some(col) = self.db {
            let mut add = |at: usize, n: u64| {
                let name = col.value(at);
                if !name.is_empty() {
                    class.dbs.add(name.as_bytes(), n, &mut |_| names(name));
                }
            };
            let mut run = (first, 0u64);
            for &i in rows {
                if !col.same(i, run.0) {
                    add(run.0, run.1);
                    run = (i, 0);
                }
                run.1 += self.count(i);
            }
            add(run.0, run.1);
        }
        if keep.series {
            for &i in rows {
                class.series.add(self.minute(i), self.statements(i), self.query_time(i) as f32);
            }
        }
        // The slowest sample; of a class new here, the first row's
        // whatever it is (as `Class::merge` keeps them: a row of no
        // statement gives none).
        let mut counted = rows.iter().copied().filter(|&i| self.count(i) > 0);
        let mut best = if was_empty { counted.next().map(|i| (i, self.sample_time(i))) } else { None };
        for i in counted {
            let floor = best.map_or(class.sample.query_time, |b| b.1);
            if self.sample_time(i) > floor {
                best = Some((i, self.sample_time(i)));
            }
        }
        if let Some((i, _)) = best {
            class.sample = self.sample(i, &names(self.db(i)));
        }
    }

    /// Attribute `k` of `rows` as one stat: counts and sums added, the
    /// extremes of the rows' extremes, their distributions' buckets added
    /// (no per-row histogram is made). None when a row knows only its sum
    /// or every value is zero with a distribution (such rows merge as the
    /// class's rules for them say), or no row logged it.
    fn sum_rows(&self, k: usize, rows: &[usize]) -> Option<Stat> {
        let (n_col, sum_col, min_col, max_col) = self.attrs[k];
        let sum_col = sum_col?;
        let (mut n, mut sum, mut min, mut max, mut any) = (0u32, 0.0, f64::INFINITY, f64::NEG_INFINITY, false);
        let mut hist = Hist::Empty;
        let with_hist = k == A::QueryTime as usize && self.lows.is_some();
        for &i in rows {
            if !sum_col.is_valid(i) {
                continue;
            }
            let rn = opt(n_col, i).unwrap_or(self.statements(i));
            if rn == 0 {
                continue;
            }
            let (lo, hi) = (opt(min_col, i)?, opt(max_col, i)?);
            any = true;
            n = n.saturating_add(rn);
            sum += sum_col.value(i);
            min = min.min(lo);
            max = max.max(hi);
            if let Some((lows, counts)) = with_hist.then(|| self.buckets(i)).flatten() {
                for (low, cn) in lows.iter().zip(counts) {
                    hist.add_low(*low, *cn);
                }
            }
        }
        // Zeros with a distribution become a class's count of zeros, which
        // holds its own: merged a row at a time.
        let zeros = sum == 0.0 && min == 0.0 && max == 0.0 && !matches!(hist, Hist::Empty);
        (any && !zeros).then_some(Stat { n, sum, min, max, hist })
    }
}

/// Row `i`'s labels.
fn labels_at(labels: Option<&arrow_array::MapArray>, i: usize) -> Vec<(String, String)> {
    labels.map_or(vec![], |m| {
        let e = m.value(i);
        let (k, v) = (e.column(0).as_string::<i32>(), e.column(1).as_string::<i32>());
        (0..e.len()).map(|j| (k.value(j).to_string(), v.value(j).to_string())).collect()
    })
}

/// The rows of a batch of [`schema`] (or of some of its columns: `minute`,
/// `host`, `fingerprint` and `count` are needed).
pub fn from_batch(b: &RecordBatch) -> Result<Vec<Row>, Error> {
    let v = View::new(b)?;
    Ok((0..v.len()).map(|i| v.row(i)).collect())
}
