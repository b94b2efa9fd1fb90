//! posts-api: custom read routes over `posts`.
//!
//! - `GET /api/posts-api/search?q=...`: posts whose title contains `q`, newest first (at most
//!   50), as `{"items":[{"id":..,"title":..}],"count":N}`, under the caller's listRule.
//! - `GET /api/posts-api/mine` (signed-in callers only): ids of the posts whose `owner` is the
//!   caller, as `{"items":["id",...],"count":N,"user":"<caller id>"}`.
//! - `POST /api/posts-api/echo`: the request body back, status 201, header `x-plugin: posts-api`.
//!
//! A database error answers 400 with PocketBase's error body and the host's message.
//!
//! Load it by putting `posts_api.wasm` (built into `plugins/target/wasm32-wasip2/release/`)
//! in the server's plugins folder (`[plugins] dir` in pb.toml), with its grants:
//!
//! ```toml
//! [plugins.posts-api]
//! grants = ["db:read"]
//! ```

use ferrobase_plugin::json::{Array, Object};
use ferrobase_plugin::prelude::*;

const VERSION: &str = "1.0.0";
const SEARCH: &str = "/api/posts-api/search";
const MINE: &str = "/api/posts-api/mine";
const ECHO: &str = "/api/posts-api/echo";

struct PostsApi;

impl Plugin for PostsApi {
    fn manifest() -> Manifest {
        Manifest::new("posts-api", VERSION)
            .route("GET", SEARCH)
            .auth_route("GET", MINE)
            .route("POST", ECHO)
            .wants(&["db:read"])
    }

    fn handle(ctx: &Context, req: &Request) -> Response {
        match (req.method.as_str(), req.route.as_str()) {
            ("GET", SEARCH) => search(req),
            ("GET", MINE) => mine(ctx),
            ("POST", ECHO) => echo(req),
            _ => Response::not_found(),
        }
    }
}

ferrobase_plugin::export!(PostsApi);

fn search(req: &Request) -> Response {
    let q = req.query_param("q").unwrap_or_default();
    let found = db::find_records("posts", "title ~ {:q}", &[("q", q.into())], "-created", 50);
    let posts = match found {
        Ok(posts) => posts,
        Err(e) => return Response::error(400, e.message()),
    };
    let items = posts
        .iter()
        .fold(Array::new(), |items, post| {
            let item = Object::new()
                .str("id", post.id())
                .str("title", post.text("title").unwrap_or_default())
                .finish();
            items.raw(&item)
        })
        .finish();
    let body = Object::new()
        .raw("items", &items)
        .int("count", count(posts.len()))
        .finish();
    Response::json(200, body)
}

fn mine(ctx: &Context) -> Response {
    // The host answers guests with 401 before calling; this is the same answer if it did not.
    let Some(me) = ctx.auth() else {
        return Response::error(
            401,
            "The request requires valid record authorization token.",
        );
    };
    let found = db::find_records(
        "posts",
        "owner = {:me}",
        &[("me", (&me.id).into())],
        "",
        100,
    );
    let posts = match found {
        Ok(posts) => posts,
        Err(e) => return Response::error(400, e.message()),
    };
    let items = posts
        .iter()
        .fold(Array::new(), |items, post| items.str(post.id()))
        .finish();
    let body = Object::new()
        .raw("items", &items)
        .int("count", count(posts.len()))
        .str("user", &me.id)
        .finish();
    Response::json(200, body)
}

fn echo(req: &Request) -> Response {
    let mut res = Response::new(201).header("x-plugin", "posts-api");
    if let Some(content_type) = req.header("content-type") {
        res = res.header("content-type", content_type);
    }
    res.body.clone_from(&req.body);
    res
}

fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
