//! A bench run's results as the output layer writes them.

use std::io::Write;

use serde::Serialize;

use crate::report::{text, ExperimentReport};

/// One experiment as the output layer writes it: its text, its JSON, and
/// its plot as the SVG.
impl pileup_output::Report for ExperimentReport {
    fn tool(&self) -> &'static str {
        "bench"
    }
    fn text(&self, _o: &pileup_output::Options, w: &mut dyn Write) -> std::io::Result<()> {
        text(self, w)
    }
    fn svg(&self, _o: &pileup_output::Options, w: &mut dyn Write) -> Option<std::io::Result<()>> {
        Some(match crate::plot::svg(self) {
            Ok(s) => w.write_all(s.as_bytes()),
            Err(e) => Err(std::io::Error::other(format!("drawing the plot: {e}"))),
        })
    }
}

/// Several experiments of one run: the text of each in turn, or one JSON
/// object with them in `experiments`.
pub struct Experiments<'a>(pub &'a [ExperimentReport]);

impl Serialize for Experiments<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(1))?;
        m.serialize_entry("experiments", self.0)?;
        m.end()
    }
}

impl pileup_output::Report for Experiments<'_> {
    fn tool(&self) -> &'static str {
        "bench"
    }
    fn text(&self, _o: &pileup_output::Options, w: &mut dyn Write) -> std::io::Result<()> {
        for (i, r) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(w)?;
            }
            text(r, w)?;
        }
        Ok(())
    }
}

/// The crash-recovery experiment as the output layer writes it.
impl pileup_output::Report for crate::recovery::RecoveryReport {
    fn tool(&self) -> &'static str {
        "bench"
    }
    fn text(&self, _o: &pileup_output::Options, w: &mut dyn Write) -> std::io::Result<()> {
        crate::recovery::report::text(self, w)
    }
    fn svg(&self, _o: &pileup_output::Options, w: &mut dyn Write) -> Option<std::io::Result<()>> {
        Some(match crate::recovery::plot::svg(self) {
            Ok(s) => w.write_all(s.as_bytes()),
            Err(e) => Err(std::io::Error::other(format!("drawing the plot: {e}"))),
        })
    }
}
