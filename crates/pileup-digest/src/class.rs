//! Per-class aggregation: counts, sums, extremes and percentiles of every
//! attribute, the hosts, users and databases seen, and a sample statement.
//! Memory grows with the number of classes and the spread of their values,
//! never with the number of statements.

use std::borrow::Cow;

use crate::attr::{A, N_ATTRS, N_FLAGS};

/// A histogram with 16 buckets per power of two (each a sixteenth of its
/// power of two: 3.1% to 6.25% of the values in it): a
/// value's bucket is the top 16 bits of its IEEE-754 double (sign,
/// exponent, 4 mantissa bits), so bucketing costs one shift. Small integers
/// up to 16 have buckets of their own; bucket 0 holds zeros.
///
/// Only buckets that saw a value are stored, sorted, until a histogram
/// holds many of them close together (a busy class's query times); then it
/// keeps a count for every bucket of its range, found by subtraction rather
/// than by search.
///
/// Written here: hdrhistogram keeps a dense array per histogram (kilobytes
/// each, for every attribute of every class), which would make memory grow
/// with classes × attributes × range rather than with what was seen.
#[derive(Clone, Debug, Default)]
pub enum Hist {
    #[default]
    Empty,
    /// One bucket: most attributes of most classes (a class seen a few
    /// times, a count that is always 0 or 1) need no more, and no
    /// allocation.
    One(u16, u32),
    Many(Box<Vec<(u16, u32)>>),
    Dense(Box<Dense>),
}

/// Counts of the buckets from `lo` on, and of zeros.
#[derive(Clone, Debug)]
pub struct Dense {
    zeros: u32,
    lo: u16,
    counts: Vec<u32>,
}

/// Sparse buckets past which a histogram turns dense, when they span at
/// most [`DENSE_SPAN`] buckets (2 KB of counts).
const DENSE_AFTER: usize = 48;
const DENSE_SPAN: usize = 512;

fn bucket(v: f64) -> u16 {
    if v > 0.0 && v.is_finite() {
        (v.to_bits() >> 48) as u16
    } else {
        0
    }
}

fn bucket_low(b: u16) -> f64 {
    f64::from_bits(u64::from(b) << 48)
}

impl Hist {
    pub fn add(&mut self, v: f64, n: u32) {
        self.add_bucket(bucket(v), n);
    }

    fn add_bucket(&mut self, b: u16, n: u32) {
        match self {
            Hist::Empty => *self = Hist::One(b, n),
            Hist::One(ob, on) if *ob == b => *on = on.saturating_add(n),
            Hist::One(ob, on) => {
                let mut v = vec![(*ob, *on), (b, n)];
                v.sort_unstable_by_key(|e| e.0);
                *self = Hist::Many(Box::new(v));
            }
            Hist::Dense(d) => {
                if b == 0 {
                    d.zeros = d.zeros.saturating_add(n);
                    return;
                }
                let (lo, len) = (usize::from(d.lo), d.counts.len());
                let b = usize::from(b);
                if b >= lo && b < lo + len {
                    d.counts[b - lo] = d.counts[b - lo].saturating_add(n);
                    return;
                }
                let (new_lo, new_end) = (lo.min(b), (lo + len).max(b + 1));
                if new_end - new_lo > DENSE_SPAN {
                    // Spread too wide: back to sparse, for good (a span
                    // never narrows).
                    let mut v: Vec<(u16, u32)> = self.raw().collect();
                    let at = v.partition_point(|e| usize::from(e.0) < b);
                    v.insert(at, (b as u16, n));
                    *self = Hist::Many(Box::new(v));
                    return;
                }
                if b < lo {
                    d.counts.splice(0..0, std::iter::repeat_n(0, lo - b));
                    d.lo = b as u16;
                } else {
                    d.counts.resize(b + 1 - lo, 0);
                }
                let i = b - usize::from(d.lo);
                d.counts[i] = d.counts[i].saturating_add(n);
            }
            Hist::Many(v) => {
                match v.binary_search_by_key(&b, |e| e.0) {
                    Ok(i) => v[i].1 = v[i].1.saturating_add(n),
                    Err(i) => v.insert(i, (b, n)),
                }
                if v.len() >= DENSE_AFTER {
                    // Buckets other than zeros', first to last.
                    let nonzero = &v[usize::from(v[0].0 == 0)..];
                    let (lo, hi) = (usize::from(nonzero[0].0), usize::from(nonzero[nonzero.len() - 1].0));
                    if hi - lo < DENSE_SPAN {
                        let mut d = Dense { zeros: 0, lo: lo as u16, counts: vec![0; hi - lo + 1] };
                        for &(b, n) in v.iter() {
                            match b {
                                0 => d.zeros = n,
                                b => d.counts[usize::from(b) - lo] = n,
                            }
                        }
                        *self = Hist::Dense(Box::new(d));
                    }
                }
            }
        }
    }

