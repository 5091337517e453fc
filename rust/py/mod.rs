//! The PyO3 binding: the only code that knows Python. It converts a turn's
//! inputs once, releases the interpreter for the engine's work, and builds the
//! result once.

mod builders;
mod calls;
mod convert;
mod copies;
mod errors;
mod rules;
mod stepped;
mod stepping;

use std::cell::Cell;
use std::fmt::Write as _;
use std::sync::Arc;

use pyo3::exceptions::PyTypeError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedStr;
use pyo3::types::{PyList, PyString, PyTuple, PyType};

use crate::assemble::model_order;
use crate::catalog::{Catalog, ToolSpec};
use crate::conflicts::{normalize_key as engine_normalize_key, plan_dependencies, Access, ConflictPlanner};
use crate::error::EngineError;
use crate::plan::{same_arguments, Arguments, ChunkedTurn, Pushed, TurnPlanner, Verdict};
use crate::schedule::{plan_batches as engine_plan_batches, Strategy};
use crate::shape::{truncate as engine_truncate, Budget, Cut};
use crate::validate::Limits;

use convert::{not_unicode, to_json, to_python, KeyStrings, PyBuilder};
use errors::{AssemblyError, OptionError};
use rules::PyRuleTable;

fn limits(max_input_bytes: usize, max_input_depth: usize, max_errors: usize, repair: bool) -> Limits {
    Limits {
        max_input_bytes,
        max_input_depth,
        max_errors,
        repair,
    }
}

/// The limits a call's arguments are read and checked under: the most bytes
/// of argument text, the deepest nesting, and how many schema errors a
/// refusal lists. Made once per executor, so that a turn passes one object.
///
/// Depth counts arrays and objects: the arguments object is level 1, each
/// container in it one more, a scalar none (`{"a": [1]}` is 2 deep); text and
/// mappings are held to it alike. `max_input_depth` is at most
/// `MAX_INPUT_DEPTH` (else `OptionError`). With `repair`, arguments that fail
/// to parse or to validate are repaired where one fix is unambiguous (see
/// `rust/repair.rs`) and then validated; valid arguments are never changed.
#[pyclass(frozen, module = "toolsched._core", name = "Limits")]
pub struct PyLimits {
    limits: Limits,
}

#[pymethods]
impl PyLimits {
    /// The deepest nesting `max_input_depth` may allow (the engine's walks recurse once per level).
    #[classattr]
    const MAX_INPUT_DEPTH: usize = crate::validate::MAX_INPUT_DEPTH;

    #[new]
    #[pyo3(signature = (max_input_bytes, max_input_depth, max_errors, *, repair = false))]
    fn new(max_input_bytes: usize, max_input_depth: usize, max_errors: usize, repair: bool) -> PyResult<Self> {
        if max_input_depth > crate::validate::MAX_INPUT_DEPTH {
            return Err(OptionError::new_err(format!(
                "max_input_depth must be at most {}, got {max_input_depth}",
                crate::validate::MAX_INPUT_DEPTH
            )));
        }
        Ok(Self {
            limits: limits(max_input_bytes, max_input_depth, max_errors, repair),
        })
    }

    #[getter]
    fn max_input_bytes(&self) -> usize {
        self.limits.max_input_bytes
    }

    #[getter]
    fn max_input_depth(&self) -> usize {
        self.limits.max_input_depth
    }

    #[getter]
    fn max_errors(&self) -> usize {
        self.limits.max_errors
    }

    fn __repr__(&self) -> String {
        format!(
            "Limits(max_input_bytes={}, max_input_depth={}, max_errors={})",
            self.limits.max_input_bytes, self.limits.max_input_depth, self.limits.max_errors
        )
    }
}

/// The registered tools' names, aliases and compiled schemas.
///
/// Built from `(name, aliases, input_schema)` triples; every schema is compiled
/// once here. Raises `SchemaError` or `ToolNameError`.
#[pyclass(frozen, module = "toolsched._core", name = "ToolTable")]
pub struct PyToolTable {
    catalog: Arc<Catalog>,
}

