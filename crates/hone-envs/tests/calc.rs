//! The `calc` tool's evaluator and the shape of calc tasks per difficulty.

use hone_envs::calc::{
    evaluate, family_of, format_number, template_of, CalcError, ADD_UP, MAX_DEPTH, MAX_EXPRESSION_CHARS, TAKE_AWAY,
};
use hone_envs::{Calc, Difficulty, Environment, Split, TaskData};
use proptest::prelude::*;

fn value(expression: &str) -> f64 {
    evaluate(expression).unwrap_or_else(|e| panic!("`{expression}`: {e}"))
}

#[test]
fn precedence_associativity_and_parentheses() {
    assert_eq!(value("2 + 3 * 4"), 14.0);
    assert_eq!(value("(2 + 3) * 4"), 20.0);
    assert_eq!(value("10 - 4 - 3"), 3.0);
    assert_eq!(value("100 / 10 / 5"), 2.0);
    assert_eq!(value("2 * (3 + (4 - 1)) / 3"), 4.0);
    assert_eq!(value("((7))"), 7.0);
    assert_eq!(value("-3 + 5"), 2.0);
    assert_eq!(value("2 * -3"), -6.0);
    assert_eq!(value("-(2 + 3)"), -5.0);
    assert_eq!(value("--4"), 4.0);
    assert_eq!(value("+4"), 4.0);
    assert_eq!(value("12 × 3 ÷ 4 − 1"), 8.0);
    assert_eq!(value("  48*25 "), 1200.0);
}

#[test]
fn division_and_decimals() {
    assert_eq!(value("7 / 2"), 3.5);
    assert_eq!(value("1.5 + 2.25"), 3.75);
    assert_eq!(value(".5 * 4"), 2.0);
    assert_eq!(value("(1224 + 876) / 12"), 175.0);
    assert_eq!(format_number(value("7 / 2")), "3.5");
    assert_eq!(format_number(value("0.1 + 0.2")), "0.3");
    assert_eq!(format_number(value("1 / 3")), "0.3333333333");
    assert_eq!(format_number(value("1200 / 4")), "300");
    assert_eq!(format_number(value("0 * -1")), "0");
    assert_eq!(format_number(-2.5), "-2.5");
}

#[test]
fn anything_else_is_refused_with_a_clear_error() {
    assert_eq!(evaluate(""), Err(CalcError::Empty));
    assert_eq!(evaluate("   "), Err(CalcError::Empty));
    assert_eq!(
        evaluate("2 ^ 3"),
        Err(CalcError::UnexpectedCharacter {
            character: '^',
            position: 3
        })
    );
    assert!(matches!(
        evaluate("sqrt(4)"),
        Err(CalcError::UnexpectedCharacter { character: 's', .. })
    ));
    assert!(matches!(
        evaluate("1e5"),
        Err(CalcError::UnexpectedCharacter { character: 'e', .. })
    ));
    assert!(matches!(evaluate("1.2.3"), Err(CalcError::BadNumber { .. })));
    assert!(matches!(evaluate("."), Err(CalcError::BadNumber { .. })));
    assert_eq!(
        evaluate("(1 + 2"),
        Err(CalcError::Expected {
            expected: "`)`",
            found: "the end".to_owned(),
            position: 7
        })
    );
    assert_eq!(
        evaluate("1 + 2)"),
        Err(CalcError::Expected {
            expected: "an operator or the end",
            found: "`)`".to_owned(),
            position: 6
        })
    );
    assert!(matches!(evaluate("2 3"), Err(CalcError::Expected { position: 3, .. })));
    assert!(matches!(evaluate("1 +"), Err(CalcError::Expected { .. })));
    assert!(matches!(evaluate("* 2"), Err(CalcError::Expected { .. })));
    assert!(matches!(evaluate("()"), Err(CalcError::Expected { .. })));
    assert_eq!(evaluate("1 / 0"), Err(CalcError::DivisionByZero { position: 3 }));
    assert!(matches!(evaluate("5 / (2 - 2)"), Err(CalcError::DivisionByZero { .. })));
    assert_eq!(
        evaluate(&"(".repeat(MAX_DEPTH + 1)),
        Err(CalcError::TooDeep { max: MAX_DEPTH })
    );
    assert_eq!(evaluate(&"-".repeat(200)), Err(CalcError::TooDeep { max: MAX_DEPTH }));
    assert_eq!(
        evaluate(&"1+".repeat(MAX_EXPRESSION_CHARS)),
        Err(CalcError::TooLong {
            max: MAX_EXPRESSION_CHARS
        })
    );
    assert_eq!(evaluate(&"9".repeat(400)), Err(CalcError::Overflow));
    let message = evaluate("2 ^ 3").unwrap_err().to_string();
    assert!(message.contains("only numbers, + - * / and parentheses"), "{message}");
}

