//! Planning a turn: lookup, dedup by call ID and validation.
//!
//! [`prepare_turn`] plans a whole turn at once. [`TurnPlanner`] plans it call by
//! call, so that a caller can hand calls over in chunks and drop each chunk's
//! parsed arguments before the next: dedup still spans the whole turn.

use ahash::RandomState;
use hashbrown::HashTable;
use serde_json::Value;

use crate::catalog::Catalog;
use crate::direct::Build;
use crate::repair::{decode_encoded, repair_text, repair_to_schema, Fixes, Refusal};
use crate::validate::{parse_arguments, InputRejection, Limits};

/// A call's arguments as the model sent them.
#[derive(Debug, Clone, PartialEq)]
pub enum Arguments<'a> {
    /// JSON text (OpenAI sends arguments this way).
    Text(&'a str),
    /// An already-decoded object.
    Value(Value),
    /// The binding could not turn the arguments into JSON at all.
    Rejected(InputRejection),
}

/// One tool call of a turn. Its strings are borrowed from the caller.
#[derive(Debug, Clone, PartialEq)]
pub struct CallInput<'a> {
    pub id: &'a str,
    pub name: &'a str,
    pub args: Arguments<'a>,
}

/// What planning decided for one call.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// The call may proceed. `parsed` holds arguments decoded from text; for
    /// [`Arguments::Value`] it is `None` and the caller's own object is valid.
    Ready { tool: usize, parsed: Option<Value> },
    /// The arguments were repaired (see [`crate::repair`]) and then passed the schema; `parsed` is what
    /// will run and `fixes` what was changed.
    Repaired { tool: usize, parsed: Value, fixes: Fixes },
    /// No enabled tool has this name.
    UnknownTool { message: String },
    /// The arguments were refused.
    InvalidInput {
        tool: usize,
        rejection: InputRejection,
        message: String,
    },
}

/// A call that survived dedup, with its verdict. Results are returned in the
/// order of these calls (first appearance of each ID).
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedCall {
    /// Position of the call in the turn as the model sent it.
    pub index: usize,
    pub verdict: Verdict,
}

/// A call dropped because an earlier call had the same ID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Duplicate {
    /// Position of the dropped call in the turn.
    pub index: usize,
    /// Position of the earlier call with the same ID, which runs instead.
    pub first: usize,
    /// Whether its arguments differ from the earlier call's.
    pub args_differ: bool,
}

/// The plan of one turn, before scheduling.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TurnPlan {
    pub calls: Vec<PlannedCall>,
    pub duplicates: Vec<Duplicate>,
}

/// How many tool names an unknown-tool message lists before it stops.
const NAMES_IN_MESSAGE: usize = 20;

/// Resolves, dedups and validates a whole turn.
///
/// `disabled[i]` marks tool `i` as absent this turn. No call ever makes this
/// fail: each problem becomes that call's verdict.
pub fn prepare_turn(catalog: &Catalog, calls: &[CallInput<'_>], disabled: &[bool], limits: &Limits) -> TurnPlan {
    let mut planner = TurnPlanner::new(catalog, disabled, *limits, calls.len());
    let mut plan = TurnPlan {
        calls: Vec::with_capacity(calls.len()),
        duplicates: Vec::new(),
    };
    for call in calls {
        match planner.admit(call.id) {
            Admission::First { index } => plan.calls.push(PlannedCall {
                index,
                verdict: planner.judge(call.name, &call.args),
            }),
            Admission::Repeat { index, first } => plan.duplicates.push(Duplicate {
                index,
                first,
                args_differ: !same_arguments(&calls[first].args, &call.args, limits),
            }),
        }
    }
    plan
}

/// Whether the next call of a turn is the first with its ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// The call at position `index` is the first with its ID: judge it.
    First { index: usize },
    /// The call at position `index` repeats the ID of the call at `first`, which runs instead.
    Repeat { index: usize, first: usize },
}

