//! `calc`: arithmetic word problems of graded difficulty, and a `calc` tool
//! that evaluates `+ - * /` and parentheses on integers and decimals.
//!
//! - Easy: one addition or subtraction of small numbers.
//! - Medium: two operations (one may be a small multiplication).
//! - Hard: multi-digit multiplication, division with an integer result,
//!   parentheses.
//!
//! Every prompt comes from a template whose numbers fill an expression, so a
//! task is recovered from its prompt alone by matching the templates back.
//! The hidden score: the last number of the final answer equals the
//! expression's value (within 1e-6). The agent may call the tool or answer
//! directly.

use crate::seeded::{task_in_split, SplitMix64};
use crate::text::{capture, fill, last_number, slot};
use crate::{
    assistant_tool_calls, function_tool, parse_arguments, tool_result, tool_result_text, Difficulty, Environment,
    Split, Task, TaskData, ToolError,
};
use hone_types::openai::{Message, Role, Tool};
use serde::{Deserialize, Serialize};

pub const NAME: &str = "calc";
/// The seed [`Calc::default`] uses.
pub const DEFAULT_SEED: u64 = 7;
/// Longest expression the tool evaluates.
pub const MAX_EXPRESSION_CHARS: usize = 500;
/// Deepest nesting of parentheses and signs (the evaluator is recursive).
pub const MAX_DEPTH: usize = 64;
/// How far an answer may be from the expected value.
pub const TOLERANCE: f64 = 1e-6;

/// The calc environment; its seed picks which tasks an index names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Calc {
    seed: u64,
}

impl Default for Calc {
    fn default() -> Self {
        Calc::new(DEFAULT_SEED)
    }
}

/// What a calc task needs: the expression its numbers form, and its value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CalcTask {
    pub expression: String,
    pub answer: f64,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CalcArguments {
    expression: String,
}

/// One word-problem template: `{a}`…`{d}` are numbers, `{name}` a person,
/// `{items}` a plural noun.
struct Template {
    difficulty: Difficulty,
    /// The kind of problem ([`Environment::family`]): templates of one
    /// family share their wording and their operation.
    family: &'static str,
    text: &'static str,
    expression: &'static str,
    numbers: fn(&mut SplitMix64) -> [i64; 4],
}

const NUMBER_SLOTS: [&str; 4] = ["a", "b", "c", "d"];

const NAMES: &[&str] = &[
    "Ana", "Ben", "Chloe", "Dev", "Emma", "Farid", "Grace", "Hugo", "Iris", "Jonas", "Kemi", "Liam", "Mei", "Noah",
    "Olga", "Priya", "Quinn", "Ravi", "Sara", "Tomas",
];

const ITEMS: &[&str] = &[
    "apples", "pencils", "marbles", "stickers", "cookies", "books", "shells", "cards", "stamps", "buttons", "candles",
    "plums",
];

/// Easy problems that take something away (`a − b`).
pub const TAKE_AWAY: &str = "take-away";
/// Easy problems that add two amounts up (`a + b`).
pub const ADD_UP: &str = "add-up";
/// Medium problems: two operations.
pub const TWO_STEP: &str = "two-step";
/// Hard problems: multi-digit products, shares and brackets.
pub const MANY_STEP: &str = "many-step";

