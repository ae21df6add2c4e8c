//! watch's decisions as a state machine: given what each poll and each pulse
//! of the thread scan showed, and a clock, which captures start, which early
//! capture is kept, taken again, handed over or dropped, what is reported.
//!
//! The loop in [`crate::watch`] feeds it and carries out its [`Action`]s
//! (spawning captures, reading the metric history, writing the store); this
//! module touches no server, thread or clock, so every rule is tested here
//! with scripted timelines.
//!
//! Rules:
//! * A trigger whose condition starts to hold begins an **early capture**
//!   at once (the first stacks show the stall's start, not the end of its
//!   hold), within the [`Scheduler`]'s limits. It is kept when the trigger
//!   fires, or when any other trigger fires or a pile-up lasts or short
//!   stalls repeat while it runs (it is that stall's evidence).
//! * When its condition clears, it is handed to a pile-up the scan still
//!   sees, or to another trigger still in its hold; otherwise dropped.
//! * Another condition that begins after it has gathered makes it gather
//!   again (its evidence is of what came before), spaced like early
//!   captures.
//! * The threads **stirring** (the scan's pulse short of a pile-up) begin
//!   an early capture too, at most once per [`STIR_CAPTURE_GAP_SECS`]:
//!   kept when a trigger fires, handed to a trigger in its hold or dropped
//!   after [`STIR_CONFIRM_SECS`].
//! * A **pile-up** (the scan's pulse) begins an early capture too; refused
//!   (another capture finishing, the gap between early captures), it is
//!   tried again at each scan interval until it starts or the pile-up ends.
//!   It is kept when the pile-up lasts or short stalls repeat; a pile-up
//!   that ends short drops it, or hands it to a trigger in its hold.
//! * **Short stalls** that repeat ([`SHORT_STALLS_TO_CAPTURE`] in
//!   [`SHORT_STALL_WINDOW_SECS`]) are captured: the running early capture
//!   is kept, or, with none, one is taken as the last ends.
//! * A trigger that fires with no early capture running starts a capture,
//!   or is reported skipped with the limit that refused it.

use std::collections::{BTreeMap, VecDeque};

use crate::scan::{Pulse, Stall, LASTING_SECS};
use crate::schedule::{Limits, Scheduler};
use crate::trigger::{Armed, Context, Step, Trigger};

/// A window in which short stalls are counted…
pub const SHORT_STALL_WINDOW_SECS: f64 = 600.0;
/// …and how many of them in it make a capture.
pub const SHORT_STALLS_TO_CAPTURE: usize = 3;
/// A capture begun when the threads stirred waits this long for a trigger
/// to keep it…
pub const STIR_CONFIRM_SECS: f64 = 2.0;
/// …and another is begun by a stir no sooner than this after it: a server
/// whose threads stir often pays a stack sample a few times a minute.
pub const STIR_CAPTURE_GAP_SECS: f64 = 10.0;
/// Short stalls that overlap (or touch, within this) are one episode.
pub const EPISODE_GAP_SECS: f64 = 0.05;
/// A trigger's condition seen on this many polls, cleared before its hold,
/// is a short stall; one poll's sight of it is a blip.
pub const SHORT_STALL_POLLS: u32 = 2;

/// What the loop reports, in order.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// The watcher has its history store and begins polling.
    Started {
        /// The server, as the connection names it.
        server: String,
        /// Its process, when it is on this machine.
        pid: Option<i32>,
        interval_ms: u64,
        data_dir: String,
        /// Every trigger, as written.
        triggers: Vec<String>,
    },
    Listening {
        addr: String,
        /// `http` or `https`.
        scheme: String,
        /// Why the profile endpoints answer 403 there, when they do.
        #[serde(skip_serializing_if = "Option::is_none")]
        profiles_refused: Option<String>,
    },
    /// The server came back as another process (restarted): stacks, OS
    /// figures and profiles follow the new one.
    ServerRestarted {
        unix: f64,
        old_pid: i32,
        new_pid: i32,
    },
    Poll {
        unix: f64,
        ok: bool,
        cost_ms: f64,
        error: Option<String>,
        derived: BTreeMap<String, f64>,
    },
    Fired {
        unix: f64,
        trigger: String,
        onset_unix: f64,
    },
    /// The thread scan saw threads held up (the start of a pile-up).
    PileUp {
        unix: f64,
        began_unix: f64,
        blocked: u32,
        baseline: u32,
    },
    /// A short stall ended: a pile-up (timed to the scan interval), or a
    /// trigger's condition that cleared before its hold (`what`: the
    /// trigger's name or text; timed to the polls).
    Stall {
        began_unix: f64,
        ended_unix: f64,
        ms: f64,
        peak_blocked: u32,
        baseline: u32,
        #[serde(skip_serializing_if = "Option::is_none")]
        what: Option<String>,
        /// Still on when watch stopped: it ended no earlier than
        /// `ended_unix`, the last poll that saw it.
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        ongoing: bool,
    },
    Skipped {
        unix: f64,
        trigger: String,
        why: String,
    },
    Captured {
        unix: f64,
        trigger: String,
        dir: String,
        verdict: String,
        onset_to_first_stack_ms: Option<f64>,
    },
    CaptureFailed {
        unix: f64,
        trigger: String,
        error: String,
    },
    /// What the shipper did with captures (`--ship`).
    Ship(pileup_store::ShipEvent),
    /// The history store could not be written (a full or read-only disk):
    /// polls and captures go on.
    StoreFailed {
        unix: f64,
        error: String,
    },
    /// It can be written again, after `failed` writes that could not be.
    StoreRecovered {
        unix: f64,
        failed: u64,
    },
}

/// What the loop is to do. Captures named here take the metric history
/// up to `unix` (or `fired`).
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Report this.
    Tell(Event),
    /// Record a pile-up that ended.
    RecordStall(Stall),
    /// Start a capture now (already counted against the limits).
    Capture { trigger: String, unix: f64, onset: f64 },
    /// Start an early capture now: it gathers at once and waits for
    /// [`Action::Keep`], [`Action::Retake`] or [`Action::Drop`].
    CaptureEarly { trigger: String, unix: f64, onset: f64 },
    /// Keep the early capture, under `trigger` fired at `fired`, for a
    /// condition that began at `onset`.
    Keep { trigger: String, fired: f64, onset: f64 },
    /// The early capture gathers again, for a condition that began after
    /// its evidence was taken.
    Retake { trigger: String, unix: f64, onset: f64 },
    /// Drop the early capture (its sampling ends after the current sample).
    Drop,
}

/// A stall that ended (or, `ongoing`, was still on when watch stopped),
/// as the loop tells it.
fn stall_event(st: &Stall, ongoing: bool) -> Event {
    Event::Stall {
        began_unix: st.began_unix,
        ended_unix: st.ended_unix,
        ms: st.ms(),
        peak_blocked: st.peak_blocked,
        baseline: st.baseline,
        what: st.what.clone(),
        ongoing,
    }
}

