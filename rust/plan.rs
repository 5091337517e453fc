//! Planning a turn: lookup, dedup by call ID and validation, for every call at once.

use ahash::AHashMap;
use serde_json::Value;

use crate::catalog::Catalog;
use crate::validate::{parse_arguments, InputRejection, Limits};

/// A call's arguments as the model sent them.
#[derive(Debug, Clone, PartialEq)]
pub enum Arguments {
    /// JSON text (OpenAI sends arguments this way).
    Text(String),
    /// An already-decoded object.
    Value(Value),
    /// The binding could not turn the arguments into JSON at all.
    Rejected(InputRejection),
}

/// One tool call of a turn.
#[derive(Debug, Clone, PartialEq)]
pub struct CallInput {
    pub id: String,
    pub name: String,
    pub args: Arguments,
}

/// What planning decided for one call.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// The call may proceed. `parsed` holds arguments decoded from text; for
    /// [`Arguments::Value`] it is `None` and the caller's own object is valid.
    Ready { tool: usize, parsed: Option<Value> },
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
const NAMES_IN_MESSAGE: usize = 30;

/// Resolves, dedups and validates a whole turn.
///
/// `disabled[i]` marks tool `i` as absent this turn. No call ever makes this
/// fail: each problem becomes that call's verdict.
pub fn prepare_turn(catalog: &Catalog, calls: &[CallInput], disabled: &[bool], limits: &Limits) -> TurnPlan {
    let mut plan = TurnPlan {
        calls: Vec::with_capacity(calls.len()),
        duplicates: Vec::new(),
    };
    let mut first_by_id: AHashMap<&str, usize> = AHashMap::with_capacity(calls.len());
    for (index, call) in calls.iter().enumerate() {
        if let Some(&first) = first_by_id.get(call.id.as_str()) {
            let args_differ = !same_arguments(&calls[first].args, &call.args, limits);
            plan.duplicates.push(Duplicate {
                index,
                first,
                args_differ,
            });
            continue;
        }
        first_by_id.insert(&call.id, index);
        let verdict = judge(catalog, call, disabled, limits);
        plan.calls.push(PlannedCall { index, verdict });
    }
    plan
}

fn judge(catalog: &Catalog, call: &CallInput, disabled: &[bool], limits: &Limits) -> Verdict {
    let tool = match catalog.resolve(&call.name) {
        Some(tool) if !disabled.get(tool).copied().unwrap_or(false) => tool,
        found => {
            return Verdict::UnknownTool {
                message: unknown_tool_message(catalog, &call.name, found, disabled),
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
    match &call.args {
        Arguments::Rejected(rejection) => reject(rejection.clone()),
        Arguments::Value(value) => match catalog.check(tool, value, limits) {
            Ok(()) => Verdict::Ready { tool, parsed: None },
            Err(rejection) => reject(rejection),
        },
        Arguments::Text(text) => match parse_arguments(text, limits).and_then(|value| {
            catalog.check(tool, &value, limits)?;
            Ok(value)
        }) {
            Ok(value) => Verdict::Ready {
                tool,
                parsed: Some(value),
            },
            Err(rejection) => reject(rejection),
        },
    }
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
    match found {
        Some(_) => format!("tool `{name}` is not available in this turn; available tools: {listed}"),
        None => format!("unknown tool `{name}`; available tools: {listed}"),
    }
}

fn same_arguments(a: &Arguments, b: &Arguments, limits: &Limits) -> bool {
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

    fn call(id: &str, name: &str, args: Arguments) -> CallInput {
        CallInput {
            id: id.into(),
            name: name.into(),
            args,
        }
    }

    fn text(s: &str) -> Arguments {
        Arguments::Text(s.into())
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
        assert!(message.ends_with("and 10 more"), "{message}");
    }
}