/// Plans one turn call by call: [`TurnPlanner::admit`] each call's ID in turn
/// order, then [`TurnPlanner::judge`] the calls admitted as first.
///
/// The planner remembers only the IDs (copied into one buffer), so a caller can
/// judge the calls in chunks and drop each chunk's inputs and verdicts before
/// the next while dedup still covers the whole turn. A repeated call is compared
/// with its first occurrence by [`same_arguments`], which needs both calls'
/// arguments: the caller keeps what it needs to produce them again.
#[derive(Debug)]
pub struct TurnPlanner<'t> {
    catalog: &'t Catalog,
    disabled: &'t [bool],
    limits: Limits,
    ids: CallIds,
    admitted: usize,
}

impl<'t> TurnPlanner<'t> {
    /// A planner for a turn of about `expected_calls` calls (a capacity hint).
    pub fn new(catalog: &'t Catalog, disabled: &'t [bool], limits: Limits, expected_calls: usize) -> Self {
        Self {
            catalog,
            disabled,
            limits,
            ids: CallIds::with_capacity(expected_calls),
            admitted: 0,
        }
    }

    /// Takes the next call of the turn by its ID: the first call with an ID is
    /// planned, a later one is dropped in favour of the first.
    pub fn admit(&mut self, id: &str) -> Admission {
        let index = self.admitted;
        self.admitted += 1;
        match self.ids.first_or_insert(id, index) {
            None => Admission::First { index },
            Some(first) => Admission::Repeat { index, first },
        }
    }

    /// The verdict for a call admitted as [`Admission::First`]: lookup of its
    /// tool, then its arguments against the limits and the tool's schema.
    pub fn judge(&self, name: &str, args: &Arguments<'_>) -> Verdict {
        judge(self.catalog, name, args, self.disabled, &self.limits)
    }

    /// The direct path for a call admitted as [`Admission::First`] with argument text: its tool
    /// and its built arguments when the tool is enabled, its schema has a one-pass form and the
    /// text passes it (see [`crate::direct`]). None leaves the call to [`TurnPlanner::judge`],
    /// which then gives the verdict the direct path would have given, or says what is wrong.
    pub fn judge_direct<B: Build>(&self, name: &str, text: &str, builder: &mut B) -> Option<(usize, B::Value)> {
        let tool = self.catalog.resolve(name)?;
        if self.disabled.get(tool).copied().unwrap_or(false) {
            return None;
        }
        let value = self.catalog.direct(tool)?.build(text, &self.limits, builder)?;
        Some((tool, value))
    }
}

/// What [`ChunkedTurn::push`] did with a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed<C> {
    /// The call repeats the ID of the call at `first`: it is handed back for the caller to record the duplicate.
    Repeat { index: usize, first: usize, call: C },
    /// The call is the first with its ID and joined the chunk; `full` says the chunk must be judged now.
    Joined { full: bool },
}

/// The chunked planning loop, in one place for the binding, the tests and the benches.
///
/// Calls are pushed in turn order; a first call joins the current chunk, a
/// repeat is reported at once. When the chunk is full (and at the end of the
/// turn) the caller takes it with [`ChunkedTurn::take_chunk`] and judges its
/// calls with [`TurnPlanner::judge`] however it likes (the binding releases
/// the interpreter meanwhile); dedup spans every chunk. `C` is the caller's
/// pending call, which keeps whatever it needs to judge the call later.
#[derive(Debug)]
pub struct ChunkedTurn<'t, C> {
    planner: TurnPlanner<'t>,
    chunk: Vec<(usize, C)>,
    chunk_size: usize,
}

impl<'t, C> ChunkedTurn<'t, C> {
    /// A chunked plan over `planner`, judging at most `chunk_size` first calls at a time, for a turn
    /// of about `expected_calls` calls (a capacity hint: a small turn reserves a small chunk).
    pub fn new(planner: TurnPlanner<'t>, chunk_size: usize, expected_calls: usize) -> Self {
        let chunk_size = chunk_size.max(1);
        Self {
            planner,
            chunk: Vec::with_capacity(chunk_size.min(expected_calls)),
            chunk_size,
        }
    }

    /// Takes the next call of the turn by its ID (see [`Pushed`]).
    pub fn push(&mut self, id: &str, call: C) -> Pushed<C> {
        match self.planner.admit(id) {
            Admission::First { index } => {
                self.chunk.push((index, call));
                Pushed::Joined {
                    full: self.chunk.len() >= self.chunk_size,
                }
            }
            Admission::Repeat { index, first } => Pushed::Repeat { index, first, call },
        }
    }