#[pymethods]
impl PyToolTable {
    #[new]
    fn new(py: Python<'_>, tools: Vec<(String, Vec<String>, Bound<'_, PyAny>)>) -> PyResult<Self> {
        let mut specs = Vec::with_capacity(tools.len());
        let unlimited = limits(usize::MAX, 256, 1, false);
        for (name, aliases, schema) in tools {
            let input_schema = match &schema {
                text if text.is_instance_of::<PyString>() => serde_json::from_str(text.cast::<PyString>()?.to_str()?)
                    .map_err(|err| EngineError::InvalidSchema {
                    tool: name.clone(),
                    message: err.to_string(),
                })?,
                object => to_json(object, &unlimited).map_err(|rejection| EngineError::InvalidSchema {
                    tool: name.clone(),
                    message: rejection.message(&name),
                })?,
            };
            specs.push(ToolSpec {
                name,
                aliases,
                input_schema,
            });
        }
        let catalog = py.detach(|| Catalog::new(specs))?;
        Ok(Self {
            catalog: Arc::new(catalog),
        })
    }

    fn __len__(&self) -> usize {
        self.catalog.len()
    }

    /// Resolves, dedups and validates a turn of calls (objects with `id`,
    /// `name` and `args`, the latter a mapping or JSON text), under `limits`,
    /// and with `rules` judges each call's permission rules.
    ///
    /// The planned calls are the first call of each ID, in order of first
    /// appearance; a call's *slot* is its place among them. Returns columns
    /// rather than a row per call, so a large turn costs no tuple per call:
    /// `(tools, args, failures, positions, duplicates, rulings)`, where
    /// `tools[slot]` is the call's tool position (-1 when unknown),
    /// `args[slot]` its validated arguments (the caller's own mapping, or one
    /// decoded from text; None when refused), `failures` the refused calls as
    /// `(slot, error_kind, message)` in slot order, `positions[slot]` the
    /// call's index in the turn (None when no call was dropped, so that slot
    /// and index agree), `duplicates` the dropped calls as
    /// `(index, first_index, args_differ)`, and `rulings[slot]` the rules'
    /// verdict on the call (`RuleTable.judge`; None without `rules`). Only
    /// arguments decoded from text are judged: the caller's own mapping is
    /// left `undecided`, since the caller may change it before the rules
    /// are applied.
    ///
    /// With `call_type`, every call must be an instance of it: any other
    /// object raises `TypeError` naming its position. With `repairs` (a list),
    /// each call whose arguments were repaired (`Limits(repair=True)`) appends
    /// `(slot, fixes)`, `fixes` a tuple of the fixes' names.
    #[pyo3(signature = (calls, disabled, limits, rules = None, call_type = None, repairs = None))]
    // The arguments are Python's, as the binding's callers pass them.
    #[allow(clippy::too_many_arguments)]
    fn prepare<'py>(
        &self,
        py: Python<'py>,
        calls: &Bound<'py, PyAny>,
        disabled: Vec<bool>,
        limits: &Bound<'py, PyLimits>,
        rules: Option<&Bound<'py, PyRuleTable>>,
        call_type: Option<&Bound<'py, PyType>>,
        repairs: Option<&Bound<'py, PyList>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let limits = limits.get().limits;
        // A capacity hint only: a sequence may misreport its length.
        let expected = calls.len().unwrap_or(0).min(MAX_CAPACITY_HINT);
        let mut turn = Preparation {
            py,
            collector: CollectorPause::new(py),
            turn: ChunkedTurn::new(
                TurnPlanner::new(&self.catalog, &disabled, limits, expected),
                CHUNK_CALLS,
                expected,
            ),
            limits,
            originals: Vec::with_capacity(expected),
            direct: Vec::with_capacity(expected.min(CHUNK_CALLS)),
            verdicts: Vec::with_capacity(expected.min(CHUNK_CALLS)),
            tools: Vec::with_capacity(expected),
            args: Vec::with_capacity(expected),
            positions: Vec::with_capacity(expected),
            failures: PyList::empty(py),
            duplicates: PyList::empty(py),
            keys: KeyStrings::new(),
            rules: rules.map(Bound::get),
            rulings: Vec::with_capacity(if rules.is_some() { expected } else { 0 }),
            subject: String::new(),
            repairs: repairs.cloned(),
        };
        for (position, call) in calls.try_iter()?.enumerate() {
            let call = call?;
            if let Some(expected) = call_type {
                // `isinstance` tells the exact type apart first, without a lookup.
                if !call.is_instance(expected)? {
                    return Err(PyTypeError::new_err(format!(
                        "calls[{position}] must be a {}, got {}",
                        expected.name()?,
                        call.get_type().name()?
                    )));
                }
            }
            if turn.read(&call)? {
                turn.judge_chunk()?;
            }
        }
        if !turn.turn.chunk().is_empty() {
            turn.judge_chunk()?;
        }
        let positions = if turn.duplicates.is_empty() {
            py.None().into_bound(py)
        } else {
            PyList::new(py, turn.positions)?.into_any()
        };
        let rulings = if turn.rules.is_some() {
            PyList::new(py, turn.rulings)?.into_any()
        } else {
            py.None().into_bound(py)
        };
        PyTuple::new(
            py,
            [
                PyList::new(py, turn.tools)?.into_any(),
                PyList::new(py, turn.args)?.into_any(),
                turn.failures.into_any(),
                positions,
                turn.duplicates.into_any(),
                rulings,
            ],
        )
    }

    /// Whether tool `tool`'s schema has a one-pass form, so that its argument
    /// text is parsed, checked and built at once (see `rust/direct.rs`).
    fn has_direct_path(&self, tool: usize) -> PyResult<bool> {
        if tool >= self.catalog.len() {
            return Err(OptionError::new_err(format!("no tool at position {tool}")));
        }
        Ok(self.catalog.direct(tool).is_some())
    }

    /// Checks arguments (a mapping or JSON text) against tool `tool`'s schema,
    /// as after a hook rewrote them. Returns `(args, None)` when valid, else
    /// `(None, message)`.
    fn check<'py>(
        &self,
        py: Python<'py>,
        tool: usize,
        args: &Bound<'py, PyAny>,
        limits: &Bound<'py, PyLimits>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        if tool >= self.catalog.len() {
            return Err(OptionError::new_err(format!("no tool at position {tool}")));
        }
        let limits = limits.get().limits;
        let name = self.catalog.name(tool);
        let none = || py.None().into_bound(py);
        let value = if let Ok(text) = args.cast::<PyString>() {
            match text.to_str() {
                Ok(text) => crate::validate::parse_arguments(text, &limits),
                Err(_) => Err(not_unicode()),
            }
        } else {
            to_json(args, &limits)
        };
        let checked = value.and_then(|value| self.catalog.check(tool, &value, &limits).map(|()| value));
        match checked {
            Ok(value) => {
                // What was checked, built anew (as a call's own arguments are): never the caller's object, whose
                // type may read back other values than the ones checked (a dict subclass overriding its reads).
                let args = to_python(py, &value, &mut KeyStrings::new())?;
                PyTuple::new(py, [args, none()])
            }
            Err(rejection) => PyTuple::new(py, [none(), PyString::new(py, &rejection.message(name)).into_any()]),
        }
    }
}

