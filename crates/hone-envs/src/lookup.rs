//! `lookup`: questions about a company's customers, answered with tools
//! (the ART-E pattern: search, then read the record, then answer).
//!
//! The table (200 customers: id `C0042`, name, city, plan, balance) is fixed
//! by the environment's seed. `search(query)` lists up to five `{id, name}`
//! of the customers whose name or city contain every query word; `read(id)`
//! returns one record. Every question names customers, never ids, so it
//! needs a search and a read.
//!
//! - Easy: a customer's city or plan.
//! - Medium: a customer's balance (exactly, with two decimals).
//! - Hard: the combined balance of two customers (two searches, two reads).
//!
//! The hidden score: the answer contains the expected value as a whole word
//! (case-insensitive).

use crate::seeded::{derive_seed, stable_hash, task_in_split, SplitMix64};
use crate::text::{capture, contains_whole_word, fill, slot};
use crate::{
    assistant_tool_calls, function_tool, parse_arguments, tool_result, tool_result_text, Difficulty, Environment,
    Split, Task, TaskData, ToolError,
};
use hone_types::openai::{Message, Role, Tool};
use serde::{Deserialize, Serialize};

pub const NAME: &str = "lookup";
/// The seed [`Lookup::default`] uses.
pub const DEFAULT_SEED: u64 = 42;
/// How many customers the table holds.
pub const CUSTOMERS: usize = 200;
/// Most customers one search lists.
pub const SEARCH_LIMIT: usize = 5;

const FIRST_NAMES: &[&str] = &[
    "Dana", "Sam", "Alex", "Maria", "Kenji", "Fatima", "Oliver", "Chiara", "Tobias", "Amara", "Lucas", "Ingrid",
    "Mateo", "Yuki", "Hassan", "Elena", "Victor", "Nadia", "Pavel", "Rosa", "Felix", "Leila", "Bruno", "Sofia",
];

const LAST_NAMES: &[&str] = &[
    "Okafor",
    "Lindqvist",
    "Moreau",
    "Tanaka",
    "Haddad",
    "Novak",
    "Brennan",
    "Rossi",
    "Schmidt",
    "Mensah",
    "Costa",
    "Ivanova",
    "Garcia",
    "Kowalski",
    "Nakamura",
    "Petrov",
    "Quispe",
    "Adeyemi",
    "Fischer",
    "Silva",
    "Yilmaz",
    "Dubois",
    "Kaur",
    "Walsh",
];

const CITIES: &[&str] = &[
    "Lisbon",
    "Porto",
    "Lyon",
    "Berlin",
    "Osaka",
    "Nairobi",
    "Toronto",
    "Denver",
    "Krakow",
    "Seville",
    "Melbourne",
    "Buenos Aires",
];

const PLANS: &[&str] = &["free", "basic", "pro", "team", "enterprise"];

/// One customer record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Customer {
    pub id: String,
    pub name: String,
    pub city: String,
    pub plan: String,
    pub balance_cents: i64,
}

impl Customer {
    /// The balance as the record shows it: `1234.50`.
    pub fn balance(&self) -> String {
        format_cents(self.balance_cents)
    }
}

fn format_cents(cents: i64) -> String {
    let sign = if cents < 0 { "-" } else { "" };
    format!("{sign}{}.{:02}", cents.abs() / 100, cents.abs() % 100)
}

/// A record as `read` returns it (the balance as text, exactly as answers must give it).
#[derive(Debug, Serialize)]
struct RecordView<'a> {
    id: &'a str,
    name: &'a str,
    city: &'a str,
    plan: &'a str,
    balance: String,
}

/// A search hit as `search` lists it.
#[derive(Debug, Serialize)]
struct HitView<'a> {
    id: &'a str,
    name: &'a str,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchArguments {
    query: String,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadArguments {
    id: String,
}

/// What is asked, about which customers (by id).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Question {
    City { customer: String },
    Plan { customer: String },
    Balance { customer: String },
    CombinedBalance { first: String, second: String },
}

/// What a lookup task needs: the question and the exact expected value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LookupTask {
    pub question: Question,
    pub expected: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Asks {
    City,
    Plan,
    Balance,
    CombinedBalance,
}