    pub fn merge(&mut self, o: &Hist) {
        for (b, n) in o.raw() {
            self.add_bucket(b, n);
        }
    }

    /// (bucket, count) of every bucket that saw a value, by bucket.
    fn raw(&self) -> impl Iterator<Item = (u16, u32)> + '_ {
        let one = match self {
            Hist::One(b, n) => Some((*b, *n)),
            Hist::Dense(d) if d.zeros > 0 => Some((0, d.zeros)),
            _ => None,
        };
        let many = match self {
            Hist::Many(v) => v.as_slice(),
            _ => &[],
        };
        let (lo, dense) = match self {
            Hist::Dense(d) => (d.lo, d.counts.as_slice()),
            _ => (0, &[][..]),
        };
        let dense = dense.iter().enumerate().filter(|e| *e.1 > 0).map(move |(i, n)| (lo + i as u16, *n));
        one.into_iter().chain(many.iter().copied()).chain(dense)
    }

    /// The value below which `q` (0..1) of the values fall: the bucket's
    /// lower bound for counts (exact up to 16), its middle for times.
    pub fn quantile(&self, q: f64, integer: bool) -> f64 {
        let total: u64 = self.raw().map(|e| u64::from(e.1)).sum();
        if total == 0 {
            return 0.0;
        }
        let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0u64;
        for (b, n) in self.raw() {
            seen += u64::from(n);
            if seen >= rank {
                if b == 0 {
                    return 0.0;
                }
                let lo = bucket_low(b);
                return if integer { lo } else { (lo + bucket_low(b + 1)) / 2.0 };
            }
        }
        0.0
    }

    /// Add `n` to the bucket whose lower bound is `low` (a stored row's).
    pub(crate) fn add_low(&mut self, low: f64, n: u32) {
        self.add_bucket(bucket(low), n);
    }

    /// The histogram of `buckets` as [`Hist::buckets`] gives them: each
    /// bucket's lower bound, exact as an f64, names the bucket again.
    pub fn from_buckets(buckets: impl IntoIterator<Item = (f64, u32)>) -> Hist {
        let mut h = Hist::default();
        for (low, n) in buckets {
            h.add_bucket(bucket(low), n);
        }
        h
    }

    /// (bucket lower bound, count) pairs, for histograms in reports.
    pub fn buckets(&self) -> impl Iterator<Item = (f64, u32)> + '_ {
        self.raw().map(|(b, n)| (if b == 0 { 0.0 } else { bucket_low(b) }, n))
    }
}

/// When a class ran: statements and their time in equal slices of time,
/// at most [`SERIES_POINTS`] of them. Slices are a power of two seconds,
/// aligned on the Unix epoch, so any two series can be merged: when a
/// series needs more slices than it may keep, its slices double.
#[derive(Clone, Debug, Default)]
pub struct Series {
    /// Seconds a slice covers (0: nothing yet).
    pub width: u64,
    /// (slice start, statements, seconds of statement time), by start; one
    /// slice (a class seen once or in one minute) is held inline.
    pub points: smallvec::SmallVec<[(i64, u32, f32); 1]>,
}

pub const SERIES_POINTS: usize = 48;

impl Series {
    pub(crate) fn add(&mut self, ts: i64, n: u32, t: f32) {
        // Unix times of 1970–2106 only (the log's own range): a garbled one
        // would stretch the slices past any use.
        if !(0..=i64::from(u32::MAX)).contains(&ts) {
            return;
        }
        if self.width == 0 {
            self.width = 1;
        }
        let start = ts.div_euclid(self.width as i64) * self.width as i64;
        // A log is in time order: its statements mostly fall in the last
        // slice.
        if let Some(last) = self.points.last_mut().filter(|l| l.0 == start) {
            last.1 = last.1.saturating_add(n);
            last.2 += t;
            return;
        }
        match self.points.binary_search_by_key(&start, |p| p.0) {
            Ok(i) => {
                self.points[i].1 = self.points[i].1.saturating_add(n);
                self.points[i].2 += t;
            }
            Err(i) => {
                self.points.insert(i, (start, n, t));
                while self.span() > SERIES_POINTS {
                    self.coarsen();
                }
            }
        }
    }