/// A chunk of fewer calls than this, and less argument text than
/// `DETACH_MIN_BYTES`, is judged without releasing the interpreter: for a few
/// small calls, releasing and taking it back costs more than the work another
/// thread could do meanwhile.
const DETACH_MIN_CALLS: usize = 16;
const DETACH_MIN_BYTES: usize = 64 * 1024;

/// The most calls a prepare reserves room for before it has read them.
const MAX_CAPACITY_HINT: usize = 1 << 20;

/// How many calls a prepare judges per release of the interpreter: few enough
/// that a chunk's parsed arguments are dropped while still in cache, enough that
/// releasing the interpreter costs nothing per call.
const CHUNK_CALLS: usize = 512;

/// One `ToolTable.prepare` in progress: calls are read with the interpreter
/// held, judged a chunk at a time without it, and each chunk's verdicts turned
/// into result rows before the next chunk is read.
struct Preparation<'t, 'py> {
    py: Python<'py>,
    /// The cyclic collector, paused while this prepare holds the interpreter.
    collector: CollectorPause<'py>,
    /// The turn's dedup and its current chunk of first calls, waiting to be judged.
    turn: ChunkedTurn<'t, Pending>,
    limits: Limits,
    /// Every call's arguments object, by position in the turn: returned as-is
    /// when valid, and read again when a later call repeats its ID.
    originals: Vec<Bound<'py, PyAny>>,
    /// The chunk's calls taken by the direct path (tool and built arguments), in chunk order.
    direct: Vec<Option<(usize, Bound<'py, PyAny>)>>,
    /// The verdicts of the chunk's other calls, in chunk order (the buffer is reused by every chunk).
    verdicts: Vec<Verdict>,
    /// The result columns, by slot (see `prepare`).
    tools: Vec<isize>,
    args: Vec<Bound<'py, PyAny>>,
    positions: Vec<usize>,
    failures: Bound<'py, PyList>,
    duplicates: Bound<'py, PyList>,
    keys: KeyStrings<'py>,
    /// The permission rules the calls are judged by, if any, and their verdicts by slot.
    rules: Option<&'t PyRuleTable>,
    rulings: Vec<Bound<'py, PyAny>>,
    /// The buffer a path subject is joined to its root in.
    subject: String,
    /// Where repaired calls are reported as `(slot, fixes)`, if the caller asked.
    repairs: Option<Bound<'py, PyList>>,
}

/// A first call waiting for its chunk to be judged. Its strings stay in the
/// Python objects, which it keeps alive.
struct Pending {
    name: PyBackedStr,
    args: PendingArguments,
}

/// A waiting call's arguments: JSON text, or anything else converted as it was read.
enum PendingArguments {
    Text(PyBackedStr),
    Converted(Arguments<'static>),
}

impl PendingArguments {
    /// The length of the argument text (0 for converted arguments).
    fn text_bytes(&self) -> usize {
        match self {
            Self::Text(text) => text.len(),
            Self::Converted(_) => 0,
        }
    }

