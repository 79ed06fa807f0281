//! Compile-fail tests: each file under `tests/ui` is a kernel the macro rejects, and its
//! `.stderr` shows the error pointing at the offending code.

#[test]
fn unsupported_syntax_is_an_error_on_the_users_code() {
    trybuild::TestCases::new().compile_fail("tests/ui/*.rs");
}
