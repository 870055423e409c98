//! Test harness, one file per concern:
//! - [`servers`]: the redis-server (or Redis Cluster, with `KTIMER_TEST_REDIS_CLUSTER=1`)
//!   and Tansu broker shared by a test binary; [`cluster`]: a real Redis Cluster;
//! - [`env`]: one test's topics, group and prefix, and [`InProcess`] instances;
//! - [`child`]: [`child::ChildProcess`] instances (`ktimer run` as a child process, for
//!   SIGKILL and SIGSTOP);
//! - [`world`]: servers a fault scenario owns alone (to kill, freeze or wipe them);
//!   [`proxy`]: a TCP proxy that cuts one instance off a server; [`netns`]: a second
//!   host (a network namespace) that can lose the broker and keep Redis;
//! - [`collected`]: what arrived on the fired and results topics;
//! - [`commands`]: command builders; [`checker`]: the fault scenarios' one checker;
//! - [`store`]: a store on its own prefix, for the store-level tests;
//! - [`registry`]: a schema registry stand-in; [`scripts`]: running the example scripts;
//! - [`api`]: a client of the admin API;
//! - [`serial`]: one test at a time in a binary whose tests measure timings.
// Each test binary uses a part of the harness.
#![allow(dead_code, unused_imports)]

pub mod api;
pub mod bound;
pub mod checker;
pub mod child;
pub mod cluster;
pub mod collected;
pub mod commands;
pub mod env;
pub mod netns;
pub mod proxy;
pub mod registry;
pub mod scripts;
pub mod servers;
pub mod store;
pub mod world;

/// Makes the tests of a binary that all take it run one at a time: a test that measures
/// lateness or throughput on two shared cores measures the promise, not its neighbours
/// (`cargo test` runs the test binaries one after the other).
pub async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    SERIAL.lock().await
}

pub use collected::{Collected, Fired};
pub use commands::{cancel, cron, lifecycle, once_at, undeliverable};
pub use env::{InProcess, TestEnv};
pub use servers::{free_port, servers, spawn_server, tansu_bin, unique, wait_for_port, Servers};