    /// Calls `f` with the arguments as the engine takes them.
    fn with<R>(&self, f: impl FnOnce(&Arguments<'_>) -> R) -> R {
        match self {
            Self::Text(text) => f(&Arguments::Text(text)),
            Self::Converted(args) => f(args),
        }
    }
}

impl<'py> Preparation<'_, 'py> {
    /// Reads the next call: a repeated ID becomes a duplicate row at once, a
    /// first call joins the chunk. Returns whether the chunk is full (to be judged now).
    fn read(&mut self, call: &Bound<'py, PyAny>) -> PyResult<bool> {
        let py = self.py;
        // Each attribute is checked as it is read (id, name, args), so the first
        // bad attribute in turn order is the one reported, as with whole-turn reading.
        let id = call.getattr(intern!(py, "id"))?.cast_into::<PyString>()?;
        let surrogate_key;
        let id_key = if let Ok(text) = id.to_str() {
            text
        } else {
            surrogate_key = id_key(&id)?;
            surrogate_key.as_str()
        };
        let name = backed_name(call.getattr(intern!(py, "name"))?.cast_into::<PyString>()?)?;
        let raw = call.getattr(intern!(py, "args"))?;
        let args = match raw.cast::<PyString>() {
            Ok(text) => match PyBackedStr::try_from(text.clone()) {
                Ok(text) => PendingArguments::Text(text),
                Err(_) => PendingArguments::Converted(Arguments::Rejected(not_unicode())),
            },
            Err(_) => PendingArguments::Converted(converted_arguments(&raw, &self.limits)),
        };
        let full = match self.turn.push(id_key, Pending { name, args }) {
            Pushed::Joined { full } => full,
            Pushed::Repeat { index, first, call } => {
                let earlier = arguments(&self.originals[first], &self.limits);
                let args_differ = call.args.with(|args| !same_arguments(&earlier, args, &self.limits));
                self.duplicates.append((index, first, args_differ))?;
                false
            }
        };
        self.originals.push(raw);
        Ok(full)
    }

