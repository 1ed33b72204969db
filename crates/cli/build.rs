//! Sets `cfg(spool_postgres)` and `cfg(spool_redis)` when `SPOOL_TEST_DATABASE_URL` and
//! `SPOOL_TEST_REDIS_URL` are set, or under CI: the tests that run `spool serve` on
//! PostgreSQL and Redis are `#[ignore]`d without them, so a machine with neither lists
//! them as ignored instead of passing them unrun (tests/common/mod.rs). Under CI they
//! always run, and fail if a variable is missing.

fn main() {
    println!("cargo:rustc-check-cfg=cfg(spool_postgres)");
    println!("cargo:rustc-check-cfg=cfg(spool_redis)");
    for var in ["SPOOL_TEST_DATABASE_URL", "SPOOL_TEST_REDIS_URL", "CI"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let ci = std::env::var_os("CI").is_some();
    if ci || is_set("SPOOL_TEST_DATABASE_URL") {
        println!("cargo:rustc-cfg=spool_postgres");
    }
    if ci || is_set("SPOOL_TEST_REDIS_URL") {
        println!("cargo:rustc-cfg=spool_redis");
    }
}

fn is_set(var: &str) -> bool {
    std::env::var(var).is_ok_and(|v| !v.trim().is_empty())
}