/// A question template: `{name}` (and `{other}` for two customers).
struct Template {
    difficulty: Difficulty,
    text: &'static str,
    asks: Asks,
}

const TEMPLATES: &[Template] = &[
    Template {
        difficulty: Difficulty::Easy,
        text: "Which city does {name} live in?",
        asks: Asks::City,
    },
    Template {
        difficulty: Difficulty::Easy,
        text: "Where does our customer {name} live? Give the city.",
        asks: Asks::City,
    },
    Template {
        difficulty: Difficulty::Easy,
        text: "What plan is {name} on?",
        asks: Asks::Plan,
    },
    Template {
        difficulty: Difficulty::Easy,
        text: "Which subscription plan does {name} have?",
        asks: Asks::Plan,
    },
    Template {
        difficulty: Difficulty::Medium,
        text: "What is the account balance of {name}?",
        asks: Asks::Balance,
    },
    Template {
        difficulty: Difficulty::Medium,
        text: "How much money is in the account of {name}?",
        asks: Asks::Balance,
    },
    Template {
        difficulty: Difficulty::Hard,
        text: "What is the combined account balance of {name} and {other}?",
        asks: Asks::CombinedBalance,
    },
    Template {
        difficulty: Difficulty::Hard,
        text: "How much do {name} and {other} have in their accounts together?",
        asks: Asks::CombinedBalance,
    },
];

/// The lookup environment: a customer table fixed by its seed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lookup {
    seed: u64,
    customers: Vec<Customer>,
}

impl Default for Lookup {
    fn default() -> Self {
        Lookup::new(DEFAULT_SEED)
    }
}

impl Lookup {
    pub fn new(seed: u64) -> Lookup {
        let mut rng = SplitMix64::new(derive_seed(&[seed, stable_hash(b"lookup.customers")]));
        // Distinct names: a seeded partial shuffle of every first × last pair.
        let mut names: Vec<String> = FIRST_NAMES
            .iter()
            .flat_map(|first| LAST_NAMES.iter().map(move |last| format!("{first} {last}")))
            .collect();
        let count = CUSTOMERS.min(names.len());
        for i in 0..count {
            let j = i + rng.below((names.len() - i) as u64) as usize;
            names.swap(i, j);
        }
        names.truncate(count);
        let customers = names
            .into_iter()
            .enumerate()
            .map(|(i, name)| Customer {
                id: format!("C{:04}", i + 1),
                name,
                city: rng.pick(CITIES).copied().unwrap_or("Lisbon").to_owned(),
                plan: rng.pick(PLANS).copied().unwrap_or("free").to_owned(),
                balance_cents: rng.range(0, 500_000),
            })
            .collect();
        Lookup { seed, customers }
    }

    /// The whole table, in id order.
    pub fn customers(&self) -> &[Customer] {
        &self.customers
    }

    pub fn customer(&self, id: &str) -> Option<&Customer> {
        let id = id.trim();
        self.customers.iter().find(|c| c.id.eq_ignore_ascii_case(id))
    }

    fn customer_named(&self, name: &str) -> Option<&Customer> {
        self.customers.iter().find(|c| c.name == name)
    }

    /// Customers whose name or city contain every word of `query`
    /// (case-insensitive): exact name matches first, then by id.
    pub fn search(&self, query: &str) -> Vec<&Customer> {
        let words: Vec<String> = query
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .collect();
        if words.is_empty() {
            return Vec::new();
        }
        let wanted = query.trim().to_lowercase();
        let mut hits: Vec<&Customer> = self
            .customers
            .iter()
            .filter(|c| {
                let haystack = format!("{} {}", c.name, c.city).to_lowercase();
                words.iter().all(|w| haystack.contains(w.as_str()))
            })
            .collect();
        hits.sort_by_key(|c| (c.name.to_lowercase() != wanted, c.id.clone()));
        hits
    }