    /// Judges the chunk's calls, then appends their rows and drops their parsed
    /// arguments. Calls the direct path takes are read and built with the
    /// interpreter held; the others are judged with it released (unless they
    /// are few and small).
    fn judge_chunk(&mut self) -> PyResult<()> {
        let py = self.py;
        let Self {
            turn,
            direct,
            verdicts,
            keys,
            ..
        } = self;
        let planner = turn.planner();
        let chunk = turn.chunk();
        let mut builder = PyBuilder { py, keys };
        let (mut left, mut left_bytes) = (0, 0);
        direct.extend(chunk.iter().map(|(_, call)| {
            let built = match &call.args {
                PendingArguments::Text(text) => planner.judge_direct(&call.name, text, &mut builder),
                PendingArguments::Converted(_) => None,
            };
            if built.is_none() {
                left += 1;
                left_bytes += call.args.text_bytes();
            }
            built
        }));
        // Python objects stay with the interpreter: the judging side sees only which calls are left.
        let taken: Vec<bool> = if left == 0 {
            Vec::new()
        } else {
            direct.iter().map(Option::is_some).collect()
        };
        let mut judge_rest = || {
            verdicts.extend(
                chunk
                    .iter()
                    .zip(&taken)
                    .filter(|(_, taken)| !**taken)
                    .map(|((_, call), _)| call.args.with(|args| planner.judge(&call.name, args))),
            );
        };
        if left == 0 {
            // Every call took the direct path: nothing is left to judge.
        } else if left < DETACH_MIN_CALLS && left_bytes < DETACH_MIN_BYTES {
            judge_rest();
        } else {
            // Other threads run meanwhile, with the collector as this prepare found it.
            let _resumed = self.collector.resumed();
            py.detach(judge_rest);
        }
        self.record_chunk()
    }