    /// Slices between the first and the last, inclusive.
    fn span(&self) -> usize {
        match (self.points.first(), self.points.last()) {
            (Some(a), Some(b)) => ((b.0 - a.0) as u64 / self.width) as usize + 1,
            _ => 0,
        }
    }

    fn coarsen(&mut self) {
        self.width = self.width.saturating_mul(2);
        let w = self.width as i64;
        let mut out: smallvec::SmallVec<[(i64, u32, f32); 1]> = smallvec::SmallVec::with_capacity(self.points.len());
        for &(s, n, t) in &self.points {
            let start = s.div_euclid(w) * w;
            match out.last_mut() {
                Some(l) if l.0 == start => {
                    l.1 = l.1.saturating_add(n);
                    l.2 += t;
                }
                _ => out.push((start, n, t)),
            }
        }
        self.points = out;
    }

    fn merge(&mut self, o: &Series) {
        if o.width == 0 {
            return;
        }
        while self.width != 0 && self.width < o.width {
            self.coarsen();
        }
        if self.width == 0 {
            self.width = o.width;
        }
        for &(s, n, t) in &o.points {
            self.add(s, n, t);
        }
    }
}

/// One attribute of one class.
#[derive(Clone, Debug)]
pub struct Stat {
    /// Statements that logged it.
    pub n: u32,
    pub sum: f64,
    pub min: f64,
    pub max: f64,
    pub hist: Hist,
}

impl Stat {
    /// `n` zeros.
    fn zeros(n: u32) -> Stat {
        Stat { n, sum: 0.0, min: 0.0, max: 0.0, hist: Hist::One(0, n) }
    }

    fn new(v: f64) -> Stat {
        let mut hist = Hist::default();
        hist.add(v, 1);
        Stat { n: 1, sum: v, min: v, max: v, hist }
    }

    /// Known by its sum only (performance_schema): no distribution and no
    /// min or max, and none is made up by what is added to it. (Without a
    /// distribution but with its extremes, a stat is a stored row's whose
    /// distribution is kept elsewhere or not at all: merged as any other,
    /// its percentiles come from the distributions merged into it.)
    fn is_summed(&self) -> bool {
        matches!(self.hist, Hist::Empty) && self.n > 0 && (self.min.is_nan() || self.max.is_nan())
    }

    fn add(&mut self, v: f64) {
        if self.is_summed() {
            self.n = self.n.saturating_add(1);
            self.sum += v;
            return;
        }
        self.n = self.n.saturating_add(1);
        self.sum += v;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        self.hist.add(v, 1);
    }

    fn merge(&mut self, o: &Stat) {
        if self.is_summed() || o.is_summed() {
            // Extremes stay known where both sides knew theirs (stored
            // rows of a log's digest keep them without a distribution).
            let known =
                |a: f64, b: f64, f: fn(f64, f64) -> f64| if a.is_nan() || b.is_nan() { f64::NAN } else { f(a, b) };
            let (min, max) = (known(self.min, o.min, f64::min), known(self.max, o.max, f64::max));
            *self = Stat::summed(self.n.saturating_add(o.n), self.sum + o.sum);
            if self.is_summed() {
                (self.min, self.max) = (min, max);
            }
            return;
        }
        self.n = self.n.saturating_add(o.n);
        self.sum += o.sum;
        self.min = self.min.min(o.min);
        self.max = self.max.max(o.max);
        self.hist.merge(&o.hist);
    }

    pub fn mean(&self) -> f64 {
        if self.n == 0 {
            0.0
        } else {
            self.sum / f64::from(self.n)
        }
    }

    /// A percentile, kept within what was seen; NaN where only sums are
    /// known (performance_schema).
    pub fn quantile(&self, q: f64, integer: bool) -> f64 {
        if self.min == self.max {
            // Every value the same (NaN, unknown, equals nothing).
            return self.min;
        }
        if matches!(self.hist, Hist::Empty) || self.min.is_nan() || self.max.is_nan() || self.min > self.max {
            return f64::NAN;
        }
        self.hist.quantile(q, integer).clamp(self.min, self.max)
    }