    /// The first calls waiting to be judged, each with its position in the turn.
    pub fn chunk(&self) -> &[(usize, C)] {
        &self.chunk
    }

    /// The planner that judges the chunk's calls.
    pub fn planner(&self) -> &TurnPlanner<'t> {
        &self.planner
    }

    /// Empties the chunk once its calls are judged (its buffer is kept for the next).
    pub fn clear_chunk(&mut self) {
        self.chunk.clear();
    }
}

/// The call IDs of a turn so far, each with the position of its first call.
///
/// The IDs live in one buffer rather than one allocation each, and the hash
/// table holds only positions in `firsts`: it stays small enough to be probed
/// from cache on turns of 100,000 calls, while `firsts` and `text` only grow at
/// their ends. A turn of a few calls (most turns) is deduplicated by comparing
/// its IDs: the table and its random hasher are made only once a turn has more
/// than `SCANNED_IDS` distinct IDs.
#[derive(Debug)]
struct CallIds {
    text: String,
    firsts: Vec<FirstCall>,
    table: Option<(HashTable<usize>, RandomState)>,
    capacity: usize,
}

/// The most distinct IDs deduplicated by comparison before a hash table is made.
const SCANNED_IDS: usize = 8;

/// Where a first call's ID lies in [`CallIds::text`], and the call's position.
#[derive(Debug, Clone, Copy)]
struct FirstCall {
    start: usize,
    end: usize,
    index: usize,
}

impl CallIds {
    fn with_capacity(calls: usize) -> Self {
        Self {
            text: String::new(),
            firsts: Vec::with_capacity(calls),
            table: None,
            capacity: calls,
        }
    }

    /// The position of the first call with `id`, or None after recording `index` as that call.
    fn first_or_insert(&mut self, id: &str, index: usize) -> Option<usize> {
        let Self {
            text,
            firsts,
            table,
            capacity,
        } = self;
        let id_of = |first: &FirstCall| &text[first.start..first.end];
        if table.is_none() {
            if let Some(first) = firsts.iter().find(|first| id_of(first) == id) {
                return Some(first.index);
            }
            if firsts.len() >= SCANNED_IDS {
                let hasher = RandomState::new();
                let mut made = HashTable::with_capacity((*capacity).max(firsts.len() + 1));
                for (slot, first) in firsts.iter().enumerate() {
                    made.insert_unique(hasher.hash_one(id_of(first)), slot, |&slot| {
                        hasher.hash_one(id_of(&firsts[slot]))
                    });
                }
                *table = Some((made, hasher));
            }
        }
        let hash = match table {
            Some((table, hasher)) => {
                let hash = hasher.hash_one(id);
                if let Some(&slot) = table.find(hash, |&slot| id_of(&firsts[slot]) == id) {
                    return Some(firsts[slot].index);
                }
                Some(hash)
            }
            None => None,
        };
        let start = text.len();
        text.push_str(id);
        firsts.push(FirstCall {
            start,
            end: text.len(),
            index,
        });
        if let (Some((table, hasher)), Some(hash)) = (table, hash) {
            let text = &*text;
            table.insert_unique(hash, firsts.len() - 1, |&slot| {
                let first = &firsts[slot];
                hasher.hash_one(&text[first.start..first.end])
            });
        }
        None
    }
}