    /// Appends the judged chunk's rows (each call's tool and arguments, or
    /// its failure), then drops the chunk.
    fn record_chunk(&mut self) -> PyResult<()> {
        let py = self.py;
        let mut verdicts = self.verdicts.drain(..);
        for ((index, call), built) in self.turn.chunk().iter().zip(self.direct.drain(..)) {
            let slot = self.tools.len();
            self.positions.push(*index);
            if let Some((tool, args)) = built {
                if let Some(rules) = self.rules {
                    self.rulings
                        .push(rules.verdict(py, tool, Some(&args), &mut self.subject));
                }
                self.tools.push(tool_position(tool));
                self.args.push(args);
                continue;
            }
            let refused = |tool: isize, kind: &Bound<'py, PyString>, message: &str| {
                (tool, (slot, kind.clone(), PyString::new(py, message)))
            };
            let failure = match verdicts.next().expect("a verdict for every call the direct path left") {
                Verdict::Repaired { tool, parsed, fixes } => {
                    if let Some(repairs) = &self.repairs {
                        let names = PyTuple::new(py, fixes.as_slice().iter().map(|fix| fix.as_str()))?;
                        repairs.append((slot, names))?;
                    }
                    let args = to_python(py, &parsed, &mut self.keys)?;
                    if let Some(rules) = self.rules {
                        self.rulings
                            .push(rules.verdict(py, tool, Some(&args), &mut self.subject));
                    }
                    self.tools.push(tool_position(tool));
                    self.args.push(args);
                    continue;
                }
                Verdict::Ready { tool, parsed } => {
                    let decoded = parsed.is_some();
                    let args = match (parsed, &call.args) {
                        (Some(value), _) => to_python(py, &value, &mut self.keys)?,
                        // A mapping the caller keeps is built anew from what was validated: the rules, the
                        // hooks, the approver and the tool see what was checked, whatever the caller's mapping
                        // becomes meanwhile (nested values included).
                        (None, PendingArguments::Converted(Arguments::Value(value))) => {
                            to_python(py, value, &mut self.keys)?
                        }
                        (None, _) => self.originals[*index].clone(),
                    };
                    if let Some(rules) = self.rules {
                        // Mappings are judged when their calls are admitted (``ToolRules.evaluate``).
                        let readable = if decoded { Some(&args) } else { None };
                        self.rulings.push(rules.verdict(py, tool, readable, &mut self.subject));
                    }
                    self.tools.push(tool_position(tool));
                    self.args.push(args);
                    continue;
                }
                Verdict::UnknownTool { message } => refused(-1, intern!(py, "unknown_tool"), &message),
                Verdict::InvalidInput { tool, message, .. } => {
                    refused(tool_position(tool), intern!(py, "invalid_input"), &message)
                }
            };
            self.tools.push(failure.0);
            self.args.push(py.None().into_bound(py));
            if self.rules.is_some() {
                self.rulings.push(py.None().into_bound(py));
            }
            self.failures.append(failure.1)?;
        }
        drop(verdicts);
        self.turn.clear_chunk();
        Ok(())
    }
}

/// Keeps Python's cyclic garbage collector off while a prepare builds its
/// result, and puts it back on when dropped (on error too) if the pause turned
/// it off.
///
/// The rows are tuples, lists and dicts that cannot form cycles, yet each one
/// counts towards a collection; with the collector on, a large turn would
/// trigger hundreds of collections that walk the rows built so far. While a
/// chunk is judged with the interpreter released, the collector is back as it
/// was, so other threads run with it as they expect; Python code that the
/// prepare itself runs (a mapping's methods, a property of a call) runs with it
/// paused.
struct CollectorPause<'py> {
    // Ties the pause to the attached interpreter, where it must end.
    _py: Python<'py>,
    /// Whether the collector was on when the pause last turned it off: what to put back.
    was_enabled: Cell<bool>,
}

impl<'py> CollectorPause<'py> {
    fn new(py: Python<'py>) -> Self {
        // SAFETY: the interpreter is attached (we hold `Python`).
        let was_enabled = unsafe { pyo3::ffi::PyGC_Disable() } != 0;
        Self {
            _py: py,
            was_enabled: Cell::new(was_enabled),
        }
    }

    /// Puts the collector back as it was until the returned guard is dropped;
    /// call it before releasing the interpreter.
    fn resumed(&self) -> CollectorResumed<'_, 'py> {
        if self.was_enabled.get() {
            // SAFETY: the interpreter is attached (the pause holds `Python`).
            unsafe { pyo3::ffi::PyGC_Enable() };
        }
        CollectorResumed { pause: self }
    }
}

impl Drop for CollectorPause<'_> {
    fn drop(&mut self) {
        if self.was_enabled.get() {
            // SAFETY: dropped where it was made, with the interpreter attached.
            unsafe { pyo3::ffi::PyGC_Enable() };
        }
    }
}

/// The collector resumed while a chunk is judged. Dropped once the interpreter
/// is attached again, it pauses the collector anew and remembers the state it
/// found then: another thread may have switched the collector meanwhile, and
/// that choice is what the prepare puts back at its end.
struct CollectorResumed<'p, 'py> {
    pause: &'p CollectorPause<'py>,
}

impl Drop for CollectorResumed<'_, '_> {
    fn drop(&mut self) {
        // SAFETY: dropped in `judge_chunk` after `py.detach` returned, with the interpreter attached.
        let was_enabled = unsafe { pyo3::ffi::PyGC_Disable() } != 0;
        self.pause.was_enabled.set(was_enabled);
    }
}

/// A call's arguments as the engine takes them: text borrowed from the Python
/// string, anything else converted to JSON.
fn arguments<'a>(raw: &'a Bound<'_, PyAny>, limits: &Limits) -> Arguments<'a> {
    match raw.cast::<PyString>() {
        Ok(text) => text
            .to_str()
            .map_or_else(|_| Arguments::Rejected(not_unicode()), Arguments::Text),
        Err(_) => converted_arguments(raw, limits),
    }
}

