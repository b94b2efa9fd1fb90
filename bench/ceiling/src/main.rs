//! bench-ceiling: serve one fixed body (read from a file at start) for every GET/POST on every path.
//!
//!   bench-ceiling --http 127.0.0.1:PORT --body FILE
//!
//! It does what a records server must do at minimum per request (accept, parse HTTP/1.1, write the
//! headers and a body of the same size as the real list response) and nothing else, so its req/s is
//! the ceiling that the box + wrk allow for that response size.
use std::net::SocketAddr;

use axum::{
    Router,
    body::Bytes,
    http::{HeaderValue, header},
    response::IntoResponse,
};

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1).cloned())
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let addr: SocketAddr = arg(&args, "--http")
        .unwrap_or_else(|| "127.0.0.1:28099".into())
        .parse()
        .expect("--http HOST:PORT");
    let path = arg(&args, "--body").expect("--body FILE");
    let body = Bytes::from(std::fs::read(&path).expect("read --body file"));

    let handler = move || {
        let body = body.clone();
        async move {
            (
                [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))],
                body,
            )
                .into_response()
        }
    };
    let app = Router::new().fallback(handler);
    let listener = tokio::net::TcpListener::bind(addr).await.expect("bind");
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .expect("serve");
}