    /// `n` values of which only the sum is known.
    pub fn summed(n: u32, sum: f64) -> Stat {
        if sum == 0.0 {
            return Stat::zeros(n);
        }
        Stat { n, sum, min: f64::NAN, max: f64::NAN, hist: Hist::Empty }
    }
}

/// A host, user or database name, shared by every class that saw it.
pub type Name = std::sync::Arc<[u8]>;

/// Up to a few distinct values (hosts, users, databases) with counts; the
/// rest counted together. One value (the common case) is held inline.
#[derive(Clone, Debug, Default)]
pub struct Few {
    pub values: smallvec::SmallVec<[(Name, u64); 1]>,
    pub others: u64,
}

const FEW: usize = 8;

impl Few {
    pub(crate) fn add(&mut self, v: &[u8], n: u64, intern: &mut impl FnMut(&[u8]) -> Name) {
        if let Some(e) = self.values.iter_mut().find(|e| &*e.0 == v) {
            e.1 += n;
        } else if self.values.len() < FEW {
            self.values.push((intern(v), n));
        } else {
            self.others += n;
        }
    }

    fn merge(&mut self, o: &Few) {
        for (v, n) in &o.values {
            self.add(v, *n, &mut |_| v.clone());
        }
        self.others += o.others;
    }

    /// Values, most frequent first.
    pub fn sorted(&self) -> Vec<(String, u64)> {
        let mut v: Vec<(String, u64)> =
            self.values.iter().map(|(k, n)| (String::from_utf8_lossy(k).into_owned(), *n)).collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        v
    }
}

/// The statement kept as a class's example: its slowest.
#[derive(Clone, Debug, Default)]
pub struct Sample {
    pub query: Box<[u8]>,
    pub db: Option<Name>,
    pub query_time: f64,
    /// Unix time (seconds), when the log gave it.
    pub ts: Option<i64>,
    /// The logged EXPLAIN's header line (the same for most statements, so
    /// kept once for all), each line's `# explain: ` taken off.
    pub explain_head: Option<Name>,
    /// Its other lines, joined by newlines (tab-separated columns as
    /// logged).
    pub explain: Box<[u8]>,
    /// Where it was: input index and line.
    pub at: (usize, u64),
}

impl Sample {
    /// The logged EXPLAIN's lines, header first.
    pub fn explain_lines(&self) -> impl Iterator<Item = &[u8]> {
        self.explain_head.as_deref().into_iter().chain(self.explain.split(|&b| b == b'\n')).filter(|l| !l.is_empty())
    }

    /// Its database ("" when none was selected).
    pub fn db(&self) -> &[u8] {
        self.db.as_deref().unwrap_or(b"")
    }
}

/// Everything known about one statement as logged.
#[derive(Debug)]
pub struct Event<'a> {
    pub values: &'a [f64; N_ATTRS],
    /// Bit i: values[i] was logged.
    pub present: u64,
    /// Bit i: FLAGS[i] logged (as Yes or No); `flags_yes` the yeses.
    pub flags_seen: u32,
    pub flags_yes: u32,
    pub user: &'a [u8],
    pub host: &'a [u8],
    pub db: &'a [u8],
    pub ts: Option<i64>,
    pub query: &'a [u8],
    pub explain: &'a [&'a [u8]],
    pub at: (usize, u64),
}

impl Event<'_> {
    pub fn get(&self, a: A) -> Option<f64> {
        (self.present & (1 << a as usize) != 0).then(|| self.values[a as usize])
    }
}

/// Statements known by their sums only: `n` of them, `sums` per attribute,
/// `flags` as (flag, yeses), their database, when last seen, and a sample.
pub struct Summary<'a> {
    pub n: u64,
    pub sums: &'a [(A, f64)],
    pub flags: &'a [(usize, u64)],
    pub db: &'a [u8],
    pub last: Option<i64>,
    pub sample: &'a [u8],
}

const NONE: u8 = 0xFF;
const ZERO: u8 = 0x80;