/// The key an ID holding lone surrogates is deduplicated by: a spelling no
/// valid ID can have, so distinct IDs stay distinct.
fn id_key(id: &Bound<'_, PyString>) -> PyResult<String> {
    let bytes = id.call_method1(intern!(id.py(), "encode"), ("utf-8", "surrogatepass"))?;
    let bytes: Vec<u8> = bytes.extract()?;
    let mut key = String::from("\u{0}surrogates:");
    for byte in bytes {
        let _ = write!(key, "{byte:02x}");
    }
    Ok(key)
}

/// A tool name as the engine looks it up; one holding lone surrogates names no
/// tool, so it is looked up with those replaced (and is then unknown).
fn backed_name(name: Bound<'_, PyString>) -> PyResult<PyBackedStr> {
    match PyBackedStr::try_from(name.clone()) {
        Ok(backed) => Ok(backed),
        Err(_) => PyBackedStr::try_from(PyString::new(name.py(), &name.to_string_lossy())),
    }
}

/// Arguments that are not text, converted to JSON (or refused).
fn converted_arguments(raw: &Bound<'_, PyAny>, limits: &Limits) -> Arguments<'static> {
    match to_json(raw, limits) {
        Ok(value) => Arguments::Value(value),
        Err(rejection) => Arguments::Rejected(rejection),
    }
}

/// A tool's position as Python sees it (-1 stands for no tool).
fn tool_position(tool: usize) -> isize {
    isize::try_from(tool).unwrap_or(-1)
}

fn strategy(name: &str, max_concurrency: usize, size: usize) -> PyResult<Strategy> {
    Ok(match name {
        "sequential" => Strategy::Sequential,
        "parallel" => Strategy::Parallel { max_concurrency },
        "batched" => Strategy::Batched { size, max_concurrency },
        "partitioned" => Strategy::Partitioned { max_concurrency },
        other => return Err(OptionError::new_err(format!("unknown strategy `{other}`"))),
    })
}

/// Groups runnable calls into batches: a list of `(start, end, concurrency)`.
/// `safe[i]` is call `i`'s concurrency-safety.
#[pyfunction]
#[pyo3(signature = (strategy_name, safe, *, max_concurrency, size = 1))]
fn plan_batches(
    py: Python<'_>,
    strategy_name: &str,
    safe: Vec<bool>,
    max_concurrency: usize,
    size: usize,
) -> PyResult<Vec<(usize, usize, usize)>> {
    let strategy = strategy(strategy_name, max_concurrency, size)?;
    let batches = py.detach(|| engine_plan_batches(strategy, &safe))?;
    Ok(batches.into_iter().map(|b| (b.start, b.end, b.concurrency)).collect())
}

/// Plans a turn by resource conflicts. `accesses[i]` is call `i`'s
/// `(reads, writes)` keys, or None when its resources are unknown.
///
/// Returns `(wait_offsets, waits, dependent_offsets, dependents)`: call `i`
/// waits for the calls `waits[wait_offsets[i]:wait_offsets[i + 1]]` (earlier
/// calls it conflicts with), and the calls in
/// `dependents[dependent_offsets[i]:dependent_offsets[i + 1]]` wait for it.
#[pyfunction]
#[allow(clippy::type_complexity)]
fn plan_conflicts(
    py: Python<'_>,
    accesses: Vec<Option<(Vec<String>, Vec<String>)>>,
) -> PyResult<(Vec<u32>, Vec<u32>, Vec<u32>, Vec<u32>)> {
    let calls: Vec<Option<Access>> = accesses
        .into_iter()
        .map(|access| access.map(|(reads, writes)| Access { reads, writes }))
        .collect();
    let plan = py.detach(|| plan_dependencies(&calls))?;
    Ok((plan.wait_offsets, plan.waits, plan.dependent_offsets, plan.dependents))
}

/// The conflict planner of a turn whose calls arrive one at a time (a
/// streamed turn): `insert(access)` adds the next call and returns the
/// earlier calls it waits for, as `plan_conflicts` would for the whole turn.
#[pyclass(module = "toolsched._core", name = "ConflictPlanner")]
struct PyConflictPlanner {
    planner: ConflictPlanner,
}

#[pymethods]
impl PyConflictPlanner {
    #[new]
    fn new() -> Self {
        Self {
            planner: ConflictPlanner::new(),
        }
    }

    /// Adds the next call: `access` is its `(reads, writes)` keys, or None
    /// when its resources are unknown. Returns the indexes of the earlier
    /// calls it waits for, increasing.
    fn insert(&mut self, access: Option<(Vec<String>, Vec<String>)>) -> PyResult<Vec<u32>> {
        let access = access.map(|(reads, writes)| Access { reads, writes });
        Ok(self.planner.insert(access.as_ref())?.to_vec())
    }

    fn __len__(&self) -> usize {
        self.planner.len()
    }
}

/// A resource key in the form the conflict planner compares: `.` components,
/// doubled and trailing slashes dropped, `name/..` resolved.
#[pyfunction]
fn normalize_key(key: &str) -> String {
    engine_normalize_key(key)
}

/// Puts results that arrived in completion order into model order.
/// `slots[i]` is the model-order slot of `results[i]`; every slot in
/// `0..count` must be answered exactly once, else `AssemblyError`.
#[pyfunction]
fn assemble<'py>(
    py: Python<'py>,
    count: usize,
    slots: Vec<usize>,
    results: &Bound<'py, PyList>,
) -> PyResult<Bound<'py, PyList>> {
    if slots.len() != results.len() {
        return Err(AssemblyError::new_err(format!(
            "{} slots for {} results",
            slots.len(),
            results.len()
        )));
    }
    let order = py.detach(|| model_order(count, &slots))?;
    PyList::new(
        py,
        order
            .into_iter()
            .map(|position| results.get_item(position))
            .collect::<PyResult<Vec<_>>>()?,
    )
}

