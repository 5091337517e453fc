//! Permission rules a call's subject is judged by during planning, when
//! every pattern is a literal or a prefix.
//!
//! The Python side (`toolsched._policy.permissions`) compiles a tool's rules; for
//! the usual rules — each pattern a literal (`tool(src/a.py)`) or a prefix
//! (`tool(src/**)`, `tool(git *)`) — it hands the compiled forms here, so
//! that a turn's calls are judged in the same crossing that validates them.
//! The verdict is the one `ToolRules.evaluate` gives: deny patterns first,
//! then a rule asking about every call, ask patterns, a rule allowing every
//! call, allow patterns; within a kind, the first pattern in the order the
//! rules were given. A subject that is not one plain value (not a clean
//! relative path, for path rules) is left to the Python side.

/// One pattern's compiled form: it names a subject equal to `equal` or
/// starting with `prefix` (either may be absent, not both).
#[derive(Debug, Clone)]
pub struct Pattern {
    pub equal: Option<String>,
    pub prefix: Option<String>,
    /// The position of the pattern's verdict in the caller's list of verdicts.
    pub verdict: usize,
}

impl Pattern {
    fn names(&self, subject: &str) -> bool {
        self.equal.as_deref() == Some(subject)
            || self.prefix.as_deref().is_some_and(|prefix| subject.starts_with(prefix))
    }
}

/// The rules naming one tool, for one subject argument.
#[derive(Debug, Clone)]
pub struct SubjectRules {
    /// Whether the subject is a path (joined to `root` before matching) or plain text.
    pub is_path: bool,
    /// The normalised root relative paths are joined to (`""` for the filesystem root).
    pub root: String,
    pub deny: Vec<Pattern>,
    /// The verdict of a rule asking about every call of the tool, if there is one.
    pub ask_all: Option<usize>,
    pub ask: Vec<Pattern>,
    /// The verdict of a rule allowing every call of the tool, if there is one.
    pub allow_all: Option<usize>,
    pub allow: Vec<Pattern>,
}

/// What the rules say of one subject value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleVerdict {
    /// The value is not one the compiled forms can judge: the Python side judges it.
    Undecided,
    /// No rule names the call.
    Unnamed,
    /// The verdict at this position names the call.
    Named(usize),
}

/// Whether `value` is a relative path that normalising would only join to the
/// root: not empty, not starting with `/`, `.` or `~`, not ending with `/`,
/// with no empty segment and no segment starting with a dot.
pub fn is_clean_relative_path(value: &str) -> bool {
    let bytes = value.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            // No `//` and no `/.`: a slash is never followed by another or by a dot (a byte loop; a
            // substring search costs more than the whole verdict on a short path).
            !matches!(first, b'/' | b'.' | b'~')
                && *last != b'/'
                && !bytes
                    .windows(2)
                    .any(|pair| pair[0] == b'/' && matches!(pair[1], b'/' | b'.'))
        }
        _ => false,
    }
}

