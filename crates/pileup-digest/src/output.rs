//! The digest as the output layer writes it.

use crate::Digest;

/// A digest as the output layer writes it: text (the profile and the top
/// classes in detail, then the advice), JSON, or a self-contained HTML page.
pub struct DigestReport<'a> {
    /// The classes read.
    pub digest: &'a Digest,
    /// Their order and how many the text and page show.
    pub view: crate::report::View,
    /// What `--advise` measured, when it ran.
    pub advice: Option<&'a [crate::advise::Advice]>,
    /// What `--advise-indexes` measured, when it ran.
    pub indexes: Option<&'a crate::advise::index::IndexAdvice>,
    /// The hosts of a fleet's merged digest (`--from`).
    pub hosts: Option<&'a crate::fleet::merge::Hosts>,
    /// What changed since an earlier window (`--compare-to`).
    pub changes: Option<&'a crate::fleet::compare::Changes>,
}

impl pileup_output::Report for DigestReport<'_> {
    fn tool(&self) -> &'static str {
        "digest"
    }
    fn text(&self, _o: &pileup_output::Options, w: &mut dyn std::io::Write) -> std::io::Result<()> {
        w.write_all(crate::report::text::render(self.digest, &self.view, self.hosts).as_bytes())?;
        if let Some(h) = self.hosts {
            w.write_all(crate::report::hosts::text(h, self.digest, &self.view).as_bytes())?;
        }
        if let Some(c) = self.changes {
            w.write_all(crate::report::hosts::changes_text(c, self.view.limit).as_bytes())?;
        }
        if let Some(adv) = self.advice {
            w.write_all(crate::report::text::render_advice(adv).as_bytes())?;
        }
        if let Some(ix) = self.indexes {
            w.write_all(crate::report::indexes::render_index_advice(ix).as_bytes())?;
        }
        Ok(())
    }
    fn html(&self, _o: &pileup_output::Options, w: &mut dyn std::io::Write) -> Option<std::io::Result<()>> {
        let fleet = crate::report::html::Fleet { hosts: self.hosts, changes: self.changes };
        let page = crate::report::html::render(self.digest, &self.view, self.advice, self.indexes, fleet);
        Some(w.write_all(page.as_bytes()))
    }
}