/// What a poll showed the decisions: its time, how to judge the triggers,
/// the data directory's free bytes, and whether the running early capture
/// (if any) has gathered its evidence.
pub struct PollSeen<'a> {
    pub unix: f64,
    pub ctx: &'a dyn Context,
    pub free: Option<u64>,
    /// When the running early capture (if any) finished gathering.
    pub early_gathered: Option<f64>,
}

/// A condition that begins within this long of an early capture's last
/// stack is part of what that capture saw begin (writers queueing a
/// moment after the flushing that stalls them): the capture is its
/// evidence, lead-up included. One that begins later gets evidence of its
/// own.
pub const EARLY_FRESH_SECS: f64 = 2.0;
/// A condition seen on [`SHORT_STALL_POLLS`] polls or more that cleared
/// less than this long after it was last seen is flickering about its
/// threshold (a checkpoint age that synchronous flushing pulls back for a
/// moment, again and again): its early capture waits for it to come back
/// rather than being dropped (unless another trigger's condition holds),
/// and a capture begun by a stir goes to it. A blip seen on one poll is
/// not flickering.
pub const FLICKER_SECS: f64 = 1.0;

/// watch's decisions.
pub struct Decider {
    triggers: Vec<Trigger>,
    armed: Vec<Armed>,
    /// Until when each trigger's condition, cleared after a short stall,
    /// counts as flickering (Unix seconds).
    flicker_until: Vec<f64>,
    /// When each trigger's condition last held.
    last_held: Vec<f64>,
    /// When each trigger's current episode began: its first hold, kept
    /// while the condition flickers.
    episode: Vec<Option<f64>>,
    /// For a trigger that fired in its current episode, when that episode
    /// began: its stall is recorded, start to end, when the condition
    /// clears.
    fired_episode: Vec<Option<f64>>,
    /// The first poll that saw each trigger's condition clear since it last
    /// held: a fired stall's end, once it stays clear past the flicker.
    cleared_at: Vec<Option<f64>>,
    /// The latest poll's time.
    last_poll: f64,
    sched: Scheduler<()>,
    /// Early captures may be taken (a local server's process is known).
    early_ok: bool,
    /// The early capture begun by the scan is known by this index, one
    /// past the triggers'.
    scan_idx: usize,
    /// When the pile-up the scan sees began.
    open_pileup: Option<f64>,
    /// A pile-up no capture has begun for yet: (began, blocked, usual).
    uncaptured: Option<(f64, u32, u32)>,
    /// When recent short stalls ended, one per episode.
    short_stalls: VecDeque<f64>,
    /// When the last capture begun by a stir started, and until when it
    /// waits to be kept.
    last_stir_capture: Option<f64>,
    stir_capture_until: Option<f64>,
    /// When the last short stall counted ended: those that overlap it (the
    /// same episode seen by several triggers, or by a trigger and the scan)
    /// count once.
    last_counted_end: f64,
}

impl Decider {
    pub fn new(triggers: Vec<Trigger>, limits: Limits, early_ok: bool) -> Decider {
        let n = triggers.len();
        Decider {
            triggers,
            armed: vec![Armed::default(); n],
            flicker_until: vec![f64::MIN; n],
            last_held: vec![f64::MIN; n],
            episode: vec![None; n],
            fired_episode: vec![None; n],
            cleared_at: vec![None; n],
            last_poll: f64::MIN,
            sched: Scheduler::new(limits),
            early_ok,
            scan_idx: n,
            open_pileup: None,
            uncaptured: None,
            short_stalls: VecDeque::new(),
            last_counted_end: f64::MIN,
            last_stir_capture: None,
            stir_capture_until: None,
        }
    }

    /// The schedule (running captures, reports to rebuild).
    pub fn schedule(&mut self) -> &mut Scheduler<()> {
        &mut self.sched
    }

    /// A pile-up waits for its early capture: the loop should come back at
    /// each scan interval even without a pulse.
    pub fn waiting_to_capture(&self) -> bool {
        self.uncaptured.is_some()
    }

    /// Some trigger's condition holds and has not fired yet: polls should
    /// come fast until it is decided.
    pub fn pending(&self) -> bool {
        self.armed.iter().any(Armed::in_hold) || self.flicker_until.iter().any(|t| self.last_poll < *t)
    }

    /// A capture finished (written, failed or dropped).
    pub fn finished(&mut self) {
        self.sched.finished();
    }

    /// Judge every trigger at a poll; `now` is monotonic seconds.
    pub fn poll(&mut self, p: &PollSeen, now: f64) -> Vec<Action> {
        let mut out = vec![];
        // Every trigger is judged first, so that a capture whose condition
        // clears goes to another that begins its hold at this same poll.
        let judged: Vec<(Option<f64>, u32, Step)> = (0..self.triggers.len())
            .map(|i| {
                let held_since = self.armed[i].since().filter(|_| self.armed[i].in_hold());
                let seen = self.armed[i].polls();
                (held_since, seen, self.armed[i].step(&self.triggers[i], p.unix, p.ctx))
            })
            .collect();
        for (i, (held_since, seen, step)) in judged.into_iter().enumerate() {
            let since = self.armed[i].since();
            let first_clear = step == Step::Idle && self.last_held[i] == self.last_poll;
            if step == Step::Idle && held_since.is_some() && seen >= SHORT_STALL_POLLS {
                self.flicker_until[i] = self.last_held[i] + FLICKER_SECS;
            }
            // A fired stall that clears may come back at once: one stall,
            // not two, unless it stays clear past the flicker.
            if first_clear && self.fired_episode[i].is_some() {
                self.flicker_until[i] = self.last_held[i] + FLICKER_SECS;
            }
            let flickering = step == Step::Idle && p.unix < self.flicker_until[i];
            if step != Step::Idle {
                self.last_held[i] = p.unix;
                self.cleared_at[i] = None;
                // A hold begun while flickering continues the episode.
                self.episode[i] = self.episode[i].or(since);
            } else {
                self.cleared_at[i] = self.cleared_at[i].or(Some(p.unix));
                if !flickering {
                    if let Some(began) = self.fired_episode[i].take() {
                        // The stall it fired for is over: from its first
                        // hold to the poll that saw it clear.
                        let st = self.trigger_stall(i, began, self.cleared_at[i].unwrap_or(p.unix));
                        out.push(Action::RecordStall(st.clone()));
                        out.push(Action::Tell(stall_event(&st, false)));
                    }
                    self.episode[i] = None;
                }
            }
            if let (Some(began), Step::Idle, true) = (held_since, step, seen >= SHORT_STALL_POLLS) {
                // Cleared before its hold: a short stall of its kind (its
                // early capture kept if such stalls repeat, else dropped below).
                let st = self.trigger_stall(i, began, p.unix);
                self.short_stall(st, p.unix, now, p.free, &mut out);
            }
            // From the first hold of a flickering episode; the scan times a
            // pile-up's start to its interval.
            let began = self.episode[i].or(since).unwrap_or(p.unix);
            // Back after a dip of a stall it already fired for: the same
            // stall, captured already (no early capture, no second firing).
            let again = matches!(step, Step::Pending | Step::Fire) && self.fired_episode[i].is_some();
            let step = if again { Step::Ongoing } else { step };
            if step == Step::Fire {
                self.fired_episode[i] = Some(began);
            }
            let onset = self.open_pileup.map_or(began, |b| b.min(began));
            let text = self.triggers[i].text.clone();
            if self.sched.early_trigger() == Some(i) && flickering && self.in_hold(i).is_none() {
                // Cleared a moment ago after holding a while: wait for it
                // to come back.
            } else if self.sched.early_trigger() == Some(i) {
                self.own_early(i, step, text, p.unix, onset, now, &mut out);
            } else if step == Step::Pending && self.triggers[i].hold > 0.0 && self.early_ok {
                self.hold_began(i, since == Some(p.unix), p, onset, now, &mut out);
            } else if step == Step::Fire {
                out.push(Action::Tell(Event::Fired { unix: p.unix, trigger: text.clone(), onset_unix: onset }));
                self.capture(text, p.unix, onset, now, p.free, true, &mut out);
            }
        }
        self.last_poll = p.unix;
        self.stir_unconfirmed(now, &mut out);
        out
    }

