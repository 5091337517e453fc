//! Planning cost of the resource-conflict scheduler on a coding agent's turn:
//! file reads, directory searches, edits and a few calls of unknown resources.
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

use _core::conflicts::{plan_dependencies, Access};

/// A small deterministic generator, so that every run plans the same turn.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, bound: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 33) % bound as u64) as usize
    }
}

/// `count` calls over a workspace of 64 directories of 32 files each. Files
/// are picked with a bias towards a few hot ones, as agents revisit the files
/// they work on.
fn turn(count: usize) -> Vec<Option<Access>> {
    let mut rng = Lcg(42);
    let file = |rng: &mut Lcg| {
        let hot = rng.below(4) == 0;
        let dir = if hot { rng.below(4) } else { rng.below(64) };
        let name = if hot { rng.below(4) } else { rng.below(32) };
        (format!("src/pkg{dir}"), format!("./src/pkg{dir}/mod{name}.py"))
    };
    (0..count)
        .map(|_| {
            let (dir, path) = file(&mut rng);
            let access = |reads: Vec<String>, writes: Vec<String>| Some(Access { reads, writes });
            match rng.below(100) {
                0..=59 => access(vec![path], vec![]),
                60..=69 => access(vec![dir], vec![]),
                70..=89 => access(vec![], vec![path]),
                90..=97 => {
                    let (_, other) = file(&mut rng);
                    access(vec![path, other], vec![format!("{dir}/__init__.py")])
                }
                _ => None,
            }
        })
        .collect()
}

fn bench_conflicts(c: &mut Criterion) {
    let mut group = c.benchmark_group("plan_dependencies");
    for count in [1_000usize, 100_000] {
        let calls = turn(count);
        let plan = plan_dependencies(&calls).unwrap();
        eprintln!(
            "plan_dependencies/{count}: {:.2} waits per call, longest list {}",
            plan.waits.len() as f64 / count as f64,
            (0..count).map(|i| plan.waits_of(i).len()).max().unwrap_or(0)
        );
        group.throughput(Throughput::Elements(count as u64));
        group.sample_size(if count > 10_000 { 10 } else { 50 });
        group.bench_with_input(BenchmarkId::from_parameter(count), &calls, |b, calls| {
            b.iter(|| plan_dependencies(calls).unwrap());
        });
    }
    group.finish();
}

criterion_group!(benches, bench_conflicts);
criterion_main!(benches);
