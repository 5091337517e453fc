//! The binding of `rust/rules.rs`: each tool's permission rules, as compiled
//! by `toolsched._policy.permissions`, judged for the arguments a prepare builds.

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyString, PyTuple};

use crate::rules::{Pattern, RuleVerdict, SubjectRules};

use super::errors::OptionError;

/// What the rules do with one tool's calls.
enum Entry {
    /// No rule names the tool: its calls' verdict is None.
    Unnamed,
    /// Its rules are judged by the Python side only.
    Undecided,
    /// The verdict at this position, whatever the arguments (a rule naming every call decides).
    Constant(usize),
    /// Its subject argument and the compiled forms of its rules.
    Judged { key: Py<PyString>, rules: SubjectRules },
}

/// Every tool's permission rules in the compiled form the engine judges.
///
/// Built from `(undecided, tools)`: `undecided` is the object a verdict the
/// engine leaves to the Python side is given as; `tools[i]` is None (no rule
/// names tool `i`), False (its rules are judged in Python only), `(verdict,)`
/// (the verdict of every call, whatever its arguments), or
/// `(subject, is_path, root, deny, ask_all, ask, allow_all, allow)`, where
/// `deny`, `ask` and `allow` are lists of `(equal, prefix, verdict)` in the
/// order the rules were given (`equal` and `prefix` text or None, not both
/// None) and `ask_all` / `allow_all` the verdict of a rule naming every call
/// of the tool, or None. A verdict is any object; the engine hands it back as
/// it was given.
#[pyclass(frozen, module = "toolsched._core", name = "RuleTable")]
pub struct PyRuleTable {
    tools: Vec<Entry>,
    verdicts: Vec<Py<PyAny>>,
    undecided: Py<PyAny>,
}

#[pymethods]
impl PyRuleTable {
    #[new]
    fn new(undecided: Bound<'_, PyAny>, tools: Vec<Bound<'_, PyAny>>) -> PyResult<Self> {
        let mut verdicts = Vec::new();
        let mut entries = Vec::with_capacity(tools.len());
        for (position, tool) in tools.iter().enumerate() {
            let entry = if tool.is_none() {
                Entry::Unnamed
            } else if let Ok(flag) = tool.cast::<PyBool>() {
                if flag.is_true() {
                    return Err(OptionError::new_err(format!(
                        "tools[{position}] is True: None, False or a tuple"
                    )));
                }
                Entry::Undecided
            } else {
                judged(tool, &mut verdicts).map_err(|err| {
                    OptionError::new_err(format!("tools[{position}] is not a tool's compiled rules: {err}"))
                })?
            };
            entries.push(entry);
        }
        Ok(Self {
            tools: entries,
            verdicts,
            undecided: undecided.unbind(),
        })
    }

    fn __len__(&self) -> usize {
        self.tools.len()
    }

    /// The verdict for a call of tool `tool` with the arguments `args`: None
    /// when no rule names it, the object given for the rule that does, or
    /// `undecided` when the engine leaves it to the Python side (the subject
    /// is missing, not exactly text, or a path that normalising would change).
    fn judge<'py>(&self, py: Python<'py>, tool: usize, args: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        if tool >= self.tools.len() {
            return Err(OptionError::new_err(format!("no tool at position {tool}")));
        }
        Ok(self.verdict(py, tool, Some(args), &mut String::new()))
    }
}

impl PyRuleTable {
    /// `judge`, with a buffer the caller reuses from call to call; `args`
    /// None stands for arguments that must not be read now (a verdict that
    /// depends on them is left `undecided`).
    pub fn verdict<'py>(
        &self,
        py: Python<'py>,
        tool: usize,
        args: Option<&Bound<'py, PyAny>>,
        buffer: &mut String,
    ) -> Bound<'py, PyAny> {
        let (key, rules) = match self.tools.get(tool) {
            Some(Entry::Judged { key, rules }) => (key, rules),
            Some(Entry::Unnamed) => return py.None().into_bound(py),
            Some(Entry::Constant(index)) => return self.verdicts[*index].bind(py).clone(),
            Some(Entry::Undecided) | None => return self.undecided(py),
        };
        // Exactly a dict holding exactly text, as `ToolRules.evaluate`'s own short way asks.
        let Some(Ok(args)) = args.map(|args| args.cast_exact::<PyDict>()) else {
            return self.undecided(py);
        };
        let Ok(Some(value)) = args.get_item(key.bind(py)) else {
            return self.undecided(py);
        };
        let Ok(text) = value.cast_exact::<PyString>() else {
            return self.undecided(py);
        };
        let Ok(text) = text.to_str() else {
            return self.undecided(py);
        };
        match rules.judge(text, buffer) {
            RuleVerdict::Undecided => self.undecided(py),
            RuleVerdict::Unnamed => py.None().into_bound(py),
            RuleVerdict::Named(index) => self.verdicts[index].bind(py).clone(),
        }
    }

    /// The object a verdict left to the Python side is given as.
    pub fn undecided<'py>(&self, py: Python<'py>) -> Bound<'py, PyAny> {
        self.undecided.bind(py).clone()
    }
}

/// One tool's compiled rules, its verdicts appended to `verdicts`.
fn judged(tool: &Bound<'_, PyAny>, verdicts: &mut Vec<Py<PyAny>>) -> PyResult<Entry> {
    let tool = tool.cast::<PyTuple>()?;
    if tool.len() == 1 {
        verdicts.push(tool.get_item(0)?.unbind());
        return Ok(Entry::Constant(verdicts.len() - 1));
    }
    if tool.len() != 8 {
        return Err(OptionError::new_err(format!(
            "a tuple of 1 or 8 items, not {}",
            tool.len()
        )));
    }
    let key = tool.get_item(0)?.cast_into::<PyString>()?;
    let key = PyString::intern(tool.py(), key.to_str()?).unbind();
    let is_path: bool = tool.get_item(1)?.extract()?;
    let root: String = tool.get_item(2)?.extract()?;
    let mut every = |verdict: Bound<'_, PyAny>| -> Option<usize> {
        if verdict.is_none() {
            return None;
        }
        verdicts.push(verdict.unbind());
        Some(verdicts.len() - 1)
    };
    let ask_all = every(tool.get_item(4)?);
    let allow_all = every(tool.get_item(6)?);
    let deny = patterns(&tool.get_item(3)?, verdicts)?;
    let ask = patterns(&tool.get_item(5)?, verdicts)?;
    let allow = patterns(&tool.get_item(7)?, verdicts)?;
    Ok(Entry::Judged {
        key,
        rules: SubjectRules {
            is_path,
            root,
            deny,
            ask_all,
            ask,
            allow_all,
            allow,
        },
    })
}

fn patterns(list: &Bound<'_, PyAny>, verdicts: &mut Vec<Py<PyAny>>) -> PyResult<Vec<Pattern>> {
    let mut patterns = Vec::new();
    for item in list.try_iter()? {
        let (equal, prefix, verdict): (Option<String>, Option<String>, Bound<'_, PyAny>) = item?.extract()?;
        if equal.is_none() && prefix.is_none() {
            return Err(OptionError::new_err(
                "a pattern with neither a value to equal nor a prefix",
            ));
        }
        verdicts.push(verdict.unbind());
        patterns.push(Pattern {
            equal,
            prefix,
            verdict: verdicts.len() - 1,
        });
    }
    Ok(patterns)
}