const TEMPLATES: &[Template] = &[
    // Easy: one + or − of small numbers.
    Template {
        difficulty: Difficulty::Easy,
        family: TAKE_AWAY,
        text: "A shop has {a} {items} and sells {b}. How many {items} are left?",
        expression: "{a} - {b}",
        numbers: |rng| {
            let a = rng.range(8, 30);
            [a, rng.range(1, a - 1), 0, 0]
        },
    },
    Template {
        difficulty: Difficulty::Easy,
        family: ADD_UP,
        text: "{name} has {a} {items} and buys {b} more. How many {items} does {name} have now?",
        expression: "{a} + {b}",
        numbers: |rng| [rng.range(2, 20), rng.range(2, 20), 0, 0],
    },
    Template {
        difficulty: Difficulty::Easy,
        family: TAKE_AWAY,
        text: "There are {a} {items} in a box. {name} takes out {b}. How many {items} are still in the box?",
        expression: "{a} - {b}",
        numbers: |rng| {
            let a = rng.range(6, 25);
            [a, rng.range(1, a - 1), 0, 0]
        },
    },
    Template {
        difficulty: Difficulty::Easy,
        family: ADD_UP,
        text: "{name} collected {a} {items} on Monday and {b} on Tuesday. How many {items} did {name} collect in total?",
        expression: "{a} + {b}",
        numbers: |rng| [rng.range(3, 25), rng.range(3, 25), 0, 0],
    },
    // Medium: two operations.
    Template {
        difficulty: Difficulty::Medium,
        family: TWO_STEP,
        text: "{name} has {a} {items}, gets {b} more, then gives {c} away. How many {items} does {name} have now?",
        expression: "{a} + {b} - {c}",
        numbers: |rng| {
            let (a, b) = (rng.range(10, 40), rng.range(5, 30));
            [a, b, rng.range(1, a + b - 1), 0]
        },
    },
    Template {
        difficulty: Difficulty::Medium,
        family: TWO_STEP,
        text: "{name} had {a} {items}, lost {b}, and then found {c}. How many {items} does {name} have now?",
        expression: "{a} - {b} + {c}",
        numbers: |rng| {
            let a = rng.range(10, 50);
            [a, rng.range(1, a - 1), rng.range(1, 30), 0]
        },
    },
    Template {
        difficulty: Difficulty::Medium,
        family: TWO_STEP,
        text: "A shop packs {items} into {a} bags of {b} each and sells {c} {items}. How many {items} are left?",
        expression: "{a} * {b} - {c}",
        numbers: |rng| {
            let (a, b) = (rng.range(3, 9), rng.range(3, 12));
            [a, b, rng.range(1, a * b - 1), 0]
        },
    },
    Template {
        difficulty: Difficulty::Medium,
        family: TWO_STEP,
        text: "{name} buys {a} packs of {items} with {b} in each pack, plus {c} loose ones. How many {items} does {name} buy in total?",
        expression: "{a} * {b} + {c}",
        numbers: |rng| [rng.range(2, 9), rng.range(3, 12), rng.range(1, 20), 0],
    },
    // Hard: multi-digit ×, ÷ with integer results, parentheses.
    Template {
        difficulty: Difficulty::Hard,
        family: MANY_STEP,
        text: "A warehouse ships {a} crates with {b} {items} in each. The {items} are shared equally among {c} stores. How many {items} does each store get?",
        expression: "({a} * {b}) / {c}",
        numbers: |rng| {
            // b is a multiple of c, so the share is a whole number.
            let c = rng.range(3, 12);
            let k = rng.range((12 + c - 1) / c, 8);
            [rng.range(12, 60), c * k.max(2), c, 0]
        },
    },
    Template {
        difficulty: Difficulty::Hard,
        family: MANY_STEP,
        text: "{name} buys {a} {items} at {b} coins each and pays with {c} coins. How much change does {name} get, in coins?",
        expression: "{c} - {a} * {b}",
        numbers: |rng| {
            let (a, b) = (rng.range(11, 40), rng.range(12, 45));
            [a, b, (a * b / 100 + 1 + rng.range(0, 3)) * 100, 0]
        },
    },
    Template {
        difficulty: Difficulty::Hard,
        family: MANY_STEP,
        text: "{name} saves {a} coins in March and {b} coins in April, then shares the savings equally among {c} friends. How many coins does each friend get?",
        expression: "({a} + {b}) / {c}",
        numbers: |rng| {
            let c = rng.range(3, 12);
            let total = c * rng.range(15, 90);
            let a = rng.range(total / 4, total * 3 / 4);
            [a, total - a, c, 0]
        },
    },
    Template {
        difficulty: Difficulty::Hard,
        family: MANY_STEP,
        text: "{name} orders {a} boxes of {items} with {b} in each box, and {c} more boxes with {d} in each. How many {items} is that altogether?",
        expression: "{a} * {b} + {c} * {d}",
        numbers: |rng| [rng.range(12, 40), rng.range(12, 36), rng.range(11, 30), rng.range(11, 24)],
    },
];

