//! Planning cost of a whole turn: lookup, dedup, validation and partitioning.
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use serde_json::json;

use _core::catalog::{Catalog, ToolSpec};
use _core::plan::{prepare_turn, Arguments, CallInput, ChunkedTurn, Pushed, TurnPlanner};
use _core::schedule::{plan_batches, Strategy};
use _core::validate::Limits;

fn catalog() -> Catalog {
    let schema = json!({
        "type": "object",
        "properties": {"path": {"type": "string"}, "limit": {"type": "integer", "minimum": 1}},
        "required": ["path"]
    });
    let specs = ["read_file", "grep", "edit_file", "bash"]
        .iter()
        .map(|name| ToolSpec {
            name: (*name).into(),
            aliases: vec![],
            input_schema: schema.clone(),
        })
        .collect();
    Catalog::new(specs).unwrap()
}

/// The IDs and argument texts of a turn of `count` calls.
fn turn_text(count: usize) -> Vec<(String, String)> {
    (0..count)
        .map(|i| {
            (
                format!("call_{i}"),
                format!(r#"{{"path": "src/file_{i}.rs", "limit": {}}}"#, i % 100 + 1),
            )
        })
        .collect()
}

fn turn(text: &[(String, String)]) -> Vec<CallInput<'_>> {
    let names = ["read_file", "grep", "edit_file", "bash"];
    text.iter()
        .enumerate()
        .map(|(i, (id, args))| CallInput {
            id,
            name: names[i % 4],
            args: Arguments::Text(args),
        })
        .collect()
}

/// Runs `plan` over turns of 1,000 and 100,000 calls as the benchmark group `name`.
fn bench_turns<R>(c: &mut Criterion, name: &str, plan: impl Fn(&[CallInput<'_>]) -> R) {
    let mut group = c.benchmark_group(name);
    for count in [1_000usize, 100_000] {
        let text = turn_text(count);
        let calls = turn(&text);
        group.throughput(Throughput::Elements(count as u64));
        group.sample_size(if count > 10_000 { 10 } else { 50 });
        group.bench_with_input(BenchmarkId::from_parameter(count), &calls, |b, calls| {
            b.iter(|| plan(calls));
        });
    }
    group.finish();
}

fn bench_plan(c: &mut Criterion) {
    let catalog = catalog();
    let limits = Limits::default();
    bench_turns(c, "plan_turn", |calls| {
        let plan = prepare_turn(&catalog, calls, &[], &limits);
        let safe: Vec<bool> = plan.calls.iter().map(|c| c.index % 4 < 2).collect();
        plan_batches(Strategy::Partitioned { max_concurrency: 10 }, &safe).unwrap()
    });
}

/// The same turns planned the way the binding does: IDs admitted call by call,
/// first calls judged a chunk of 512 at a time and each chunk's verdicts dropped
/// before the next.
fn bench_plan_in_chunks(c: &mut Criterion) {
    let catalog = catalog();
    let limits = Limits::default();
    bench_turns(c, "plan_turn_in_chunks", |calls| {
        let mut turn = ChunkedTurn::new(TurnPlanner::new(&catalog, &[], limits, calls.len()), 512, calls.len());
        let mut ready = 0usize;
        let mut judge = |turn: &mut ChunkedTurn<'_, &CallInput<'_>>| {
            let verdicts: Vec<_> = turn
                .chunk()
                .iter()
                .map(|(_, call)| turn.planner().judge(call.name, &call.args))
                .collect();
            ready += verdicts.len();
            turn.clear_chunk();
        };
        for call in calls {
            if matches!(turn.push(call.id, call), Pushed::Joined { full: true }) {
                judge(&mut turn);
            }
        }
        judge(&mut turn);
        ready
    });
}

criterion_group!(benches, bench_plan, bench_plan_in_chunks);
criterion_main!(benches);