    /// A capture begun when the threads stirred and not kept within
    /// [`STIR_CONFIRM_SECS`] goes to a trigger still in its hold, or is
    /// dropped; a pile-up the scan sees meanwhile keeps it as its own.
    fn stir_unconfirmed(&mut self, now: f64, out: &mut Vec<Action>) {
        if self.stir_capture_until.is_some_and(|t| now >= t) {
            self.stir_capture_until = None;
            if self.sched.early_trigger() == Some(self.scan_idx) && self.open_pileup.is_none() {
                self.hand_over(self.in_hold_or_flickering(self.scan_idx), out);
            }
        }
    }

    /// Trigger `i`'s own early capture is running: keep it when the trigger
    /// fires, hand it over or drop it when its condition clears.
    #[allow(clippy::too_many_arguments)]
    fn own_early(
        &mut self,
        i: usize,
        step: Step,
        trigger: String,
        unix: f64,
        onset: f64,
        now: f64,
        out: &mut Vec<Action>,
    ) {
        match step {
            Step::Fire => {
                out.push(Action::Tell(Event::Fired { unix, trigger: trigger.clone(), onset_unix: onset }));
                if self.sched.confirm_early(now).is_some() {
                    out.push(Action::Keep { trigger, fired: unix, onset });
                }
            }
            Step::Idle => {
                let other = self.open_pileup.map(|_| self.scan_idx).or_else(|| self.in_hold_or_flickering(i));
                self.hand_over(other, out);
            }
            Step::Pending | Step::Ongoing => {}
        }
    }

    /// Trigger `i`'s condition holds and has not fired: begin an early
    /// capture, or, when `began_now` and another's early capture has
    /// gathered, have that one gather again.
    fn hold_began(&mut self, i: usize, began_now: bool, p: &PollSeen, onset: f64, now: f64, out: &mut Vec<Action>) {
        let trigger = self.triggers[i].text.clone();
        if self.sched.early_trigger().is_none() {
            if self.sched.may_start_early(now, p.free) {
                self.sched.started_early(i, now, ());
                out.push(Action::CaptureEarly { trigger, unix: p.unix, onset });
            }
        } else if began_now
            && self
                .sched
                .retake_early(now, |_| p.early_gathered.is_some_and(|g| onset > g + EARLY_FRESH_SECS))
                .is_some()
        {
            out.push(Action::Retake { trigger, unix: p.unix, onset });
        }
    }

    /// A stall was recognised (a trigger fired, a pile-up lasted, short
    /// stalls repeated): keep the running early capture for it, or start
    /// one within the limits (`tell_skip`: report a refusal).
    #[allow(clippy::too_many_arguments)]
    fn capture(
        &mut self,
        trigger: String,
        unix: f64,
        onset: f64,
        now: f64,
        free: Option<u64>,
        tell_skip: bool,
        out: &mut Vec<Action>,
    ) {
        if self.sched.confirm_early(now).is_some() {
            out.push(Action::Keep { trigger, fired: unix, onset });
            return;
        }
        match self.sched.refused(now, free) {
            None => {
                self.sched.started(now);
                out.push(Action::Capture { trigger, unix, onset });
            }
            Some(why) if tell_skip => out.push(Action::Tell(Event::Skipped { unix, trigger, why })),
            Some(why) => tracing::debug!("{trigger}: not captured ({why})"),
        }
    }

    /// A stall the scan recognised (a pile-up that lasts, short stalls that
    /// repeat): told only when a capture is kept or starts for it, since
    /// otherwise one of this stall runs or just ran.
    fn scan_fired(
        &mut self,
        trigger: String,
        unix: f64,
        onset: f64,
        now: f64,
        free: Option<u64>,
        out: &mut Vec<Action>,
    ) {
        let mut kept = vec![];
        self.capture(trigger.clone(), unix, onset, now, free, false, &mut kept);
        if !kept.is_empty() {
            out.push(Action::Tell(Event::Fired { unix, trigger, onset_unix: onset }));
            out.extend(kept);
        }
    }

    /// Between polls, at each scan interval while a pile-up waits for its
    /// early capture: start it when the limits allow. A stir's capture not
    /// kept in time is let go here too.
    pub fn between_polls(&mut self, unix: f64, now: f64, free: Option<u64>) -> Vec<Action> {
        let mut out = vec![];
        self.stir_unconfirmed(now, &mut out);
        if !out.is_empty() {
            return out;
        }
        let Some((began, blocked, baseline)) = self.uncaptured else { return vec![] };
        if self.sched.early_trigger().is_some() || !self.sched.may_start_early(now, free) {
            return vec![];
        }
        self.uncaptured = None;
        self.sched.started_early(self.scan_idx, now, ());
        let trigger = format!("pile-up: {blocked} threads held up (usually {baseline})");
        vec![Action::CaptureEarly { trigger, unix, onset: began }]
    }

    /// A pulse of the thread scan, seen at `unix`.
    pub fn pulse(&mut self, pulse: Pulse, unix: f64, now: f64, free: Option<u64>) -> Vec<Action> {
        let mut out = vec![];
        match pulse {
            Pulse::Began { began_unix, blocked, baseline } => {
                self.open_pileup = Some(began_unix);
                out.push(Action::Tell(Event::PileUp { unix, began_unix, blocked, baseline }));
                // A trigger's early capture running is this stall's (it
                // gathers again if kept for it after gathering).
                if self.sched.early_trigger().is_none() {
                    self.uncaptured = Some((began_unix, blocked, baseline));
                    out.extend(self.between_polls(unix, now, free));
                }
            }
            Pulse::Lasting { began_unix, blocked, baseline } => {
                self.uncaptured = None;
                let text = format!("pile-up: {blocked} threads held up for {LASTING_SECS}s (usually {baseline})");
                self.scan_fired(text, unix, began_unix, now, free, &mut out);
            }
            Pulse::Ended(st) => self.stall_ended(st, unix, now, free, &mut out),
            // Polls come sooner ([`crate::pace`]), and capturing begins at
            // first sight, as for a pile-up: kept if a trigger fires, else
            // dropped once [`STIR_CONFIRM_SECS`] pass.
            Pulse::Stir { unix: at, why } => {
                let spaced = self.last_stir_capture.is_none_or(|t| now - t >= STIR_CAPTURE_GAP_SECS);
                if spaced && self.sched.early_trigger().is_none() && self.sched.may_start_early(now, free) {
                    self.sched.started_early(self.scan_idx, now, ());
                    self.last_stir_capture = Some(now);
                    self.stir_capture_until = Some(now + STIR_CONFIRM_SECS);
                    out.push(Action::CaptureEarly { trigger: format!("threads stirred: {why}"), unix, onset: at });
                }
            }
        }
        out
    }