/// Cuts `text` to at most `max_chars` characters (and `max_lines` lines),
/// removing the "head", the "tail" or the "middle". Returns None when it fits,
/// else `(shaped_text, omitted_chars)`.
#[pyfunction]
#[pyo3(signature = (text, max_chars, *, max_lines = None, cut = "tail"))]
fn truncate(
    py: Python<'_>,
    text: &str,
    max_chars: usize,
    max_lines: Option<usize>,
    cut: &str,
) -> PyResult<Option<(String, usize)>> {
    let cut = match cut {
        "head" => Cut::Head,
        "tail" => Cut::Tail,
        "middle" => Cut::Middle,
        other => {
            return Err(OptionError::new_err(format!(
                "unknown cut `{other}`; use head, tail or middle"
            )))
        }
    };
    let budget = Budget { max_chars, max_lines };
    let shaped = py.detach(|| engine_truncate(text, budget, cut));
    Ok(shaped.map(|s| (s.text, s.omitted_chars)))
}

/// The toolsched engine, compiled from Rust.
// The module holds the interpreter's lock (also where a build could run without it): the builders and
// `ToolCall`'s `__init__` write slots in place as the member descriptors do under that lock, with no
// critical section of their own.
#[pymodule(gil_used = true)]
mod _core {
    #[pymodule_export]
    use super::builders::{turn_jobs, PySlotBuilder};
    #[pymodule_export]
    use super::calls::call_init;
    #[pymodule_export]
    use super::copies::detached;
    #[pymodule_export]
    use super::stepped::{abandon_closed, stepper};
    #[pymodule_export]
    use super::stepping::{start, PyResume};

    #[pymodule_init]
    fn init(module: &pyo3::Bound<'_, pyo3::types::PyModule>) -> pyo3::PyResult<()> {
        super::stepped::make_type(module)
    }
    #[pymodule_export]
    use super::{
        assemble, normalize_key, plan_batches, plan_conflicts, truncate, PyConflictPlanner, PyLimits, PyRuleTable,
        PyToolTable,
    };
}
