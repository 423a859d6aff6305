//! The module-graph test's reading of Rust source: tokens without comments and literals, the
//! product code (no `#[cfg(test)]`), the `mod` declarations and the paths a file names.

use std::path::Path;

/// A module's path from the crate root: `[]` for `lib.rs`, `["run", "channel"]`.
pub(crate) type Module = Vec<String>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Tok {
    Ident(String),
    /// `::`
    Path,
    Punct(char),
}

/// The code's tokens: comments dropped, each literal (string, raw string, byte string, char,
/// number) reduced to one `"` punct, lifetimes to their name.
pub(crate) fn tokens(text: &str) -> Vec<Tok> {
    let c: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        let next = c.get(i + 1).copied();
        if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && next == Some('/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && next == Some('*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if ch == 'r' && matches!(next, Some('#' | '"')) || ch == 'b' && next == Some('r') {
            // A raw string: r"..", r#".."#, br#".."#; or an identifier starting with r/b.
            let mut j = i + if ch == 'b' { 2 } else { 1 };
            let hashes = c[j..].iter().take_while(|&&h| h == '#').count();
            j += hashes;
            if c.get(j) == Some(&'"') {
                let close = format!("\"{}", "#".repeat(hashes));
                let rest: String = c[j + 1..].iter().collect();
                let end = rest.find(&close).expect("unterminated raw string");
                i = j + 1 + rest[..end].chars().count() + close.chars().count();
                out.push(Tok::Punct('"'));
            } else {
                i = ident(&c, i, &mut out);
            }
        } else if ch == '"' || ch == 'b' && next == Some('"') {
            i += if ch == 'b' { 2 } else { 1 };
            while i < c.len() && c[i] != '"' {
                i += if c[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push(Tok::Punct('"'));
        } else if ch == '\'' || ch == 'b' && next == Some('\'') {
            let j = i + if ch == 'b' { 2 } else { 1 };
            if c.get(j) == Some(&'\\') {
                // An escaped char literal: '\n', '\'', '\u{..}'.
                let mut k = j + 2;
                while k < c.len() && c[k] != '\'' {
                    k += 1;
                }
                i = k + 1;
                out.push(Tok::Punct('"'));
            } else if c.get(j + 1) == Some(&'\'') {
                i = j + 2;
                out.push(Tok::Punct('"'));
            } else {
                // A lifetime or a label.
                i = ident(&c, j, &mut Vec::new());
            }
        } else if ch.is_ascii_digit() {
            while i < c.len() && (c[i].is_ascii_alphanumeric() || c[i] == '_' || c[i] == '.') {
                // `0..n`: a range, not a fraction.
                if c[i] == '.' && c.get(i + 1) == Some(&'.') {
                    break;
                }
                i += 1;
            }
            out.push(Tok::Punct('"'));
        } else if ch.is_alphabetic() || ch == '_' {
            i = ident(&c, i, &mut out);
        } else if ch == ':' && next == Some(':') {
            out.push(Tok::Path);
            i += 2;
        } else {
            out.push(Tok::Punct(ch));
            i += 1;
        }
    }
    out
}

fn ident(c: &[char], mut i: usize, out: &mut Vec<Tok>) -> usize {
    let start = i;
    while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
        i += 1;
    }
    out.push(Tok::Ident(c[start..i].iter().collect()));
    i
}

pub(crate) fn is(t: Option<&Tok>, word: &str) -> bool {
    matches!(t, Some(Tok::Ident(w)) if w == word)
}

fn punct(t: Option<&Tok>, p: char) -> bool {
    t == Some(&Tok::Punct(p))
}

/// Where the item starting at `i` ends: one past its `;` or its closing brace at depth 0.
fn item_end(t: &[Tok], mut i: usize) -> usize {
    let mut depth = 0i32;
    while i < t.len() {
        match t[i] {
            Tok::Punct('(' | '[' | '{') => depth += 1,
            Tok::Punct(')' | ']') => depth -= 1,
            Tok::Punct('}') => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            Tok::Punct(';') if depth == 0 => return i + 1,
            _ => {}
        }
        i += 1;
    }
    t.len()
}

/// The tokens without `#[cfg(test)]` items.
pub(crate) fn product(t: &[Tok]) -> Vec<Tok> {
    let cfg_test = [
        Tok::Punct('#'),
        Tok::Punct('['),
        Tok::Ident("cfg".into()),
        Tok::Punct('('),
        Tok::Ident("test".into()),
        Tok::Punct(')'),
        Tok::Punct(']'),
    ];
    let mut out = Vec::new();
    let mut i = 0;
    while i < t.len() {
        if t[i..].starts_with(&cfg_test) {
            i = item_end(t, i + cfg_test.len());
        } else {
            out.push(t[i].clone());
            i += 1;
        }
    }
    out
}

/// The `mod name;` declarations. An inline `mod name { .. }` outside tests is not modelled.
pub(crate) fn declared(t: &[Tok], file: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for (i, tok) in t.iter().enumerate() {
        if *tok == Tok::Ident("mod".into()) {
            let Some(Tok::Ident(name)) = t.get(i + 1) else {
                continue;
            };
            assert!(
                punct(t.get(i + 2), ';'),
                "{}: inline `mod {name} {{..}}` is not modelled by this test",
                file.display()
            );
            out.push(name.clone());
        }
    }
    out
}

/// A path as written, and the name it is bound to when it comes from a `use` (the last
/// segment, or its `as` alias; `None` for a glob or a path in the code).
pub(crate) type Named = (Vec<String>, Option<String>);

/// Every path of the `use` tree starting at `i` (after `use`), groups expanded, pushed on `out`;
/// returns where the tree ends.
fn use_tree(t: &[Tok], mut i: usize, prefix: &[String], out: &mut Vec<Named>) -> usize {
    let mut path = prefix.to_vec();
    if matches!(t.get(i), Some(Tok::Path)) {
        i += 1; // `use ::std::..`
    }
    let mut glob = false;
    loop {
        match t.get(i) {
            // `{self, ..}`: the prefix itself.
            Some(Tok::Ident(w)) if w == "self" && !path.is_empty() => i += 1,
            Some(Tok::Ident(w)) => {
                path.push(w.clone());
                i += 1;
            }
            Some(Tok::Punct('*')) => {
                glob = true;
                i += 1;
            }
            Some(Tok::Punct('{')) => {
                i += 1;
                while i < t.len() && !punct(t.get(i), '}') {
                    i = use_tree(t, i, &path, out);
                    if punct(t.get(i), ',') {
                        i += 1;
                    }
                }
                return i + 1;
            }
            _ => break,
        }
        if matches!(t.get(i), Some(Tok::Path)) {
            i += 1;
        } else {
            break;
        }
    }
    let mut name = path.last().cloned().filter(|_| !glob);
    if is(t.get(i), "as") {
        if let Some(Tok::Ident(alias)) = t.get(i + 1) {
            name = Some(alias.clone());
        }
        i += 2;
    }
    out.push((path, name));
    i
}

/// Every path in the code: those of `use` trees, and every `a::b::..` elsewhere (not itself
/// after a `::`).
pub(crate) fn paths(t: &[Tok]) -> Vec<Named> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < t.len() {
        if is(t.get(i), "use") {
            i = use_tree(t, i + 1, &[], &mut out);
            continue;
        }
        let after_path = matches!(i.checked_sub(1).map(|p| &t[p]), Some(Tok::Path));
        if let (Some(Tok::Ident(first)), Some(Tok::Path), false) =
            (t.get(i), t.get(i + 1), after_path)
        {
            let mut path = vec![first.clone()];
            let mut j = i + 1;
            while let (Some(Tok::Path), Some(Tok::Ident(seg))) = (t.get(j), t.get(j + 1)) {
                path.push(seg.clone());
                j += 2;
            }
            out.push((path, None));
            i = j;
            continue;
        }
        i += 1;
    }
    out
}