    fn stall_ended(&mut self, st: Stall, unix: f64, now: f64, free: Option<u64>, out: &mut Vec<Action>) {
        self.open_pileup = None;
        self.uncaptured = None;
        self.short_stall(st, unix, now, free, out);
    }

    /// A stall ended (a pile-up, or a trigger's condition that cleared
    /// before its hold): recorded and told; short ones that repeat are
    /// captured.
    fn short_stall(&mut self, st: Stall, unix: f64, now: f64, free: Option<u64>, out: &mut Vec<Action>) {
        out.push(Action::RecordStall(st.clone()));
        out.push(Action::Tell(stall_event(&st, false)));
        // One episode counts once, however many triggers saw it.
        let same_episode = st.began_unix <= self.last_counted_end + EPISODE_GAP_SECS;
        if st.ms() < LASTING_SECS * 1000.0 && !same_episode {
            self.short_stalls.push_back(st.ended_unix);
        }
        self.last_counted_end = self.last_counted_end.max(st.ended_unix);
        while self.short_stalls.front().is_some_and(|t| st.ended_unix - t > SHORT_STALL_WINDOW_SECS) {
            self.short_stalls.pop_front();
        }
        let repeated = (!same_episode && self.short_stalls.len() >= SHORT_STALLS_TO_CAPTURE).then(|| {
            format!(
                "short stalls: {} in {} min, this one {:.0} ms",
                self.short_stalls.len(),
                SHORT_STALL_WINDOW_SECS / 60.0,
                st.ms()
            )
        });
        match (self.sched.early_trigger(), repeated) {
            (_, Some(text)) => {
                // Kept if one runs, else taken now, just after it, where
                // the limits allow.
                self.scan_fired(text, unix, st.began_unix, now, free, out);
            }
            // The scan's own: a trigger in its hold keeps it as its own.
            (Some(early), None) if early == self.scan_idx && st.what.is_none() => {
                self.hand_over(self.in_hold_or_flickering(self.scan_idx), out)
            }
            _ => {}
        }
    }

    /// The running early capture's condition cleared: it becomes `to`'s
    /// (a trigger's, or the scan's) to keep or drop, or is dropped.
    fn hand_over(&mut self, to: Option<usize>, out: &mut Vec<Action>) {
        if self.sched.release_early(to).is_some() {
            out.push(Action::Drop);
        }
    }

    /// A stall trigger `i` saw, from `began` to `ended`.
    fn trigger_stall(&self, i: usize, began: f64, ended: f64) -> Stall {
        let what = Some(self.triggers[i].label().to_string());
        Stall { began_unix: began, ended_unix: ended, peak_blocked: 0, baseline: 0, what }
    }

    /// watch is stopping: an unconfirmed early capture is dropped, and a
    /// stall a trigger fired for that is still on is recorded up to the
    /// last poll that saw it, and told as still on.
    pub fn stop(&mut self) -> Vec<Action> {
        let mut out = vec![];
        if let Some(()) = self.sched.drop_early() {
            out.push(Action::Drop);
        }
        for i in 0..self.triggers.len() {
            if let Some(began) = self.fired_episode[i].take() {
                let st = self.trigger_stall(i, began, self.cleared_at[i].unwrap_or(self.last_held[i]));
                out.push(Action::RecordStall(st.clone()));
                out.push(Action::Tell(stall_event(&st, self.cleared_at[i].is_none())));
            }
        }
        out
    }

    /// A trigger other than `but` whose condition holds and has not yet
    /// fired (in its hold), the first if several.
    fn in_hold(&self, but: usize) -> Option<usize> {
        (0..self.triggers.len()).find(|&j| j != but && self.triggers[j].hold > 0.0 && self.armed[j].in_hold())
    }

