//! The read path's pieces, each on its own: encoding a page of records, verifying a token, and
//! counting. Run: `cargo bench -p ferrobase --bench pieces`.

use criterion::{Criterion, criterion_group, criterion_main};
use ferrobase::testkit::{CountFixture, PageFixture, TokenFixture};
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

criterion_group! {
    name = pieces;
    config = Criterion::default()
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(1))
        .sample_size(30);
    targets = bench_pieces
}
criterion_main!(pieces);
