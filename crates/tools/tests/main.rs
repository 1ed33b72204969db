//! Integration tests of the workspace tools, one module a file (one test binary).

mod race;