    fn question(&self, template: &Template, first: &Customer, second: Option<&Customer>) -> Option<Task> {
        let mut values = vec![("name", first.name.clone())];
        let (question, expected) = match template.asks {
            Asks::City => (
                Question::City {
                    customer: first.id.clone(),
                },
                first.city.clone(),
            ),
            Asks::Plan => (
                Question::Plan {
                    customer: first.id.clone(),
                },
                first.plan.clone(),
            ),
            Asks::Balance => (
                Question::Balance {
                    customer: first.id.clone(),
                },
                first.balance(),
            ),
            Asks::CombinedBalance => {
                let second = second?;
                values.push(("other", second.name.clone()));
                (
                    Question::CombinedBalance {
                        first: first.id.clone(),
                        second: second.id.clone(),
                    },
                    format_cents(first.balance_cents + second.balance_cents),
                )
            }
        };
        Some(Task::new(
            NAME,
            fill(template.text, &values),
            template.difficulty,
            TaskData::Lookup(LookupTask { question, expected }),
        ))
    }

    fn generate(&self, rng: &mut SplitMix64, difficulty: Difficulty) -> Option<Task> {
        let templates: Vec<&Template> = TEMPLATES.iter().filter(|t| t.difficulty == difficulty).collect();
        let template = *rng.pick(&templates)?;
        let first = rng.pick(&self.customers)?;
        let second = rng.pick(&self.customers)?;
        if template.asks == Asks::CombinedBalance && first.id == second.id {
            return None;
        }
        self.question(template, first, Some(second))
    }

    /// The final answer a correct agent gives, from the records it read.
    fn answer(&self, question: &Question) -> Option<String> {
        Some(match question {
            Question::City { customer } => {
                let c = self.customer(customer)?;
                format!("{} lives in {}.", c.name, c.city)
            }
            Question::Plan { customer } => {
                let c = self.customer(customer)?;
                format!("{} is on the {} plan.", c.name, c.plan)
            }
            Question::Balance { customer } => {
                let c = self.customer(customer)?;
                format!("The account balance of {} is {}.", c.name, c.balance())
            }
            Question::CombinedBalance { first, second } => {
                let (a, b) = (self.customer(first)?, self.customer(second)?);
                format!(
                    "{} has {} and {} has {}, so together they have {}.",
                    a.name,
                    a.balance(),
                    b.name,
                    b.balance(),
                    format_cents(a.balance_cents + b.balance_cents)
                )
            }
        })
    }
}