impl SubjectRules {
    /// The verdict for the subject value `value`; `subject` is a buffer
    /// reused between calls (the joined path is built in it).
    pub fn judge(&self, value: &str, subject: &mut String) -> RuleVerdict {
        let subject: &str = if self.is_path {
            if !is_clean_relative_path(value) {
                return RuleVerdict::Undecided;
            }
            subject.clear();
            subject.push_str(&self.root);
            subject.push('/');
            subject.push_str(value);
            subject
        } else {
            value
        };
        let first = |patterns: &[Pattern]| {
            patterns
                .iter()
                .find(|pattern| pattern.names(subject))
                .map(|p| p.verdict)
        };
        if let Some(verdict) = first(&self.deny) {
            return RuleVerdict::Named(verdict);
        }
        if let Some(verdict) = self.ask_all.or_else(|| first(&self.ask)) {
            return RuleVerdict::Named(verdict);
        }
        match self.allow_all.or_else(|| first(&self.allow)) {
            Some(verdict) => RuleVerdict::Named(verdict),
            None => RuleVerdict::Unnamed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(equal: Option<&str>, prefix: Option<&str>, verdict: usize) -> Pattern {
        Pattern {
            equal: equal.map(str::to_owned),
            prefix: prefix.map(str::to_owned),
            verdict,
        }
    }

    fn paths() -> SubjectRules {
        SubjectRules {
            is_path: true,
            root: "/repo".to_owned(),
            deny: vec![pattern(Some("/repo/secret"), Some("/repo/secret/"), 0)],
            ask_all: None,
            ask: vec![pattern(Some("/repo/src/setup.py"), None, 1)],
            allow_all: None,
            allow: vec![
                pattern(Some("/repo/src"), Some("/repo/src/"), 2),
                pattern(Some("/repo/src/a.py"), None, 3),
            ],
        }
    }

    #[test]
    fn deny_then_ask_then_allow_the_first_pattern_of_a_kind_names_the_call() {
        let rules = paths();
        let mut buffer = String::new();
        assert_eq!(rules.judge("secret/key", &mut buffer), RuleVerdict::Named(0));
        assert_eq!(rules.judge("secret", &mut buffer), RuleVerdict::Named(0));
        assert_eq!(rules.judge("src/setup.py", &mut buffer), RuleVerdict::Named(1));
        // Both allow patterns name it: the first given wins.
        assert_eq!(rules.judge("src/a.py", &mut buffer), RuleVerdict::Named(2));
        assert_eq!(rules.judge("docs/a.md", &mut buffer), RuleVerdict::Unnamed);
        // A prefix names what is below the directory, not a longer name beside it.
        assert_eq!(rules.judge("secrets", &mut buffer), RuleVerdict::Unnamed);
    }

    #[test]
    fn a_path_normalising_would_change_is_left_to_the_python_side() {
        let rules = paths();
        let mut buffer = String::new();
        for value in [
            "",
            "/etc/passwd",
            "./secret",
            "../repo/secret",
            "~/x",
            "src/",
            "src//a",
            "src/../secret",
            "a/.b",
        ] {
            assert_eq!(rules.judge(value, &mut buffer), RuleVerdict::Undecided, "{value:?}");
        }
        // Dots inside a segment and non-ASCII text are plain.
        assert_eq!(rules.judge("src/a.b.py", &mut buffer), RuleVerdict::Named(2));
        assert_eq!(rules.judge("src/é/ß", &mut buffer), RuleVerdict::Named(2));
    }

    #[test]
    fn rules_for_every_call_come_before_the_patterns_of_their_kind() {
        let mut rules = paths();
        rules.ask_all = Some(7);
        let mut buffer = String::new();
        assert_eq!(rules.judge("secret/key", &mut buffer), RuleVerdict::Named(0));
        assert_eq!(rules.judge("src/a.py", &mut buffer), RuleVerdict::Named(7));
        rules.ask_all = None;
        rules.allow_all = Some(8);
        assert_eq!(rules.judge("src/setup.py", &mut buffer), RuleVerdict::Named(1));
        assert_eq!(rules.judge("docs/a.md", &mut buffer), RuleVerdict::Named(8));
    }

    #[test]
    fn text_subjects_are_matched_as_given() {
        let rules = SubjectRules {
            is_path: false,
            root: String::new(),
            deny: vec![pattern(None, Some("rm "), 0)],
            ask_all: None,
            ask: vec![],
            allow_all: None,
            allow: vec![pattern(Some("ls"), None, 1), pattern(None, Some("git "), 2)],
        };
        let mut buffer = String::new();
        assert_eq!(rules.judge("rm -rf /", &mut buffer), RuleVerdict::Named(0));
        assert_eq!(rules.judge("ls", &mut buffer), RuleVerdict::Named(1));
        assert_eq!(rules.judge("ls -l", &mut buffer), RuleVerdict::Unnamed);
        assert_eq!(rules.judge("git status", &mut buffer), RuleVerdict::Named(2));
        // No path rules here: any text is plain, even one that looks like a path.
        assert_eq!(rules.judge("../x", &mut buffer), RuleVerdict::Unnamed);
        assert_eq!(rules.judge("", &mut buffer), RuleVerdict::Unnamed);
    }

    #[test]
    fn the_filesystem_root_joins_as_a_single_slash() {
        let rules = SubjectRules {
            is_path: true,
            root: String::new(),
            deny: vec![pattern(Some("/etc"), Some("/etc/"), 0)],
            ask_all: None,
            ask: vec![],
            allow_all: None,
            allow: vec![],
        };
        let mut buffer = String::new();
        assert_eq!(rules.judge("etc/passwd", &mut buffer), RuleVerdict::Named(0));
        assert_eq!(rules.judge("home/a", &mut buffer), RuleVerdict::Unnamed);
    }
}
