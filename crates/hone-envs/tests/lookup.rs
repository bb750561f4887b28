//! The customer table and the `search` / `read` tools.

use hone_envs::lookup::{Question, CUSTOMERS, SEARCH_LIMIT};
use hone_envs::{Difficulty, Environment, Lookup, Split, TaskData, ToolError};
use std::collections::HashSet;

#[test]
fn the_table_is_fixed_by_the_seed() {
    let lookup = Lookup::new(1);
    assert_eq!(lookup.customers().len(), CUSTOMERS);
    assert_eq!(lookup.customers(), Lookup::new(1).customers());
    assert_ne!(lookup.customers(), Lookup::new(2).customers());
    let ids: HashSet<_> = lookup.customers().iter().map(|c| c.id.as_str()).collect();
    let names: HashSet<_> = lookup.customers().iter().map(|c| c.name.as_str()).collect();
    assert_eq!((ids.len(), names.len()), (CUSTOMERS, CUSTOMERS));
    assert_eq!(lookup.customers()[41].id, "C0042");
}

#[test]
fn search_finds_by_name_and_city_and_read_returns_the_record() {
    let lookup = Lookup::default();
    let task = lookup.task(Split::Train, 0, Difficulty::Easy);
    let customer = lookup.customers()[7].clone();

    let hits = lookup
        .call_tool(
            &task,
            "search",
            &serde_json::json!({"query": customer.name.to_uppercase()}).to_string(),
        )
        .unwrap();
    let first: serde_json::Value = serde_json::from_str(hits.lines().next().unwrap()).unwrap();
    assert_eq!(first, serde_json::json!({"id": customer.id, "name": customer.name}));

    // A city matches many customers: five are listed, and the rest counted.
    let in_city = lookup.customers().iter().filter(|c| c.city == customer.city).count();
    let listed = lookup
        .call_tool(
            &task,
            "search",
            &serde_json::json!({"query": customer.city}).to_string(),
        )
        .unwrap();
    assert_eq!(
        listed.lines().count(),
        SEARCH_LIMIT.min(in_city) + usize::from(in_city > SEARCH_LIMIT)
    );
    if in_city > SEARCH_LIMIT {
        assert!(listed.contains(&format!("{} more", in_city - SEARCH_LIMIT)), "{listed}");
    }

    let none = lookup.call_tool(&task, "search", r#"{"query": "Zebediah"}"#).unwrap();
    assert!(none.starts_with("no customer"), "{none}");
    let empty = lookup.call_tool(&task, "search", r#"{"query": "  "}"#).unwrap_err();
    assert!(matches!(empty, ToolError::BadArguments { .. }));

    let record: serde_json::Value = serde_json::from_str(
        &lookup
            .call_tool(
                &task,
                "read",
                &serde_json::json!({"id": customer.id.to_lowercase()}).to_string(),
            )
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        record,
        serde_json::json!({
            "id": customer.id, "name": customer.name, "city": customer.city,
            "plan": customer.plan, "balance": customer.balance(),
        })
    );
    let missing = lookup.call_tool(&task, "read", r#"{"id": "C9999"}"#).unwrap_err();
    assert!(missing.to_string().contains("use `search`"), "{missing}");
}

#[test]
fn questions_name_customers_never_ids() {
    let lookup = Lookup::default();
    for difficulty in Difficulty::ALL {
        for index in 0..100 {
            let task = lookup.task(Split::HeldOut, index, difficulty);
            assert!(!task.prompt.contains("C0"), "{}", task.prompt);
            let TaskData::Lookup(data) = &task.data else { panic!() };
            let expected_kind = match (&data.question, difficulty) {
                (Question::City { .. } | Question::Plan { .. }, Difficulty::Easy) => true,
                (Question::Balance { .. }, Difficulty::Medium) => true,
                (Question::CombinedBalance { first, second }, Difficulty::Hard) => first != second,
                _ => false,
            };
            assert!(expected_kind, "{difficulty:?}: {:?}", data.question);
        }
    }
}
