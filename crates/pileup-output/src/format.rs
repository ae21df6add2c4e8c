//! The formats, their names and the `-o` extensions that choose them.

use std::path::Path;

/// An output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The tool's own text (pt-pmp's for stacks).
    Text,
    /// Everything the tool found, as JSON.
    Json,
    /// Folded stacks for FlameGraph, inferno or speedscope.
    Folded,
    /// A flame graph (SVG).
    Svg,
    /// A Graphviz call graph weighted by the first value.
    Dot,
    /// A gzipped pprof profile (go tool pprof, Pyroscope, Parca).
    Pprof,
    /// A self-contained HTML page.
    Html,
}

/// Every format, in the order help lists them.
pub const FORMATS: [Format; 7] =
    [Format::Text, Format::Json, Format::Folded, Format::Svg, Format::Dot, Format::Pprof, Format::Html];

impl Format {
    /// The format's name as `--format` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Format::Text => "text",
            Format::Json => "json",
            Format::Folded => "folded",
            Format::Svg => "svg",
            Format::Dot => "dot",
            Format::Pprof => "pprof",
            Format::Html => "html",
        }
    }

    /// The format's other names, as `--format` takes them too.
    pub fn aliases(self) -> &'static [&'static str] {
        match self {
            Format::Text => &["txt", "pmp"],
            Format::Folded => &["collapsed"],
            Format::Svg => &["flamegraph"],
            Format::Dot => &["graphviz"],
            Format::Json | Format::Pprof | Format::Html => &[],
        }
    }

    /// What the format is, in a few words (for help and errors).
    pub fn describe(self) -> &'static str {
        match self {
            Format::Text => "the tool's own text",
            Format::Json => "everything it found",
            Format::Folded => "folded stacks",
            Format::Svg => "a picture: flame graph or plot",
            Format::Dot => "Graphviz call graph",
            Format::Pprof => "gzipped pprof profile",
            Format::Html => "a self-contained page",
        }
    }

    /// The file extension that names the format.
    pub fn extension(self) -> &'static str {
        match self {
            Format::Text => "txt",
            Format::Json => "json",
            Format::Folded => "folded",
            Format::Svg => "svg",
            Format::Dot => "dot",
            Format::Pprof => "pb.gz",
            Format::Html => "html",
        }
    }

    /// A `--format` value: a name, or a common other name of it (`pmp`
    /// for text, `collapsed` for folded, `flamegraph` for svg).
    pub fn parse(s: &str) -> Result<Format, OutputError> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "text" | "txt" | "pmp" => Format::Text,
            "json" => Format::Json,
            "folded" | "collapsed" => Format::Folded,
            "svg" | "flamegraph" => Format::Svg,
            "dot" | "graphviz" => Format::Dot,
            "pprof" => Format::Pprof,
            "html" => Format::Html,
            _ => return Err(OutputError::UnknownFormat(s.to_string())),
        })
    }

    /// The format an output file's name asks for: `.txt`, `.json`,
    /// `.folded`, `.svg`, `.dot`/`.gv`, `.pb.gz`/`.pb`/`.pprof`. A name
    /// without an extension is text; any other extension is an error.
    pub fn from_path(p: &Path) -> Result<Format, OutputError> {
        let Some(ext) = p.extension().and_then(|e| e.to_str()) else {
            return Ok(Format::Text);
        };
        Ok(match ext.to_ascii_lowercase().as_str() {
            "txt" | "text" | "pmp" | "log" => Format::Text,
            "json" => Format::Json,
            "folded" | "collapsed" => Format::Folded,
            "svg" => Format::Svg,
            "dot" | "gv" => Format::Dot,
            "pb" | "pprof" | "gz" => Format::Pprof,
            "html" | "htm" => Format::Html,
            _ => return Err(OutputError::UnknownExtension(p.display().to_string())),
        })
    }

    /// Whether the format is binary (not for a terminal).
    pub fn is_binary(self) -> bool {
        self == Format::Pprof
    }

    /// The format chosen by `--format` if given, else by the `-o` file's
    /// extension, else text.
    pub fn choose(format: Option<&str>, output: Option<&Path>) -> Result<Format, OutputError> {
        match (format, output) {
            (Some(f), _) => Format::parse(f),
            (None, Some(p)) => Format::from_path(p),
            (None, None) => Ok(Format::Text),
        }
    }
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error("unknown format '{0}': choose text, json, folded, svg, dot, pprof or html")]
    UnknownFormat(String),
    #[error(
        "{0}: unknown extension; name the file .txt, .json, .html, .folded, .svg, .dot or .pb.gz, or choose with --format"
    )]
    UnknownExtension(String),
    #[error("{tool} has nothing to write as {format}; choose text or json")]
    Unsupported { tool: &'static str, format: Format },
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extensions_name_one_format_for_every_tool_and_unknown_ones_are_refused() {
        let f = |p: &str| Format::from_path(Path::new(p));
        assert_eq!(f("x.pb.gz").unwrap(), Format::Pprof);
        assert_eq!(f("x.pprof").unwrap(), Format::Pprof);
        assert_eq!(f("x.SVG").unwrap(), Format::Svg);
        assert_eq!(f("x.gv").unwrap(), Format::Dot);
        assert_eq!(f("x.folded").unwrap(), Format::Folded);
        assert_eq!(f("x.json").unwrap(), Format::Json);
        assert_eq!(f("x.txt").unwrap(), Format::Text);
        assert_eq!(f("report").unwrap(), Format::Text);
        let e = f("x.png").unwrap_err().to_string();
        assert!(e.starts_with("x.png: unknown extension"), "{e}");
        assert_eq!(Format::choose(Some("pmp"), Some(Path::new("a.png"))).unwrap(), Format::Text);
        assert!(Format::parse("png").is_err());
        for f in FORMATS {
            assert_eq!(Format::parse(f.name()).unwrap(), f);
        }
    }
}