impl Calc {
    pub fn new(seed: u64) -> Calc {
        Calc { seed }
    }

    fn generate(&self, rng: &mut SplitMix64, difficulty: Difficulty) -> Option<Task> {
        let templates: Vec<&Template> = TEMPLATES.iter().filter(|t| t.difficulty == difficulty).collect();
        let template = *rng.pick(&templates)?;
        let numbers = (template.numbers)(rng);
        let mut values: Vec<(&str, String)> = NUMBER_SLOTS
            .iter()
            .zip(numbers)
            .map(|(slot, n)| (*slot, n.to_string()))
            .collect();
        values.push(("name", (*rng.pick(NAMES)?).to_owned()));
        values.push(("items", (*rng.pick(ITEMS)?).to_owned()));
        task_of(template, fill(template.text, &values), &values)
    }
}

/// The template a prompt was made from.
fn template_for(prompt: &str) -> Option<&'static Template> {
    let prompt = prompt.trim();
    TEMPLATES.iter().find(|t| capture(t.text, prompt).is_some())
}

/// The template a prompt was made from (its text, with `{a}`, `{name}`, …
/// slots), for reports that break results down per template.
pub fn template_of(prompt: &str) -> Option<&'static str> {
    template_for(prompt).map(|t| t.text)
}

/// The family of a prompt's template (`None`: no template reads so).
pub fn family_of(prompt: &str) -> Option<&'static str> {
    template_for(prompt).map(|t| t.family)
}

/// The task a template makes with these slot values (`None` if its
/// expression does not evaluate, which no generated task hits).
fn task_of(template: &Template, prompt: String, values: &[(&str, String)]) -> Option<Task> {
    let expression = fill(template.expression, values);
    let answer = evaluate(&expression).ok()?;
    Some(Task::new(
        NAME,
        prompt,
        template.difficulty,
        TaskData::Calc(CalcTask { expression, answer }),
    ))
}

impl Environment for Calc {
    fn name(&self) -> &'static str {
        NAME
    }

    fn task(&self, split: Split, index: u64, difficulty: Difficulty) -> Task {
        task_in_split(self.seed, NAME, split, difficulty, index, |rng| {
            self.generate(rng, difficulty)
        })
    }

    fn tools(&self) -> Vec<Tool> {
        vec![function_tool(
            "calc",
            "Evaluates an arithmetic expression with + - * / and parentheses on integers and decimals, e.g. `(12 + 30) / 6`. Returns the value.",
            &[("expression", "the arithmetic expression to evaluate")],
        )]
    }

    fn system_prompt(&self) -> String {
        "You solve short arithmetic word problems.\n\
         You have one tool, `calc`: it evaluates an arithmetic expression with + - * / and parentheses, \
         for example `(12 + 30) / 6`. Use it whenever the arithmetic is not trivial.\n\
         When you know the result, reply with one short sentence that ends with the number, for example \
         `The answer is 42.` The last number in your reply is taken as your answer."
            .to_owned()
    }

    fn call_tool(&self, _task: &Task, name: &str, arguments: &str) -> Result<String, ToolError> {
        if name != "calc" {
            return Err(ToolError::unknown(name, &self.tools()));
        }
        let arguments: CalcArguments = parse_arguments(name, arguments)?;
        evaluate(&arguments.expression)
            .map(format_number)
            .map_err(|e| ToolError::Failed {
                tool: name.to_owned(),
                message: e.to_string(),
            })
    }

    fn score(&self, task: &Task, answer: &str) -> f64 {
        let TaskData::Calc(calc) = &task.data else {
            return 0.0;
        };
        match last_number(answer) {
            Some(value) if (value - calc.answer).abs() <= TOLERANCE => 1.0,
            _ => 0.0,
        }
    }

    fn family(&self, task: &Task) -> Option<&'static str> {
        family_of(&task.prompt)
    }

    fn task_from_prompt(&self, prompt: &str) -> Option<Task> {
        let prompt = prompt.trim();
        TEMPLATES.iter().find_map(|template| {
            let captured = capture(template.text, prompt)?;
            let mut values: Vec<(&str, String)> = Vec::new();
            for name in NUMBER_SLOTS {
                if let Some(raw) = slot(&captured, name) {
                    // Digits only: the templates' numbers are whole and non-negative.
                    if raw.len() > 12 || !raw.bytes().all(|b| b.is_ascii_digit()) {
                        return None;
                    }
                    values.push((name, raw.to_owned()));
                }
            }
            task_of(template, prompt.to_owned(), &values)
        })
    }

    fn demonstration(&self, task: &Task) -> Vec<Message> {
        let TaskData::Calc(calc) = &task.data else {
            return Vec::new();
        };
        let arguments = serde_json::json!({ "expression": calc.expression }).to_string();
        let result = tool_result_text(self.call_tool(task, "calc", &arguments));
        vec![
            assistant_tool_calls(vec![("call_1".to_owned(), "calc".to_owned(), arguments)]),
            tool_result("call_1", result.clone()),
            Message::new(Role::Assistant, format!("The answer is {result}.")),
        ]
    }
}

