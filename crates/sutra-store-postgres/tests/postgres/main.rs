//! What the PostgreSQL store promises beyond the conformance suite: migrations, and the
//! guarantees that rest on PostgreSQL itself — claims, polls and buffers racing across replicas
//! on separate connections, and row-level security against raw queries.
//!
//! One test binary, so that the throwaway cluster starts once; each test has its own database.

mod calls;
mod common;
mod leases;
mod migrations;
mod notices;
mod races;
mod row_security;
mod timeouts;
mod volume;
