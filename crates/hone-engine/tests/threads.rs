//! `threads::fix_thread_count`: the count candle would pick (or one, for a
//! small model), written once; a count the user set is left alone. One
//! test in its own binary, since it changes the process environment.

use hone_engine::threads::{fix_thread_count, fix_thread_count_to, per_op_for_hidden_size, VARIABLE};

#[test]
fn the_thread_count_is_candles_own_and_a_users_setting_wins() {
    std::env::remove_var(VARIABLE);
    let default = candle_core::utils::get_num_threads();
    assert_eq!(fix_thread_count(), default);
    assert_eq!(std::env::var(VARIABLE).ok(), Some(default.to_string()));
    // Later matmuls read the variable: the same count, without /proc/cpuinfo.
    assert_eq!(candle_core::utils::get_num_threads(), default);

    std::env::set_var(VARIABLE, "3");
    assert_eq!(fix_thread_count(), 3);
    assert_eq!(std::env::var(VARIABLE).ok().as_deref(), Some("3"));

    // Not a positive number: replaced by candle's default, as candle itself
    // would ignore it.
    std::env::set_var(VARIABLE, "0");
    assert_eq!(fix_thread_count(), default);
    assert_eq!(std::env::var(VARIABLE).ok(), Some(default.to_string()));

    // A small model's preference applies only where the user set nothing.
    std::env::remove_var(VARIABLE);
    assert_eq!(fix_thread_count_to(per_op_for_hidden_size(128)), 1);
    assert_eq!(std::env::var(VARIABLE).ok().as_deref(), Some("1"));
    std::env::set_var(VARIABLE, "3");
    assert_eq!(fix_thread_count_to(Some(1)), 3);
    std::env::remove_var(VARIABLE);
    assert_eq!(fix_thread_count_to(per_op_for_hidden_size(896)), default);
}