#[test]
fn the_tool_returns_values_and_errors_as_text() {
    let calc = Calc::default();
    let task = calc.task(Split::Train, 0, Difficulty::Easy);
    assert_eq!(
        calc.call_tool(&task, "calc", r#"{"expression": "(2 + 3) * 4"}"#)
            .unwrap(),
        "20"
    );
    let error = calc.call_tool(&task, "calc", r#"{"expression": "1 / 0"}"#).unwrap_err();
    assert_eq!(error.to_string(), "`calc` failed: division by zero at character 3");
}

#[test]
fn difficulty_shapes_the_arithmetic() {
    let calc = Calc::new(23);
    for index in 0..300 {
        let expression = |difficulty| {
            let TaskData::Calc(data) = calc.task(Split::Train, index, difficulty).data else {
                panic!()
            };
            assert_eq!(data.answer.fract(), 0.0, "{}", data.expression);
            assert!(data.answer >= 0.0, "{}", data.expression);
            data.expression
        };
        let operators = |e: &str| e.chars().filter(|c| "+-*/".contains(*c)).count();
        let easy = expression(Difficulty::Easy);
        assert_eq!(operators(&easy), 1, "{easy}");
        assert!(!easy.contains(['*', '/']), "{easy}");
        assert_eq!(operators(&expression(Difficulty::Medium)), 2);
        let hard = expression(Difficulty::Hard);
        assert!(hard.contains(['*', '/']), "{hard}");
        // Multi-digit: every hard task multiplies or divides a number of two digits or more.
        assert!(
            hard.split(|c: char| !c.is_ascii_digit()).any(|n| n.len() >= 2),
            "{hard}"
        );
    }
}

#[test]
fn every_prompt_names_the_template_it_was_made_from() {
    let calc = Calc::new(23);
    for (difficulty, templates) in [(Difficulty::Easy, 4), (Difficulty::Medium, 4), (Difficulty::Hard, 4)] {
        let mut seen = std::collections::BTreeSet::new();
        for index in 0..200 {
            let prompt = calc.task(Split::HeldOut, index, difficulty).prompt;
            let template = template_of(&prompt).unwrap_or_else(|| panic!("no template for `{prompt}`"));
            // The template's fixed words are in the prompt.
            let first_words = template.split('{').next().unwrap_or_default();
            assert!(prompt.starts_with(first_words), "`{prompt}` from `{template}`");
            seen.insert(template);
        }
        assert_eq!(seen.len(), templates, "{difficulty:?}: {seen:?}");
    }
    assert_eq!(template_of("What is 2 + 2?"), None);
}

#[test]
fn easy_problems_come_in_two_families_one_taking_away_one_adding_up() {
    let calc = Calc::new(23);
    let mut count = std::collections::BTreeMap::new();
    for index in 0..200 {
        let task = calc.task(Split::Train, index, Difficulty::Easy);
        let family = calc
            .family(&task)
            .unwrap_or_else(|| panic!("no family for `{}`", task.prompt));
        assert_eq!(family_of(&task.prompt), Some(family));
        let TaskData::Calc(data) = &task.data else {
            panic!("not a calc task")
        };
        let sign = if family == TAKE_AWAY { " - " } else { " + " };
        assert!(family == ADD_UP || family == TAKE_AWAY, "{family}");
        assert!(data.expression.contains(sign), "{family}: `{}`", data.expression);
        *count.entry(family).or_insert(0) += 1;
    }
    // Both families are common among easy tasks.
    assert!(count.values().all(|n| *n > 60), "{count:?}");
    let medium = calc.task(Split::Train, 0, Difficulty::Medium);
    assert_ne!(calc.family(&medium), Some(ADD_UP));
    assert_eq!(family_of("What is 2 + 2?"), None);
}

#[test]
fn a_direct_answer_is_scored_like_one_after_the_tool() {
    let calc = Calc::default();
    let task = calc.task(Split::HeldOut, 4, Difficulty::Medium);
    let TaskData::Calc(data) = &task.data else { panic!() };
    assert_eq!(calc.score(&task, &format!("{}", data.answer)), 1.0);
    assert_eq!(calc.score(&task, &format!("The answer is {}.0", data.answer)), 1.0);
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::with_cases(512) })]

    #[test]
    fn evaluation_never_panics(text in "[0-9+*/().× -]{0,40}|\\PC{0,40}") {
        let _ = evaluate(&text);
    }

    #[test]
    fn evaluation_agrees_with_integer_arithmetic(a in -999i64..999, b in -999i64..999, c in 1i64..99, d in -99i64..99) {
        let expression = format!("{a} + {b} * ({c} - {d}) - ({a} * {c}) / {c}");
        let expected = a + b * (c - d) - a;
        prop_assert_eq!(evaluate(&expression).unwrap(), expected as f64);
    }
}