fn judge(catalog: &Catalog, name: &str, args: &Arguments<'_>, disabled: &[bool], limits: &Limits) -> Verdict {
    let tool = match catalog.resolve(name) {
        Some(tool) if !disabled.get(tool).copied().unwrap_or(false) => tool,
        found => {
            return Verdict::UnknownTool {
                message: unknown_tool_message(catalog, name, found, disabled),
            }
        }
    };
    let reject = |rejection: InputRejection| {
        let message = rejection.message(catalog.name(tool));
        Verdict::InvalidInput {
            tool,
            rejection,
            message,
        }
    };
    match args {
        Arguments::Rejected(rejection) => reject(rejection.clone()),
        Arguments::Value(value) => match catalog.check(tool, value, limits) {
            Ok(()) => Verdict::Ready { tool, parsed: None },
            Err(rejection) if limits.repair => {
                repair_to_fit(catalog, tool, value, Fixes::default(), limits).unwrap_or_else(|| reject(rejection))
            }
            Err(rejection) => reject(rejection),
        },
        Arguments::Text(text) => match parse_arguments(text, limits) {
            Ok(value) => match catalog.check(tool, &value, limits) {
                Ok(()) => Verdict::Ready {
                    tool,
                    parsed: Some(value),
                },
                Err(rejection) if limits.repair => {
                    repair_to_fit(catalog, tool, &value, Fixes::default(), limits).unwrap_or_else(|| reject(rejection))
                }
                Err(rejection) => reject(rejection),
            },
            // Only text that failed to parse reaches the repair: valid JSON is never changed by it.
            Err(rejection @ (InputRejection::Malformed(_) | InputRejection::NotAnObject(_))) if limits.repair => {
                match repair_text(text, limits) {
                    Ok((value, fixes)) => repair_to_fit(catalog, tool, &value, fixes, limits).unwrap_or_else(|| {
                        // Fixed text that still breaks the schema is refused with the fixed text's errors.
                        catalog
                            .check(tool, &value, limits)
                            .map_or_else(reject, |()| reject(rejection))
                    }),
                    Err(refusal @ (Refusal::CutOff | Refusal::Ambiguous(_))) => Verdict::InvalidInput {
                        tool,
                        message: refusal.message(catalog.name(tool)),
                        rejection,
                    },
                    Err(Refusal::Unrepairable(_)) => reject(rejection),
                }
            }
            Err(rejection) => reject(rejection),
        },
    }
}

/// Repaired arguments `value` (after `fixes`) as a verdict, if they pass the schema as they are or after the
/// schema-guided fixes; `None` if they do not.
fn repair_to_fit(catalog: &Catalog, tool: usize, value: &Value, mut fixes: Fixes, limits: &Limits) -> Option<Verdict> {
    if value.is_string() {
        let decoded = decode_encoded(value.clone(), limits, &mut fixes).ok()?;
        return repair_to_fit(catalog, tool, &decoded, fixes, limits);
    }
    if catalog.check(tool, value, limits).is_ok() {
        return (!fixes.is_empty()).then(|| Verdict::Repaired {
            tool,
            parsed: value.clone(),
            fixes,
        });
    }
    let (fitted, schema_fixes) = repair_to_schema(value, catalog.schema(tool))?;
    catalog.check(tool, &fitted, limits).ok()?;
    fixes.extend(&schema_fixes);
    Some(Verdict::Repaired {
        tool,
        parsed: fitted,
        fixes,
    })
}

fn unknown_tool_message(catalog: &Catalog, name: &str, found: Option<usize>, disabled: &[bool]) -> String {
    let mut available: Vec<&str> = (0..catalog.len())
        .filter(|&i| !disabled.get(i).copied().unwrap_or(false))
        .map(|i| catalog.name(i))
        .collect();
    available.sort_unstable();
    let listed = if available.is_empty() {
        "none".to_owned()
    } else if available.len() > NAMES_IN_MESSAGE {
        format!(
            "{}, and {} more",
            available[..NAMES_IN_MESSAGE].join(", "),
            available.len() - NAMES_IN_MESSAGE
        )
    } else {
        available.join(", ")
    };
    let shown = crate::validate::cut_text(name, crate::validate::PREVIEW_CHARS);
    if found.is_some() {
        return format!("tool `{shown}` is not available in this turn; available tools: {listed}");
    }
    if let Some(meant) = spelled_otherwise(&available, name) {
        return format!(
            "unknown tool `{shown}`: tool names are exact, did you mean `{meant}`? Call it by that name; \
             available tools: {listed}"
        );
    }
    let closest = closest_names(&available, name);
    if closest.is_empty() {
        format!("unknown tool `{shown}`; available tools: {listed}")
    } else {
        let named: Vec<String> = closest.iter().map(|n| format!("`{n}`")).collect();
        format!(
            "unknown tool `{shown}`; did you mean {}? available tools: {listed}",
            named.join(" or ")
        )
    }
}

