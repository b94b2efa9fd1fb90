//! The read path's pieces, each on its own: encoding a page of records, verifying a token, and
//! counting; and what a request's log row costs the log thread (built and inserted in batches
//! of 1,000, with PocketBase's indexes and without). Run: `cargo bench -p ferrobase --bench
//! pieces`.

use criterion::{Criterion, criterion_group, criterion_main};
use ferrobase::testkit::{CountFixture, LogsFixture, PageFixture, TokenFixture};
use std::hint::black_box;
use std::time::Duration;

fn bench_pieces(c: &mut Criterion) {
    let page = PageFixture::new(30);
    assert_eq!(
        page.encode_direct().len() + 29 + 2,
        page.encode_values().len()
    );
    c.bench_function("encode 30 records: straight to bytes", |b| {
        b.iter(|| black_box(page.encode_direct()))
    });
    c.bench_function("encode 30 records: through JSON values", |b| {
        b.iter(|| black_box(page.encode_values()))
    });

    let token = TokenFixture::new();
    assert!(token.verify());
    c.bench_function("verify an auth token (HS256)", |b| {
        b.iter(|| black_box(token.verify()))
    });

    for n in [1_000, 100_000] {
        let fx = CountFixture::new(n);
        assert_eq!(fx.count_all(), n as i64);
        c.bench_function(&format!("count(*) over {n} rows"), |b| {
            b.iter(|| black_box(fx.count_all()))
        });
        c.bench_function(&format!("filtered page + total over {n} rows"), |b| {
            b.iter(|| black_box(fx.filtered_page(black_box(500))))
        });
    }
}

fn bench_logs(c: &mut Criterion) {
    for indexes in [true, false] {
        let work = std::env::temp_dir().join(format!(
            "ferrobase-logs-bench-{}-{indexes}",
            std::process::id()
        ));
        std::fs::create_dir_all(&work).expect("work dir");
        let mut fx = LogsFixture::new(&work, indexes).expect("logs fixture");
        fx.write_batch(1_000).expect("a batch");
        assert_eq!(fx.rows(), 1_000);
        let name = if indexes {
            "1,000 request log rows: build + insert + commit"
        } else {
            "1,000 request log rows, no secondary indexes"
        };
        c.bench_function(name, |b| {
            b.iter(|| fx.write_batch(black_box(1_000)).expect("a batch"))
        });
        drop(fx);
        let _ = std::fs::remove_dir_all(&work);
    }
}

criterion_group! {
    name = pieces;
    config = Criterion::default()
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(1))
        .sample_size(30);
    targets = bench_pieces, bench_logs
}
criterion_main!(pieces);
