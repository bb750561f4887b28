//! Text helpers shared by the environments: prompt templates with `{slot}`
//! placeholders that fill one way and match back the other (how a task is
//! recovered from its prompt), and the answer checks (last number, whole
//! word). No environment knowledge here.

/// One piece of a template: literal text or a named slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Segment<'a> {
    Literal(&'a str),
    Slot(&'a str),
}

fn segments(template: &str) -> Vec<Segment<'_>> {
    let mut out = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}').map(|c| open + c) else {
            break;
        };
        if open > 0 {
            out.push(Segment::Literal(&rest[..open]));
        }
        out.push(Segment::Slot(&rest[open + 1..close]));
        rest = &rest[close + 1..];
    }
    if !rest.is_empty() {
        out.push(Segment::Literal(rest));
    }
    out
}

/// The template with each `{slot}` replaced by its value; slots without a
/// value stay as they are.
pub(crate) fn fill(template: &str, values: &[(&str, String)]) -> String {
    segments(template)
        .into_iter()
        .map(|segment| match segment {
            Segment::Literal(text) => text.to_owned(),
            Segment::Slot(name) => values
                .iter()
                .find(|(slot, _)| *slot == name)
                .map_or_else(|| format!("{{{name}}}"), |(_, value)| value.clone()),
        })
        .collect()
}

/// The slot values that make `template` read exactly `text`, if any. A slot
/// takes the shortest text up to the next literal; a slot used twice must
/// take the same text both times.
pub(crate) fn capture(template: &str, text: &str) -> Option<Vec<(String, String)>> {
    let parts = segments(template);
    let mut values: Vec<(String, String)> = Vec::new();
    let mut position = 0;
    for (i, segment) in parts.iter().enumerate() {
        let rest = text.get(position..)?;
        match *segment {
            Segment::Literal(literal) => {
                if !rest.starts_with(literal) {
                    return None;
                }
                position += literal.len();
            }
            Segment::Slot(name) => {
                let length = match parts.get(i + 1) {
                    Some(Segment::Literal(next)) => rest.find(next)?,
                    // Two slots in a row cannot be told apart; templates avoid them.
                    Some(Segment::Slot(_)) => return None,
                    None => rest.len(),
                };
                let value = &rest[..length];
                if value.is_empty() {
                    return None;
                }
                match values.iter().find(|(slot, _)| slot == name) {
                    Some((_, seen)) if seen != value => return None,
                    Some(_) => {}
                    None => values.push((name.to_owned(), value.to_owned())),
                }
                position += length;
            }
        }
    }
    (position == text.len()).then_some(values)
}

/// The value of `slot` among captured values.
pub(crate) fn slot<'a>(values: &'a [(String, String)], slot: &str) -> Option<&'a str> {
    values
        .iter()
        .find(|(name, _)| name == slot)
        .map(|(_, value)| value.as_str())
}

/// The last number written in `text`: an optional minus sign, digits with
/// optional `,` thousands groups, an optional decimal part (`-1,234.5`).
pub(crate) fn last_number(text: &str) -> Option<f64> {
    let bytes = text.as_bytes();
    let mut last = None;
    let mut i = 0;
    while i < bytes.len() {
        if !bytes[i].is_ascii_digit() {
            i += 1;
            continue;
        }
        let start = i;
        let negative =
            start > 0 && bytes[start - 1] == b'-' && (start < 2 || !bytes[start - 2].is_ascii_alphanumeric());
        let mut digits = String::new();
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            digits.push(char::from(bytes[i]));
            i += 1;
        }
        // Thousands groups: a comma followed by exactly three digits.
        while bytes.get(i) == Some(&b',')
            && bytes
                .get(i + 1..i + 4)
                .is_some_and(|g| g.iter().all(u8::is_ascii_digit))
            && !bytes.get(i + 4).is_some_and(u8::is_ascii_digit)
        {
            digits.extend(bytes[i + 1..i + 4].iter().map(|&b| char::from(b)));
            i += 4;
        }
        if i + 1 < bytes.len() && bytes[i] == b'.' && bytes[i + 1].is_ascii_digit() {
            digits.push('.');
            i += 1;
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                digits.push(char::from(bytes[i]));
                i += 1;
            }
        }
        if let Ok(value) = digits.parse::<f64>() {
            last = Some(if negative { -value } else { value });
        }
    }
    last
}

/// Whether `needle` occurs in `haystack` as a whole word or phrase:
/// case-insensitive, and not flanked by letters or digits.
pub(crate) fn contains_whole_word(haystack: &str, needle: &str) -> bool {
    let haystack = haystack.trim().to_lowercase();
    let needle = needle.trim().to_lowercase();
    if needle.is_empty() {
        return false;
    }
    let is_word = |c: Option<char>| c.is_some_and(char::is_alphanumeric);
    haystack.match_indices(&needle).any(|(start, found)| {
        let before = haystack[..start].chars().next_back();
        let after = haystack[start + found.len()..].chars().next();
        // A decimal point followed by a digit continues a number (`1.5` is not `1`).
        let continues_number = after == Some('.')
            && haystack[start + found.len() + 1..]
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_digit());
        !is_word(before) && !is_word(after) && !continues_number
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_fill_and_capture_back() {
        let template = "{name} has {a} {items} and buys {b} more. How many {items} does {name} have now?";
        let values = vec![
            ("name", "Ana".to_owned()),
            ("a", "12".to_owned()),
            ("b", "7".to_owned()),
            ("items", "apples".to_owned()),
        ];
        let text = fill(template, &values);
        assert_eq!(
            text,
            "Ana has 12 apples and buys 7 more. How many apples does Ana have now?"
        );
        let captured = capture(template, &text).unwrap();
        assert_eq!(slot(&captured, "a"), Some("12"));
        assert_eq!(slot(&captured, "items"), Some("apples"));
        // A repeated slot must agree with itself.
        assert!(capture(
            template,
            "Ana has 12 apples and buys 7 more. How many pears does Ana have now?"
        )
        .is_none());
        assert!(capture(template, "Ana has 12 apples and buys 7 more.").is_none());
        assert!(capture("What plan is {name} on?", "What plan is Dana Okafor on?").is_some());
    }

    #[test]
    fn last_number_reads_signs_groups_and_decimals() {
        assert_eq!(last_number("The answer is 12."), Some(12.0));
        assert_eq!(last_number("17 - 5 = 12"), Some(12.0));
        assert_eq!(last_number("It is -4, I think"), Some(-4.0));
        assert_eq!(last_number("a total of 1,234.50 coins"), Some(1234.5));
        assert_eq!(last_number("3 and then 0.25"), Some(0.25));
        assert_eq!(last_number("no numbers"), None);
        assert_eq!(last_number("C-3PO"), Some(3.0));
    }

    #[test]
    fn whole_words_are_not_parts_of_words_or_numbers() {
        assert!(contains_whole_word("Dana is on the Pro plan.", "pro"));
        assert!(!contains_whole_word("Dana is on the professional plan.", "pro"));
        assert!(contains_whole_word("Balance: 1234.50.", "1234.50"));
        assert!(!contains_whole_word("Balance: 11234.50", "1234.50"));
        assert!(!contains_whole_word("Balance: 1234.505", "1234.50"));
        assert!(!contains_whole_word("Balance: 12.5", "12"));
        assert!(contains_whole_word("She lives in New York!", "new york"));
    }
}