    /// [`Decider::in_hold`], or else one whose condition is flickering
    /// (cleared within [`FLICKER_SECS`] of the latest poll).
    fn in_hold_or_flickering(&self, but: usize) -> Option<usize> {
        self.in_hold(but).or_else(|| {
            (0..self.triggers.len())
                .find(|&j| j != but && self.triggers[j].hold > 0.0 && self.last_poll < self.flicker_until[j])
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::schedule::EARLY_GAP;

    /// Unix time is 1000 s after the decisions' monotonic clock.
    const T0: f64 = 1000.0;

    struct Vals(BTreeMap<String, f64>);
    impl Context for Vals {
        fn value(&self, m: &str) -> Option<f64> {
            self.0.get(m).copied()
        }
        fn usual(&self, _: &str, _: f64) -> Option<crate::trigger::Usual> {
            None
        }
        fn poll_failed(&self) -> bool {
            false
        }
    }

    fn limits(cooldown_s: u64) -> Limits {
        Limits {
            cooldown: Duration::from_secs(cooldown_s),
            max_per_hour: 12,
            min_free_bytes: 1 << 20,
            data_dir: "/data".into(),
        }
    }

    fn decider(triggers: &[&str]) -> Decider {
        Decider::new(triggers.iter().map(|t| Trigger::parse(t).unwrap()).collect(), limits(300), true)
    }

    /// A poll at monotonic `t` with these values.
    fn poll(d: &mut Decider, t: f64, vals: &[(&str, f64)], gathered: bool) -> Vec<String> {
        let ctx = Vals(vals.iter().map(|(k, v)| (k.to_string(), *v)).collect());
        // Gathered long before: any new condition is after its evidence.
        let seen = PollSeen { unix: T0 + t, ctx: &ctx, free: Some(1 << 30), early_gathered: gathered.then_some(T0) };
        show(&d.poll(&seen, t))
    }

    fn pulse(d: &mut Decider, t: f64, p: Pulse) -> Vec<String> {
        show(&d.pulse(p, T0 + t, t, Some(1 << 30)))
    }

    fn began(t: f64) -> Pulse {
        Pulse::Began { began_unix: T0 + t, blocked: 12, baseline: 1 }
    }

    fn ended(from: f64, to: f64) -> Pulse {
        Pulse::Ended(Stall { began_unix: T0 + from, ended_unix: T0 + to, peak_blocked: 12, baseline: 1, what: None })
    }

    /// Actions as short text: what, for which trigger, and the onset as
    /// seconds of the monotonic clock.
    fn show(a: &[Action]) -> Vec<String> {
        let at = |u: f64| format!("{:.1}", u - T0);
        a.iter()
            .map(|a| match a {
                Action::Tell(Event::Fired { trigger, onset_unix, .. }) => {
                    format!("fired {trigger} @{}", at(*onset_unix))
                }
                Action::Tell(Event::Skipped { trigger, why, .. }) => format!("skipped {trigger}: {why}"),
                Action::Tell(Event::PileUp { .. }) => "pile-up".into(),
                Action::Tell(Event::Stall { .. }) => "stall".into(),
                Action::Tell(e) => format!("{e:?}"),
                Action::RecordStall(_) => "record".into(),
                Action::Capture { trigger, onset, .. } => format!("capture {trigger} @{}", at(*onset)),
                Action::CaptureEarly { trigger, onset, .. } => format!("early {trigger} @{}", at(*onset)),
                Action::Keep { trigger, onset, .. } => format!("keep {trigger} @{}", at(*onset)),
                Action::Retake { trigger, onset, .. } => format!("retake {trigger} @{}", at(*onset)),
                Action::Drop => "drop".into(),
            })
            .collect()
    }

    #[test]
    fn an_early_capture_begins_with_the_hold_and_is_kept_when_the_trigger_fires() {
        let mut d = decider(&["a > 1 for 2s"]);
        assert!(poll(&mut d, 0.0, &[("a", 0.0)], false).is_empty());
        assert_eq!(poll(&mut d, 1.0, &[("a", 5.0)], false), ["early a > 1 for 2s @1.0"]);
        assert!(poll(&mut d, 2.0, &[("a", 5.0)], true).is_empty());
        assert_eq!(poll(&mut d, 3.0, &[("a", 5.0)], true), ["fired a > 1 for 2s @1.0", "keep a > 1 for 2s @1.0"]);
        d.finished();
        assert!(poll(&mut d, 4.0, &[("a", 5.0)], false).is_empty(), "the stall goes on: nothing new");
    }

    #[test]
    fn a_fired_stall_is_recorded_from_its_first_hold_to_its_end() {
        let mut d = decider(&["a > 1 for 2s"]);
        poll(&mut d, 1.0, &[("a", 5.0)], false);
        poll(&mut d, 2.0, &[("a", 5.0)], true);
        assert_eq!(poll(&mut d, 3.0, &[("a", 5.0)], true), ["fired a > 1 for 2s @1.0", "keep a > 1 for 2s @1.0"]);
        d.finished();
        for t in 4..11 {
            assert!(poll(&mut d, t as f64, &[("a", 5.0)], false).is_empty(), "still stalled at {t}");
        }
        let ctx = Vals([("a".to_string(), 0.0)].into());
        let seen = PollSeen { unix: T0 + 11.0, ctx: &ctx, free: Some(1 << 30), early_gathered: None };
        let acts = d.poll(&seen, 11.0);
        let Some(Action::RecordStall(st)) = acts.first() else { panic!("{:?}", show(&acts)) };
        assert_eq!((st.began_unix - T0, st.ended_unix - T0, st.what.as_deref()), (1.0, 11.0, Some("a > 1 for 2s")));
        assert!(matches!(acts.get(1), Some(Action::Tell(Event::Stall { ms, .. })) if (*ms - 10_000.0).abs() < 1e-6));
        assert!(poll(&mut d, 12.0, &[("a", 0.0)], false).is_empty(), "recorded once");
    }

    #[test]
    fn a_fired_stall_that_dips_for_a_poll_is_one_stall_and_one_still_on_at_stop_is_recorded() {
        let mut d = decider(&["a > 1 for 2s"]);
        poll(&mut d, 1.0, &[("a", 5.0)], false);
        poll(&mut d, 2.0, &[("a", 5.0)], true);
        assert_eq!(poll(&mut d, 3.0, &[("a", 5.0)], true), ["fired a > 1 for 2s @1.0", "keep a > 1 for 2s @1.0"]);
        d.finished();
        poll(&mut d, 4.0, &[("a", 5.0)], false);
        // Clear for one poll half a second long, then back: not over, and
        // not fired again.
        assert!(poll(&mut d, 4.5, &[("a", 0.0)], false).is_empty());
        for t in [5.0, 6.0, 7.0, 8.0] {
            assert!(poll(&mut d, t, &[("a", 5.0)], false).is_empty(), "the same stall at {t}");
        }
        // Clear past the flicker: one stall, from its first hold to the
        // first poll that saw it clear.
        assert!(poll(&mut d, 8.5, &[("a", 0.0)], false).is_empty(), "flickering");
        let ctx = Vals([("a".to_string(), 0.0)].into());
        let seen = PollSeen { unix: T0 + 9.5, ctx: &ctx, free: Some(1 << 30), early_gathered: None };
        let acts = d.poll(&seen, 9.5);
        let Some(Action::RecordStall(st)) = acts.first() else { panic!("{:?}", show(&acts)) };
        assert_eq!((st.began_unix - T0, st.ended_unix - T0), (1.0, 8.5));
        // Another stall still on when watch stops: recorded to its last
        // poll and told as still on.
        poll(&mut d, 20.0, &[("a", 5.0)], false);
        poll(&mut d, 21.0, &[("a", 5.0)], true);
        poll(&mut d, 22.0, &[("a", 5.0)], true);
        d.finished();
        poll(&mut d, 23.0, &[("a", 5.0)], false);
        let acts = d.stop();
        let Some(Action::RecordStall(st)) = acts.first() else { panic!("{:?}", show(&acts)) };
        assert_eq!((st.began_unix - T0, st.ended_unix - T0), (20.0, 23.0));
        assert!(matches!(acts.get(1), Some(Action::Tell(Event::Stall { ongoing: true, .. }))), "{:?}", show(&acts));
        assert!(d.stop().is_empty(), "recorded once");
    }

    #[test]
    fn an_early_capture_is_dropped_when_its_condition_clears_and_the_next_waits_for_it_and_the_gap() {
        let mut d = decider(&["a > 1 for 2s"]);
        poll(&mut d, 1.0, &[("a", 5.0)], false);
        assert_eq!(poll(&mut d, 2.0, &[("a", 0.0)], false), ["drop"], "seen on one poll: a blip, not a short stall");
        // The dropped capture has not reported its end yet.
        assert!(poll(&mut d, 3.0, &[("a", 5.0)], false).is_empty());
        d.finished();
        // Still in its hold (since 3.0): the next poll starts one, not
        // counted against the cooldown (a dropped one never is).
        assert_eq!(poll(&mut d, 4.0, &[("a", 5.0)], false), ["early a > 1 for 2s @3.0"]);
        assert_eq!(poll(&mut d, 5.0, &[("a", 5.0)], true), ["fired a > 1 for 2s @3.0", "keep a > 1 for 2s @3.0"]);
        // Dropped again: within the gap, none starts even with nothing running.
        let mut d = decider(&["a > 1 for 2s"]);
        poll(&mut d, 1.0, &[("a", 5.0)], false);
        assert_eq!(poll(&mut d, 1.2, &[("a", 0.0)], false), ["drop"]);
        d.finished();
        assert!(poll(&mut d, 1.5, &[("a", 5.0)], false).is_empty());
        assert_eq!(poll(&mut d, 1.0 + EARLY_GAP.as_secs_f64(), &[("a", 5.0)], false), ["early a > 1 for 2s @1.5"]);
    }

    #[test]
    fn a_cleared_early_capture_goes_to_another_trigger_still_in_its_hold() {
        let mut d = decider(&["a > 1 for 2s", "b > 1 for 3s"]);
        assert_eq!(poll(&mut d, 1.0, &[("a", 5.0), ("b", 5.0)], false), ["early a > 1 for 2s @1.0"]);
        assert!(poll(&mut d, 2.0, &[("a", 0.0), ("b", 5.0)], true).is_empty(), "not dropped: b holds");
        assert!(poll(&mut d, 3.0, &[("b", 5.0)], true).is_empty());
        assert_eq!(poll(&mut d, 4.0, &[("b", 5.0)], true), ["fired b > 1 for 3s @1.0", "keep b > 1 for 3s @1.0"]);
    }

    #[test]
    fn a_gathered_early_capture_gathers_again_when_another_condition_begins_spaced_by_the_gap() {
        let mut d = decider(&["a > 1 for 5s", "b > 1 for 5s", "c > 1 for 5s"]);
        poll(&mut d, 1.0, &[("a", 5.0)], false);
        // Not gathered yet: what it gathers is already of the new condition.
        assert!(poll(&mut d, 1.5, &[("a", 5.0), ("b", 5.0)], false).is_empty());
        assert_eq!(poll(&mut d, 2.5, &[("a", 5.0), ("b", 5.0), ("c", 5.0)], true), ["retake c > 1 for 5s @2.5"]);
        // Another beginning within the gap: not taken again.
        assert_eq!(poll(&mut d, 3.0, &[("a", 5.0), ("b", 0.0), ("c", 5.0)], true), ["record", "stall"]);
        assert!(poll(&mut d, 3.2, &[("a", 5.0), ("b", 5.0), ("c", 5.0)], true).is_empty());
        assert_eq!(poll(&mut d, 3.6, &[("a", 5.0), ("b", 0.0), ("c", 5.0), ("d", 1.0)], true), Vec::<String>::new());
        assert_eq!(poll(&mut d, 3.7, &[("a", 5.0), ("b", 5.0), ("c", 5.0)], true), ["retake b > 1 for 5s @3.7"]);
        // It is still the first trigger's to keep.
        assert_eq!(
            poll(&mut d, 6.0, &[("a", 5.0), ("b", 5.0), ("c", 5.0)], true),
            ["fired a > 1 for 5s @1.0", "keep a > 1 for 5s @1.0"]
        );
    }

    #[test]
    fn a_condition_beginning_just_after_an_early_capture_gathered_is_part_of_what_it_saw() {
        let mut d = decider(&["a > 1 for 5s", "b > 1 for 5s"]);
        poll(&mut d, 1.0, &[("a", 5.0)], false);
        // Its last stack at 1.8; b begins at 2.5, within two seconds: kept.
        let ctx = Vals(BTreeMap::from([("a".to_string(), 5.0), ("b".to_string(), 5.0)]));
        let a =
            d.poll(&PollSeen { unix: T0 + 2.5, ctx: &ctx, free: Some(1 << 30), early_gathered: Some(T0 + 1.8) }, 2.5);
        assert!(show(&a).is_empty(), "{:?}", show(&a));
        // c begins at 4.0, more than two seconds after: evidence of its own.
        let mut d = decider(&["a > 1 for 5s", "c > 1 for 5s"]);
        poll(&mut d, 1.0, &[("a", 5.0)], false);
        let ctx = Vals(BTreeMap::from([("a".to_string(), 5.0), ("c".to_string(), 5.0)]));
        let a =
            d.poll(&PollSeen { unix: T0 + 4.0, ctx: &ctx, free: Some(1 << 30), early_gathered: Some(T0 + 1.8) }, 4.0);
        assert_eq!(show(&a), ["retake c > 1 for 5s @4.0"]);
    }

    #[test]
    fn a_flickering_condition_keeps_its_early_capture_and_a_stirs_capture_goes_to_it() {
        // A checkpoint age about its threshold: held a while, dips for a
        // poll, back again; fires once it holds for its hold, dated from
        // the episode's first hold.
        let mut d = decider(&["flushing storm: f > 88 for 1s"]);
        assert!(!d.pending(), "nothing flickers before the first poll");
        assert_eq!(poll(&mut d, 1.0, &[("f", 93.0)], false), ["early flushing storm: f > 88 for 1s @1.0"]);
        assert!(poll(&mut d, 1.25, &[("f", 95.0)], true).is_empty());
        assert_eq!(poll(&mut d, 1.5, &[("f", 87.0)], true), ["record", "stall"]);
        assert!(poll(&mut d, 1.75, &[("f", 99.0)], true).is_empty(), "kept: it came back");
        assert!(poll(&mut d, 2.5, &[("f", 99.0)], true).is_empty());
        assert_eq!(
            poll(&mut d, 2.75, &[("f", 97.0)], true),
            ["fired flushing storm: f > 88 for 1s @1.0", "keep flushing storm: f > 88 for 1s @1.0"]
        );
        // A stir's capture unconfirmed after its wait, at a dip of a
        // flickering condition: it goes to that condition's trigger.
        let mut d = decider(&["flushing storm: f > 88 for 1s"]);
        assert_eq!(pulse(&mut d, 1.0, stir(1.0)), ["early threads stirred: connections accepted @1.0"]);
        for (t, f, want) in [
            (1.5, 93.0, 0),
            (2.0, 95.0, 0),
            (2.3, 87.0, 2),
            (2.6, 92.0, 0),
            (2.7, 94.0, 0),
            (2.8, 86.0, 2),
            // Unconfirmed at 3.0, in a dip: handed to the trigger, not dropped.
            (3.1, 85.0, 0),
            (3.4, 93.0, 0),
        ] {
            // Still gathering (or just gathered): what it gathers is of this.
            let a = poll(&mut d, t, &[("f", f)], false);
            assert_eq!(a.len(), want, "at {t}: {a:?}");
        }
        assert_eq!(
            poll(&mut d, 4.4, &[("f", 92.0)], true),
            ["fired flushing storm: f > 88 for 1s @1.5", "keep flushing storm: f > 88 for 1s @1.5"]
        );
    }

    #[test]
    fn another_trigger_firing_keeps_the_running_early_capture_as_its_own() {
        let mut d = decider(&["a > 1 for 5s", "b > 1"]);
        poll(&mut d, 1.0, &[("a", 5.0)], false);
        assert_eq!(poll(&mut d, 2.0, &[("a", 5.0), ("b", 5.0)], true), ["fired b > 1 @2.0", "keep b > 1 @2.0"]);
    }

    #[test]
    fn a_trigger_refused_by_the_limits_is_reported_with_the_limit() {
        let mut d = decider(&["b > 1"]);
        assert_eq!(poll(&mut d, 1.0, &[("b", 5.0)], false), ["fired b > 1 @1.0", "capture b > 1 @1.0"]);
        assert_eq!(poll(&mut d, 2.0, &[("b", 0.0)], false), ["record", "stall"], "the stall it fired for ended");
        assert_eq!(
            poll(&mut d, 3.0, &[("b", 5.0)], false),
            ["fired b > 1 @3.0", "skipped b > 1: a capture is already running"]
        );
        d.finished();
        poll(&mut d, 4.0, &[("b", 0.0)], false);
        assert_eq!(poll(&mut d, 5.0, &[("b", 5.0)], false), ["fired b > 1 @5.0", "skipped b > 1: cooldown (300s)"]);
        let ctx = Vals(BTreeMap::from([("b".to_string(), 0.0)]));
        d.poll(&PollSeen { unix: T0 + 6.0, ctx: &ctx, free: Some(0), early_gathered: None }, 6.0);
        let ctx = Vals(BTreeMap::from([("b".to_string(), 5.0)]));
        let mut d2 = decider(&["b > 1"]);
        let a = d2.poll(&PollSeen { unix: T0 + 7.0, ctx: &ctx, free: Some(1000), early_gathered: None }, 7.0);
        assert_eq!(show(&a), ["fired b > 1 @7.0", "skipped b > 1: less than 1 MiB free in /data"]);
    }

    #[test]
    fn a_pile_up_captures_at_once_and_is_kept_when_it_lasts() {
        let mut d = decider(&[]);
        assert_eq!(pulse(&mut d, 1.0, began(0.9)), ["pile-up", "early pile-up: 12 threads held up (usually 1) @0.9"]);
        assert!(!d.waiting_to_capture());
        let lasting = Pulse::Lasting { began_unix: T0 + 0.9, blocked: 14, baseline: 1 };
        assert_eq!(
            pulse(&mut d, 3.0, lasting),
            [
                "fired pile-up: 14 threads held up for 2s (usually 1) @0.9",
                "keep pile-up: 14 threads held up for 2s (usually 1) @0.9"
            ]
        );
    }

    #[test]
    fn a_pile_up_whose_capture_is_refused_at_its_start_is_tried_again_each_scan_interval() {
        let mut d = decider(&["a > 1 for 5s"]);
        poll(&mut d, 1.0, &[("a", 5.0)], false);
        assert_eq!(poll(&mut d, 1.5, &[("a", 0.0)], false), ["drop"]);
        // The dropped capture is still finishing.
        assert_eq!(pulse(&mut d, 1.6, began(1.5)), ["pile-up"]);
        assert!(d.waiting_to_capture());
        assert!(d.between_polls(T0 + 1.7, 1.7, None).is_empty());
        d.finished();
        // The gap since the last early capture (1.0) has not passed.
        assert!(d.between_polls(T0 + 1.8, 1.8, None).is_empty());
        let a = d.between_polls(T0 + 2.1, 2.1, None);
        assert_eq!(show(&a), ["early pile-up: 12 threads held up (usually 1) @1.5"]);
        assert!(!d.waiting_to_capture());
    }

    #[test]
    fn a_triggers_early_capture_whose_condition_clears_during_a_pile_up_becomes_the_scans() {
        let mut d = decider(&["a > 1 for 5s"]);
        poll(&mut d, 1.0, &[("a", 5.0)], false);
        assert_eq!(pulse(&mut d, 1.5, began(1.4)), ["pile-up"], "the running early capture is this stall's");
        assert!(!d.waiting_to_capture());
        assert!(poll(&mut d, 2.0, &[("a", 0.0)], true).is_empty(), "not dropped: the pile-up goes on");
        let lasting = Pulse::Lasting { began_unix: T0 + 1.4, blocked: 12, baseline: 1 };
        assert_eq!(
            pulse(&mut d, 3.4, lasting),
            [
                "fired pile-up: 12 threads held up for 2s (usually 1) @1.4",
                "keep pile-up: 12 threads held up for 2s (usually 1) @1.4"
            ]
        );
    }

    #[test]
    fn a_short_pile_up_drops_the_scans_capture_unless_short_stalls_repeat() {
        let mut d = decider(&[]);
        pulse(&mut d, 1.0, began(1.0));
        assert_eq!(pulse(&mut d, 1.5, ended(1.0, 1.5)), ["record", "stall", "drop"]);
        d.finished();
        pulse(&mut d, 3.0, began(3.0));
        assert_eq!(pulse(&mut d, 3.3, ended(3.0, 3.3)), ["record", "stall", "drop"]);
        d.finished();
        assert_eq!(pulse(&mut d, 5.0, began(5.0)).len(), 2);
        assert_eq!(
            pulse(&mut d, 5.4, ended(5.0, 5.4)),
            [
                "record",
                "stall",
                "fired short stalls: 3 in 10 min, this one 400 ms @5.0",
                "keep short stalls: 3 in 10 min, this one 400 ms @5.0"
            ]
        );
    }

    #[test]
    fn the_third_short_stall_with_no_capture_running_is_captured_as_it_ends() {
        let mut d = decider(&[]);
        pulse(&mut d, 1.0, began(1.0));
        assert_eq!(pulse(&mut d, 1.2, ended(1.0, 1.2)), ["record", "stall", "drop"]);
        // The dropped capture still finishing: no capture for the second.
        assert_eq!(pulse(&mut d, 1.3, began(1.3)), ["pile-up"]);
        assert_eq!(pulse(&mut d, 1.5, ended(1.3, 1.5)), ["record", "stall"]);
        d.finished();
        // Within the gap: none for the third while it lasts.
        assert_eq!(pulse(&mut d, 1.6, began(1.6)), ["pile-up"]);
        assert_eq!(
            pulse(&mut d, 1.8, ended(1.6, 1.8)),
            [
                "record",
                "stall",
                "fired short stalls: 3 in 10 min, this one 200 ms @1.6",
                "capture short stalls: 3 in 10 min, this one 200 ms @1.6"
            ]
        );
        // Short stalls older than the window are forgotten.
        d.finished();
        let mut d = decider(&[]);
        for (i, t) in [0.0, 700.0, 1400.0].into_iter().enumerate() {
            pulse(&mut d, t, began(t));
            let a = pulse(&mut d, t + 0.2, ended(t, t + 0.2));
            assert!(!a.iter().any(|a| a.starts_with("fired")), "stall {i}: {a:?}");
            d.finished();
        }
    }

    #[test]
    fn a_trigger_during_a_pile_up_dates_its_onset_from_the_pile_ups_start() {
        let mut d = decider(&["a > 1"]);
        pulse(&mut d, 0.5, began(0.4));
        assert_eq!(poll(&mut d, 1.0, &[("a", 5.0)], false), ["fired a > 1 @0.4", "keep a > 1 @0.4"]);
    }

    #[test]
    fn without_a_local_process_there_are_no_early_captures() {
        let mut d = Decider::new(vec![Trigger::parse("a > 1 for 2s").unwrap()], limits(300), false);
        assert!(poll(&mut d, 1.0, &[("a", 5.0)], false).is_empty());
        assert_eq!(poll(&mut d, 3.0, &[("a", 5.0)], false), ["fired a > 1 for 2s @1.0", "capture a > 1 for 2s @1.0"]);
    }

    #[test]
    fn a_signature_that_clears_before_its_hold_is_a_short_stall_of_its_class_and_repeats_are_captured() {
        let mut d = decider(&["connection storm: c > 1 for 1s"]);
        assert!(poll(&mut d, 0.0, &[("c", 0.0)], false).is_empty());
        assert_eq!(poll(&mut d, 1.0, &[("c", 5.0)], false), ["early connection storm: c > 1 for 1s @1.0"]);
        assert!(d.pending(), "polls come fast until it is decided");
        assert!(poll(&mut d, 1.1, &[("c", 5.0)], true).is_empty());
        let ctx = Vals(BTreeMap::from([("c".to_string(), 0.0)]));
        let a = d.poll(&PollSeen { unix: T0 + 1.25, ctx: &ctx, free: Some(1 << 30), early_gathered: Some(T0) }, 1.25);
        assert_eq!(show(&a), ["record", "stall"]);
        let Action::RecordStall(st) = &a[0] else { unreachable!() };
        assert_eq!((st.began_unix, st.ended_unix, st.what.as_deref()), (T0 + 1.0, T0 + 1.25, Some("connection storm")));
        // Its capture waits a second from when it was last seen, in case it
        // is flickering, with polls still fast; then it is dropped.
        assert!(d.pending());
        assert!(poll(&mut d, 2.0, &[("c", 0.0)], true).is_empty());
        assert_eq!(poll(&mut d, 2.2, &[("c", 0.0)], true), ["drop"]);
        assert!(!d.pending());
        d.finished();
        assert_eq!(poll(&mut d, 3.0, &[("c", 5.0)], false).len(), 1);
        assert!(poll(&mut d, 3.25, &[("c", 5.0)], true).is_empty());
        assert_eq!(poll(&mut d, 3.5, &[("c", 0.0)], true), ["record", "stall"]);
        assert_eq!(poll(&mut d, 4.5, &[("c", 0.0)], true), ["drop"]);
        d.finished();
        // The third in ten minutes: its early capture is kept for them.
        assert_eq!(poll(&mut d, 5.0, &[("c", 5.0)], false).len(), 1);
        assert!(poll(&mut d, 5.1, &[("c", 5.0)], true).is_empty());
        assert_eq!(
            poll(&mut d, 5.25, &[("c", 0.0)], true),
            [
                "record",
                "stall",
                "fired short stalls: 3 in 10 min, this one 250 ms @5.0",
                "keep short stalls: 3 in 10 min, this one 250 ms @5.0"
            ]
        );
    }

    #[test]
    fn a_capture_whose_condition_clears_goes_to_a_trigger_that_begins_its_hold_at_the_same_poll() {
        // threads_running's condition starts it; at the next poll it clears
        // as the table-open storm's begins (a later trigger in the list).
        let mut d = decider(&["r > 16 for 1s", "storm: o > 200 for 1s"]);
        assert_eq!(poll(&mut d, 0.2, &[("r", 26.0), ("o", 46.0)], false), ["early r > 16 for 1s @0.2"]);
        assert!(poll(&mut d, 0.4, &[("r", 3.0), ("o", 19_000.0)], false).is_empty(), "handed over, not dropped");
        assert!(poll(&mut d, 0.65, &[("r", 1.0), ("o", 21_000.0)], true).is_empty());
        assert_eq!(
            poll(&mut d, 1.4, &[("r", 1.0), ("o", 20_000.0)], true),
            ["fired storm: o > 200 for 1s @0.4", "keep storm: o > 200 for 1s @0.4"]
        );
    }

    #[test]
    fn one_blip_seen_by_several_triggers_is_one_episode_of_short_stalls() {
        let mut d = decider(&["x: a > 1 for 1s", "y: b > 1 for 1s", "z: c > 1 for 1s"]);
        let all = [("a", 5.0), ("b", 5.0), ("c", 5.0)];
        assert_eq!(poll(&mut d, 1.0, &all, false).len(), 1, "one early capture");
        assert!(poll(&mut d, 1.25, &all, true).is_empty());
        // All three clear at once: three records, one episode, no capture.
        let a = poll(&mut d, 1.5, &[], true);
        assert_eq!(a.iter().filter(|x| *x == "record").count(), 3, "{a:?}");
        assert!(!a.iter().any(|x| x.starts_with("fired")), "{a:?}");
    }

    fn stir(t: f64) -> Pulse {
        Pulse::Stir { unix: T0 + t, why: "connections accepted" }
    }

    #[test]
    fn a_stir_captures_at_first_sight_kept_when_a_trigger_fires_else_dropped() {
        let mut d = decider(&["connection storm: c > 1 for 1s"]);
        assert_eq!(pulse(&mut d, 1.0, stir(1.0)), ["early threads stirred: connections accepted @1.0"]);
        // The poll that follows sees the storm, then the hold confirms it.
        assert!(poll(&mut d, 1.1, &[("c", 900.0)], false).is_empty());
        assert!(poll(&mut d, 1.35, &[("c", 900.0)], false).is_empty());
        assert_eq!(
            poll(&mut d, 2.1, &[("c", 900.0)], true),
            ["fired connection storm: c > 1 for 1s @1.1", "keep connection storm: c > 1 for 1s @1.1"]
        );
        d.finished();
        // A stir nothing confirms: dropped after STIR_CONFIRM_SECS.
        let mut d = decider(&["connection storm: c > 1 for 1s"]);
        assert_eq!(pulse(&mut d, 1.0, stir(1.0)).len(), 1);
        assert!(poll(&mut d, 1.5, &[("c", 0.0)], true).is_empty());
        assert!(d.between_polls(T0 + 2.9, 2.9, None).is_empty());
        assert_eq!(show(&d.between_polls(T0 + 3.0, 3.0, None)), ["drop"]);
        d.finished();
        // Another stir soon after begins none (at most one per STIR_CAPTURE_GAP_SECS).
        assert!(pulse(&mut d, 5.0, stir(5.0)).is_empty());
        assert_eq!(pulse(&mut d, 11.0, stir(11.0)).len(), 1);
    }

    #[test]
    fn stopping_drops_an_unconfirmed_early_capture_once() {
        let mut d = decider(&["a > 1 for 2s"]);
        poll(&mut d, 1.0, &[("a", 5.0)], false);
        assert_eq!(show(&d.stop()), ["drop"]);
        assert!(d.stop().is_empty());
    }
}
