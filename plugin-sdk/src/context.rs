//! The call context the host lends to hooks, routes and jobs.

use crate::bindings::ferrobase::plugin::context::CallContext;
pub use crate::bindings::ferrobase::plugin::context::Upload;
use crate::record::Principal;

/// Facts about the current call. Each method asks the host, so nothing is copied unless asked.
pub struct Context<'a> {
    raw: &'a CallContext,
}

impl<'a> Context<'a> {
    pub(crate) fn new(raw: &'a CallContext) -> Self {
        Context { raw }
    }

    /// Unique id of this call, for log correlation.
    pub fn call_id(&self) -> u64 {
        self.raw.call_id()
    }

    /// The authenticated caller, if any.
    pub fn auth(&self) -> Option<Principal> {
        self.raw.auth()
    }

    /// The HTTP method of the request behind this call (none for jobs).
    pub fn method(&self) -> Option<String> {
        self.raw.method()
    }

    /// The path of the request behind this call (none for jobs).
    pub fn path(&self) -> Option<String> {
        self.raw.path()
    }

    /// One header of the request behind this call.
    pub fn header(&self, name: &str) -> Option<String> {
        self.raw.header(name)
    }

    /// The client's address.
    pub fn remote_ip(&self) -> Option<String> {
        self.raw.remote_ip()
    }

    /// Milliseconds left before the host stops this call.
    pub fn remaining_ms(&self) -> u32 {
        self.raw.remaining_ms()
    }

    /// In a before-create or before-update hook, the files the write is about to attach, each
    /// with its field, stored name (the one in the pending record), the client's name, its size
    /// and its detected content type, so a hook can refuse a file. Empty elsewhere (contract
    /// 0.1.3: a plugin that calls it needs a host that links 0.1.3).
    pub fn uploads(&self) -> Vec<Upload> {
        self.raw.uploads()
    }

    /// The generated resource, for anything the wrapper does not cover.
    pub fn raw(&self) -> &CallContext {
        self.raw
    }
}