/// One statement class.
#[derive(Clone, Debug)]
pub struct Class {
    pub fingerprint: Box<[u8]>,
    pub count: u64,
    /// The attributes its statements logged, with their attribute index,
    /// in the order first seen (only those present: memory follows what the
    /// log has).
    stats: Vec<(u8, Stat)>,
    /// Attributes that were 0 every time they were logged: (index, times
    /// logged). Many are (pages read from disk in a cached workload, rows
    /// affected by a SELECT), and they need no histogram.
    zeros: Vec<(u8, u32)>,
    /// Per attribute: its place in `stats` (below 0x80), or 0x80 + its
    /// place in `zeros`, or [`NONE`].
    slots: [u8; N_ATTRS],
    /// Per flag: statements that logged it, and those that said Yes.
    pub flags: [(u32, u32); N_FLAGS],
    pub first: Option<i64>,
    pub last: Option<i64>,
    pub hosts: Few,
    pub users: Few,
    pub dbs: Few,
    pub sample: Sample,
    pub series: Series,
}

impl Class {
    pub fn new(fingerprint: Box<[u8]>) -> Class {
        Class {
            fingerprint,
            count: 0,
            stats: Vec::new(),
            zeros: Vec::new(),
            slots: [NONE; N_ATTRS],
            flags: [(0, 0); N_FLAGS],
            first: None,
            last: None,
            hosts: Few::default(),
            users: Few::default(),
            dbs: Few::default(),
            sample: Sample::default(),
            series: Series::default(),
        }
    }