/// Why an expression could not be evaluated; the text is what the agent sees.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CalcError {
    #[error("the expression is empty; write one such as `(12 + 30) / 6`")]
    Empty,
    #[error("the expression is longer than {max} characters")]
    TooLong { max: usize },
    #[error("unexpected `{character}` at character {position}: only numbers, + - * / and parentheses are allowed")]
    UnexpectedCharacter { character: char, position: usize },
    #[error("`{text}` at character {position} is not a number")]
    BadNumber { text: String, position: usize },
    #[error("expected {expected} at character {position}, found {found}")]
    Expected {
        expected: &'static str,
        found: String,
        position: usize,
    },
    #[error("division by zero at character {position}")]
    DivisionByZero { position: usize },
    #[error("parentheses and signs nest deeper than {max} levels")]
    TooDeep { max: usize },
    #[error("the result is too large to represent")]
    Overflow,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Symbol {
    Number(f64),
    Plus,
    Minus,
    Times,
    Divide,
    Open,
    Close,
}

/// A symbol with its 1-based character position and its source text.
#[derive(Debug, Clone, PartialEq)]
struct Token {
    symbol: Symbol,
    position: usize,
    text: String,
}

fn tokenize(expression: &str) -> Result<Vec<Token>, CalcError> {
    let mut tokens = Vec::new();
    let mut chars = expression.chars().enumerate().peekable();
    while let Some((index, c)) = chars.next() {
        let position = index + 1;
        let symbol = match c {
            c if c.is_whitespace() => continue,
            '0'..='9' | '.' => {
                let mut text = String::from(c);
                while let Some(&(_, next)) = chars.peek() {
                    if !(next.is_ascii_digit() || next == '.') {
                        break;
                    }
                    text.push(next);
                    chars.next();
                }
                let value = text.parse::<f64>().map_err(|_| CalcError::BadNumber {
                    text: text.clone(),
                    position,
                })?;
                tokens.push(Token {
                    symbol: Symbol::Number(value),
                    position,
                    text,
                });
                continue;
            }
            '+' => Symbol::Plus,
            '-' | '\u{2212}' => Symbol::Minus,
            '*' | '\u{00D7}' => Symbol::Times,
            '/' | '\u{00F7}' => Symbol::Divide,
            '(' => Symbol::Open,
            ')' => Symbol::Close,
            character => return Err(CalcError::UnexpectedCharacter { character, position }),
        };
        tokens.push(Token {
            symbol,
            position,
            text: c.to_string(),
        });
    }
    Ok(tokens)
}