impl Environment for Lookup {
    fn name(&self) -> &'static str {
        NAME
    }

    fn task(&self, split: Split, index: u64, difficulty: Difficulty) -> Task {
        task_in_split(self.seed, NAME, split, difficulty, index, |rng| {
            self.generate(rng, difficulty)
        })
    }

    fn tools(&self) -> Vec<Tool> {
        vec![
            function_tool(
                "search",
                "Finds customers whose name or city contains every word of the query. Lists up to 5 matches as {\"id\", \"name\"}, one per line.",
                &[("query", "words of a customer's name or city, e.g. `Dana Okafor`")],
            ),
            function_tool(
                "read",
                "Returns one customer's record (id, name, city, plan, balance) as JSON.",
                &[("id", "the customer's id, e.g. `C0042`")],
            ),
        ]
    }

    fn system_prompt(&self) -> String {
        "You answer questions about the customers of a small company. You cannot know their data without the tools:\n\
         - `search(query)` lists up to 5 customers whose name or city contains every word of the query, as {\"id\", \"name\"};\n\
         - `read(id)` returns one customer's record: id, name, city, plan and balance.\n\
         Search for each customer the question names, read their record, then answer in one short sentence \
         that states the value exactly as the record shows it (a balance with its two decimals, e.g. 1234.50). \
         For a combined balance, add the balances and give the total with two decimals."
            .to_owned()
    }

    fn call_tool(&self, _task: &Task, name: &str, arguments: &str) -> Result<String, ToolError> {
        match name {
            "search" => {
                let arguments: SearchArguments = parse_arguments(name, arguments)?;
                if arguments.query.trim().is_empty() {
                    return Err(ToolError::BadArguments {
                        tool: name.to_owned(),
                        message: "`query` is empty; give words of a customer's name or city".to_owned(),
                    });
                }
                let hits = self.search(&arguments.query);
                if hits.is_empty() {
                    return Ok(format!(
                        "no customer's name or city contains every word of `{}`",
                        arguments.query.trim()
                    ));
                }
                let mut lines: Vec<String> = hits
                    .iter()
                    .take(SEARCH_LIMIT)
                    .map(|c| {
                        serde_json::to_string(&HitView {
                            id: &c.id,
                            name: &c.name,
                        })
                        .unwrap_or_default()
                    })
                    .collect();
                if hits.len() > SEARCH_LIMIT {
                    lines.push(format!(
                        "… and {} more; add words to narrow the search",
                        hits.len() - SEARCH_LIMIT
                    ));
                }
                Ok(lines.join("\n"))
            }
            "read" => {
                let arguments: ReadArguments = parse_arguments(name, arguments)?;
                let customer = self.customer(&arguments.id).ok_or_else(|| ToolError::Failed {
                    tool: name.to_owned(),
                    message: format!(
                        "no customer has id `{}`; ids look like `C0042`: use `search` to find one",
                        arguments.id.trim()
                    ),
                })?;
                let record = RecordView {
                    id: &customer.id,
                    name: &customer.name,
                    city: &customer.city,
                    plan: &customer.plan,
                    balance: customer.balance(),
                };
                serde_json::to_string(&record).map_err(|e| ToolError::Failed {
                    tool: name.to_owned(),
                    message: e.to_string(),
                })
            }
            _ => Err(ToolError::unknown(name, &self.tools())),
        }
    }

    fn score(&self, task: &Task, answer: &str) -> f64 {
        let TaskData::Lookup(lookup) = &task.data else {
            return 0.0;
        };
        if contains_whole_word(answer, &lookup.expected) {
            1.0
        } else {
            0.0
        }
    }

    fn task_from_prompt(&self, prompt: &str) -> Option<Task> {
        let prompt = prompt.trim();
        TEMPLATES.iter().find_map(|template| {
            let captured = capture(template.text, prompt)?;
            let first = self.customer_named(slot(&captured, "name")?)?;
            let second = match slot(&captured, "other") {
                Some(name) => Some(self.customer_named(name)?),
                None => None,
            };
            self.question(template, first, second)
                .filter(|task| task.prompt == prompt)
        })
    }

    fn demonstration(&self, task: &Task) -> Vec<Message> {
        let TaskData::Lookup(lookup) = &task.data else {
            return Vec::new();
        };
        let ids: Vec<&str> = match &lookup.question {
            Question::City { customer } | Question::Plan { customer } | Question::Balance { customer } => {
                vec![customer]
            }
            Question::CombinedBalance { first, second } => vec![first, second],
        };
        let customers: Vec<&Customer> = ids.iter().filter_map(|id| self.customer(id)).collect();
        let Some(answer) = self.answer(&lookup.question) else {
            return Vec::new();
        };
        let mut messages = Vec::new();
        let mut next_id = 1;
        // One round of searches, then one round of reads: parallel tool calls
        // keep a two-customer question within the runner's default four steps.
        for (tool, arguments) in [
            (
                "search",
                customers
                    .iter()
                    .map(|c| serde_json::json!({ "query": c.name }).to_string())
                    .collect::<Vec<_>>(),
            ),
            (
                "read",
                customers
                    .iter()
                    .map(|c| serde_json::json!({ "id": c.id }).to_string())
                    .collect::<Vec<_>>(),
            ),
        ] {
            let calls: Vec<(String, String, String)> = arguments
                .into_iter()
                .map(|arguments| {
                    let id = format!("call_{next_id}");
                    next_id += 1;
                    (id, tool.to_owned(), arguments)
                })
                .collect();
            let results: Vec<Message> = calls
                .iter()
                .map(|(id, name, arguments)| tool_result(id, tool_result_text(self.call_tool(task, name, arguments))))
                .collect();
            messages.push(assistant_tool_calls(calls));
            messages.extend(results);
        }
        messages.push(Message::new(Role::Assistant, answer));
        messages
    }
}
