//! Compile-time benchmarks of the filter/sort compiler (`Fixture::compile`: rule + filter + sort
//! into the full list statement). Run: `cargo bench -p ferrobase --bench query`.

use criterion::{Criterion, criterion_group, criterion_main};
use ferrobase::testkit::{Caller, Fixture};
use std::hint::black_box;
use std::time::Duration;

/// ~100 comparisons over plain, json, relation and modifier operands, grouped in parentheses.
fn long_filter() -> String {
    let atoms = [
        "title ~ \"abc{i}\"",
        "n > {i}",
        "flag = true",
        "kind != \"b\"",
        "meta.a.b = {i}",
        "title:lower = \"x{i}\"",
        "when >= \"2024-01-0{d} 00:00:00.000Z\"",
        "colors:length < {i}",
        "site = \"\"",
        "body !~ \"%{i}%\"",
    ];
    let mut groups = Vec::new();
    for g in 0..10 {
        let parts: Vec<String> = (0..10)
            .map(|k| {
                let i = g * 10 + k;
                atoms[k]
                    .replace("{i}", &i.to_string())
                    .replace("{d}", &(1 + i % 9).to_string())
            })
            .collect();
        let join = if g % 2 == 0 { " && " } else { " || " };
        groups.push(format!("({})", parts.join(join)));
    }
    groups.join(" && ")
}

fn bench_compile(c: &mut Criterion) {
    let fx = Fixture::new();
    let long = long_filter();
    assert_eq!(
        long.matches(" && ").count() + long.matches(" || ").count(),
        99
    );
    assert!(long.len() <= 3500, "long filter is {} bytes", long.len());
    let cases: [(&str, &str, &str, Caller); 5] = [
        (
            "typical (superuser)",
            "title ~ \"abc\" && n > 10",
            "-when",
            Caller::Superuser,
        ),
        (
            "relation (superuser)",
            "owner.name = \"x\" && tags.name ?= \"y\"",
            "",
            Caller::Superuser,
        ),
        (
            "relation (member, listRule joins)",
            "owner.name = \"x\" && tags.name ?= \"y\"",
            "",
            Caller::Member,
        ),
        (
            "typical (member)",
            "title ~ \"abc\" && n > 10",
            "-when",
            Caller::Member,
        ),
        (
            "long ~100 comparisons",
            &long,
            "-when,title",
            Caller::Superuser,
        ),
    ];
    let mut group = c.benchmark_group("compile");
    for (name, filter, sort, caller) in cases {
        // Fail early (not inside the timing loop) if the case does not compile.
        if let Err(e) = fx.compile("items", filter, sort, caller) {
            panic!("bench case {name:?} does not compile: {e}");
        }
        group.bench_function(name, |b| {
            b.iter(|| {
                fx.compile(
                    black_box("items"),
                    black_box(filter),
                    black_box(sort),
                    caller,
                )
            })
        });
    }
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(30)
}

criterion_group! {
    name = benches;
    config = config();
    targets = bench_compile
}
criterion_main!(benches);