/// The available tool a name means when it differs only in case, or by a prefix some models add
/// (`functions.`, `default_api:`). Suggested, never run under the guess.
fn spelled_otherwise<'a>(available: &[&'a str], name: &str) -> Option<&'a str> {
    let mut bare = name;
    for prefix in ["functions.", "default_api:", "default_api."] {
        if let Some(rest) = bare.strip_prefix(prefix) {
            bare = rest;
            break;
        }
    }
    if let Some(exact) = available.iter().find(|&&tool| tool == bare) {
        return Some(exact);
    }
    let lowered = bare.to_lowercase();
    let mut folded = available.iter().filter(|tool| tool.to_lowercase() == lowered);
    match (folded.next(), folded.next()) {
        (Some(only), None) => Some(only),
        _ => None,
    }
}

/// Up to three available names closest to `name` by edit distance (at most a third of its length, and 1
/// for short names), closest first.
fn closest_names<'a>(available: &[&'a str], name: &str) -> Vec<&'a str> {
    const SUGGESTED: usize = 3;
    let wanted: Vec<char> = name.to_lowercase().chars().collect();
    if wanted.is_empty() || wanted.len() > 200 {
        return Vec::new();
    }
    let bound = (wanted.len() / 3).max(1);
    let mut scored: Vec<(usize, &str)> = available
        .iter()
        .filter_map(|&tool| {
            let candidate: Vec<char> = tool.to_lowercase().chars().collect();
            let distance = edit_distance(&wanted, &candidate, bound)?;
            Some((distance, tool))
        })
        .collect();
    scored.sort_unstable();
    scored.into_iter().take(SUGGESTED).map(|(_, tool)| tool).collect()
}

/// Levenshtein distance between `a` and `b`, or None when it is over `bound`.
fn edit_distance(a: &[char], b: &[char], bound: usize) -> Option<usize> {
    if a.len().abs_diff(b.len()) > bound {
        return None;
    }
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    let mut current = vec![0; b.len() + 1];
    for (i, &x) in a.iter().enumerate() {
        current[0] = i + 1;
        let mut row_min = current[0];
        for (j, &y) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(x != y);
            current[j + 1] = substitution.min(previous[j + 1] + 1).min(current[j] + 1);
            row_min = row_min.min(current[j + 1]);
        }
        if row_min > bound {
            return None;
        }
        std::mem::swap(&mut previous, &mut current);
    }
    let distance = previous[b.len()];
    (distance <= bound).then_some(distance)
}