    pub fn stat(&self, a: A) -> Option<Cow<'_, Stat>> {
        match self.slots[a as usize] {
            NONE => None,
            s if s & ZERO != 0 => Some(Cow::Owned(Stat::zeros(self.zeros[usize::from(s & !ZERO)].1))),
            s => Some(Cow::Borrowed(&self.stats[usize::from(s)].1)),
        }
    }

    /// Attribute `a`'s distribution, taken out (left empty: its stat keeps
    /// its count, sum and extremes); none for an attribute not logged or
    /// always zero.
    pub fn take_hist(&mut self, a: A) -> Option<Hist> {
        match self.slots[a as usize] {
            s if s == NONE || s & ZERO != 0 => None,
            s => Some(std::mem::take(&mut self.stats[usize::from(s)].1.hist)),
        }
    }

    /// Put `h` in attribute `a`'s distribution, whose stat is kept (see
    /// [`Class::take_hist`]).
    pub fn set_hist(&mut self, a: A, h: Hist) {
        if let s @ 0..0x80 = self.slots[a as usize] {
            self.stats[usize::from(s)].1.hist = h;
        }
    }

    /// Every attribute logged: (index into [`crate::attr::ATTRS`], its
    /// stat), in index order.
    pub fn stats(&self) -> impl Iterator<Item = (usize, Cow<'_, Stat>)> {
        (0..N_ATTRS).filter_map(|i| {
            let a: A = crate::attr::from_index(i);
            self.stat(a).map(|s| (i, s))
        })
    }

    /// Add one logged value of attribute `i`: the two common cases (a
    /// stat already kept; another zero of an attribute always zero) at
    /// once, the rest through [`Class::add_value`].
    #[inline]
    fn add_logged(&mut self, i: u8, v: f64) {
        match self.slots[usize::from(i)] {
            NONE => {}
            s if s & ZERO == 0 => return self.stats[usize::from(s)].1.add(v),
            s if v == 0.0 => {
                let z = &mut self.zeros[usize::from(s & !ZERO)].1;
                *z = z.saturating_add(1);
                return;
            }
            _ => {}
        }
        self.add_value(i, Ok(v));
    }

    /// Add `n` values of attribute `i`: `v`, or a whole stat.
    fn add_value(&mut self, i: u8, v: Result<f64, &Stat>) {
        // A stat without a distribution (a stored row's) is kept as it is:
        // as zeros it would count its statements in a distribution of
        // zeros, and a merged distribution would hold them and not the
        // other rows' values.
        let is_zero = match v {
            Ok(x) => x == 0.0,
            Err(st) => st.sum == 0.0 && st.max == 0.0 && st.min == 0.0 && !matches!(st.hist, Hist::Empty),
        };
        let zero_n = |v: &Result<f64, &Stat>| match v {
            Ok(_) => 1,
            Err(st) => st.n,
        };
        match self.slots[usize::from(i)] {
            NONE if is_zero => {
                self.slots[usize::from(i)] = ZERO | self.zeros.len() as u8;
                self.zeros.push((i, zero_n(&v)));
            }
            NONE => {
                self.slots[usize::from(i)] = self.stats.len() as u8;
                self.stats.push((
                    i,
                    match v {
                        Ok(x) => Stat::new(x),
                        Err(st) => st.clone(),
                    },
                ));
            }
            s if s & ZERO != 0 => {
                let z = usize::from(s & !ZERO);
                if is_zero {
                    self.zeros[z].1 = self.zeros[z].1.saturating_add(zero_n(&v));
                    return;
                }
                let (_, n) = self.zeros.swap_remove(z);
                if let Some(moved) = self.zeros.get(z) {
                    self.slots[usize::from(moved.0)] = ZERO | z as u8;
                }
                let mut st = Stat::zeros(n);
                match v {
                    Ok(x) => st.add(x),
                    Err(o) => st.merge(o),
                }
                self.slots[usize::from(i)] = self.stats.len() as u8;
                self.stats.push((i, st));
            }
            s => match v {
                Ok(x) => self.stats[usize::from(s)].1.add(x),
                Err(o) => self.stats[usize::from(s)].1.merge(o),
            },
        }
    }

    /// Sum of an attribute (0 when never logged).
    pub fn sum(&self, a: A) -> f64 {
        self.stat(a).map_or(0.0, |s| s.sum)
    }

    pub fn add(&mut self, e: &Event, intern: &mut impl FnMut(&[u8]) -> Name) {
        if self.count == 0 {
            // Sized for the first statement's attributes exactly: most
            // classes of a varied log are seen once or twice, and doubling
            // growth would leave a third of their memory unused.
            let (mut zeros, mut others) = (0, 0);
            let mut bits = e.present;
            while bits != 0 {
                let i = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                if e.values[i] == 0.0 {
                    zeros += 1;
                } else {
                    others += 1;
                }
            }
            self.zeros.reserve_exact(zeros);
            self.stats.reserve_exact(others);
        }
        self.count += 1;
        let mut bits = e.present;
        while bits != 0 {
            let i = bits.trailing_zeros() as u8;
            bits &= bits - 1;
            self.add_logged(i, e.values[usize::from(i)]);
        }
        let mut bits = e.flags_seen;
        while bits != 0 {
            let i = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            self.flags[i].0 = self.flags[i].0.saturating_add(1);
            self.flags[i].1 = self.flags[i].1.saturating_add(e.flags_yes >> i & 1);
        }
        if let Some(t) = e.ts {
            self.first = Some(self.first.map_or(t, |f| f.min(t)));
            self.last = Some(self.last.map_or(t, |l| l.max(t)));
            self.series.add(t, 1, e.get(A::QueryTime).unwrap_or(0.0) as f32);
        }
        self.hosts.add(e.host, 1, intern);
        self.users.add(e.user, 1, intern);
        self.dbs.add(e.db, 1, intern);
        let qt = e.get(A::QueryTime).unwrap_or(0.0);
        if self.count == 1 || qt > self.sample.query_time {
            // Only a header line is shared (`id  select_type  table …`):
            // interned names are kept for the whole run.
            let head = e.explain.first().filter(|h| h.starts_with(b"id\t"));
            self.sample = Sample {
                query: e.query.into(),
                db: Some(intern(e.db)),
                query_time: qt,
                ts: e.ts,
                explain_head: head.map(|h| intern(h)),
                explain: e.explain[usize::from(head.is_some())..].join(&b'\n').into(),
                at: e.at,
            };
        }
    }

    /// Add statements known by their sums only (performance_schema's
    /// digests).
    pub fn add_summary(&mut self, sm: &Summary, intern: &mut impl FnMut(&[u8]) -> Name) {
        let Summary { n, sums, flags, db, last, sample } = *sm;
        let first_time = self.count == 0;
        self.count += n;
        let n32 = u32::try_from(n).unwrap_or(u32::MAX);
        for &(a, sum) in sums {
            self.add_value(a as u8, Err(&Stat::summed(n32, sum)));
        }
        for &(f, yes) in flags {
            self.flags[f].0 = self.flags[f].0.saturating_add(n32);
            self.flags[f].1 = self.flags[f].1.saturating_add(u32::try_from(yes.min(n)).unwrap_or(u32::MAX));
        }
        if let Some(t) = last {
            self.first = Some(self.first.map_or(t, |f| f.min(t)));
            self.last = Some(self.last.map_or(t, |l| l.max(t)));
        }
        self.dbs.add(db, n, intern);
        if first_time {
            self.sample = Sample {
                query: sample.into(),
                db: Some(intern(db)),
                query_time: 0.0,
                ts: last,
                explain_head: None,
                explain: Box::default(),
                at: (0, 0),
            };
        }
    }

    /// Add statements of attribute `i` known as `s` (a stored row's).
    pub fn add_stat(&mut self, i: usize, s: &Stat) {
        self.add_value(i as u8, Err(s));
    }

    pub fn merge(&mut self, o: &Class) {
        self.count += o.count;
        for (i, t) in &o.stats {
            self.add_value(*i, Err(t));
        }
        for (i, n) in &o.zeros {
            self.add_value(*i, Err(&Stat::zeros(*n)));
        }
        for (m, t) in self.flags.iter_mut().zip(&o.flags) {
            m.0 = m.0.saturating_add(t.0);
            m.1 = m.1.saturating_add(t.1);
        }
        self.first = match (self.first, o.first) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.last = match (self.last, o.last) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        self.hosts.merge(&o.hosts);
        self.users.merge(&o.users);
        self.dbs.merge(&o.dbs);
        self.series.merge(&o.series);
        // The slowest, and of equally slow ones the first in the input, as
        // one thread reading in order keeps: the same sample whatever the
        // number of threads.
        let (a, b) = (&o.sample, &self.sample);
        let slower = a.query_time > b.query_time || a.query_time == b.query_time && a.at < b.at;
        if o.count > 0 && (self.count == o.count || slower) {
            self.sample = o.sample.clone();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_quantiles_are_close_and_small_integers_exact() {
        let mut h = Hist::default();
        for v in 1..=100 {
            h.add(f64::from(v) / 1000.0, 1);
        }
        let p95 = h.quantile(0.95, false);
        assert!((p95 - 0.095).abs() / 0.095 < 0.05, "{p95}");
        let mut c = Hist::default();
        for v in [1.0, 2.0, 3.0, 3.0, 16.0, 0.0] {
            c.add(v, 1);
        }
        assert_eq!(c.quantile(0.5, true), 2.0);
        assert_eq!(c.quantile(1.0, true), 16.0);
        assert_eq!(c.quantile(0.01, true), 0.0);
    }

    /// Whatever form a histogram takes (one bucket, sparse, dense, sparse
    /// again past the dense span), it holds the counts a plain map of
    /// buckets holds, and merging gives what adding gives.
    #[test]
    fn every_form_of_histogram_counts_the_same() {
        let mut seed = 7u64;
        let mut rnd = || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            seed >> 33
        };
        for round in 0..40 {
            let (mut h, mut parts, mut want) = (Hist::default(), [Hist::default(), Hist::default()], Vec::new());
            for k in 0..2000 {
                // Times around a millisecond, zeros, and from some rounds
                // on, values far out that widen the span past dense.
                let v = match rnd() % 10 {
                    0 => 0.0,
                    1 if round > 20 => (rnd() % 1000) as f64 * 1e6,
                    _ => (1 + rnd() % 5000) as f64 * 1e-6,
                };
                let n = 1 + (rnd() % 3) as u32;
                h.add(v, n);
                parts[k % 2].add(v, n);
                want.push((bucket(v), n));
            }
            let mut map = std::collections::BTreeMap::new();
            for (b, n) in want {
                *map.entry(b).or_insert(0u32) += n;
            }
            let want: Vec<(u16, u32)> = map.into_iter().collect();
            assert_eq!(h.raw().collect::<Vec<_>>(), want, "round {round}");
            let [mut a, b] = parts;
            a.merge(&b);
            assert_eq!(a.raw().collect::<Vec<_>>(), want, "round {round}, merged");
            if round <= 20 {
                assert!(matches!(h, Hist::Dense(_)), "round {round}: {h:?}");
            } else {
                assert!(matches!(h, Hist::Many(_)), "round {round}: {h:?}");
            }
        }
    }

    #[test]
    fn series_keep_their_points_bounded_and_merge_at_the_coarser_width() {
        let mut a = Series::default();
        for m in 0..200 {
            a.add(1_000_020 + m * 60, 1, 0.5);
        }
        assert!(a.points.len() <= SERIES_POINTS, "{}", a.points.len());
        assert_eq!(a.points.iter().map(|p| p.1).sum::<u32>(), 200);
        assert_eq!(a.width, 256);
        let mut b = Series::default();
        b.add(1_000_020, 3, 1.0);
        b.merge(&a);
        assert_eq!(b.width, 256);
        assert_eq!(b.points.iter().map(|p| p.1).sum::<u32>(), 203);
        assert!(b.points.windows(2).all(|w| w[0].0 < w[1].0 && (w[1].0 - w[0].0) % 256 == 0));
    }

    #[test]
    fn sums_only_stay_sums_only() {
        let mut c = Class::new(Box::from(&b"x"[..]));
        let mut intern = |v: &[u8]| Name::from(v);
        let sm = |sums: &'static [(A, f64)]| Summary { n: 3, sums, flags: &[], db: b"d", last: None, sample: b"" };
        // Zero in one schema's digest, not in another's.
        c.add_summary(&sm(&[(A::QueryTime, 0.0)]), &mut intern);
        c.add_summary(&sm(&[(A::QueryTime, 2.0)]), &mut intern);
        let st = c.stat(A::QueryTime).unwrap();
        assert_eq!((st.n, st.sum), (6, 2.0));
        assert!(st.min.is_nan() && st.max.is_nan() && st.quantile(0.95, false).is_nan(), "{st:?}");
        // A garbled far-off time is left out of the series, not a panic.
        c.series.add(99_999_999_999, 1, 0.1);
        c.series.add(100, 1, 0.1);
        c.series.add(4_000_000_000, 1, 0.1);
        assert!(c.series.points.len() <= SERIES_POINTS);
    }

    #[test]
    fn merged_classes_equal_one_built_whole() {
        let values = |qt: f64| {
            let mut values = [0.0; N_ATTRS];
            values[A::QueryTime as usize] = qt;
            // Zero in the first half, not in the second: kept as zeros, then
            // turned into a full stat.
            values[A::RowsSent as usize] = if qt > 1.0 { 5.0 } else { 0.0 };
            values
        };
        let ev = |qt: f64, host: &'static [u8], values: &'static [f64; N_ATTRS]| Event {
            values,
            present: 1 | 1 << A::RowsSent as usize,
            flags_seen: 1 << 5,
            flags_yes: u32::from(qt > 1.0) << 5,
            user: b"u",
            host,
            db: b"d",
            ts: Some((qt * 10.0) as i64),
            query: b"select 1",
            explain: &[],
            at: (0, 1),
        };
        let mut whole = Class::new(Box::from(&b"x"[..]));
        let (mut a, mut b) = (whole.clone(), whole.clone());
        for (i, qt) in [0.5, 2.0, 0.1, 3.0].into_iter().enumerate() {
            let e = ev(qt, if i % 2 == 0 { b"h1" } else { b"h2" }, Box::leak(Box::new(values(qt))));
            let mut intern = |v: &[u8]| Name::from(v);
            whole.add(&e, &mut intern);
            if i < 2 { &mut a } else { &mut b }.add(&e, &mut intern);
        }
        a.merge(&b);
        let (s, t) = (whole.stat(A::QueryTime).unwrap(), a.stat(A::QueryTime).unwrap());
        assert_eq!((s.n, s.sum, s.min, s.max), (t.n, t.sum, t.min, t.max));
        assert_eq!(a.flags[5], (4, 2));
        let (s, t) = (whole.stat(A::RowsSent).unwrap(), a.stat(A::RowsSent).unwrap());
        assert_eq!((s.n, s.sum, s.min, s.max), (4, 10.0, 0.0, 5.0));
        assert_eq!((t.n, t.sum, t.min, t.max), (4, 10.0, 0.0, 5.0));
        assert_eq!(t.quantile(0.5, true), 0.0);
        assert_eq!(t.quantile(1.0, true), 5.0);
        assert_eq!((a.first, a.last), (Some(1), Some(30)));
        assert_eq!(a.sample.query_time, 3.0);
        assert_eq!(a.hosts.sorted(), vec![("h1".to_string(), 2), ("h2".to_string(), 2)]);
    }
}