/// A recursive-descent evaluator over:
/// `expression := term (("+" | "-") term)*`,
/// `term := unary (("*" | "/") unary)*`,
/// `unary := ("+" | "-") unary | primary`,
/// `primary := number | "(" expression ")"`.
struct Parser {
    tokens: Vec<Token>,
    next: usize,
    depth: usize,
    end: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.next)
    }

    fn found(&self) -> (String, usize) {
        match self.peek() {
            Some(token) => (format!("`{}`", token.text), token.position),
            None => ("the end".to_owned(), self.end),
        }
    }

    fn expected(&self, expected: &'static str) -> CalcError {
        let (found, position) = self.found();
        CalcError::Expected {
            expected,
            found,
            position,
        }
    }

    fn enter(&mut self) -> Result<(), CalcError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(CalcError::TooDeep { max: MAX_DEPTH });
        }
        Ok(())
    }

    fn expression(&mut self) -> Result<f64, CalcError> {
        let mut value = self.term()?;
        while let Some(symbol) = self.peek().map(|t| t.symbol) {
            match symbol {
                Symbol::Plus => {
                    self.next += 1;
                    value += self.term()?;
                }
                Symbol::Minus => {
                    self.next += 1;
                    value -= self.term()?;
                }
                _ => break,
            }
        }
        Ok(value)
    }

    fn term(&mut self) -> Result<f64, CalcError> {
        let mut value = self.unary()?;
        while let Some((symbol, position)) = self.peek().map(|t| (t.symbol, t.position)) {
            match symbol {
                Symbol::Times => {
                    self.next += 1;
                    value *= self.unary()?;
                }
                Symbol::Divide => {
                    self.next += 1;
                    let divisor = self.unary()?;
                    if divisor == 0.0 {
                        return Err(CalcError::DivisionByZero { position });
                    }
                    value /= divisor;
                }
                _ => break,
            }
        }
        Ok(value)
    }

    fn unary(&mut self) -> Result<f64, CalcError> {
        match self.peek().map(|t| t.symbol) {
            Some(Symbol::Plus | Symbol::Minus) => {
                let negate = self.peek().map(|t| t.symbol) == Some(Symbol::Minus);
                self.next += 1;
                self.enter()?;
                let value = self.unary()?;
                self.depth -= 1;
                Ok(if negate { -value } else { value })
            }
            _ => self.primary(),
        }
    }

    fn primary(&mut self) -> Result<f64, CalcError> {
        match self.peek().map(|t| t.symbol) {
            Some(Symbol::Number(value)) => {
                self.next += 1;
                Ok(value)
            }
            Some(Symbol::Open) => {
                self.next += 1;
                self.enter()?;
                let value = self.expression()?;
                if self.peek().map(|t| t.symbol) != Some(Symbol::Close) {
                    return Err(self.expected("`)`"));
                }
                self.next += 1;
                self.depth -= 1;
                Ok(value)
            }
            _ => Err(self.expected("a number or `(`")),
        }
    }
}

/// Evaluates `+ - * /` and parentheses on integers and decimals (`×`, `÷`
/// and `−` are read as `*`, `/` and `-`); anything else is refused.
pub fn evaluate(expression: &str) -> Result<f64, CalcError> {
    let length = expression.chars().count();
    if length > MAX_EXPRESSION_CHARS {
        return Err(CalcError::TooLong {
            max: MAX_EXPRESSION_CHARS,
        });
    }
    let tokens = tokenize(expression)?;
    if tokens.is_empty() {
        return Err(CalcError::Empty);
    }
    let mut parser = Parser {
        tokens,
        next: 0,
        depth: 0,
        end: length + 1,
    };
    let value = parser.expression()?;
    if parser.peek().is_some() {
        return Err(parser.expected("an operator or the end"));
    }
    if !value.is_finite() {
        return Err(CalcError::Overflow);
    }
    Ok(value)
}

/// A value as the tool prints it: whole numbers without a decimal point,
/// others with up to ten decimals and no trailing zeros.
pub fn format_number(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        return format!("{}", value as i64);
    }
    let text = format!("{value:.10}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" {
        "0".to_owned()
    } else {
        text.to_owned()
    }
}