/// Whether two calls' arguments are the same: equal text, or equal once decoded.
/// Arguments that were rejected are never the same as anything.
pub fn same_arguments(a: &Arguments<'_>, b: &Arguments<'_>, limits: &Limits) -> bool {
    let decode = |args: &Arguments| match args {
        Arguments::Value(value) => Some(value.clone()),
        Arguments::Text(text) => parse_arguments(text, limits).ok(),
        Arguments::Rejected(_) => None,
    };
    match (a, b) {
        (Arguments::Text(x), Arguments::Text(y)) if x == y => true,
        (Arguments::Value(x), Arguments::Value(y)) => x == y,
        _ => matches!((decode(a), decode(b)), (Some(x), Some(y)) if x == y),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::ToolSpec;
    use serde_json::json;

    fn catalog() -> Catalog {
        let schema = json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]});
        Catalog::new(vec![
            ToolSpec {
                name: "read".into(),
                aliases: vec!["cat".into()],
                input_schema: schema.clone(),
            },
            ToolSpec {
                name: "write".into(),
                aliases: vec![],
                input_schema: schema,
            },
        ])
        .unwrap()
    }

    fn call<'a>(id: &'a str, name: &'a str, args: Arguments<'a>) -> CallInput<'a> {
        CallInput { id, name, args }
    }

    fn text(s: &str) -> Arguments<'_> {
        Arguments::Text(s)
    }

    #[test]
    fn a_clean_turn_is_ready_in_order() {
        let calls = [
            call("1", "read", Arguments::Value(json!({"path": "a"}))),
            call("2", "cat", text(r#"{"path": "b"}"#)),
        ];
        let plan = prepare_turn(&catalog(), &calls, &[], &Limits::default());
        assert_eq!(plan.calls.len(), 2);
        assert_eq!(plan.calls[0].verdict, Verdict::Ready { tool: 0, parsed: None });
        assert_eq!(
            plan.calls[1].verdict,
            Verdict::Ready {
                tool: 0,
                parsed: Some(json!({"path": "b"}))
            }
        );
        assert!(plan.duplicates.is_empty());
    }

    #[test]
    fn the_direct_path_gives_the_verdict_judge_gives_or_none() {
        use crate::direct::ValueBuilder;
        let catalog = catalog();
        let disabled = [false, true];
        let planner = TurnPlanner::new(&catalog, &disabled, Limits::default(), 4);
        assert_eq!(
            planner.judge_direct("cat", r#"{"path": "b"}"#, &mut ValueBuilder),
            Some((0, json!({"path": "b"})))
        );
        assert_eq!(
            planner.judge("cat", &text(r#"{"path": "b"}"#)),
            Verdict::Ready {
                tool: 0,
                parsed: Some(json!({"path": "b"}))
            }
        );
        // Unknown, disabled, or refused: left to `judge`, which says why.
        assert_eq!(
            planner.judge_direct("nope", r#"{"path": "b"}"#, &mut ValueBuilder),
            None
        );
        assert_eq!(
            planner.judge_direct("write", r#"{"path": "b"}"#, &mut ValueBuilder),
            None
        );
        assert_eq!(planner.judge_direct("read", r#"{"path": 1}"#, &mut ValueBuilder), None);
        assert!(matches!(
            planner.judge("read", &text(r#"{"path": 1}"#)),
            Verdict::InvalidInput { .. }
        ));
    }

    #[test]
    fn repeated_ids_are_dropped_and_flagged_when_different() {
        let calls = [
            call("1", "read", text(r#"{"path": "a"}"#)),
            call("1", "read", Arguments::Value(json!({"path": "a"}))),
            call("2", "read", text(r#"{"path": "a"}"#)),
            call("1", "write", text(r#"{"path": "z"}"#)),
        ];
        let plan = prepare_turn(&catalog(), &calls, &[], &Limits::default());
        assert_eq!(plan.calls.iter().map(|c| c.index).collect::<Vec<_>>(), vec![0, 2]);
        assert_eq!(
            plan.duplicates,
            vec![
                Duplicate {
                    index: 1,
                    first: 0,
                    args_differ: false
                },
                Duplicate {
                    index: 3,
                    first: 0,
                    args_differ: true
                }
            ]
        );
    }

    #[test]
    fn unknown_and_disabled_tools_name_the_available_ones() {
        let calls = [
            call("1", "nope", text("{}")),
            call("2", "write", text(r#"{"path": "a"}"#)),
        ];
        let plan = prepare_turn(&catalog(), &calls, &[false, true], &Limits::default());
        let Verdict::UnknownTool { message } = &plan.calls[0].verdict else {
            panic!()
        };
        assert_eq!(message, "unknown tool `nope`; available tools: read");
        let Verdict::UnknownTool { message } = &plan.calls[1].verdict else {
            panic!()
        };
        assert!(message.contains("`write` is not available"), "{message}");
    }

    #[test]
    fn bad_arguments_are_rejected_with_the_reason() {
        let calls = [
            call("1", "read", text("{not json")),
            call("2", "read", text(r#"{"path": 3}"#)),
            call(
                "3",
                "read",
                Arguments::Rejected(InputRejection::NotJson("a set".into())),
            ),
        ];
        let plan = prepare_turn(&catalog(), &calls, &[], &Limits::default());
        let messages: Vec<_> = plan
            .calls
            .iter()
            .map(|c| match &c.verdict {
                Verdict::InvalidInput { message, .. } => message.clone(),
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert!(messages[0].contains("not valid JSON"), "{}", messages[0]);
        assert!(messages[1].contains("/path"), "{}", messages[1]);
        assert!(messages[2].contains("a set"), "{}", messages[2]);
    }

    #[test]
    fn many_tools_are_listed_briefly() {
        let specs = (0..40)
            .map(|i| ToolSpec {
                name: format!("t{i:02}"),
                aliases: vec![],
                input_schema: json!({"type": "object"}),
            })
            .collect();
        let catalog = Catalog::new(specs).unwrap();
        let plan = prepare_turn(&catalog, &[call("1", "x", text("{}"))], &[], &Limits::default());
        let Verdict::UnknownTool { message } = &plan.calls[0].verdict else {
            panic!()
        };
        assert!(message.ends_with("and 20 more"), "{message}");
        assert!(message.contains("t19") && !message.contains("t20"), "{message}");
    }

    fn named(names: &[&str]) -> Catalog {
        let specs = names
            .iter()
            .map(|name| ToolSpec {
                name: (*name).into(),
                aliases: vec![],
                input_schema: json!({"type": "object"}),
            })
            .collect();
        Catalog::new(specs).unwrap()
    }

    fn unknown_message(catalog: &Catalog, name: &str) -> String {
        let plan = prepare_turn(catalog, &[call("1", name, text("{}"))], &[], &Limits::default());
        match &plan.calls[0].verdict {
            Verdict::UnknownTool { message } => message.clone(),
            other => panic!("{name} was not refused: {other:?}"),
        }
    }

    #[test]
    fn a_case_or_prefix_variant_is_suggested_under_the_name_sent() {
        let catalog = named(&["read_file", "write_file", "grep"]);
        for sent in [
            "Read_File",
            "READ_FILE",
            "functions.read_file",
            "default_api:read_file",
            "functions.Read_File",
        ] {
            let message = unknown_message(&catalog, sent);
            assert!(message.starts_with(&format!("unknown tool `{sent}`")), "{message}");
            assert!(message.contains("did you mean `read_file`?"), "{message}");
        }
    }

    #[test]
    fn the_closest_names_are_suggested() {
        let catalog = named(&["read_file", "write_file", "grep", "list_dir"]);
        let message = unknown_message(&catalog, "read_fil");
        assert!(message.contains("did you mean `read_file`"), "{message}");
        assert!(!message.contains("`grep`?"), "{message}");
        let message = unknown_message(&catalog, "wrte_file");
        assert!(message.contains("did you mean `write_file`"), "{message}");
        let message = unknown_message(&catalog, "send_email");
        assert!(!message.contains("did you mean"), "{message}");
        assert!(
            message.ends_with("available tools: grep, list_dir, read_file, write_file"),
            "{message}"
        );
    }

    #[test]
    fn edit_distance_is_bounded() {
        let chars = |s: &str| s.chars().collect::<Vec<_>>();
        assert_eq!(edit_distance(&chars("kitten"), &chars("sitting"), 3), Some(3));
        assert_eq!(edit_distance(&chars("kitten"), &chars("sitting"), 2), None);
        assert_eq!(edit_distance(&chars(""), &chars("ab"), 2), Some(2));
        assert_eq!(edit_distance(&chars("abc"), &chars("abc"), 0), Some(0));
    }

    /// Plans `calls` the way the binding does: admit every call of a chunk,
    /// judge that chunk's first calls, and compare repeats with first calls
    /// from any earlier chunk.
    fn plan_in_chunks(catalog: &Catalog, calls: &[CallInput<'_>], chunk: usize, limits: &Limits) -> TurnPlan {
        let mut turn = ChunkedTurn::new(TurnPlanner::new(catalog, &[], *limits, 0), chunk, calls.len());
        let mut plan = TurnPlan::default();
        let judge = |turn: &mut ChunkedTurn<'_, &CallInput<'_>>, plan: &mut TurnPlan| {
            for (index, call) in turn.chunk() {
                plan.calls.push(PlannedCall {
                    index: *index,
                    verdict: turn.planner().judge(call.name, &call.args),
                });
            }
            turn.clear_chunk();
        };
        for call in calls {
            match turn.push(call.id, call) {
                Pushed::Repeat { index, first, .. } => plan.duplicates.push(Duplicate {
                    index,
                    first,
                    args_differ: !same_arguments(&calls[first].args, &call.args, limits),
                }),
                Pushed::Joined { full: true } => judge(&mut turn, &mut plan),
                Pushed::Joined { full: false } => {}
            }
        }
        judge(&mut turn, &mut plan);
        plan
    }

    #[test]
    fn a_turn_planned_in_chunks_matches_the_whole_turn() {
        let ids: Vec<String> = (0..60).map(|i| format!("call_{}", i % 23)).collect();
        let texts: Vec<String> = (0..60)
            .map(|i| match i % 5 {
                0 => format!(r#"{{"path": "f{}"}}"#, i % 23),
                1 => format!(r#"{{ "path" : "f{}" }}"#, i % 23),
                2 => r#"{"path": 7}"#.to_owned(),
                3 => "{broken".to_owned(),
                _ => String::new(),
            })
            .collect();
        let calls: Vec<CallInput<'_>> = (0..60)
            .map(|i| {
                let name = ["read", "cat", "write", "nope"][i % 4];
                let args = match i % 7 {
                    0 => Arguments::Value(json!({"path": format!("f{}", i % 23)})),
                    1 => Arguments::Rejected(InputRejection::NotJson("a set".into())),
                    _ => Arguments::Text(&texts[i]),
                };
                call(&ids[i], name, args)
            })
            .collect();
        let limits = Limits::default();
        let whole = prepare_turn(&catalog(), &calls, &[], &limits);
        assert_eq!(whole.calls.len(), 23);
        assert_eq!(whole.duplicates.len(), 37);
        assert!(whole.duplicates.iter().any(|d| d.args_differ));
        assert!(whole.duplicates.iter().any(|d| !d.args_differ));
        for chunk in [1, 4, 7, 23, 60] {
            assert_eq!(
                plan_in_chunks(&catalog(), &calls, chunk, &limits),
                whole,
                "chunks of {chunk}"
            );
        }
    }

    #[test]
    fn a_repeat_in_a_later_chunk_is_compared_with_the_first_call() {
        let calls = [
            call("a", "read", text(r#"{"path": "x"}"#)),
            call("b", "read", text(r#"{"path": "y"}"#)),
            call("a", "read", Arguments::Value(json!({"path": "x"}))),
            call("b", "read", text(r#"{"path": "z"}"#)),
        ];
        let plan = plan_in_chunks(&catalog(), &calls, 2, &Limits::default());
        assert_eq!(plan.calls.iter().map(|c| c.index).collect::<Vec<_>>(), vec![0, 1]);
        assert_eq!(
            plan.duplicates,
            vec![
                Duplicate {
                    index: 2,
                    first: 0,
                    args_differ: false
                },
                Duplicate {
                    index: 3,
                    first: 1,
                    args_differ: true
                }
            ]
        );
    }

    #[test]
    fn ids_are_told_apart_exactly() {
        let catalog = catalog();
        let mut planner = TurnPlanner::new(&catalog, &[], Limits::default(), 2);
        let admitted: Vec<Admission> = ["ab", "a", "b", "", "ba", "ab", "", "a"]
            .iter()
            .map(|id| planner.admit(id))
            .collect();
        assert_eq!(
            admitted,
            vec![
                Admission::First { index: 0 },
                Admission::First { index: 1 },
                Admission::First { index: 2 },
                Admission::First { index: 3 },
                Admission::First { index: 4 },
                Admission::Repeat { index: 5, first: 0 },
                Admission::Repeat { index: 6, first: 3 },
                Admission::Repeat { index: 7, first: 1 },
            ]
        );
    }

    #[test]
    fn repeats_are_found_before_and_after_the_ids_are_hashed() {
        // Every mix of few and many distinct IDs, repeats of early and late ones, against a plain scan.
        let catalog = catalog();
        for distinct in [1, 2, 7, 8, 9, 10, 30] {
            for hint in [0, 1, 100] {
                let mut planner = TurnPlanner::new(&catalog, &[], Limits::default(), hint);
                let ids: Vec<String> = (0..3 * distinct).map(|i| format!("id{}", (i * 7) % distinct)).collect();
                let mut seen: Vec<&str> = Vec::new();
                let mut firsts: Vec<usize> = Vec::new();
                for (index, id) in ids.iter().enumerate() {
                    let expected = if let Some(at) = seen.iter().position(|known| known == id) {
                        Admission::Repeat {
                            index,
                            first: firsts[at],
                        }
                    } else {
                        seen.push(id);
                        firsts.push(index);
                        Admission::First { index }
                    };
                    assert_eq!(planner.admit(id), expected, "{distinct} distinct, call {index}");
                }
            }
        }
    }
}
